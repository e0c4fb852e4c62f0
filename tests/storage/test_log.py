"""Log: append/read, rolling, retention, timestamp search, truncation, flush and recovery."""

from __future__ import annotations

import os
import random
import struct
from dataclasses import replace

import pytest
from kafka.record.legacy_records import LegacyRecordBatch
from kafka.record.memory_records import MemoryRecords
from structlog.testing import capture_logs

from tests.storage.helpers import validated
from protocol.compression import Codec
from protocol.records import MessageSetBuilder, TimestampType, iter_deep, iter_shallow
from protocol.validator import ValidatedRecords
from storage import (
    FetchData,
    InvalidAppendError,
    Log,
    LogConfig,
    OffsetOutOfRangeError,
    RecordSetTooLargeError,
    TimestampOffset,
)

DAY = 86_400_000


def open_log(tmp_path, clock, *, needs_recovery=False, recovery_point=0, **config):
    return Log(
        str(tmp_path / "topic-0"),
        LogConfig(**config),
        clock=clock,
        needs_recovery=needs_recovery,
        recovery_point=recovery_point,
    )


def reopen(log, clock, *, clean=True, **kw):
    log_dir, config = log.directory, log.config
    if clean:
        log.close()
    return Log(log_dir, config, clock=clock, needs_recovery=not clean, **kw)


def all_messages(log, start=None):
    """Every message from ``start`` via read(), segment by segment."""
    out = []
    offset = log.log_start_offset if start is None else start
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 30).read_bytes()
        msgs = [m for m in iter_deep(data) if m.offset >= offset]
        assert msgs, f"no progress at offset {offset}"
        out += msgs
        offset = msgs[-1].offset + 1
    return out


def seg_files(log):
    return sorted(os.listdir(log.directory))


# -- append and read ----------------------------------------------------------------------------
def test_append_then_read_returns_the_messages(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(validated(log, [10, 30, 20]))
    log.append(validated(log, [40, 50], codec=Codec.GZIP))
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 5, 5)
    msgs = all_messages(log)
    assert [(m.offset, m.timestamp) for m in msgs] == [(0, 10), (1, 30), (2, 20), (3, 40), (4, 50)]
    assert msgs[0].key == b"k0"
    fetch = log.read(0, 1 << 20)
    assert fetch.high_watermark == 5
    assert fetch.read_bytes() == os.pread(fetch.fileno, fetch.length, fetch.position)
    assert fetch.length == log.active_segment.size


def test_read_at_log_end_is_empty_and_outside_range_raises(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(validated(log, [1, 2]))
    empty = log.read(2, 1000)
    assert empty.length == 0 and empty.read_bytes() == b""
    with pytest.raises(OffsetOutOfRangeError, match=r"offset 3 is outside .*\[0, 2\]") as e:
        log.read(3, 1000)
    assert (e.value.offset, e.value.log_start_offset, e.value.log_end_offset) == (3, 0, 2)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 1000)


def test_max_bytes_cuts_and_min_one_message_returns_whole_first_message(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(validated(log, [1], value_size=500))
    log.append(validated(log, [2], value_size=10))
    first_size = next(iter_shallow(log.read(0, 10_000).read_bytes())).next_position
    assert log.read(0, 100).length == 100  # partial message, as Kafka
    assert log.read(0, 0).length == 0
    whole = log.read(0, 100, min_one_message=True)
    assert whole.length == first_size
    assert [m.offset for m in iter_deep(whole.read_bytes())] == [0]
    # a limit inside the second entry ends the read after the first, whole one (the partial
    # second entry would be thrown away by the client)
    assert log.read(0, first_size + 5, min_one_message=True).length == first_size
    assert log.read(0, first_size + 5).length == first_size
    total = log.active_segment.size
    assert log.read(0, total).length == total


def test_read_inside_large_sets_matches_a_brute_force_scan(tmp_path, clock):
    """One index entry per produced set leaves hundreds of entries to skip inside a set; every
    offset must still start at the entry holding it (brute force over the whole file)."""
    log = open_log(tmp_path, clock, index_interval_bytes=100)
    log.append(validated(log, [5] * 300, value_size=30))
    log.append(validated(log, [6] * 40, codec=Codec.GZIP))
    log.append(validated(log, [7] * 200, value_size=1, magic=0))
    with open(log.active_segment.log_path, "rb") as f:
        entries = list(iter_shallow(f.read()))
    for offset in range(log.log_end_offset):
        expected = next(e for e in entries if e.offset >= offset)
        data = log.read(offset, 40)
        assert data.position == expected.position, offset


def test_read_inside_compressed_wrapper_starts_at_the_wrapper(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(validated(log, [1, 2]))
    log.append(validated(log, [3, 4, 5, 6], codec=Codec.SNAPPY))
    fetch = log.read(4, 1 << 20)
    entries = list(iter_shallow(fetch.read_bytes()))
    assert entries[0].offset == 5 and entries[0].codec == Codec.SNAPPY
    assert [m.offset for m in iter_deep(fetch.read_bytes())] == [2, 3, 4, 5]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4])
def test_kafka_python_reads_what_storage_wrote(tmp_path, clock, magic, codec):
    log = open_log(tmp_path, clock, segment_bytes=1000, index_interval_bytes=200)
    rng = random.Random(7)
    expected = []
    for _ in range(30):
        stamps = [rng.randrange(1_000, 9_000) for _ in range(rng.randrange(1, 6))]
        v = validated(log, stamps, magic=magic, codec=codec)
        expected += [(v.first_offset + i, ts if magic else -1) for i, ts in enumerate(stamps)]
        log.append(v)
    assert len(log.segments) > 1
    seen = []
    offset = 0
    while offset < log.log_end_offset:
        records = MemoryRecords(log.read(offset, 1 << 20).read_bytes())
        while records.has_next():
            batch = records.next_batch()
            assert isinstance(batch, LegacyRecordBatch)
            for record in batch:
                seen.append((record.offset, record.timestamp if magic else -1))
        offset = seen[-1][0] + 1
    assert seen == expected


def test_append_refuses_wrong_offset_and_oversized_sets(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_bytes=1000)
    v = validated(log, [1])
    log.append(v)
    with pytest.raises(InvalidAppendError, match="starts at offset 0, but the log end offset is 1"):
        log.append(v)
    with pytest.raises(RecordSetTooLargeError, match="exceeds segment.bytes 1000"):
        log.append(validated(log, [1], value_size=2000))
    assert log.log_end_offset == 1 and log.active_segment.size == len(v.buffer)


# -- indexes -----------------------------------------------------------------------------------
def test_index_entry_every_interval_and_time_index_monotonic(tmp_path, clock):
    log = open_log(tmp_path, clock, index_interval_bytes=300)
    stamps = [500, 100, 700, 300, 900, 200, 800, 1000, 50, 1100] * 5
    for ts in stamps:
        log.append(validated(log, [ts], value_size=100))
    seg = log.active_segment
    oi, ti = seg.offset_index, seg.time_index
    assert oi.entries > 5
    entries = [oi.entry(i) for i in range(oi.entries)]
    assert entries[0][0] > 0  # the first set is never indexed
    tentries = [ti.entry(i) for i in range(ti.entries)]
    assert all(a[0] < b[0] and a[1] <= b[1] for a, b in zip(tentries, tentries[1:]))
    for ts, off in tentries:  # entry = largest timestamp up to its offset
        assert ts == max(stamps[: off + 1])


def test_closed_segments_have_exact_index_files_with_final_time_entry(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_bytes=1200, index_interval_bytes=100)
    for i in range(60):
        log.append(validated(log, [1000 + (i * 37) % 100], value_size=40))
    log.close()
    for name in os.listdir(log.directory):
        size = os.path.getsize(os.path.join(log.directory, name))
        assert (
            size % (12 if name.endswith(".timeindex") else 8 if name.endswith(".index") else 1) == 0
        )
    log = reopen(log, clock, clean=False)
    for seg in log.segments:
        msgs = [m for m in iter_deep(open(seg.log_path, "rb").read())]
        assert seg.time_index.last_entry()[0] == max(m.timestamp for m in msgs)
        assert seg.largest_timestamp == max(m.timestamp for m in msgs)


# -- rolling -----------------------------------------------------------------------------------
def test_roll_on_segment_bytes(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_bytes=1000)
    for i in range(40):
        log.append(validated(log, [i], value_size=60))
    assert len(log.segments) > 3
    assert all(s.size <= 1000 for s in log.segments)
    bases = [s.base_offset for s in log.segments]
    assert seg_files(log)[:3] == [
        f"{bases[0]:020d}.index",
        f"{bases[0]:020d}.log",
        f"{bases[0]:020d}.timeindex",
    ]
    assert [m.offset for m in all_messages(log)] == list(range(40))


def test_append_says_when_it_rolled_and_synced(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_bytes=1000, flush_messages=5)
    results = [log.append(validated(log, [i], value_size=60)) for i in range(20)]
    rolled = [r.rolled for r in results if r.rolled is not None]
    assert rolled == [s.base_offset for s in log.segments[1:]]
    # flush.messages=5: every fifth append fsyncs, and every roll does
    assert [i for i, r in enumerate(results) if r.synced] == sorted(
        {i for i in range(20) if (i + 1) % 5 == 0}
        | {i for i, r in enumerate(results) if r.rolled is not None}
    )
    assert log.recovery_point == 20
    assert log.latest_timestamp() == 19


def test_update_config_applies_to_later_rolls_and_retention(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(validated(log, [clock.now - 2 * DAY]))
    assert log.delete_expired_segments(clock.now) == 0  # default retention: 7 days
    log.update_config(replace(log.config, retention_ms=DAY, segment_bytes=200))
    assert log.append(validated(log, [clock.now], value_size=150)).rolled == 1
    assert log.delete_expired_segments(clock.now) == 1
    assert log.log_start_offset == 1


def test_roll_on_segment_ms_uses_message_timestamps(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_ms=1000)
    t0 = clock.now - 10 * DAY
    log.append(validated(log, [t0]))
    log.append(validated(log, [t0 + 1000]))  # waited exactly segment.ms: no roll
    assert len(log.segments) == 1
    log.append(validated(log, [t0 + 1001]))
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_old_data_does_not_roll_on_every_append_kafka_4099(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_ms=DAY)
    old = clock.now - 30 * DAY  # a week-old bulk load: now - first timestamp >> segment.ms
    for i in range(20):
        log.append(validated(log, [old + i]))
    assert len(log.segments) == 1


def test_roll_falls_back_to_wall_clock_without_timestamps(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_ms=1000)
    log.append(validated(log, [-1], magic=0))
    clock.advance(1000)
    log.append(validated(log, [-1], magic=0))
    assert len(log.segments) == 1
    clock.advance(1)
    log.append(validated(log, [-1], magic=0))
    assert len(log.segments) == 2


def test_roll_honours_segment_jitter(tmp_path, clock):
    log = Log(
        str(tmp_path / "t-0"),
        LogConfig(segment_ms=1000, segment_jitter_ms=400),
        clock=clock,
        needs_recovery=False,
        rng=random.Random(3),
    )
    jitter = log.active_segment.jitter_ms
    assert 0 <= jitter < 400
    log.append(validated(log, [0]))
    log.append(validated(log, [1000 - jitter]))
    assert len(log.segments) == 1
    log.append(validated(log, [1001 - jitter]))
    assert len(log.segments) == 2


def test_roll_on_full_index(tmp_path, clock):
    # 40 bytes: offset index holds 5 entries, time index 3 (+1 reserved for the roll entry).
    log = open_log(tmp_path, clock, segment_index_bytes=40, index_interval_bytes=0)
    for i in range(30):
        log.append(validated(log, [1000 + i]))
    assert len(log.segments) > 3
    for seg in log.segments[:-1]:
        assert seg.time_index.entries <= 3 and seg.offset_index.entries <= 5
    assert [m.offset for m in all_messages(log)] == list(range(30))


def test_roll_on_relative_offset_overflow(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(validated(log, [1, 2, 3]))
    far = 2**31 + 1
    a = MessageSetBuilder(base_offset=3)
    a.append(b"x", timestamp=5)
    b = MessageSetBuilder(base_offset=far)
    b.append(b"y", timestamp=6)
    log.append(ValidatedRecords(a.build() + b.build(), 3, far, 6, far, -1, 2))
    assert [s.base_offset for s in log.segments] == [0, 3]
    assert log.log_end_offset == far + 1
    assert [m.offset for m in all_messages(log)] == [0, 1, 2, 3, far]


def test_roll_flushes_and_advances_recovery_point(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_bytes=500)
    for i in range(3):
        log.append(validated(log, [i], value_size=120))
    assert log.recovery_point == 0 and len(log.segments) == 1
    log.append(validated(log, [9], value_size=120))
    assert len(log.segments) == 2 and log.recovery_point == 3


# -- flush policy -----------------------------------------------------------------------------
def test_flush_messages_flushes_inside_append(tmp_path, clock):
    log = open_log(tmp_path, clock, flush_messages=3)
    log.append(validated(log, [1, 2]))
    assert log.recovery_point == 0 and log.unflushed_messages == 2
    log.append(validated(log, [3]))
    assert log.recovery_point == 3 and log.unflushed_messages == 0


@pytest.mark.parametrize(
    "config",
    [
        {"segment_bytes": 600, "flush_messages": 4},
        {"segment_ms": 1000},
        {"segment_index_bytes": 40, "index_interval_bytes": 0},
        {"flush_messages": 1},
    ],
)
def test_an_append_that_may_not_sync_never_fsyncs(tmp_path, clock, monkeypatch, config):
    """The broker appends on its event loop with may_sync=False: such an append must never
    fsync (counted at os.fsync), and its None (nothing done) must mean the append it then
    makes elsewhere rolls or flushes."""
    fsyncs = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
    log = open_log(tmp_path, clock, **config)
    rng = random.Random(7)
    ts = clock.now
    declined = 0
    for _ in range(60):
        ts += rng.choice([0, 300, 700])
        records = validated(log, [ts] * rng.randint(1, 3), value_size=rng.randint(10, 120))
        before = (len(fsyncs), log.recovery_point, len(log.segments), log.log_end_offset)
        appended = log.append(records, may_sync=False)
        assert len(fsyncs) == before[0]
        if appended is not None:
            assert not appended.synced and appended.rolled is None
            assert (log.recovery_point, len(log.segments)) == before[1:3]
            assert log.log_end_offset == records.last_offset + 1
            continue
        declined += 1
        assert (log.recovery_point, len(log.segments), log.log_end_offset) == before[1:]
        assert log.append(records).synced
        assert len(fsyncs) > before[0]
        assert (log.recovery_point, len(log.segments)) != before[1:3]
    assert 0 < declined < 60 or config == {"flush_messages": 1}


def test_read_cached_answers_exactly_as_read_or_not_at_all(tmp_path, clock):
    """read_cached (the broker's no-thread fetch) must equal read wherever it answers, across
    rolls, compressed sets and truncation, and must answer the tail consumer's reads."""
    log = open_log(tmp_path, clock, segment_bytes=3000)
    rng = random.Random(11)

    def check_all():
        answered = 0
        for offset in range(log.log_start_offset, log.log_end_offset + 1):
            for max_bytes, min_one in (
                (0, True),
                (5, True),
                (5, False),
                (250, False),
                (10**6, False),
            ):
                cached = log.read_cached(offset, max_bytes, min_one_message=min_one)
                if cached is None:
                    continue
                answered += 1
                real = log.read(offset, max_bytes, min_one_message=min_one)
                assert (cached.position, cached.length, cached.high_watermark) == (
                    real.position,
                    real.length,
                    real.high_watermark,
                ), (offset, max_bytes)
                assert cached.read_bytes() == real.read_bytes()
        return answered

    for step in range(40):
        first = log.log_end_offset
        codec = rng.choice([Codec.NONE, Codec.GZIP])
        log.append(
            validated(
                log, [1000 + step] * rng.randint(1, 4), codec=codec, value_size=rng.randint(5, 200)
            )
        )
        # the next read of a consumer that stopped at the previous log end
        assert log.read_cached(first, 10**6) is not None
        if step % 13 == 12:
            log.truncate_to(log.log_end_offset - rng.randint(1, 5))
        assert check_all() > 0
    assert len(log.segments) > 2
    with pytest.raises(ValueError):
        log.read_cached(log.log_end_offset, -1)


def test_flush_ms_via_flush_if_due(tmp_path, clock):
    log = open_log(tmp_path, clock, flush_ms=1000)
    assert not log.flush_if_due(clock.now + 5000)  # nothing unflushed
    log.append(validated(log, [1]))
    assert not log.flush_if_due(clock.now + 999)
    assert log.flush_if_due(clock.now + 1000)
    assert log.recovery_point == 1


# -- retention --------------------------------------------------------------------------------
def build_segments(log, clock, stamps_per_segment):
    for stamps in stamps_per_segment:
        log.append(validated(log, stamps))
        log.roll()


def test_time_retention_deletes_oldest_first_and_stops_at_first_unexpired(tmp_path, clock):
    log = open_log(tmp_path, clock, retention_ms=DAY, file_delete_delay_ms=1000)
    now = clock.now
    build_segments(
        log, clock, [[now - 5 * DAY], [now - 4 * DAY], [now - 1000], [now - 3 * DAY], [now - 10]]
    )
    assert log.delete_expired_segments(now) == 2
    assert log.log_start_offset == 2
    deleted = [n for n in seg_files(log) if n.endswith(".deleted")]
    assert sorted(deleted) == sorted(
        f"{b:020d}{s}.deleted" for b in (0, 1) for s in (".log", ".index", ".timeindex")
    )
    assert log.remove_deleted_files(now + 999) == 0
    assert log.remove_deleted_files(now + 1000) == 2
    assert not [n for n in seg_files(log) if n.endswith(".deleted")]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 100)


def test_expired_active_segment_is_rolled_then_deleted(tmp_path, clock):
    log = open_log(tmp_path, clock, retention_ms=DAY, file_delete_delay_ms=0)
    log.append(validated(log, [clock.now - 2 * DAY]))
    log.append(validated(log, [clock.now - 2 * DAY]))
    assert log.delete_expired_segments(clock.now) == 1
    assert [s.base_offset for s in log.segments] == [2]
    assert (log.log_start_offset, log.log_end_offset) == (2, 2)
    assert seg_files(log) == [
        f"{2:020d}.index",
        f"{2:020d}.log",
        f"{2:020d}.snapshot",
        f"{2:020d}.timeindex",
    ]  # the roll's producer state snapshot
    assert log.delete_expired_segments(clock.now) == 0  # an empty active segment stays
    log.append(validated(log, [clock.now]))
    assert [m.offset for m in all_messages(log)] == [2]


def test_future_timestamp_pins_retention_and_is_reported(tmp_path, clock):
    log = open_log(tmp_path, clock, retention_ms=DAY, file_delete_delay_ms=0)
    now = clock.now
    future = now + 365 * DAY
    build_segments(log, clock, [[now - 9 * DAY], [future], [now - 8 * DAY]])
    with capture_logs() as logs:
        assert log.delete_expired_segments(now) == 1
    pinned = [e for e in logs if e.get("largest_timestamp") == future]
    assert len(pinned) == 1
    assert pinned[0]["log_level"] == "warning"
    assert (pinned[0]["topic"], pinned[0]["partition"], pinned[0]["segment"]) == ("topic", 0, 1)
    assert log.log_start_offset == 1


def test_size_retention(tmp_path, clock):
    log = open_log(tmp_path, clock, retention_bytes=1000, retention_ms=-1, file_delete_delay_ms=0)
    for _ in range(6):
        log.append(validated(log, [clock.now], value_size=300))
        log.roll()
    sizes = [s.size for s in log.segments]
    excess = sum(sizes) - 1000
    # Kafka's rule: delete the longest prefix whose size fits in the excess.
    assert log.delete_expired_segments(clock.now) == 3
    assert sum(sizes[:3]) <= excess < sum(sizes[:4])
    assert log.size == sum(sizes[3:])


def test_segment_without_timestamps_expires_by_mtime(tmp_path, clock):
    log = open_log(tmp_path, clock, retention_ms=DAY, file_delete_delay_ms=0)
    log.append(validated(log, [-1], magic=0))
    log.roll()
    log.append(validated(log, [clock.now]))
    seg = log.segments[0]
    assert seg.largest_timestamp == seg.last_modified_ms
    old = (clock.now - 2 * DAY) / 1000
    os.utime(seg.log_path, (old, old))
    assert log.delete_expired_segments(clock.now) == 1
    assert log.log_start_offset == 1


# -- search by timestamp ----------------------------------------------------------------------
def brute_force_search(messages, target):
    for m in messages:
        if m.timestamp >= target:
            return TimestampOffset(m.timestamp, m.offset)
    return None


def test_offset_for_timestamp_matches_brute_force(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_bytes=2000, index_interval_bytes=150)
    rng = random.Random(11)
    for i in range(80):
        codec = rng.choice([Codec.NONE, Codec.NONE, Codec.GZIP, Codec.LZ4])
        log.append(
            validated(
                log, [rng.randrange(0, 5000) for _ in range(rng.randrange(1, 5))], codec=codec
            )
        )
    msgs = all_messages(log)
    assert len(log.segments) > 4
    for target in list(range(0, 5100, 37)) + [m.timestamp for m in msgs[::7]]:
        assert log.offset_for_timestamp(target) == brute_force_search(msgs, target), target
    assert log.offset_for_timestamp(10**13) is None
    assert log.offset_for_timestamp(-1) == TimestampOffset(-1, log.log_end_offset)
    assert log.offset_for_timestamp(-2) == TimestampOffset(-1, 0)


def test_search_with_log_append_time_wrappers(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(
        validated(
            log, [5, 6], codec=Codec.GZIP, timestamp_type=TimestampType.LOG_APPEND_TIME, now=1000
        )
    )
    log.append(validated(log, [7], timestamp_type=TimestampType.LOG_APPEND_TIME, now=2000))
    assert log.offset_for_timestamp(900) == TimestampOffset(1000, 0)
    assert log.offset_for_timestamp(1500) == TimestampOffset(2000, 2)


def test_segment_without_timestamps_does_not_hide_a_later_match(tmp_path, clock):
    # Kafka's quirk (spec 6.4): the magic-0 segment's mtime >= target picks it, its scan finds
    # nothing, and Kafka answers -1. We keep searching.
    log = open_log(tmp_path, clock)
    log.append(validated(log, [-1, -1], magic=0))
    log.roll()
    log.append(validated(log, [100, 200]))
    assert log.segments[0].largest_timestamp > 200  # mtime, now-ish
    assert log.offset_for_timestamp(150) == TimestampOffset(200, 3)


def test_legacy_offsets_before(tmp_path, clock):
    log = open_log(tmp_path, clock)
    build_segments(log, clock, [[1], [2], [3]])
    log.append(validated(log, [4]))
    for i, seg in enumerate(log.segments):
        os.utime(seg.log_path, ((1000 + i * 1000) / 1000,) * 2)
    # pairs: (0,1000) (1,2000) (2,3000) (3,4000) (LEO 4, now)
    assert log.legacy_offsets_before(-1, 10) == [4, 3, 2, 1, 0]
    assert log.legacy_offsets_before(-2, 10) == [0]
    assert log.legacy_offsets_before(2500, 10) == [1, 0]
    assert log.legacy_offsets_before(3000, 2) == [2, 1]
    assert log.legacy_offsets_before(999, 10) == []


# -- truncation -------------------------------------------------------------------------------
def test_truncate_within_and_across_segments(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_bytes=700, index_interval_bytes=100)
    stamps = [(i * 7919) % 1000 for i in range(40)]
    for ts in stamps:
        log.append(validated(log, [ts], value_size=40))
    assert len(log.segments) > 3
    log.truncate_to(17)
    assert log.log_end_offset == 17
    assert [m.timestamp for m in all_messages(log)] == stamps[:17]
    assert log.active_segment.max_timestamp == max(
        stamps[s] for s in range(log.active_segment.base_offset, 17)
    )
    ti = log.active_segment.time_index
    assert all(ti.entry(i)[1] < 17 for i in range(ti.entries))
    log.append(validated(log, [5000]))
    assert log.offset_for_timestamp(1001) == TimestampOffset(5000, 17)


def test_truncate_inside_a_compressed_wrapper_removes_the_wrapper(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(validated(log, [1, 2]))
    log.append(validated(log, [3, 4, 5], codec=Codec.GZIP))
    log.truncate_to(3)
    assert log.log_end_offset == 2
    assert [m.offset for m in all_messages(log)] == [0, 1]
    assert log.active_segment.max_timestamp == 2


def test_truncate_below_log_start_restarts_the_log(tmp_path, clock):
    log = open_log(tmp_path, clock, retention_ms=DAY, file_delete_delay_ms=0)
    build_segments(log, clock, [[clock.now - 2 * DAY], [clock.now]])
    log.delete_expired_segments(clock.now)
    assert log.log_start_offset == 1
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (0, 0, 0)
    assert seg_files(log) == [f"{0:020d}.index", f"{0:020d}.log", f"{0:020d}.timeindex"]


def test_noop_truncation_keeps_mtime_kafka_3802(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(validated(log, [1]))
    os.utime(log.active_segment.log_path, (1000, 1000))
    log.truncate_to(1)
    log.truncate_to(5)
    assert os.stat(log.active_segment.log_path).st_mtime == 1000


# -- recovery ---------------------------------------------------------------------------------
def test_clean_reopen_keeps_everything(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_bytes=600, index_interval_bytes=100)
    for i in range(30):
        log.append(validated(log, [i * 10], codec=Codec.GZIP if i % 4 else Codec.NONE))
    before = [(m.offset, m.timestamp) for m in all_messages(log)]
    log = reopen(log, clock)
    assert [(m.offset, m.timestamp) for m in all_messages(log)] == before
    assert log.recovery_point == log.log_end_offset == 30
    assert log.offset_for_timestamp(155) == TimestampOffset(160, 16)


def test_torn_tail_is_truncated_on_recovery(tmp_path, clock):
    log = open_log(tmp_path, clock)
    for i in range(5):
        log.append(validated(log, [i]))
    path, size = log.active_segment.log_path, log.active_segment.size
    os.truncate(path, size - 3)  # crash in the middle of the last append
    with capture_logs() as logs:
        log = Log(log.directory, log.config, clock=clock, needs_recovery=True)
    assert log.log_end_offset == 4
    assert [m.offset for m in all_messages(log)] == [0, 1, 2, 3]
    line = [e for e in logs if e["event"] == "log recovered after unclean shutdown"][0]
    assert line["scanned_bytes"] == size - 3
    assert line["truncated_bytes"] > 0 and "incomplete" in line["truncation_reason"]


def test_corrupt_entry_truncates_and_drops_later_segments(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_bytes=500)
    for i in range(20):
        log.append(validated(log, [i], value_size=50))
    segs = log.segments
    assert len(segs) >= 4
    victim = segs[1]
    entries = list(iter_shallow(open(victim.log_path, "rb").read()))
    target = entries[2]
    log.close()
    with open(victim.log_path, "r+b") as f:  # flip a value byte: CRC mismatch
        f.seek(target.next_position - 1)
        byte = f.read(1)
        f.seek(target.next_position - 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    with capture_logs() as logs:
        log = Log(
            log.directory,
            log.config,
            clock=clock,
            needs_recovery=True,
            recovery_point=victim.base_offset,
        )
    assert log.log_end_offset == target.offset
    assert [s.base_offset for s in log.segments] == [segs[0].base_offset, victim.base_offset]
    assert [m.offset for m in all_messages(log)] == list(range(target.offset))
    line = [e for e in logs if e["event"] == "log recovered after unclean shutdown"][0]
    assert "CRC" in line["truncation_reason"]
    assert line["deleted_segments"] == [s.base_offset for s in segs[2:]]
    assert not any(n.startswith(f"{segs[2].base_offset:020d}") for n in seg_files(log))


def test_recovery_starts_at_the_recovery_point_segment(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_bytes=500)
    for i in range(20):
        log.append(validated(log, [i], value_size=50))
    segs = log.segments
    log.close()
    with capture_logs() as logs:
        log = Log(
            log.directory,
            log.config,
            clock=clock,
            needs_recovery=True,
            recovery_point=segs[-2].base_offset + 1,
        )
    line = [e for e in logs if e["event"] == "log recovered after unclean shutdown"][0]
    assert line["scanned_segments"] == 2
    assert line["scanned_bytes"] == segs[-2].size + segs[-1].size
    assert line["truncated_bytes"] == 0


@pytest.mark.parametrize("damage", ["delete", "garbage", "zero_tail"])
@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_missing_or_corrupt_index_is_rebuilt(tmp_path, clock, damage, suffix):
    log = open_log(tmp_path, clock, segment_bytes=1500, index_interval_bytes=100)
    for i in range(60):
        log.append(validated(log, [10_000 + (i * 7) % 50], value_size=30))
    seg = log.segments[0]
    expected_entries = os.path.getsize(seg.offset_index.path) // 8
    log.close()
    path = seg.log_path[:-4] + suffix
    if damage == "delete":
        os.unlink(path)
    elif damage == "garbage":
        open(path, "ab").write(b"\x01\x02\x03")
    else:
        open(path, "ab").write(b"\x00" * 96)
    with capture_logs() as logs:
        log = Log(log.directory, log.config, clock=clock, needs_recovery=False)
    assert any(e["event"] == "rebuilt segment indexes from the log" for e in logs)
    seg = log.segments[0]
    assert seg.offset_index.entries == expected_entries
    assert os.path.getsize(seg.log_path[:-4] + ".timeindex") % 12 == 0
    msgs = all_messages(log)
    assert [m.offset for m in msgs] == list(range(60))
    for target in (10_000, 10_025, 10_049):
        assert log.offset_for_timestamp(target) == brute_force_search(msgs, target)


def test_migrated_segment_without_time_index_gets_one_and_falls_back_to_mtime(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(validated(log, [-1, -1], magic=0))
    log.roll()
    log.append(validated(log, [-1], magic=0))
    old = log.segments[0]
    log.close()
    os.unlink(old.time_index.path)
    os.utime(old.log_path, (1234, 1234))
    log = Log(log.directory, log.config, clock=clock, needs_recovery=False)
    seg = log.segments[0]
    assert os.path.getsize(seg.time_index.path) == 0  # not a 10 MiB file (KAFKA-4734)
    assert seg.largest_timestamp == 1_234_000
    assert os.stat(seg.log_path).st_mtime == 1234


def test_leftover_and_orphan_files_are_removed_on_load(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(validated(log, [1]))
    log.close()
    d = log.directory
    for name in (
        "00000000000000000077.log.deleted",
        "00000000000000000000.log.cleaned",
        "00000000000000000000.log.swap",
        "00000000000000000099.index",
        "00000000000000000099.timeindex",
    ):
        open(os.path.join(d, name), "wb").write(b"x")
    log = Log(d, log.config, clock=clock, needs_recovery=False)
    assert sorted(os.listdir(d)) == [f"{0:020d}{s}" for s in (".index", ".log", ".timeindex")] + [
        f"{1:020d}.snapshot"
    ]  # producer state written at close
    assert log.log_end_offset == 1


def test_fetch_in_flight_survives_retention_through_a_dup(tmp_path, clock):
    # The broker dup()s FetchData.fileno under the partition lock, then sendfile()s later.
    log = open_log(tmp_path, clock, retention_ms=DAY, file_delete_delay_ms=60_000)
    log.append(validated(log, [clock.now - 2 * DAY]))
    fetch = log.read(0, 1000)
    dup = FetchData(os.dup(fetch.fileno), fetch.position, fetch.length, fetch.high_watermark)
    log.delete_expired_segments(clock.now)  # rolls (closing the old file) and renames
    assert [m.offset for m in iter_deep(dup.read_bytes())] == [0]
    log.remove_deleted_files(clock.now + 60_000)
    assert not [n for n in seg_files(log) if n.endswith(".deleted")]
    assert [m.offset for m in iter_deep(dup.read_bytes())] == [0]
    os.close(dup.fileno)


def test_time_index_entry_layout_on_disk(tmp_path, clock):
    log = open_log(tmp_path, clock, index_interval_bytes=0)
    log.append(validated(log, [100]))
    log.append(validated(log, [300, 200]))
    log.append(validated(log, [250]))
    log.flush()  # the active segment's entries reach the file here
    seg = log.active_segment
    raw = open(seg.time_index.path, "rb").read()
    assert raw == struct.pack(">qi", 300, 1)  # (max so far, its offset) when the 2nd set came


def test_inactive_index_corrupted_in_the_middle_is_rebuilt_on_first_lookup(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_bytes=3000, index_interval_bytes=100)
    for i in range(80):
        log.append(validated(log, [i], value_size=30))
    first = log.segments[0]
    assert first.offset_index.entries >= 4
    log.close()
    with open(first.offset_index.path, "r+b") as f:  # first/last entries intact
        f.seek(16)
        f.write(struct.pack(">ii", 1, 1))
    log = Log(log.directory, log.config, clock=clock, needs_recovery=False)
    assert not log.segments[0].offset_index.is_loaded  # start-up only checked the ends
    with capture_logs() as logs:
        msgs = all_messages(log)
    assert [m.offset for m in msgs] == list(range(80))
    rebuilt = [e for e in logs if e["event"] == "rebuilt segment indexes from the log"]
    assert len(rebuilt) == 1 and "does not follow" in rebuilt[0]["reason"]


def test_reading_history_keeps_few_descriptors_open(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_bytes=300)
    for i in range(40):
        log.append(validated(log, [i], value_size=100))
    assert len(log.segments) >= 10
    assert not any(s.has_open_fd for s in log.segments[:-1])  # a roll closes the old file
    before = len(os.listdir("/proc/self/fd"))
    assert [m.offset for m in all_messages(log)] == list(range(40))
    opened = sum(s.has_open_fd for s in log.segments[:-1])
    assert opened <= 4
    assert len(os.listdir("/proc/self/fd")) - before <= 4


def test_lowering_max_message_bytes_does_not_truncate_older_messages(tmp_path, clock):
    log = open_log(tmp_path, clock)
    for i in range(3):
        log.append(validated(log, [i], value_size=5000))
    log.close()
    lowered = LogConfig(max_message_bytes=1000)
    log = Log(log.directory, lowered, clock=clock, needs_recovery=True)
    assert log.log_end_offset == 3


# -- deletion before an offset (the group coordinator's offsets compaction) ----------------------
def test_delete_segments_before_deletes_only_whole_segments_below_the_offset(tmp_path, clock):
    log = open_log(tmp_path, clock, retention_ms=-1, file_delete_delay_ms=1000)
    for n in (2, 3, 1, 2):  # segments [0,1] [2..4] [5] [6,7]; active starts at 8
        log.append(validated(log, [clock.now] * n))
        log.roll()
    log.append(validated(log, [clock.now]))
    assert [s.base_offset for s in log.segments] == [0, 2, 5, 6, 8]
    assert log.delete_segments_before(0, clock.now) == 0
    assert log.delete_segments_before(4, clock.now) == 1  # [2..4] holds 4: kept
    assert log.log_start_offset == 2
    assert log.delete_segments_before(5, clock.now) == 1
    assert log.log_start_offset == 5
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 100)
    assert [m.offset for m in all_messages(log)] == [5, 6, 7, 8]
    renamed = sorted(n for n in seg_files(log) if n.endswith(".deleted"))
    assert renamed == sorted(
        f"{b:020d}{s}.deleted" for b in (0, 2) for s in (".log", ".index", ".timeindex")
    )
    assert log.remove_deleted_files(clock.now + 999) == 0
    assert log.remove_deleted_files(clock.now + 1000) == 2
    # Far past the end: everything but the active segment goes, the active one stays.
    assert log.delete_segments_before(10**9, clock.now) == 2
    assert [s.base_offset for s in log.segments] == [8]
    assert (log.log_start_offset, log.log_end_offset) == (8, 9)
    assert log.recovery_point >= 8
    assert [m.offset for m in all_messages(log)] == [8]
    with pytest.raises(ValueError, match="negative offset -1"):
        log.delete_segments_before(-1, clock.now)


def test_delete_segments_before_survives_reopen_with_moved_log_start(tmp_path, clock):
    log = open_log(tmp_path, clock, retention_ms=-1, file_delete_delay_ms=60_000)
    for _ in range(3):
        log.append(validated(log, [clock.now] * 2))
        log.roll()
    assert log.delete_segments_before(4, clock.now) == 2
    # Crash with the .deleted files still present: they are removed on load, start stays 4.
    log = reopen(log, clock, clean=False)
    assert (log.log_start_offset, log.log_end_offset) == (4, 6)
    assert not [n for n in seg_files(log) if n.endswith(".deleted")]
    assert [m.offset for m in all_messages(log)] == [4, 5]
    log.close()
