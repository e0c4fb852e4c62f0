"""Record batches (magic 2) -> Arrow batches, against kafka-python's record-batch code as the
oracle: every codec, headers, LogAppendTime, control batches, a cut tail, mixed formats, and the
C record walk against its pure-Python twin."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from protocol import Codec, MessageSetBuilder, TimestampType
from protocol import recordbatch as rb
from protocol.native import fastscan
from pyspark_chronolog import arrow
from pyspark_chronolog.arrow import ARROW_SCHEMA, ARROW_SCHEMA_WITH_HEADERS, decode

BASE_TS = 1_700_000_000_000
KP_CODECS = {Codec.NONE: 0, Codec.GZIP: 1, Codec.SNAPPY: 2, Codec.LZ4: 3, Codec.ZSTD: 4}

records = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=20),
        st.none() | st.binary(max_size=60),
        st.integers(0, 10_000_000),
        st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=10)), max_size=3),
    ),
    min_size=1,
    max_size=40,
)


def kp_batch(recs, *, codec=Codec.NONE, base=0, log_append_time=None):
    """kafka-python's producer-side batch, then what a broker stores: base offset set, and
    under LogAppendTime the type bit and max timestamp set in the header, with the CRC-32C
    recomputed (as chronolog's validator and Kafka do)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=KP_CODECS[codec],
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for i, (key, value, dt, headers) in enumerate(recs):
        builder.append(i, BASE_TS + dt, key, value, [(k, v) for k, v in headers])
    buf = bytearray(builder.build())
    rb.set_base_offset(buf, 0, base, 0)
    if log_append_time is not None:
        rb.set_log_append_time(buf, 0, log_append_time)
    return bytes(buf)


def table(batch):
    out = []
    for r in batch.to_pylist():
        row = (
            r["key"],
            r["value"],
            r["offset"],
            round(r["timestamp"].timestamp() * 1000),
            r["timestampType"],
        )
        if "headers" in r:
            row += ([(h["key"], h["value"]) for h in r["headers"]],)
        out.append(row)
    return out


def oracle(buf, start, end, with_headers):
    """Rows as kafka-python reads the same bytes."""
    out = []
    pos = 0
    while pos + rb.RECORD_BATCH_OVERHEAD <= len(buf):
        size = 12 + struct.unpack_from(">i", buf, pos + 8)[0]
        if pos + size > len(buf):
            break
        batch = DefaultRecordBatch(buf[pos : pos + size])
        lat = batch.timestamp_type == 1
        for r in batch:
            if not start <= r.offset < end:
                continue
            row = (
                r.key,
                r.value,
                r.offset,
                batch.max_timestamp if lat else r.timestamp,
                1 if lat else 0,
            )
            if with_headers:
                row += ([(k, v) for k, v in r.headers],)
            out.append(row)
        pos += size
    return out


@settings(max_examples=40, deadline=None)
@given(
    batches=st.lists(
        st.tuples(records, st.sampled_from(list(KP_CODECS)), st.booleans()), min_size=1, max_size=4
    ),
    with_headers=st.booleans(),
    cut=st.integers(0, 30),
    data=st.data(),
)
def test_batches_decode_as_kafka_python_reads_them(batches, with_headers, cut, data):
    buf, base = b"", 0
    for recs, codec, lat in batches:
        buf += kp_batch(recs, codec=codec, base=base, log_append_time=BASE_TS + 99 if lat else None)
        base += len(recs)
    if cut:  # a fetch response cut inside its last batch: that batch is left for next time
        buf = buf[:-cut]
    start = data.draw(st.integers(0, base))
    end = data.draw(st.integers(start, base + 1))
    batch, next_offset = decode(buf, "t", 2, start=start, end=end, include_headers=with_headers)
    want = oracle(buf, start, end, with_headers)
    assert (table(batch) if batch is not None else []) == want
    if batch is not None:
        assert batch.schema == (ARROW_SCHEMA_WITH_HEADERS if with_headers else ARROW_SCHEMA)
        assert set(batch.column("partition").to_pylist()) == {2}
    complete = base - (len(batches[-1][0]) if cut else 0)
    assert next_offset == min(end, max(start, complete))


def test_control_batches_and_compacted_gaps_move_the_offset_on():
    data = kp_batch([(b"k", b"v", 0, [])], base=5)
    control = bytearray(
        kp_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", 0, [])], base=6)
    )
    struct.pack_into(">h", control, rb.ATTRIBUTES_OFFSET, 0x20 | 0x10)  # control, transactional
    struct.pack_into(">I", control, rb.CRC_OFFSET, rb.batch_crc(control, 0, len(control)))
    gap = bytearray(kp_batch([(b"k", b"w", 0, [])], base=7))
    struct.pack_into(">i", gap, rb.LAST_OFFSET_DELTA_OFFSET, 4)  # records 8..11 compacted away
    struct.pack_into(">I", gap, rb.CRC_OFFSET, rb.batch_crc(gap, 0, len(gap)))
    batch, next_offset = decode(data + bytes(control) + bytes(gap), "t", 0, start=0, end=100)
    assert [r[1:3] for r in table(batch)] == [(b"v", 5), (b"w", 7)]
    assert next_offset == 12


def test_mixed_magic_1_and_batches_with_headers():
    old = MessageSetBuilder(magic=1, codec=Codec.GZIP, base_offset=0)
    old.append(b"a", key=b"1", timestamp=BASE_TS)
    old.append(b"b", key=None, timestamp=BASE_TS + 1)
    new = MessageSetBuilder(
        magic=2, codec=Codec.ZSTD, base_offset=2, timestamp_type=TimestampType.CREATE_TIME
    )
    new.append(b"c", key=b"3", timestamp=BASE_TS + 2, headers=(("h", b"x"), ("bad\udcff", None)))
    plain = MessageSetBuilder(magic=1, base_offset=3)
    plain.append(b"d", timestamp=BASE_TS + 3)
    buf = old.build() + new.build() + plain.build()
    batch, next_offset = decode(buf, "t", 0, start=1, end=10, include_headers=True)
    assert table(batch) == [
        (None, b"b", 1, BASE_TS + 1, 0, []),
        (b"3", b"c", 2, BASE_TS + 2, 0, [("h", b"x"), ("bad\ufffd", None)]),
        (None, b"d", 3, BASE_TS + 3, 0, []),
    ]
    assert next_offset == 4


def test_a_corrupt_record_is_named():
    buf = bytearray(kp_batch([(b"k", b"v", 0, [])]))
    buf[rb.RECORD_BATCH_OVERHEAD] = 0x7F  # record length far past the section
    with pytest.raises(arrow.CorruptRecordError, match=r"t\[0\].*record batch at byte 0"):
        decode(bytes(buf), "t", 0, start=0, end=10)


@pytest.mark.skipif(fastscan is None, reason="the C extension is not built")
@settings(max_examples=200, deadline=None)
@given(recs=records, noise=st.binary(max_size=8), flip=st.integers(0, 400))
def test_the_c_record_walk_equals_the_python_one(recs, noise, flip):
    buf = bytearray(kp_batch(recs))
    h = rb.read_header(buf, 0)
    start, end = rb.RECORD_BATCH_OVERHEAD, len(buf)
    python = rb.record_positions(buf, start, end, h.records_count)
    native = fastscan.record_positions(buf, start, end, h.records_count)
    assert np.frombuffer(native, dtype=np.int64).tolist() == python
    if flip < end - start:  # damaged sections: C gives up exactly when Python raises
        buf[start + flip] ^= 0xFF
        damaged = bytes(buf) + noise
        try:
            python = rb.record_positions(damaged, start, end, h.records_count)
        except rb.CorruptRecordError:
            python = None
        native = fastscan.record_positions(damaged, start, end, h.records_count)
        assert (None if native is None else np.frombuffer(native, np.int64).tolist()) == python
