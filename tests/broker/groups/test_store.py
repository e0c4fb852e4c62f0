"""The offsets log on real storage: replay against an independent oracle, and compaction that
gives the same replay (offsets and group records) whatever point a crash interrupts it at
(each point is reopened from a copy of the partition directory, with recovery, as after a
kill -9)."""

from __future__ import annotations

import os
import random
import shutil

import pytest

from broker.groups import store
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
from broker.groups.store import append_records, compact, load_offsets, needs_compaction
from protocol.validator import TopicSettings
from storage import Log, LogConfig

NOW = 1_700_000_000_000
CONFIG = LogConfig(
    segment_bytes=2048, retention_ms=-1, retention_bytes=-1, file_delete_delay_ms=60_000
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


def fill(log, rng: random.Random, rounds: int) -> Replay:
    """Random commits, group records and tombstones over a few keys; returns the oracle's
    live sets."""
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
                        encode_offset_value(value),
                    )
                )
        if rng.random() < 0.3:
            group = f"g{rng.randint(0, 3)}"
            if rng.random() < 0.2:
                groups.pop(group, None)
                batch.append((encode_group_key(group), None))
            else:
                groups[group] = group_record(i, rng)
                batch.append((encode_group_key(group), encode_group_value(groups[group])))
        append_records(log, SETTINGS, batch, NOW + i)
    return oracle, groups


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_compaction_gives_the_same_replay_at_every_crash_point(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    monkeypatch.setattr(store, "SNAPSHOT_SET_BYTES", 200)  # a snapshot of several sets
    directory = str(tmp_path / "live" / "__consumer_offsets-0")
    log = Log(directory, CONFIG, clock=lambda: NOW)
    oracle = fill(log, rng, 300)
    assert oracle[1], "the workload left no group record to compact"
    assert replay_copy(log, tmp_path / "before") == oracle
    old_segments = len(log.segments)
    assert old_segments > 5

    points: list[tuple[str, str]] = []

    def capture(name):
        orig = getattr(log, name)

        def wrapped(*args, **kw):
            result = orig(*args, **kw)
            dst = tmp_path / f"p{len(points)}" / "__consumer_offsets-0"
            shutil.copytree(directory, dst)
            points.append((name, str(dst)))
            return result

        monkeypatch.setattr(log, name, wrapped)

    for name in ("roll", "append", "flush", "_delete_segment"):
        capture(name)
    cache = OffsetCache()
    for key, value in oracle[0].items():
        cache.put(key.group, key.topic, key.partition, value)
    start, deleted = compact(log, SETTINGS, cache.items(), NOW + 10**5, oracle[1].items())

    names = [n for n, _ in points]
    assert names.count("append") > 3 and names.count("_delete_segment") == deleted
    assert deleted == old_segments  # every old segment (the roll sealed the last one)
    assert log.log_start_offset == start
    assert [s.base_offset for s in log.segments][0] == start
    for name, copy in points:
        assert replay(copy) == oracle, f"crash after {name} ({copy})"
        if name != "append":
            continue  # everything else in the copy is fsynced: a crash cannot tear it
        # the snapshot is not fsynced yet: a crash may leave it torn mid-record
        newest = max(f for f in os.listdir(copy) if f.endswith(".log"))
        path = os.path.join(copy, newest)
        size = os.path.getsize(path)
        if size > 20:
            os.truncate(path, size - 7)
            assert replay(copy) == oracle, f"torn crash after {name} ({copy})"
    log.close()
    assert replay(directory) == oracle
    # replay now reads only the snapshot
    reopened = Log(directory, CONFIG, clock=lambda: NOW, needs_recovery=False)
    assert reopened.log_end_offset - reopened.log_start_offset == len(oracle[0]) + len(oracle[1])
    reopened.close()


def replay_copy(log, where) -> Replay:
    dst = where / "__consumer_offsets-0"
    shutil.copytree(log.directory, dst)
    return replay(str(dst))


def test_compaction_with_no_live_offsets_empties_the_log(tmp_path):
    log = Log(str(tmp_path / "__consumer_offsets-0"), CONFIG, clock=lambda: NOW)
    key = encode_offset_key("g", "t", 0)
    for i in range(60):
        append_records(
            log, SETTINGS, [(key, encode_offset_value(CommittedOffset(i, "", NOW)))], NOW
        )
    append_records(log, SETTINGS, [(key, None)], NOW)
    end = log.log_end_offset
    assert needs_compaction(log, 0, min_bytes=1000, ratio=4)
    assert not needs_compaction(log, 0, min_bytes=log.size, ratio=4)
    assert not needs_compaction(log, 16, min_bytes=1000, ratio=4)  # 61 records <= 4 * 16
    start, deleted = compact(log, SETTINGS, [], NOW)
    assert (start, log.log_start_offset, log.log_end_offset) == (end, end, end)
    assert deleted > 0 and log.size == 0
    log.close()
    assert replay(str(tmp_path / "__consumer_offsets-0")) == ({}, {})
