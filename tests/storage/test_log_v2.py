"""Logs holding record batches (magic 2) next to magic-1 message sets: reads inside a batch,
timestamp search inside out-of-order batches, truncation, recovery, dump-log."""

from __future__ import annotations

import io
import os

from tests.storage.helpers import validated

from protocol.compression import Codec
from protocol.records import TimestampType, iter_deep, iter_shallow
from storage import Log, LogConfig, TimestampOffset
from storage.dump import dump_file

NOW = 1_700_000_000_000


def open_log(tmp_path, clock, **config) -> Log:
    return Log(
        os.path.join(tmp_path, "t-0"), LogConfig(**config), clock=clock, needs_recovery=False
    )


def mixed(log) -> list[tuple[int, int]]:
    """Append magic-1, v2 (CreateTime out of order), v2 lz4, v2 LogAppendTime; return every
    (offset, timestamp) as a consumer sees it."""
    log.append(validated(log, [NOW + 5, NOW + 1], magic=1))
    log.append(validated(log, [NOW + 30, NOW + 10, NOW + 20, NOW + 15] * 10, magic=2))
    log.append(validated(log, [NOW + 50, NOW + 40], magic=2, codec=Codec.LZ4))
    log.append(
        validated(
            log, [NOW, NOW], magic=2, now=NOW + 70, timestamp_type=TimestampType.LOG_APPEND_TIME
        )
    )
    return read_all(log)


def read_all(log) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    while (out[-1][0] + 1 if out else 0) < log.log_end_offset:
        data = log.read(out[-1][0] + 1 if out else 0, 10**6).read_bytes()
        start = out[-1][0] + 1 if out else 0
        out += [(m.offset, m.timestamp) for m in iter_deep(data) if m.offset >= start]
    return out


def brute_force(messages, ts):
    return next((TimestampOffset(t, o) for o, t in messages if t >= ts), None)


def test_search_read_and_truncate_inside_batches(tmp_path, clock):
    log = open_log(tmp_path, clock, index_interval_bytes=0)
    messages = mixed(log)
    assert [o for o, _ in messages] == list(range(46))
    for ts in range(NOW - 1, NOW + 72):
        assert log.offset_for_timestamp(ts) == brute_force(messages, ts), ts
    # a read from inside a batch starts at the batch, as for a compressed wrapper
    data = log.read(20, 10**6)
    first = next(iter_shallow(data.read_bytes()))
    assert (first.magic, first.offset) == (2, 41) and data.position > 0
    assert next(iter_deep(data.read_bytes())).offset == 2
    log.truncate_to(43)  # inside the lz4 batch 42..43: the whole batch goes
    assert log.log_end_offset == 42
    log.append(validated(log, [NOW + 60], magic=2))
    assert log.log_end_offset == 43


def test_recovery_truncates_at_a_corrupt_batch(tmp_path, clock):
    log = open_log(tmp_path, clock)
    messages = mixed(log)
    path = log.active_segment.log_path
    log.close()
    size = os.path.getsize(path)
    with open(path, "r+b") as f:  # flip a byte inside the last batch's records
        f.seek(size - 3)
        b = f.read(1)
        f.seek(size - 3)
        f.write(bytes([b[0] ^ 0xFF]))
    log = Log(os.path.join(tmp_path, "t-0"), LogConfig(), clock=clock, needs_recovery=True)
    assert log.log_end_offset == 44
    assert read_all(log) == messages[:44]


def test_dump_log_shows_batches_and_verifies_mixed_segments(tmp_path, clock):
    log = open_log(tmp_path, clock, index_interval_bytes=0)
    mixed(log)
    log.roll()
    path = log.segments[0].log_path
    out, err = io.StringIO(), io.StringIO()
    assert dump_file(path, deep=True, verify=True, out=out, err=err) == 0, err.getvalue()
    text = out.getvalue()
    assert "baseOffset: 2 lastOffset: 41 count: 40" in text
    assert "LogAppendTime: %d" % (NOW + 70) in text and "compresscodec: lz4" in text
    assert "| offset: 3 CreateTime: %d keySize: 2 valueSize: 10 sequence: -1" % (NOW + 10) in text
    for suffix in (".index", ".timeindex"):
        out = io.StringIO()
        assert (
            dump_file(path[:-4] + suffix, deep=False, verify=True, out=out, err=io.StringIO()) == 0
        ), out.getvalue()


def test_offset_of_max_timestamp_is_the_first_message_holding_it(tmp_path, clock):
    log = open_log(tmp_path, clock, index_interval_bytes=0, segment_bytes=1000)
    assert log.offset_of_max_timestamp() is None
    messages = mixed(log)
    expected = max(messages, key=lambda m: (m[1], -m[0]))
    assert log.offset_of_max_timestamp() == TimestampOffset(expected[1], expected[0])
    log.append(validated(log, [NOW + 70, NOW + 3], magic=1))  # ties the LogAppendTime batch
    assert log.offset_of_max_timestamp() == TimestampOffset(NOW + 70, 44)


def test_partition_metadata_holds_the_topic_id(tmp_path, clock):
    import uuid

    import pytest

    from storage import InconsistentTopicIdError

    log = open_log(tmp_path, clock)
    assert log.topic_id is None
    topic_id = uuid.UUID("e3e70682-c209-4cac-629f-6fbed82c07cd")
    log.assign_topic_id(topic_id)
    path = os.path.join(log.directory, "partition.metadata")
    # Kafka's PartitionMetadataFile: version 0, the id as Uuid.toString (base64url, no padding)
    assert open(path).read() == "version: 0\ntopic_id: 4-cGgsIJTKxin2--2CwHzQ\n"
    log.assign_topic_id(topic_id)  # the same id again: nothing to do
    log.close()
    log = open_log(tmp_path, clock)
    assert log.topic_id == topic_id
    with pytest.raises(InconsistentTopicIdError, match="another topic"):
        log.assign_topic_id(uuid.uuid4())
    log.close()


def test_every_read_names_an_upper_bound_no_record_it_returns_reaches(tmp_path, clock):
    """FetchData.upper_bound (Kafka's fetchUpperBoundOffset), where a read_committed fetch stops
    collecting aborted transactions: above every offset the read returns, at most max_offset,
    and within the segment read or at the next one's base. Brute force over every start offset,
    several limits, small segments and a sparse index."""
    log = open_log(tmp_path, clock, segment_bytes=1500, index_interval_bytes=200)
    for i in range(40):
        log.append(validated(log, [NOW + i] * (1 + i % 4), magic=2, value_size=20 + 7 * i))
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 3
    for start in range(log.log_end_offset):
        for limit in (1, 150, 600, 10**6):
            for max_offset in (None, min(start + 3, log.log_end_offset)):
                data = log.read(start, limit, min_one_message=True, max_offset=max_offset)
                offsets = [m.offset for m in iter_deep(data.read_bytes())]
                if not offsets:
                    assert data.upper_bound == start
                    continue
                assert max(offsets) < data.upper_bound, (start, limit, max_offset)
                assert data.upper_bound <= (max_offset or log.log_end_offset)
                later = [b for b in bases if b > max(offsets)]
                assert data.upper_bound <= (later[0] if later else log.log_end_offset)
