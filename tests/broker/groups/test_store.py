"""The offsets log on real storage: replay against an independent oracle, and the broker's log
cleaner (storage/cleaner.py), which compacts __consumer_offsets, leaves a log whose replay
gives the same offsets and group records, one record per key written (tombstones are kept
until delete.retention.ms), with values of every version Kafka writes mixed in one log."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from broker.groups.offsets import (
    CommittedOffset,
    GroupRecord,
    MemberRecord,
    OffsetCache,
    OffsetKey,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from broker.groups.store import append_records, load_offsets
from protocol.records import iter_deep
from protocol.validator import TopicSettings
from storage import Log, LogConfig
from storage.cleaner import Cleaner

NOW = 1_700_000_000_000
CONFIG = LogConfig(
    segment_bytes=2048,
    retention_ms=-1,
    retention_bytes=-1,
    file_delete_delay_ms=60_000,
    cleanup_policy="compact",
)
SETTINGS = TopicSettings(compacted=True)


Replay = tuple[dict[OffsetKey, CommittedOffset], dict[str, GroupRecord]]


def replay(directory: str) -> Replay:
    """Open a partition directory as after a crash (full recovery) and replay it."""
    log = Log(directory, CONFIG, clock=lambda: NOW, needs_recovery=True, recovery_point=0)
    try:
        cache = OffsetCache()
        groups: dict[str, GroupRecord] = {}
        load_offsets(log, cache, groups=groups, topic="__consumer_offsets", partition=0)
        return cache.as_dict(), groups
    finally:
        log.close()


def group_record(i: int, rng: random.Random) -> GroupRecord:
    members = tuple(
        MemberRecord(f"m{j}", None if j else "static", "c", "/h", 30000, 10000, b"s", b"a" * i)
        for j in range(rng.randint(0, 3))
    )
    return GroupRecord("consumer", i, "range" if members else None, None, NOW + i, members)


def as_read_back(record: GroupRecord, version: int) -> GroupRecord:
    """A group record as a value of ``version`` gives it back: no state timestamp before v2,
    no instance ids before v3, v0's rebalance timeout is the session timeout."""
    return dataclasses.replace(
        record,
        current_state_timestamp=record.current_state_timestamp if version >= 2 else -1,
        members=tuple(
            dataclasses.replace(
                m,
                group_instance_id=m.group_instance_id if version >= 3 else None,
                rebalance_timeout=m.rebalance_timeout if version >= 1 else m.session_timeout,
            )
            for m in record.members
        ),
    )


def fill(log, rng: random.Random, rounds: int, settings: TopicSettings = SETTINGS) -> Replay:
    """Random commits, group records and tombstones over a few keys, each value at a random
    version (as after inter.broker.protocol.version changes); returns the oracle's live sets."""
    oracle: dict[OffsetKey, CommittedOffset] = {}
    groups: dict[str, GroupRecord] = {}
    keys = [OffsetKey(f"g{g}", "t", p) for g in range(3) for p in range(5)]
    for i in range(rounds):
        batch: list[tuple[bytes, bytes | None]] = []
        for key in rng.sample(keys, rng.randint(1, 4)):
            if rng.random() < 0.2:
                oracle.pop(key, None)
                batch.append((encode_offset_key(key.group, key.topic, key.partition), None))
            else:
                expire = None if rng.random() < 0.5 else NOW + i + 10**6
                value = CommittedOffset(i, "m" * rng.randint(0, 20), NOW + i, expire)
                oracle[key] = value
                batch.append(
                    (
                        encode_offset_key(key.group, key.topic, key.partition),
                        encode_offset_value(value, rng.choice([1, 2, 3])),
                    )
                )
        if rng.random() < 0.3:
            group = f"g{rng.randint(0, 3)}"
            if rng.random() < 0.2:
                groups.pop(group, None)
                batch.append((encode_group_key(group), None))
            else:
                record, version = group_record(i, rng), rng.randint(0, 3)
                groups[group] = as_read_back(record, version)
                batch.append((encode_group_key(group), encode_group_value(record, version)))
        append_records(log, settings, batch, NOW + i)
    return oracle, groups


def keys_of(log) -> list[bytes]:
    """The key of every record in the log, in offset order (a brute-force read of each
    segment file whole: a compacted v2 batch keeps its last offset, past its last record)."""
    log.flush()
    keys: list[bytes] = []
    for path in sorted(Path(log.directory).glob("*.log")):
        keys += [bytes(message.key) for message in iter_deep(path.read_bytes())]
    return keys


@pytest.mark.parametrize("magic", [1, 2])  # the offsets topic's message format
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_log_cleaner_keeps_the_replay_and_one_record_per_key(tmp_path, seed, magic):
    rng = random.Random(seed)
    directory = str(tmp_path / "__consumer_offsets-0")
    log = Log(directory, CONFIG, clock=lambda: NOW)
    oracle = fill(log, rng, 300, dataclasses.replace(SETTINGS, magic=magic))
    stored = log.read(0, 1 << 20, min_one_message=True).read_bytes()
    assert stored[16] == magic  # written as the log keeps it, not converted
    assert oracle[1], "the workload left no group record"
    written = set(keys_of(log))
    assert len(log.segments) > 5
    log.roll()  # the cleaner never touches the active segment
    result = Cleaner(1 << 20).clean(log, NOW + 10**5, force=True)
    assert result is not None
    kept = keys_of(log)
    assert sorted(kept) == sorted(written)  # the newest record of each key, tombstones too
    log.close()
    assert replay(directory) == oracle


def test_a_deleted_offset_stays_deleted_after_cleaning(tmp_path):
    directory = str(tmp_path / "__consumer_offsets-0")
    log = Log(directory, CONFIG, clock=lambda: NOW)
    key = encode_offset_key("g", "t", 0)
    for i in range(60):
        append_records(
            log, SETTINGS, [(key, encode_offset_value(CommittedOffset(i, "", NOW)))], NOW
        )
    append_records(log, SETTINGS, [(key, None)], NOW)
    log.roll()
    Cleaner(1 << 20).clean(log, NOW, force=True)
    # the tombstone alone, kept for delete.retention.ms (its expiry: tests/storage/test_cleaner*)
    assert keys_of(log) == [key]
    log.close()
    assert replay(directory) == ({}, {})
