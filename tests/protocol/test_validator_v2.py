"""validate_produce with record batches (magic 2) in or out: Kafka 3.9's LogValidator rules,
kafka-python's and aiokafka's batch code as independent oracles."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from protocol import recordbatch as rb
from protocol.compression import Codec
from protocol.errors import ErrorCode
from protocol.records import (
    MessageSetBuilder,
    TimestampType,
    check_entry,
    iter_deep,
    iter_shallow,
)
from protocol.validator import (
    ProducerBatch,
    Rejected,
    TopicSettings,
    ValidatedRecords,
    scanned_bytes_bound,
    validate_produce,
)
from tests.protocol.kafka_python_oracle import kp_read

NOW = 1_700_000_000_000
V2 = TopicSettings(magic=2)
LAT = TopicSettings(magic=2, timestamp_type=TimestampType.LOG_APPEND_TIME)


def kp_batch(codec=Codec.NONE, records=None, producer=(-1, -1, -1), transactional=False):
    records = records or [
        (NOW - 3, b"k0", b"v0", []),
        (NOW - 9, None, b"v1" * 40, [("h", b"x")]),
        (NOW + 2, b"k2", None, []),
    ]
    b = DefaultRecordBatchBuilder(2, codec, transactional, *producer, batch_size=10**7)
    for i, (ts, key, value, headers) in enumerate(records):
        b.append(i, ts, key, value, headers)
    return bytes(b.build())


def valid(buf, settings=V2, next_offset=0, now=NOW, **kw) -> ValidatedRecords:
    result = validate_produce(buf, settings, next_offset=next_offset, now_ms=now, **kw)
    assert isinstance(result, ValidatedRecords), result
    for entry in iter_shallow(result.buffer):
        check_entry(result.buffer, entry, 10**8)
    assert [(m.offset, m.timestamp, m.key, m.value) for m in iter_deep(result.buffer)] == kp_read(
        result.buffer
    )
    return result


def rejected(buf, error, settings=V2, now=NOW, **kw) -> str:
    result = validate_produce(buf, settings, next_offset=0, now_ms=now, **kw)
    assert isinstance(result, Rejected), result
    assert result.error == error, result
    return result.reason


@pytest.mark.parametrize("codec", list(Codec))
def test_batch_kept_as_sent_only_offsets_and_leader_epoch_change(codec):
    sent = kp_batch(codec, producer=(42, 3, 10))
    result = valid(sent, next_offset=100, partition_leader_epoch=4, require_magic2=True)
    out = result.buffer
    assert (
        out[rb.PARTITION_LEADER_EPOCH_OFFSET + 4 :] == sent[rb.PARTITION_LEADER_EPOCH_OFFSET + 4 :]
    )
    batch = DefaultRecordBatch(out)
    assert batch.validate_crc() and (batch.base_offset, batch.leader_epoch) == (100, 4)
    assert (result.first_offset, result.last_offset, result.message_count) == (100, 102, 3)
    assert (result.max_timestamp, result.offset_of_max_timestamp) == (NOW + 2, 102)
    assert result.log_append_time == -1
    assert result.producer_batches == (ProducerBatch(42, 3, 10, 12, 100, 102, NOW + 2),)
    assert [m.headers for m in iter_deep(out)] == [(), (("h", b"x"),), ()]


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.LZ4, Codec.ZSTD])
def test_log_append_time_rewrites_the_header_only(codec):
    sent = kp_batch(codec)
    out = valid(sent, LAT, next_offset=7).buffer
    # records untouched: only baseOffset, leader epoch, crc, attributes and maxTimestamp differ
    assert (
        out[rb.LAST_OFFSET_DELTA_OFFSET : rb.MAX_TIMESTAMP_OFFSET]
        == sent[rb.LAST_OFFSET_DELTA_OFFSET : rb.MAX_TIMESTAMP_OFFSET]
    )
    assert out[rb.PRODUCER_ID_OFFSET :] == sent[rb.PRODUCER_ID_OFFSET :]
    batch = DefaultRecordBatch(out)
    assert batch.validate_crc() and batch.timestamp_type == 1
    assert [(r.offset, r.timestamp) for r in batch] == [(7, NOW), (8, NOW), (9, NOW)]


def test_create_time_bounds_before_after_and_difference():
    old = kp_batch(records=[(NOW - 5000, b"k", b"v", [])])
    new = kp_batch(records=[(NOW + 5000, b"k", b"v", [])])
    none = kp_batch(records=[(-1, b"k", b"v", [])])
    assert "outside" in rejected(
        old, ErrorCode.INVALID_TIMESTAMP, TopicSettings(magic=2, max_timestamp_difference_ms=4999)
    )
    valid(old, TopicSettings(magic=2, max_timestamp_difference_ms=5000))
    # KIP-937: before/after set explicitly win over difference.max.ms
    s = TopicSettings(
        magic=2,
        max_timestamp_difference_ms=1,
        timestamp_before_max_ms=6000,
        timestamp_after_max_ms=4000,
    )
    valid(old, s)
    rejected(new, ErrorCode.INVALID_TIMESTAMP, s)
    valid(none, s)  # timestamp -1 is exempt
    valid(
        old,
        TopicSettings(
            magic=2, timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp_difference_ms=1
        ),
    )


def test_header_max_timestamp_is_corrected_from_the_records():
    sent = bytearray(kp_batch())
    struct.pack_into(">q", sent, rb.MAX_TIMESTAMP_OFFSET, NOW - 100)
    struct.pack_into(">I", sent, rb.CRC_OFFSET, rb.batch_crc(sent, 0, len(sent)))
    out = valid(bytes(sent)).buffer
    assert DefaultRecordBatch(out).max_timestamp == NOW + 2


def test_transactional_batches_are_accepted_and_marked():
    """A producer's transactional batch is validated like any other and reported as part of
    its transaction (storage records it so, KIP-98)."""
    result = valid(kp_batch(producer=(1, 0, 0), transactional=True))
    [batch] = result.producer_batches
    assert (batch.producer_id, batch.is_transactional) == (1, True)
    assert DefaultRecordBatch(bytes(result.buffer)).is_transactional


def test_control_batches_and_transactions_without_a_producer_are_refused():
    sent = bytearray(kp_batch(producer=(1, 0, 0), transactional=True))
    attrs = struct.unpack_from(">h", sent, rb.ATTRIBUTES_OFFSET)[0] | rb.CONTROL_MASK
    struct.pack_into(">h", sent, rb.ATTRIBUTES_OFFSET, attrs)
    struct.pack_into(">I", sent, rb.CRC_OFFSET, rb.batch_crc(sent, 0, len(sent)))
    reason = rejected(bytes(sent), ErrorCode.INVALID_RECORD)
    assert "control batch" in reason and "coordinator" in reason
    orphan = bytearray(kp_batch())
    attrs = struct.unpack_from(">h", orphan, rb.ATTRIBUTES_OFFSET)[0] | rb.TRANSACTIONAL_MASK
    struct.pack_into(">h", orphan, rb.ATTRIBUTES_OFFSET, attrs)
    struct.pack_into(">I", orphan, rb.CRC_OFFSET, rb.batch_crc(orphan, 0, len(orphan)))
    assert "no producer id" in rejected(bytes(orphan), ErrorCode.INVALID_RECORD)


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.LZ4])
def test_every_refused_record_of_a_batch_is_listed_as_kafka_lists_them(codec):
    """KIP-467: 100 records into a compacted topic, 10 of them keyless (librdkafka's 0011): the
    batch is refused with INVALID_RECORD and record_errors naming exactly those 10 by their
    index in the batch; with one bad timestamp among them the error is INVALID_TIMESTAMP."""
    keyless = set(range(5, 100, 10))
    records = [(NOW, None if i in keyless else b"k%d" % i, b"v", []) for i in range(100)]
    compacted = TopicSettings(magic=2, compacted=True, timestamp_before_max_ms=60_000)
    result = validate_produce(kp_batch(codec, records), compacted, next_offset=0, now_ms=NOW)
    assert isinstance(result, Rejected) and result.error == ErrorCode.INVALID_RECORD
    assert [index for index, _ in result.record_errors] == sorted(keyless)
    assert all("null key" in why for _, why in result.record_errors)
    assert "10 of its 100 records refused" in result.reason
    records[7] = (NOW - 120_000, b"k7", b"v", [])  # older than before.max.ms allows
    result = validate_produce(kp_batch(codec, records), compacted, next_offset=0, now_ms=NOW)
    assert isinstance(result, Rejected) and result.error == ErrorCode.INVALID_TIMESTAMP
    assert [index for index, _ in result.record_errors] == sorted(keyless | {7})
    # a set refused as a whole names no record
    bad_crc = bytearray(kp_batch(codec, records))
    bad_crc[-1] ^= 0xFF
    whole = validate_produce(bytes(bad_crc), compacted, next_offset=0, now_ms=NOW)
    assert isinstance(whole, Rejected) and whole.record_errors == ()


def test_structure_rules():
    compacted = TopicSettings(magic=2, compacted=True)
    assert "null key" in rejected(kp_batch(), ErrorCode.INVALID_RECORD, compacted)
    bad_crc = bytearray(kp_batch())
    bad_crc[-1] ^= 0xFF
    assert "CRC-32C" in rejected(bytes(bad_crc), ErrorCode.CORRUPT_MESSAGE)
    producer_lie = kp_batch(producer=(5, 0, -1))
    assert "sequence" in rejected(producer_lie, ErrorCode.INVALID_RECORD)
    gap = bytearray(kp_batch())
    struct.pack_into(">i", gap, rb.LAST_OFFSET_DELTA_OFFSET, 5)
    struct.pack_into(">I", gap, rb.CRC_OFFSET, rb.batch_crc(gap, 0, len(gap)))
    assert "last offset delta is 5" in rejected(bytes(gap), ErrorCode.INVALID_RECORD)
    small = TopicSettings(magic=2, max_message_bytes=60)
    assert "max.message.bytes" in rejected(kp_batch(), ErrorCode.MESSAGE_TOO_LARGE, small)
    empty = rb.build_batch(rb.BatchSpec(), [])
    assert "no records" in rejected(empty, ErrorCode.INVALID_RECORD)
    lat_claim = bytearray(kp_batch())
    rb.set_log_append_time(lat_claim, 0, NOW)
    rejected(bytes(lat_claim), ErrorCode.INVALID_TIMESTAMP)


def test_produce_v3_needs_exactly_one_batch():
    legacy = MessageSetBuilder(1)
    legacy.append(b"v", None, NOW)
    assert "magic 2" in rejected(legacy.build(), ErrorCode.INVALID_RECORD, require_magic2=True)
    two = kp_batch() + kp_batch()
    assert "exactly one" in rejected(two, ErrorCode.INVALID_RECORD, require_magic2=True)
    assert valid(two, next_offset=3).message_count == 6  # Produce v0-v2 may carry several


def test_batches_into_a_magic_1_topic_are_down_converted():
    v1 = TopicSettings(magic=1)
    headers = kp_batch()
    assert "headers" in rejected(headers, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, v1)
    plain = kp_batch(Codec.GZIP, records=[(NOW - 1, b"a", b"1", []), (NOW - 2, b"b", b"2", [])])
    result = valid(plain, v1, next_offset=5)
    assert {e.magic for e in iter_shallow(result.buffer)} == {1}
    assert kp_read(result.buffer) == [(5, NOW - 1, b"a", b"1"), (6, NOW - 2, b"b", b"2")]
    lat = valid(plain, TopicSettings(magic=1, timestamp_type=TimestampType.LOG_APPEND_TIME))
    assert {m.timestamp for m in iter_deep(lat.buffer)} == {NOW}


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [Codec.NONE, Codec.SNAPPY])
def test_old_producers_into_a_batch_topic_are_up_converted(magic, codec):
    b = MessageSetBuilder(magic, codec)
    for i in range(4):
        b.append(b"v%d" % i, b"k", NOW - i)
    result = valid(b.build(), next_offset=10)
    (entry,) = iter_shallow(result.buffer)
    assert entry.magic == 2 and entry.codec == codec
    expected_ts = [NOW - i if magic == 1 else -1 for i in range(4)]
    assert kp_read(result.buffer) == [(10 + i, expected_ts[i], b"k", b"v%d" % i) for i in range(4)]


def test_topic_codec_recompresses_and_keeps_producer_fields():
    sent = kp_batch(Codec.GZIP, producer=(8, 2, 50))
    result = valid(sent, TopicSettings(magic=2, target_codec=Codec.ZSTD), next_offset=3)
    batch = DefaultRecordBatch(result.buffer)
    assert batch.compression_type == Codec.ZSTD
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (8, 2, 50)
    assert [m.headers for m in iter_deep(result.buffer)][1] == (("h", b"x"),)
    assert result.producer_batches[0].first_offset == 3


def test_aiokafka_batches_are_accepted():
    from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder

    for codec in (0, 1):  # what aiokafka 0.14's producer sends, plain and gzip
        aio = AioBuilder(
            magic=2,
            compression_type=codec,
            is_transactional=False,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=16384,
        )
        aio.append(0, timestamp=NOW, key=b"k", value=b"v" * 50, headers=[])
        assert valid(bytes(aio.build()), require_magic2=True).message_count == 1


records = st.lists(
    st.tuples(
        st.integers(NOW - 10**6, NOW + 10**6),
        st.none() | st.binary(max_size=10),
        st.none() | st.binary(max_size=30),
        st.lists(st.tuples(st.text(max_size=3), st.binary(max_size=3)), max_size=2),
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=80, deadline=None)
@given(records, st.sampled_from(list(Codec)), st.booleans(), st.integers(0, 2**40))
def test_output_reads_back_as_the_input_with_offsets(recs, codec, lat, next_offset):
    settings_ = LAT if lat else V2
    result = valid(kp_batch(codec, recs), settings_, next_offset=next_offset)
    got = [(m.offset, m.timestamp, m.key, m.value, m.headers) for m in iter_deep(result.buffer)]
    assert got == [
        (next_offset + i, NOW if lat else ts, k, v, tuple(h))
        for i, (ts, k, v, h) in enumerate(recs)
    ]


def test_fuzzed_batches_never_raise():
    rng = random.Random(99)
    seeds = [kp_batch(c, producer=(1, 0, 0)) for c in Codec]
    for _ in range(1500):
        buf = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 3)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        if rng.random() < 0.2:
            del buf[rng.randrange(len(buf)) :]
        for s in (V2, LAT, TopicSettings(magic=1)):
            result = validate_produce(bytes(buf), s, next_offset=0, now_ms=NOW)
            assert isinstance(result, (Rejected, ValidatedRecords))


@settings(max_examples=150, deadline=None)
@given(records, st.booleans(), st.booleans(), st.integers(0, 2), st.data())
def test_native_scan_agrees_with_the_python_path(recs, compacted, lat, cut, data):
    """scan_v2 accepts exactly what the Python path accepts (it may only give up more often),
    on valid batches and on batches with a byte changed in their records."""
    from protocol import validator

    buf = bytearray(kp_batch(Codec.NONE, recs))
    if cut:
        i = data.draw(st.integers(rb.RECORD_BATCH_OVERHEAD, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
        struct.pack_into(">I", buf, rb.CRC_OFFSET, rb.batch_crc(buf, 0, len(buf)))
    s = TopicSettings(
        magic=2,
        compacted=compacted,
        max_timestamp_difference_ms=500_000,
        timestamp_type=TimestampType.LOG_APPEND_TIME if lat else TimestampType.CREATE_TIME,
    )
    with_native = validate_produce(bytes(buf), s, next_offset=3, now_ms=NOW)
    original = validator.scan_v2
    validator.scan_v2 = lambda *args: None  # force the Python path
    try:
        python_only = validate_produce(bytes(buf), s, next_offset=3, now_ms=NOW)
    finally:
        validator.scan_v2 = original
    assert with_native == python_only


def test_native_scan_takes_valid_batches():
    scan_v2 = pytest.importorskip(
        "protocol._fastscan", reason="the C extension is not built"
    ).scan_v2
    buf = kp_batch()
    h = rb.read_header(buf)
    section = rb.records_section(buf, h, 0)
    assert scan_v2(section, 3, h.base_timestamp, NOW - 100, NOW + 100, True, False) == NOW + 2
    assert scan_v2(section, 3, h.base_timestamp, NOW - 100, NOW + 1, True, False) is None
    assert scan_v2(section, 3, h.base_timestamp, NOW - 100, NOW + 100, True, True) is None
    assert scan_v2(section, 2, h.base_timestamp, NOW - 100, NOW + 100, True, False) is None


def test_a_batch_grown_by_the_topics_codec_is_checked_again():
    """A batch kept as sent is checked against max.message.bytes once; one re-encoded with the
    topic's codec is checked again, as Kafka does: incompressible values grow under gzip."""
    rng = random.Random(5)
    batch = kp_batch(records=[(NOW, None, rng.randbytes(500), []) for _ in range(4)])
    limit = len(batch)  # the batch plus nothing: it fits exactly as sent
    kept = TopicSettings(magic=2, max_message_bytes=limit)
    assert (
        valid(batch, kept).buffer[rb.RECORD_BATCH_OVERHEAD :] == batch[rb.RECORD_BATCH_OVERHEAD :]
    )
    gzipped = TopicSettings(magic=2, max_message_bytes=limit, target_codec=Codec.GZIP)
    reason = rejected(batch, ErrorCode.MESSAGE_TOO_LARGE, gzipped)
    assert "after conversion" in reason and "gzip" in reason


# -- scanned_bytes_bound: where the broker decides to validate (broker/handlers/produce.py) -----


@pytest.fixture
def native_scan(monkeypatch):
    """The bound is given only when the native scan checks the records: stand one in where the
    C extension is not built (test-pure); the bound itself never calls it."""
    from protocol import validator

    if validator.scan_v2 is None:
        monkeypatch.setattr(validator, "scan_v2", lambda *args: None)


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_scanned_bytes_bound_covers_the_records_section(native_scan, codec):
    records = [(NOW, None, bytes([i % 251]) * 300, []) for i in range(500)]
    buf = kp_batch(codec, records)
    scanned = len(rb.records_section(buf, rb.read_header(buf), 0))  # decompressed
    bound = scanned_bytes_bound(buf, V2)
    assert bound is not None and bound >= scanned
    if codec in (Codec.NONE, Codec.LZ4, Codec.ZSTD):  # read from the frame, not a ratio
        assert bound < scanned + 65536 + 1


def test_scanned_bytes_bound_is_none_for_work_headers_do_not_bound(native_scan, monkeypatch):
    from protocol import validator

    one = kp_batch(Codec.LZ4)
    assert scanned_bytes_bound(one + one, V2) is None  # two batches (Produce v0-v2)
    assert scanned_bytes_bound(one[:-1], V2) is None  # truncated
    assert scanned_bytes_bound(one, TopicSettings(magic=1)) is None  # converted to magic 1
    assert scanned_bytes_bound(one, TopicSettings(magic=2, target_codec=Codec.GZIP)) is None
    assert scanned_bytes_bound(one, TopicSettings(magic=2, target_codec=Codec.LZ4)) is not None
    legacy = MessageSetBuilder(magic=1)
    legacy.append(b"v", timestamp=NOW)
    magic1 = legacy.build()
    assert scanned_bytes_bound(magic1, V2) is None
    monkeypatch.setattr(validator, "scan_v2", None)
    assert scanned_bytes_bound(one, V2) is None  # the Python path's cost is per record


def test_a_batch_whose_codec_bounds_nothing_counts_as_the_decompression_limit(native_scan):
    import zstandard

    from protocol.compression import MAX_DECOMPRESSED_BYTES

    buf = bytearray(kp_batch(Codec.ZSTD))
    unsized = zstandard.ZstdCompressor(write_content_size=False).compress(b"x" * 1000)
    buf[rb.RECORD_BATCH_OVERHEAD :] = unsized
    struct.pack_into(">i", buf, rb.LENGTH_OFFSET, len(buf) - 12)
    assert scanned_bytes_bound(bytes(buf), V2) == MAX_DECOMPRESSED_BYTES


def test_native_only_declines_what_the_scan_declines():
    """validate_produce(native_only=True) answers a batch the native scan accepts exactly as
    without it, and None for one it declines (the caller validates again without it, and gets
    the precise error of the Python path)."""
    from protocol import validator

    if validator.scan_v2 is None:
        pytest.skip("no native scan (C extension not built, or CHRONOLOG_PURE_PYTHON)")
    limited = TopicSettings(magic=2, max_timestamp_difference_ms=60_000)
    for codec in (Codec.NONE, Codec.LZ4):
        fresh = kp_batch(codec)
        assert validate_produce(
            fresh, limited, next_offset=4, now_ms=NOW, native_only=True
        ) == validate_produce(fresh, limited, next_offset=4, now_ms=NOW)
        old = kp_batch(codec, [(NOW, None, b"a", []), (NOW - 3_600_000, None, b"b", [])])
        assert validate_produce(old, limited, next_offset=0, now_ms=NOW, native_only=True) is None
        assert "record 1" in rejected(old, ErrorCode.INVALID_TIMESTAMP, settings=limited)
