"""Message sets -> Arrow batches, against kafka-python's message-set builder as the oracle."""

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from protocol import CorruptRecordError, MessageSetBuilder, TimestampType, iter_deep
from protocol.compression import LEGACY_CODECS  # the arrow decoder reads magic 0/1 sets
from pyspark_chronolog.arrow import ARROW_SCHEMA, decode

BASE_TS = 1_700_000_000_000

messages = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=20),
        st.none() | st.binary(max_size=60),
        st.integers(0, 10_000_000),
    ),
    min_size=1,
    max_size=60,
)


def kafka_python_set(msgs, *, codec=0, base=0):
    """What a broker stores: kafka-python's producer-side set, with a compressed wrapper's
    offset set to the last inner message's absolute offset (the CRC does not cover it)."""
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=codec, batch_size=1 << 30)
    for i, (key, value, dt) in enumerate(msgs):
        builder.append(i if codec else base + i, BASE_TS + dt, key, value)
    buf = bytearray(builder.build())
    if codec:
        buf[0:8] = (base + len(msgs) - 1).to_bytes(8, "big")
    return bytes(buf)


def rows(batch):
    return [
        (
            r["key"],
            r["value"],
            r["offset"],
            round(r["timestamp"].timestamp() * 1000),
            r["timestampType"],
        )
        for r in batch.to_pylist()
    ]


def expected(msgs, base=0, start=0, end=None, window=(None, None), ts_type=0):
    out = []
    for i, (key, value, dt) in enumerate(msgs):
        off, ts = base + i, BASE_TS + dt
        if off < start or (end is not None and off >= end):
            continue
        if (window[0] is not None and ts < window[0]) or (
            window[1] is not None and ts >= window[1]
        ):
            continue
        out.append((key, value, off, ts, ts_type))
    return out


@settings(max_examples=60, deadline=None)
@given(msgs=messages, codec=st.sampled_from([0, 1]), data=st.data())
def test_decode_matches_kafka_python_records(msgs, codec, data):
    base = data.draw(st.integers(0, 1000))
    start = data.draw(st.integers(base, base + len(msgs)))
    end = data.draw(st.integers(start, base + len(msgs) + 2))
    lo = data.draw(st.none() | st.integers(BASE_TS, BASE_TS + 10_000_000))
    hi = data.draw(st.none() | st.integers(lo or BASE_TS, BASE_TS + 10_000_001))
    buf = kafka_python_set(msgs, codec=codec, base=base)
    batch, next_offset = decode(buf, "t", 3, start=start, end=end, window=(lo, hi))
    want = expected(msgs, base, start, end, (lo, hi))
    if batch is None:
        assert want == []
    else:
        assert batch.schema == ARROW_SCHEMA
        assert rows(batch) == want
        assert set(batch.column("topic").to_pylist()) == {"t"}
        assert set(batch.column("partition").to_pylist()) == {3}
    assert next_offset == (start if start == end else min(end, base + len(msgs)))


def test_batch_schema_is_exactly_spark_arrow_schema():
    buf = kafka_python_set([(b"k", b"v", 0), (None, None, 1)])
    batch, _ = decode(buf, "clicks", 0, start=0, end=2)
    assert batch.schema == ARROW_SCHEMA
    assert batch.column("key").to_pylist() == [b"k", None]
    assert batch.column("value").to_pylist() == [b"v", None]
    assert batch.column("timestamp").type == pa.timestamp("us", tz="UTC")


def test_incomplete_trailing_entry_is_left_for_the_next_fetch():
    full = kafka_python_set([(b"a", b"x" * 50, i) for i in range(5)])
    cut = full[:-10]
    batch, next_offset = decode(cut, "t", 0, start=0, end=100)
    assert batch.column("offset").to_pylist() == [0, 1, 2, 3]
    assert next_offset == 4
    assert decode(full[:20], "t", 0, start=0, end=100) == (None, 0)


def test_log_append_time_sets_are_typed_as_such():
    builder = MessageSetBuilder(timestamp_type=TimestampType.LOG_APPEND_TIME, base_offset=7)
    builder.append(b"v1", key=b"k", timestamp=BASE_TS)
    builder.append(b"v2", timestamp=BASE_TS + 5)
    batch, next_offset = decode(builder.build(), "t", 0, start=0, end=100)
    assert rows(batch) == [(b"k", b"v1", 7, BASE_TS, 1), (None, b"v2", 8, BASE_TS + 5, 1)]
    assert next_offset == 9


def test_compressed_wrapper_read_from_the_middle_skips_earlier_inner_messages():
    msgs = [(b"k%d" % i, b"v%d" % i, i) for i in range(10)]
    buf = kafka_python_set(msgs, codec=1, base=100)
    batch, next_offset = decode(buf, "t", 0, start=104, end=108)
    assert rows(batch) == expected(msgs, 100, 104, 108)
    assert next_offset == 108


def test_size_contradicting_key_and_value_lengths_is_corrupt():
    buf = bytearray(kafka_python_set([(b"key", b"value", 0)]))
    buf[26:30] = (100).to_bytes(4, "big")  # key length past the message end
    with pytest.raises(CorruptRecordError, match="do not match its size"):
        decode(bytes(buf), "t", 0, start=0, end=10)
    with pytest.raises(CorruptRecordError, match="size 3"):
        decode(b"\x00" * 8 + (3).to_bytes(4, "big") + b"\x00" * 20, "t", 0, start=0, end=10)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(LEGACY_CODECS), st.sampled_from(list(TimestampType)), messages),
        min_size=1,
        max_size=5,
    ),
    st.integers(0, 3),
    st.data(),
)
def test_mixed_and_compressed_sets_match_iter_deep(sets, magic0_at, data):
    """Concatenated sets as a broker stores them (each codec, LogAppendTime wrappers, now and
    then a magic-0 set) decode like protocol.records.iter_deep sees them."""
    buf, base = b"", 0
    for i, (codec, ts_type, msgs) in enumerate(sets):
        magic = 0 if i == magic0_at and ts_type == TimestampType.CREATE_TIME else 1
        builder = MessageSetBuilder(
            magic=magic, codec=codec, timestamp_type=ts_type, base_offset=base
        )
        for key, value, dt in msgs:
            builder.append(value, key=key, timestamp=BASE_TS + dt)
        buf += builder.build()
        base += len(msgs)
    start = data.draw(st.integers(0, base))
    end = data.draw(st.integers(start, base + 1))
    want = [
        (m.key, m.value, m.offset, m.timestamp, int(m.timestamp_type))
        for m in iter_deep(buf)
        if start <= m.offset < end
    ]
    batch, next_offset = decode(buf, "t", 0, start=start, end=end)
    assert (rows(batch) if batch is not None else []) == want
    assert next_offset == (start if start == end else min(end, base))
