"""Appends, recovery and the cleaner write a segment through one code path (LogSegment.append
and its index.interval.bytes rule, then the final time index entry): for the same entries they
leave byte-identical .log, .index and .timeindex files.

Each set appended is one entry (a record batch, or a compressed magic-1 wrapper), so the
append's per-set rule and recovery's and the cleaner's per-entry walks index the same places;
the keys are distinct, so the cleaner keeps every entry as it is."""

from __future__ import annotations

import os
import random

import pytest

from protocol.compression import Codec
from protocol.records import MessageSetBuilder
from protocol.validator import TopicSettings, ValidatedRecords, validate_produce
from storage import Log, LogConfig
from storage.cleaner import Cleaner

SUFFIXES = (".log", ".index", ".timeindex")


def one_entry_set(log: Log, rng: random.Random, now: int, key: int) -> ValidatedRecords:
    magic = rng.choice([1, 2, 2])
    codec = Codec.GZIP if magic == 1 else rng.choice([Codec.NONE, Codec.GZIP])
    builder = MessageSetBuilder(magic=magic, codec=codec)
    for i in range(rng.randrange(1, 8)):
        # timestamps out of order, so the time index skips some entries
        builder.append(
            b"v" * rng.randrange(1, 300),
            key=b"k%d-%d" % (key, i),
            timestamp=now + rng.randrange(-3000, 3000),
        )
    result = validate_produce(
        builder.build(), TopicSettings(magic=magic), next_offset=log.log_end_offset, now_ms=now
    )
    assert isinstance(result, ValidatedRecords), result
    return result


def segment_files(log: Log, base: int) -> dict[str, bytes]:
    files = {}
    for suffix in SUFFIXES:
        with open(os.path.join(log.directory, f"{base:020d}{suffix}"), "rb") as f:
            files[suffix] = f.read()
    return files


@pytest.mark.parametrize("interval", [0, 150, 700, 4096])
def test_append_recovery_and_cleaning_write_the_same_segment(tmp_path, clock, interval):
    config = LogConfig(
        index_interval_bytes=interval, cleanup_policy="compact", file_delete_delay_ms=0
    )
    directory = str(tmp_path / "same-0")
    log = Log(directory, config, clock=clock, needs_recovery=False)
    rng = random.Random(interval)
    for key in range(80):
        log.append(one_entry_set(log, rng, clock.now, key))
        clock.advance(rng.randrange(0, 50))
    log.roll()  # seals segment 0: its final time index entry
    appended = segment_files(log, 0)
    assert len(appended[".index"]) >= 8 * 3 and len(appended[".timeindex"]) >= 12 * 3, (
        "too few index entries to compare"
    )
    log.close()

    log = Log(directory, config, clock=clock, needs_recovery=True, recovery_point=0)
    assert segment_files(log, 0) == appended, "recovery rebuilt other indexes than the appends"

    result = Cleaner(1 << 20).clean(log, clock.now, force=True)
    assert result is not None and result.swapped and result.stats.segments_after == 1
    assert result.stats.messages_written == result.stats.messages_read
    assert segment_files(log, 0) == appended, "the cleaner wrote another segment than the appends"
    log.close()


def test_short_writes_are_continued_where_they_stopped(tmp_path, clock, monkeypatch):
    """A pwrite may write less than asked (a signal, a quota): the rest follows from there,
    and the .log is the one full writes leave."""
    from storage import syscalls

    logs = {}
    for name in ("whole", "short"):
        if name == "short":
            real = syscalls.pwrite
            monkeypatch.setattr(syscalls, "pwrite", lambda fd, data, at: real(fd, data[:7], at))
        log = Log(str(tmp_path / f"{name}-0"), LogConfig(), clock=clock, needs_recovery=False)
        rng = random.Random(5)
        for key in range(20):
            log.append(one_entry_set(log, rng, clock.now, key))
        log.flush()
        logs[name] = segment_files(log, 0)
        log.close()
    assert logs["short"] == logs["whole"] and len(logs["whole"][".log"]) > 1000
