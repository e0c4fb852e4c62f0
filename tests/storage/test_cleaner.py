"""The log cleaner (storage/cleaner.py) on real logs: what survives, how wrappers and batches are
rebuilt (read back with kafka-python's record code as the oracle), indexes, tombstones, lags,
the dirty ratio, the bounded offset map, segment grouping, the checkpoint, stale cleanings."""

from __future__ import annotations

import io
import os

import pytest

from protocol import recordbatch as rb
from protocol.compression import Codec
from protocol.records import MessageSetBuilder, TimestampType, iter_shallow
from protocol.validator import TopicSettings, ValidatedRecords, validate_produce
from storage import Log, LogConfig, LogManager, TimestampOffset
from storage.checkpoint import cleaner_checkpoint_path, read_checkpoint
from storage.cleaner import (
    OFFSET_MAP_ENTRY_BYTES,
    Cleaner,
    CleanerManager,
    CleaningAbortedError,
    CleaningJob,
    OffsetMap,
    Throttler,
    group_segments,
    plan_cleaning,
)
from storage.dump import dump_file
from tests.protocol.kafka_python_oracle import kp_read

DAY = 86_400_000
MIB = 1 << 20


def open_log(tmp_path, clock, **overrides) -> Log:
    settings = dict(cleanup_policy="compact", segment_bytes=4096, file_delete_delay_ms=0)
    settings.update(overrides)
    return Log(str(tmp_path / "topic-0"), LogConfig(**settings), clock=clock, needs_recovery=False)


def append(
    log,
    clock,
    records,
    *,
    magic=2,
    codec=Codec.NONE,
    lat=False,
    producer=-1,
    sequence=-1,
    timestamps=None,
) -> ValidatedRecords:
    """Append (key, value) records as one set, stamped clock.now (or ``timestamps``)."""
    builder = MessageSetBuilder(
        magic=magic,
        codec=codec,
        producer_id=producer,
        producer_epoch=0 if producer >= 0 else -1,
        base_sequence=sequence,
    )
    for i, (key, value) in enumerate(records):
        ts = timestamps[i] if timestamps else clock.now
        builder.append(value, key=key, timestamp=ts)
    settings = TopicSettings(
        magic=magic,
        timestamp_type=TimestampType.LOG_APPEND_TIME if lat else TimestampType.CREATE_TIME,
        compacted=True,
    )
    v = validate_produce(
        builder.build(), settings, next_offset=log.log_end_offset, now_ms=clock.now
    )
    assert isinstance(v, ValidatedRecords), v
    log.append(v)
    return v


def read_all(log) -> list[tuple]:
    """(offset, timestamp, key, value) of every record, fetched as a consumer does (advancing
    past each batch's last offset) and decoded by kafka-python."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, MIB).read_bytes()
        shallow = list(iter_shallow(data))
        assert shallow, f"nothing read at {offset}"
        out += [r for r in kp_read(data) if r[0] >= offset]
        offset = shallow[-1].offset + 1
    return out


def latest(records) -> dict:
    """key -> (offset, value) of the last record of each key."""
    result = {}
    for offset, _, key, value in records:
        result[key] = (offset, value)
    return result


def verify_files(log) -> None:
    out = io.StringIO()
    for s in log.segments:
        for path in (s.log_path, s.offset_index.path, s.time_index.path):
            assert dump_file(path, deep=True, verify=True, out=out, err=out) == 0, out.getvalue()


def clean(log, clock, **kwargs):
    return Cleaner(16 * MIB).clean(log, clock.now, force=True, **kwargs)


@pytest.mark.parametrize(
    "magic,codec",
    [(2, Codec.NONE), (2, Codec.GZIP), (2, Codec.LZ4), (2, Codec.ZSTD), (1, Codec.NONE)]
    + [(1, Codec.GZIP), (1, Codec.SNAPPY), (0, Codec.NONE), (0, Codec.LZ4)],
)
def test_one_value_per_key_survives_at_its_original_offset(tmp_path, clock, magic, codec):
    log = open_log(tmp_path, clock, segment_bytes=1500, index_interval_bytes=100)
    for i in range(60):
        append(
            log,
            clock,
            [(b"k%d" % ((i * 3 + j) % 7), b"v%d-%d" % (i, j)) for j in range(3)],
            magic=magic,
            codec=codec,
        )
        clock.advance(1000)
    log.roll()
    before = read_all(log)
    expected = latest(before)
    result = clean(log, clock)
    assert result is not None and result.swapped
    after = read_all(log)
    assert latest(after) == expected
    assert sorted((o, v) for o, v in expected.values()) == [(o, v) for o, _, _, v in after]
    assert len(after) == 7
    assert log.size < sum(len(v) + 30 for *_, v in before) / 3
    assert log.first_dirty_offset == log.active_segment.base_offset
    verify_files(log)
    # KIP-79 over what remains equals brute force
    for _, ts, _, _ in [r for r in before if r[1] >= 0]:
        expected_hit = next(((t, o) for o, t, _, _ in after if t >= ts), None)
        found = log.offset_for_timestamp(ts)
        assert (found and tuple(found)) == expected_hit or (found is None and not expected_hit)


def test_compressed_magic1_wrapper_is_rebuilt_with_its_last_offset_and_kip32_timestamp(
    tmp_path, clock
):
    log = open_log(tmp_path, clock)
    t = clock.now
    # CreateTime: the wrapper takes the largest remaining timestamp
    append(
        log,
        clock,
        [(b"a", b"1"), (b"b", b"1"), (b"c", b"1"), (b"d", b"1")],
        magic=1,
        codec=Codec.GZIP,
        timestamps=[t + 40, t + 10, t + 30, t + 20],
    )
    append(log, clock, [(b"a", b"2"), (b"c", b"2")], magic=1)
    log.roll()
    clean(log, clock)
    raw = open(log.segments[0].log_path, "rb").read()
    wrapper = next(iter_shallow(raw))
    assert wrapper.codec == Codec.GZIP
    assert wrapper.offset == 3  # the last remaining inner message, d
    assert wrapper.timestamp == t + 20  # max of b (t+10) and d (t+20): a's t+40 is gone
    assert kp_read(raw[: wrapper.next_position]) == [
        (1, t + 10, b"b", b"1"),
        (3, t + 20, b"d", b"1"),
    ]
    verify_files(log)


def test_log_append_time_wrapper_keeps_its_timestamp(tmp_path, clock):
    log = open_log(tmp_path, clock)
    lat = clock.now
    append(
        log, clock, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], magic=1, codec=Codec.LZ4, lat=True
    )
    clock.advance(5000)
    append(log, clock, [(b"c", b"2")], magic=1, lat=True)
    log.roll()
    clean(log, clock)
    raw = open(log.segments[0].log_path, "rb").read()
    wrapper = next(iter_shallow(raw))
    assert (wrapper.offset, wrapper.timestamp) == (1, lat)
    assert wrapper.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r[:3] for r in kp_read(raw[: wrapper.next_position])] == [
        (0, lat, b"a"),
        (1, lat, b"b"),
    ]


def test_batches_keep_offsets_and_producer_fields_and_a_producers_last_batch_stays_empty(
    tmp_path, clock
):
    log = open_log(tmp_path, clock)
    # producer 7: a batch of 3, then a batch of 2 (its last); both fully overwritten later
    append(log, clock, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], producer=7, sequence=0)
    append(log, clock, [(b"a", b"2"), (b"b", b"2")], producer=7, sequence=3)
    # a batch without producer whose middle record survives
    append(log, clock, [(b"x", b"1"), (b"y", b"1"), (b"z", b"1")], codec=Codec.GZIP)
    append(log, clock, [(b"a", b"3"), (b"b", b"3"), (b"c", b"3"), (b"x", b"2"), (b"z", b"2")])
    log.roll()
    clean(log, clock)
    raw = open(log.segments[0].log_path, "rb").read()
    headers = [rb.read_header(raw, e.position) for e in iter_shallow(raw)]
    # the first batch of producer 7 is gone, its last one stays without records
    empty, middle, last = headers
    assert (empty.base_offset, empty.last_offset, empty.records_count) == (3, 4, 0)
    assert (empty.producer_id, empty.producer_epoch, empty.base_sequence) == (7, 0, 3)
    assert empty.last_sequence == 4
    assert (middle.base_offset, middle.last_offset, middle.records_count) == (5, 7, 1)
    assert middle.codec == Codec.GZIP
    assert last.records_count == 5
    assert kp_read(raw) == [(6, clock.now, b"y", b"1")] + [
        (8 + i, clock.now, k, v)
        for i, (k, v) in enumerate(
            [(b"a", b"3"), (b"b", b"3"), (b"c", b"3"), (b"x", b"2"), (b"z", b"2")]
        )
    ]
    # the producer state rebuilt from the cleaned log still knows producer 7's last batch
    log.close()
    for name in os.listdir(log.directory):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(log.directory, name))
    log = Log(log.directory, log.config, clock=clock, needs_recovery=True)
    dup = log.producer_state().check(7, 0, 3, 4)
    assert dup is not None and (dup.first_offset, dup.last_offset) == (3, 4)
    verify_files(log)


def test_v2_tombstones_get_a_delete_horizon_and_go_after_delete_retention_ms(tmp_path, clock):
    log = open_log(tmp_path, clock, delete_retention_ms=DAY)
    append(log, clock, [(b"a", b"1"), (b"b", b"1")])
    append(log, clock, [(b"a", None), (b"c", b"1")])
    log.roll()
    first_clean = clock.now
    clean(log, clock)
    assert [(r[0], r[2], r[3]) for r in read_all(log)] == [
        (1, b"b", b"1"),
        (2, b"a", None),
        (3, b"c", b"1"),
    ]
    raw = open(log.segments[0].log_path, "rb").read()
    horizons = [rb.read_header(raw, e.position).delete_horizon_ms for e in iter_shallow(raw)]
    assert horizons == [None, first_clean + DAY]
    # a later cleaning before the horizon keeps it (the horizon is not moved)
    clock.advance(DAY - 1)
    append(log, clock, [(b"d", b"1")])
    log.roll()
    clean(log, clock)
    assert (2, b"a", None) in [(r[0], r[2], r[3]) for r in read_all(log)]
    # from the horizon on the tombstone goes
    clock.advance(1)
    append(log, clock, [(b"e", b"1")])
    log.roll()
    clean(log, clock)
    assert [r[2] for r in read_all(log)] == [b"b", b"c", b"d", b"e"]
    verify_files(log)


def test_legacy_tombstones_go_by_segment_modification_time(tmp_path, clock):
    """Kafka's rule for magic 0/1: a tombstone goes once the newest clean segment was last
    modified delete.retention.ms after the tombstone's segment. Each segment here holds a large
    record, so no two are ever grouped (grouping moves a tombstone into a younger segment)."""
    log = open_log(tmp_path, clock, delete_retention_ms=DAY, segment_bytes=500)
    t0 = clock.now
    big = b"x" * 300

    def segment_at(records, mtime):
        append(log, clock, records, magic=1)
        segment = log.active_segment
        log.roll()
        os.utime(segment.log_path, ns=(mtime * 10**6,) * 2)
        clean(log, clock)
        return [r[2:] for r in read_all(log)]

    assert (b"a", None) in segment_at([(b"s0", big), (b"a", b"1"), (b"a", None)], t0)
    assert (b"a", None) in segment_at([(b"s1", big)], t0 + DAY - 1)
    assert (b"a", None) in segment_at([(b"s2", big)], t0 + DAY)  # newest clean: t0 + DAY - 1
    remaining = segment_at([(b"s3", big)], t0 + 2 * DAY)  # newest clean: t0 + DAY
    assert remaining == [(b"s0", big), (b"s1", big), (b"s2", big), (b"s3", big)]


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path, clock):
    log = open_log(tmp_path, clock, min_compaction_lag_ms=10_000)
    t0 = clock.now
    for value, at in ((b"1", t0), (b"2", t0 + 20_000), (b"3", t0 + 25_000)):
        append(log, clock, [(b"a", value)], timestamps=[at])
        log.roll()
    now = t0 + 25_000
    plan = plan_cleaning(log, now)
    assert plan.first_uncleanable_offset == 1  # the second segment is younger than the lag
    Cleaner(MIB).clean(log, now, force=True)
    assert [r[3] for r in read_all(log)] == [b"1", b"2", b"3"]  # nothing in [0, 1) to drop
    now = t0 + 30_001  # the second one is old enough now, the third not
    Cleaner(MIB).clean(log, now, force=True)
    assert [r[3] for r in read_all(log)] == [b"2", b"3"]


def test_dirty_ratio_and_max_compaction_lag_decide_when_a_log_is_due(tmp_path, clock):
    log = open_log(tmp_path, clock, min_cleanable_dirty_ratio=0.5, segment_bytes=2000)
    for i in range(10):
        append(log, clock, [(b"k%d" % i, b"x" * 50)])
    log.roll()
    plan = plan_cleaning(log, clock.now)
    assert plan.cleanable_ratio == 1.0 and plan.due
    assert Cleaner(MIB).clean(log, clock.now) is not None
    append(log, clock, [(b"k0", b"y" * 50)])
    log.roll()
    plan = plan_cleaning(log, clock.now)
    assert 0 < plan.cleanable_ratio < 0.5 and not plan.due
    assert Cleaner(MIB).clean(log, clock.now) is None
    # KIP-354: once a dirty record is older than max.compaction.lag.ms the log is due anyway
    log.update_config(log.config.with_overrides({"max.compaction.lag.ms": 60_000}))
    assert not plan_cleaning(log, clock.now + 60_000).due
    plan = plan_cleaning(log, clock.now + 60_001)
    assert plan.needs_compaction_now and plan.due
    assert Cleaner(MIB).clean(log, clock.now + 60_001) is not None
    assert [r[2] for r in read_all(log)] == [b"k%d" % i for i in range(1, 10)] + [b"k0"]


def test_max_compaction_lag_rolls_the_active_segment(tmp_path, clock):
    log = open_log(tmp_path, clock, max_compaction_lag_ms=1000, segment_ms=DAY)
    append(log, clock, [(b"a", b"1")])
    clock.advance(1001)
    append(log, clock, [(b"a", b"2")])
    assert len(log.segments) == 2


def test_a_small_dedupe_buffer_cleans_in_several_passes(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_bytes=600)
    for round_ in range(3):
        for k in range(40):
            append(log, clock, [(b"k%d" % k, b"r%d" % round_)])
    log.roll()
    expected = latest(read_all(log))
    cleaner = Cleaner(12 * OFFSET_MAP_ENTRY_BYTES)  # 10 keys per pass
    ends = []
    while True:
        result = cleaner.clean(log, clock.now, force=True)
        if result is None:
            break
        ends.append(result.end_offset)
        assert result.stats.keys_mapped <= 10
    assert ends == sorted(ends) and ends[-1] == log.active_segment.base_offset and len(ends) > 3
    assert latest(read_all(log)) == expected and len(read_all(log)) == 40
    verify_files(log)


def test_cleaned_segments_are_grouped_within_segment_bytes(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_bytes=1000)
    for i in range(100):
        append(log, clock, [(b"k%d" % (i % 10), b"v" * 20)])
    log.roll()
    assert len(log.segments) > 10
    clean(log, clock)  # each segment is nearly full: cleaned one by one
    append(log, clock, [(b"k0", b"w")])
    log.roll()
    clean(log, clock)  # the emptied segments are merged now
    assert len(log.segments) <= 3
    assert all(s.size <= 1000 for s in log.segments)
    assert len(read_all(log)) == 10
    verify_files(log)


def test_group_segments_respects_size_index_and_offset_range():
    class Info:
        def __init__(self, base, size, index=8, time=12):
            self.base_offset, self.size = base, size
            self.offset_index_bytes, self.time_index_bytes = index, time

    segs = [Info(0, 400), Info(10, 400), Info(20, 400), Info(30, 100)]
    assert [[s.base_offset for s in g] for g in group_segments(segs, 1000, 100, 40)] == [
        [0, 10],
        [20, 30],
    ]
    segs = [Info(0, 1, index=60), Info(10, 1, index=60)]
    assert len(group_segments(segs, 1000, 100, 20)) == 2
    segs = [Info(0, 1), Info(2**31 + 5, 1)]
    assert len(group_segments(segs, 1000, 100, 2**31 + 10)) == 2


def test_offset_map_is_bounded_by_its_memory():
    m = OffsetMap(100 * OFFSET_MAP_ENTRY_BYTES)
    assert m.max_entries == 90
    assert all(m.put(b"%016d" % i, i) for i in range(90))
    assert not m.put(b"new key digest!!", 1)
    assert m.put(b"%016d" % 3, 1000) and m.get(b"%016d" % 3) == 1000
    assert m.get(b"absent") == -1
    with pytest.raises(ValueError, match="dedupe buffer"):
        OffsetMap(OFFSET_MAP_ENTRY_BYTES)


def test_throttler_sleeps_off_the_excess():
    now = [0.0]
    slept = []

    def sleep(s):
        slept.append(s)
        now[0] += s

    t = Throttler(1000.0, clock=lambda: now[0], sleep=sleep)
    t.maybe_throttle(100)
    now[0] += 0.5
    t.maybe_throttle(900)  # 1000 bytes in 0.5 s: sleep another 0.5 s
    assert slept == [pytest.approx(0.5)]
    now[0] += 1.0
    t.maybe_throttle(100)  # below the rate: no sleep
    assert len(slept) == 1


def test_retention_deletes_only_under_the_delete_policy(tmp_path, clock):
    log = open_log(tmp_path, clock, retention_ms=DAY)
    append(log, clock, [(b"a", b"1")])
    log.roll()
    assert log.delete_expired_segments(clock.now + 2 * DAY) == 0
    log.update_config(log.config.with_overrides({"cleanup.policy": "compact,delete"}))
    assert log.delete_expired_segments(clock.now + 2 * DAY) == 1


@pytest.mark.parametrize(
    "delete",
    [lambda m: m.delete_topic("t"), lambda m: m.delete_log("t", 0)],
    ids=["delete_topic", "delete_log"],
)
def test_checkpoint_file_is_kafkas_and_survives_a_restart(tmp_path, clock, delete):
    config = LogConfig(cleanup_policy="compact", file_delete_delay_ms=0)
    manager = LogManager([str(tmp_path)], lambda topic: config, clock)
    manager.startup()
    log = manager.create_log("t", 0)
    append(log, clock, [(b"a", b"1")])
    append(log, clock, [(b"a", b"2")])
    log.roll()
    append(log, clock, [(b"b", b"1")])
    result = Cleaner(MIB).clean(log, clock.now, force=True, manager=manager.cleaning)
    manager.checkpoint_cleaner(str(tmp_path))
    path = cleaner_checkpoint_path(str(tmp_path))
    assert open(path).read() == f"0\n1\nt 0 {result.end_offset}\n"
    manager.shutdown()
    manager = LogManager([str(tmp_path)], lambda topic: config, clock)
    manager.startup()
    log = manager.get_log("t", 0)
    assert log.first_dirty_offset == 2
    # a truncation below the checkpoint lowers it and rewrites the file at once
    log.truncate_to(1)
    assert log.first_dirty_offset == log.log_end_offset == 0  # offset 0 was cleaned away
    assert read_checkpoint(path) == {("t", 0): 0}
    delete(manager)
    assert read_checkpoint(path) == {}
    manager.shutdown()


def mapped_job(tmp_path, clock) -> tuple[Log, CleaningJob]:
    """A log of 20 sets over 3 keys in several segments, and a cleaning of it (registered with
    a CleanerManager of its own) whose offset map is built."""
    log = open_log(tmp_path, clock, segment_bytes=200)
    for i in range(20):
        append(log, clock, [(b"k%d" % (i % 3), b"v%d" % i)])
    log.roll()
    plan = plan_cleaning(log, clock.now)
    manager = CleanerManager()
    job = CleaningJob(plan, Cleaner(MIB), manager, manager.begin(plan.key), clock.now)
    job.build_offset_map()
    return log, job


def test_a_cleaning_is_dropped_when_the_log_is_truncated_meanwhile(tmp_path, clock):
    log, job = mapped_job(tmp_path, clock)
    cleaned = job.clean_group(job.groups[0])
    assert any(n.endswith(".cleaned") for n in os.listdir(log.directory))
    log.truncate_to(10)  # under the lock, between the cleaning and its swap
    for i in range(10, 20):
        append(log, clock, [(b"k%d" % (i % 3), b"w%d" % i)])
    log.roll()
    before = read_all(log)
    assert not job.swap(cleaned)
    assert not any(
        n.endswith((".cleaned", ".swap", ".replaces")) for n in os.listdir(log.directory)
    )
    result = job.finish()
    assert not result.swapped and log.first_dirty_offset is None
    assert read_all(log) == before


def test_aborted_cleaning_stops_and_removes_its_files(tmp_path, clock):
    log, job = mapped_job(tmp_path, clock)
    manager, key = job.manager, job.plan.key
    manager.abort_and_wait(key)
    with pytest.raises(CleaningAbortedError):
        job.clean_group(job.groups[0])
    assert not any(n.endswith(".cleaned") for n in os.listdir(log.directory))
    assert manager.begin(key) is None  # still running until end()
    manager.end(key)
    assert manager.begin(key) is not None


def test_offset_of_max_timestamp_and_search_after_cleaning(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_bytes=400, index_interval_bytes=0)
    t = clock.now
    stamps = [t + 50, t + 10, t + 70, t + 30, t + 90, t + 20]
    for i, ts in enumerate(stamps):
        append(log, clock, [(b"k%d" % (i % 2), b"v%d" % i)], timestamps=[ts])
    log.roll()
    clean(log, clock)
    after = read_all(log)
    assert [r[:2] for r in after] == [(4, t + 90), (5, t + 20)]
    assert log.offset_for_timestamp(t) == TimestampOffset(t + 90, 4)
    assert log.offset_for_timestamp(t + 91) is None
    assert log.offset_of_max_timestamp() == TimestampOffset(t + 90, 4)
    verify_files(log)


def test_retention_waits_while_a_log_is_being_cleaned(tmp_path, clock):
    from storage import Maintenance

    config = LogConfig(cleanup_policy="compact,delete", file_delete_delay_ms=0)
    manager = LogManager([str(tmp_path)], lambda topic: config, clock)
    manager.startup()
    manager.create_log("t", 0)
    assert [key for key, _ in manager.due(Maintenance.RETENTION, clock.now)] == [("t", 0)]
    assert manager.cleaning.begin(("t", 0)) is not None
    assert manager.due(Maintenance.RETENTION, clock.now) == []
    manager.cleaning.end(("t", 0))
    assert len(manager.due(Maintenance.RETENTION, clock.now)) == 1
    manager.shutdown()
