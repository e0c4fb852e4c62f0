"""A follower's log (Log.append_replica), the high watermark and leader epochs in the Log."""

from __future__ import annotations

import io
import random

import pytest

from protocol.compression import Codec
from protocol.errors import CorruptRecordError
from protocol.records import MessageSetBuilder, TimestampType, iter_deep
from protocol.validator import TopicSettings, ValidatedRecords, validate_produce
from storage import InvalidAppendError, Log, LogConfig
from storage.dump import dump_file
from storage.leader_epoch import EpochEntry

DAY = 86_400_000


def open_log(path, clock, **config):
    return Log(str(path), LogConfig(**config), clock=clock, needs_recovery=False)


def produce(log, timestamps, *, epoch=0, codec=Codec.NONE, magic=2, lat=False, now=None):
    builder = MessageSetBuilder(magic=magic, codec=codec)
    for i, ts in enumerate(timestamps):
        builder.append(b"v%d" % i, key=b"k%d" % i, timestamp=ts)
    settings = TopicSettings(
        magic=magic,
        timestamp_type=TimestampType.LOG_APPEND_TIME if lat else TimestampType.CREATE_TIME,
    )
    result = validate_produce(
        builder.build(),
        settings,
        next_offset=log.log_end_offset,
        now_ms=now if now is not None else 1_700_000_000_000,
        partition_leader_epoch=epoch,
    )
    assert isinstance(result, ValidatedRecords)
    log.append(result)
    return result


def leader_bytes(log, start=0):
    """Everything the leader holds from ``start``, as a fetch would hand it out."""
    out = bytearray()
    offset = start
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).read_bytes()
        out += data
        offset = list(iter_deep(data))[-1].offset + 1
    return bytes(out)


def segment_files(log):
    return [
        f"{log.directory}/{s.base_offset:020d}{suffix}"
        for s in log.segments
        for suffix in (".log", ".index", ".timeindex")
    ]


def verify_clean(log):
    log.flush()
    for path in segment_files(log):
        out, err = io.StringIO(), io.StringIO()
        assert dump_file(path, deep=False, verify=True, out=out, err=err) == 0, out.getvalue()


@pytest.mark.parametrize("magic,codec", [(2, Codec.NONE), (2, Codec.LZ4), (1, Codec.GZIP)])
def test_follower_copies_the_leaders_log_exactly(tmp_path, clock, magic, codec):
    config = dict(segment_bytes=4096, index_interval_bytes=256)
    leader = open_log(tmp_path / "lead-0", clock, **config)
    follower = open_log(tmp_path / "follow-0", clock, **config)
    rng = random.Random(7)
    base = clock.now - 7 * DAY
    for n in range(60):
        stamps = [base + rng.randrange(10 * DAY) for _ in range(rng.randrange(1, 6))]
        produce(leader, stamps, epoch=n // 20, magic=magic, codec=codec)
    # fetched in pieces that end inside an entry, as max_bytes cuts them
    data = leader_bytes(leader)
    position = 0
    while position < len(data):
        chunk = data[position : position + rng.randrange(100, 900)]
        got = follower.append_replica(chunk)
        position += got.size
        if got.entries == 0:
            chunk = data[position : position + 5000]
            position += follower.append_replica(chunk).size
    assert follower.log_end_offset == leader.log_end_offset
    assert leader_bytes(follower) == data
    assert [m.timestamp for m in iter_deep(leader_bytes(follower))] == [
        m.timestamp for m in iter_deep(data)
    ]
    # offsets_for_times: the same answer on both replicas for every timestamp
    stamps = sorted({m.timestamp for m in iter_deep(data)})
    for ts in [stamps[0] - 1, *stamps, stamps[-1] + 1, *(s + 1 for s in stamps[::7])]:
        assert follower.offset_for_timestamp(ts) == leader.offset_for_timestamp(ts)
    if magic == 2:
        assert follower.leader_epochs.entries == [
            EpochEntry(e, leader_first)
            for e, leader_first in [(0, 0), (1, _first_offset_of_epoch(data, 1))]
            + [(2, _first_offset_of_epoch(data, 2))]
        ]
    verify_clean(follower)


def _first_offset_of_epoch(data, epoch):
    from protocol import recordbatch as rb
    from protocol.records import iter_shallow

    for entry in iter_shallow(data):
        h = rb.read_header(data, entry.position)
        if h.partition_leader_epoch == epoch:
            return h.base_offset
    raise AssertionError(epoch)


def test_log_append_time_is_not_restamped(tmp_path, clock):
    leader = open_log(tmp_path / "lead-0", clock)
    follower = open_log(tmp_path / "follow-0", clock)
    produce(leader, [1, 2, 3], lat=True, now=5_000)
    clock.advance(DAY)
    follower.append_replica(leader_bytes(leader))
    messages = list(iter_deep(leader_bytes(follower)))
    assert {m.timestamp for m in messages} == {5_000}
    assert {m.timestamp_type for m in messages} == {TimestampType.LOG_APPEND_TIME}
    assert follower.latest_timestamp() == 5_000


def test_corrupt_or_misplaced_entries_are_refused(tmp_path, clock):
    leader = open_log(tmp_path / "lead-0", clock)
    follower = open_log(tmp_path / "follow-0", clock)
    produce(leader, [1, 2])
    produce(leader, [3])
    data = bytearray(leader_bytes(leader))
    second = len(leader_bytes(leader)) - len(leader_bytes(leader, start=2))
    bad = bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(CorruptRecordError):
        follower.append_replica(bad)
    assert follower.log_end_offset == 2  # the sound first batch is kept
    with pytest.raises(InvalidAppendError):
        follower.append_replica(bytes(data[:second]))  # offsets 0..1 again
    follower.append_replica(bytes(data[second:]))
    assert follower.log_end_offset == 3
    producer_state = follower.producer_state()
    assert producer_state is not None


def test_high_watermark_caps_reads_and_follows_truncation(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=300)
    for i in range(10):
        produce(log, [1000 + i, 1000 + i])
    assert log.high_watermark == log.log_end_offset == 20 and not log.replicated
    assert log.update_high_watermark(7) == 7 and log.replicated
    assert log.update_high_watermark(99) == 20
    log.update_high_watermark(8)
    got = [m.offset for m in iter_deep(log.read(0, 1 << 20, max_offset=8).read_bytes())]
    assert got and got == list(range(len(got))) and len(got) <= 8  # a segment may end first
    everything = []
    offset = 0
    while True:
        data = log.read(offset, 1 << 20, max_offset=8, min_one_message=True)
        if not data.length:
            break
        msgs = [m.offset for m in iter_deep(data.read_bytes())]
        everything += msgs
        offset = msgs[-1] + 1
    assert everything == list(range(8))
    assert log.read(8, 1 << 20, max_offset=8).length == 0
    assert log.read_cached(8, 1 << 20, max_offset=8).length == 0
    assert log.read_cached(18, 1 << 20, max_offset=8) is None
    log.truncate_to(6)
    assert log.high_watermark == 6 == log.log_end_offset


def test_retention_keeps_what_is_above_the_high_watermark(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=200, retention_ms=DAY)
    old = clock.now - 7 * DAY
    for i in range(12):
        produce(log, [old + i])
    assert len(log.segments) > 3
    log.update_high_watermark(log.segments[1].base_offset)
    assert log.delete_expired_segments(clock.now) == 1  # only the segment below the HW
    assert log.log_start_offset == log.high_watermark
    log.update_high_watermark(log.log_end_offset)
    log.delete_expired_segments(clock.now)
    assert log.log_start_offset == log.log_end_offset


def test_epochs_follow_truncation_retention_and_reopen(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=200, retention_ms=DAY)
    log.leader_epochs.assign(0, 0)
    for i in range(4):
        produce(log, [clock.now - 7 * DAY])
    log.leader_epochs.assign(3, log.log_end_offset)
    for i in range(4):
        produce(log, [clock.now], epoch=3)
    assert log.leader_epochs.entries == [EpochEntry(0, 0), EpochEntry(3, 4)]
    log.truncate_to(5)
    assert log.leader_epochs.entries == [EpochEntry(0, 0), EpochEntry(3, 4)]
    log.truncate_to(4)
    assert log.leader_epochs.entries == [EpochEntry(0, 0)]
    follower = open_log(tmp_path / "f-0", clock)
    follower.leader_epochs.assign(9, 0)
    follower.truncate_to(0)
    log.close()
    again = Log(log.directory, log.config, clock=clock, needs_recovery=True)
    assert again.leader_epochs.entries == [EpochEntry(0, 0)]
    again.leader_epochs.assign(4, again.log_end_offset)
    produce(again, [clock.now], epoch=4)
    again.delete_expired_segments(clock.now)
    assert again.leader_epochs.entries[0].start_offset == again.log_start_offset
