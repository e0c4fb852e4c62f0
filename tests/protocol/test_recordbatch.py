"""Record batches (magic 2) against kafka-python's DefaultRecordBatch code as the oracle, both
ways, for every codec; mixed sets; conversion between all formats; bounded fuzzing."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from protocol import recordbatch as rb
from protocol.compression import Codec
from protocol.errors import CorruptRecordError, UnsupportedCompressionError
from protocol.conversion import convert
from protocol.records import (
    NO_TIMESTAMP,
    MessageSetBuilder,
    TimestampType,
    check_entry,
    first_offset,
    iter_deep,
    iter_shallow,
)
from tests.protocol.kafka_python_oracle import kp_read

RECORDS = [
    (1000, b"k0", b"v0", ()),
    (995, None, b"v1", (("h", b"x"),)),
    (1010, b"k2", None, (("a", None), ("b", b""))),
    (1003, b"", b"", ()),
    (1001, b"key" * 50, b"value" * 300, (("\u00e9t\u00e9", b"\x00\xff"),)),
]


def kp_batch(
    codec: int, records=RECORDS, *, base_offset=0, producer=(-1, -1, -1), transactional=False
) -> bytes:
    b = DefaultRecordBatchBuilder(2, codec, transactional, *producer, batch_size=10**7)
    for i, (ts, key, value, headers) in enumerate(records):
        b.append(i, ts, key, value, list(headers))
    out = bytearray(b.build())
    struct.pack_into(">q", out, 0, base_offset)
    return bytes(out)


def kp_records(buf) -> list[tuple]:
    batch = DefaultRecordBatch(bytes(buf))
    assert batch.validate_crc()
    return [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in batch]


def ours_records(buf) -> list[tuple]:
    return [(m.offset, m.timestamp, m.key, m.value, m.headers) for m in iter_deep(buf)]


@pytest.mark.parametrize("codec", list(Codec))
def test_kafka_python_batches_read_identically(codec):
    buf = kp_batch(codec, base_offset=40, producer=(7, 3, 100))
    (entry,) = list(iter_shallow(buf))
    assert (entry.offset, entry.magic, entry.codec, entry.timestamp) == (44, 2, codec, 1010)
    assert entry.timestamp_type == TimestampType.CREATE_TIME and entry.next_position == len(buf)
    check_entry(buf, entry, 10**6)
    assert first_offset(buf, entry) == 40
    assert ours_records(buf) == [
        (40 + i, ts, k, v, tuple((hk, hv) for hk, hv in h))
        for i, (ts, k, v, h) in enumerate(RECORDS)
    ]
    assert ours_records(buf) == kp_records(buf)
    header = rb.read_header(buf)
    assert (
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.last_sequence,
        header.records_count,
    ) == (7, 3, 100, 104, 5)


@pytest.mark.parametrize("codec", list(Codec))
@pytest.mark.parametrize("lat", [False, True])
def test_our_batches_read_identically_with_kafka_python(codec, lat):
    tst = TimestampType.LOG_APPEND_TIME if lat else TimestampType.CREATE_TIME
    builder = MessageSetBuilder(
        2,
        codec,
        tst,
        base_offset=7,
        producer_id=9,
        producer_epoch=1,
        base_sequence=2_147_483_646,
        partition_leader_epoch=5,
    )
    for ts, key, value, headers in RECORDS:
        builder.append(value, key, ts, headers)
    buf = builder.build()
    batch = DefaultRecordBatch(buf)
    assert batch.validate_crc() and batch.compression_type == codec
    assert (
        batch.base_offset,
        batch.leader_epoch,
        batch.producer_id,
        batch.producer_epoch,
        batch.base_sequence,
        batch.last_sequence,
    ) == (7, 5, 9, 1, 2_147_483_646, 2)
    assert batch.timestamp_type == int(lat) and batch.max_timestamp == 1010
    expected = [(7 + i, 1010 if lat else ts, k, v, h) for i, (ts, k, v, h) in enumerate(RECORDS)]
    assert kp_records(buf) == expected == ours_records(buf)
    assert {m.timestamp_type for m in iter_deep(buf)} == {tst}
    assert rb.read_header(buf).last_sequence == 2  # wraps past int32 max to 0, as Kafka


def test_empty_builder_and_headers_need_magic_2():
    assert MessageSetBuilder(2).build() == b""
    with pytest.raises(ValueError, match="headers"):
        MessageSetBuilder(1).append(b"v", headers=(("h", b"x"),))
    with pytest.raises(ValueError, match="zstd"):
        MessageSetBuilder(1, Codec.ZSTD)


def mixed_set() -> tuple[bytes, list[tuple]]:
    """magic-1 plain, v2 lz4, magic-1 gzip wrapper, v2 plain LogAppendTime: offsets 0..11."""
    parts, expected = [], []
    b = MessageSetBuilder(1, base_offset=0)
    for i in range(3):
        b.append(b"m1-%d" % i, None, 500 + i)
        expected.append((i, 500 + i, None, b"m1-%d" % i))
    parts.append(b.build())
    b = MessageSetBuilder(2, Codec.LZ4, base_offset=3)
    for i in range(3, 6):
        b.append(b"v2-%d" % i, b"k", 900 - i, (("n", b"%d" % i),))
        expected.append((i, 900 - i, b"k", b"v2-%d" % i))
    parts.append(b.build())
    b = MessageSetBuilder(1, Codec.GZIP, base_offset=6)
    for i in range(6, 9):
        b.append(b"w-%d" % i, b"wk", 600 + i)
        expected.append((i, 600 + i, b"wk", b"w-%d" % i))
    parts.append(b.build())
    b = MessageSetBuilder(2, Codec.NONE, TimestampType.LOG_APPEND_TIME, base_offset=9)
    for i in range(9, 12):
        b.append(b"lat-%d" % i, None, 2000)
        expected.append((i, 2000, None, b"lat-%d" % i))
    parts.append(b.build())
    return b"".join(parts), expected


def test_mixed_set_shallow_and_deep():
    buf, expected = mixed_set()
    entries = list(iter_shallow(buf))
    assert [(e.offset, e.magic) for e in entries] == [
        (0, 1),
        (1, 1),
        (2, 1),
        (5, 2),
        (8, 1),
        (11, 2),
    ]
    for e in entries:
        check_entry(buf, e, 10**6)
    assert [first_offset(buf, e) for e in entries] == [0, 1, 2, 3, 6, 9]
    assert [(m.offset, m.timestamp, m.key, m.value) for m in iter_deep(buf)] == expected
    assert kp_read(buf) == expected  # kafka-python's consumer reads mixed sets too


@pytest.mark.parametrize("to_magic", [0, 1, 2])
def test_convert_mixed_set(to_magic):
    buf, expected = mixed_set()
    out = convert(buf, to_magic)
    assert {e.magic for e in iter_shallow(out)} == {to_magic}
    for e in iter_shallow(out):
        check_entry(out, e, 10**6)
    got = [(m.offset, m.timestamp, m.key, m.value) for m in iter_deep(out)]
    assert [(o, k, v) for o, _, k, v in got] == [(o, k, v) for o, _, k, v in expected]
    assert kp_read(out) == got
    if to_magic == 0:
        assert {t for _, t, _, _ in got} == {NO_TIMESTAMP}
    if to_magic == 1:
        # v2 timestamps (and the LogAppendTime batch's) survive; magic-1 ones are unchanged
        assert got == expected
        lat = [m for m in iter_deep(out) if m.offset >= 9]
        assert {m.timestamp_type for m in lat} == {TimestampType.LOG_APPEND_TIME}
    if to_magic == 2:
        assert got == expected
        # the three uncompressed magic-1 messages became one batch, each wrapper one batch
        assert [(first_offset(out, e), e.offset, e.codec) for e in iter_shallow(out)] == [
            (0, 2, Codec.NONE),
            (3, 5, Codec.LZ4),
            (6, 8, Codec.GZIP),
            (9, 11, Codec.NONE),
        ]


def test_convert_keeps_a_trailing_partial_batch_and_refuses_zstd_below_2():
    buf, _ = mixed_set()
    cut = buf + kp_batch(Codec.NONE, base_offset=12)[:30]
    assert convert(cut, 1).endswith(cut[len(buf) :])
    zstd = kp_batch(Codec.ZSTD)
    assert convert(zstd, 2) == zstd
    for magic in (0, 1):
        with pytest.raises(UnsupportedCompressionError, match="zstd"):
            convert(zstd, magic)


def test_check_entry_catches_corruption():
    buf = bytearray(kp_batch(Codec.NONE))
    (entry,) = iter_shallow(buf)
    check_entry(buf, entry, 10**6)
    with pytest.raises(CorruptRecordError, match="max.message.bytes"):
        check_entry(buf, entry, 40)
    buf[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC-32C"):
        check_entry(buf, entry, 10**6)
    short = bytearray(kp_batch(Codec.NONE))
    struct.pack_into(">i", short, rb.LENGTH_OFFSET, 40)
    with pytest.raises(CorruptRecordError, match="below the 49-byte batch header"):
        list(iter_shallow(short))


def test_records_must_fill_the_batch_and_match_the_count():
    buf = bytearray(kp_batch(Codec.NONE))
    struct.pack_into(">i", buf, rb.RECORDS_COUNT_OFFSET, 4)
    with pytest.raises(CorruptRecordError, match="bytes follow its 4 records"):
        list(iter_deep(buf))
    struct.pack_into(">i", buf, rb.RECORDS_COUNT_OFFSET, 6)
    with pytest.raises(CorruptRecordError, match="record 5 is malformed"):
        list(iter_deep(buf))


def test_in_place_log_append_time_and_offsets():
    buf = bytearray(kp_batch(Codec.LZ4))
    rb.set_base_offset(buf, 0, 1234, 7)
    rb.set_log_append_time(buf, 0, 99_999)
    batch = DefaultRecordBatch(bytes(buf))
    assert batch.validate_crc() and batch.timestamp_type == 1 and batch.leader_epoch == 7
    assert [(r.offset, r.timestamp) for r in batch] == [(1234 + i, 99_999) for i in range(5)]


def test_varints_match_kafka_python():
    from kafka.record.util import decode_varint, encode_varint

    for value in [0, 1, -1, 63, -64, 64, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)]:
        ours = bytearray()
        rb.encode_varint(value, ours)
        theirs = bytearray()
        encode_varint(value, theirs.append)
        assert ours == theirs
        assert rb.read_varint(ours, 0, len(ours)) == (value, len(ours))
        assert decode_varint(bytes(ours), 0) == (value, len(ours))


@st.composite
def batches(draw):
    codec = draw(st.sampled_from(list(Codec)))
    records = draw(
        st.lists(
            st.tuples(
                st.integers(0, 2**40),
                st.none() | st.binary(max_size=20),
                st.none() | st.binary(max_size=40),
                st.lists(
                    st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2
                ),
            ),
            min_size=1,
            max_size=8,
        )
    )
    return codec, [(ts, k, v, tuple(h)) for ts, k, v, h in records]


@settings(max_examples=60, deadline=None)
@given(batches(), st.sampled_from([0, 1, 2]))
def test_conversion_round_trips(batch, to_magic):
    codec, records = batch
    buf = kp_batch(codec, records, base_offset=100)
    expected = ours_records(buf)
    # kafka-python stores a batch uncompressed when compressing would not make it smaller
    if rb.read_header(buf).codec == Codec.ZSTD and to_magic < 2:
        with pytest.raises(UnsupportedCompressionError):
            convert(buf, to_magic)
        return
    down = convert(buf, to_magic)
    got = [(m.offset, m.key, m.value) for m in iter_deep(down)]
    assert got == [(o, k, v) for o, _, k, v, _ in expected]
    if to_magic >= 1:
        assert [m.timestamp for m in iter_deep(down)] == [t for _, t, _, _, _ in expected]
    back = convert(down, 2)
    assert [(m.offset, m.key, m.value) for m in iter_deep(back)] == got


def test_fuzzed_batches_raise_only_corrupt_record_errors():
    rng = random.Random(1234)
    seeds = [kp_batch(c, base_offset=5, producer=(1, 0, 0)) for c in Codec]
    seeds.append(mixed_set()[0])
    for _ in range(1500):
        buf = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(buf))
            buf[i] = rng.randrange(256)
        if rng.random() < 0.3:
            del buf[rng.randrange(len(buf)) :]
        try:
            for entry in iter_shallow(buf):
                try:
                    check_entry(buf, entry, 10**6)
                except CorruptRecordError:
                    pass
            list(iter_deep(buf))
            for magic in (0, 1, 2):
                convert(buf, magic)
        except CorruptRecordError:
            pass


@given(
    commit=st.booleans(),
    coordinator_epoch=st.integers(-(2**31), 2**31 - 1),
    producer_id=st.integers(0, 2**63 - 1),
    producer_epoch=st.integers(0, 2**15 - 1),
    base_offset=st.integers(0, 2**62),
)
def test_transaction_markers_read_as_kafka_python_reads_them(
    commit, coordinator_epoch, producer_id, producer_epoch, base_offset
):
    marker = rb.EndTxnMarker(commit, coordinator_epoch)
    data = rb.build_end_txn_marker(
        marker,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        timestamp=1_700_000_000_000,
    )
    batch = DefaultRecordBatch(bytearray(data))
    assert batch.validate_crc()
    assert (batch.is_control_batch, batch.is_transactional) == (True, True)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
        producer_id,
        producer_epoch,
        -1,
    )
    [record] = list(batch)
    assert (record.offset, record.version, record.type) == (base_offset, 0, int(commit))
    header = rb.read_header(data)
    [ours] = rb.iter_records(data, 0, header)
    assert rb.read_end_txn_marker(ours) == marker
    # A control batch holds no messages for a consumer.
    assert list(iter_deep(data)) == []


def test_transactional_batches_and_their_empty_headers_keep_the_bit():
    spec = rb.BatchSpec(producer_id=5, producer_epoch=1, base_sequence=0, is_transactional=True)
    data = rb.build_batch(spec, [(0, 1000, b"k", b"v", ())])
    batch = DefaultRecordBatch(bytearray(data))
    assert batch.is_transactional and not batch.is_control_batch
    empty = rb.build_empty_batch(spec, 0, 1000)
    header = rb.read_header(empty)
    assert header.is_transactional and not header.is_control and header.records_count == 0


def test_marker_records_of_other_control_types_or_short_are_told_apart():
    record = rb.Record(0, 0, struct.pack(">hh", 0, 3), b"\x00\x00", ())
    assert rb.read_end_txn_marker(record) is None  # e.g. KRaft's LeaderChange
    with pytest.raises(CorruptRecordError):
        rb.read_end_txn_marker(rb.Record(0, 0, b"\x00", b"", ()))
    with pytest.raises(CorruptRecordError):
        rb.read_end_txn_marker(rb.Record(0, 0, struct.pack(">hh", 0, 1), b"\x00\x00", ()))
