"""The validator's one-batch path (protocol/validator.py ``_one_batch_kept``): what producers
send nearly always, one v2 batch kept in its codec, validated in one pass. Its answers must be
the general path's, byte for byte, for any batch and topic settings, wrong batches included
(where it steps aside and the general path answers)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from protocol import recordbatch as rb
from protocol import validator
from protocol.compression import Codec
from protocol.records import TimestampType
from protocol.validator import TopicSettings, ValidatedRecords, validate_produce
from tests.protocol.test_validator_v2 import records

pytestmark = pytest.mark.skipif(
    validator.scan_v2 is None, reason="the one-batch path needs the C extension's scan"
)

NOW = 1_700_000_000_000

# Header fields a producer's bug or an attacker may set, as (struct format, offset).
_FIELDS = {
    "attributes": (">h", rb.ATTRIBUTES_OFFSET),
    "last_offset_delta": (">i", rb.LAST_OFFSET_DELTA_OFFSET),
    "max_timestamp": (">q", rb.MAX_TIMESTAMP_OFFSET),
    "producer_id": (">q", rb.PRODUCER_ID_OFFSET),
    "producer_epoch": (">h", rb.PRODUCER_EPOCH_OFFSET),
    "base_sequence": (">i", rb.BASE_SEQUENCE_OFFSET),
    "records_count": (">i", rb.RECORDS_COUNT_OFFSET),
    "length": (">i", rb.LENGTH_OFFSET),
}

topic_settings = st.builds(
    TopicSettings,
    magic=st.just(2),
    timestamp_type=st.sampled_from(list(TimestampType)),
    max_timestamp_difference_ms=st.sampled_from([2**63 - 1, 500_000]),
    max_message_bytes=st.sampled_from([1_000_012, 200]),
    target_codec=st.none() | st.sampled_from(list(Codec)),
    compacted=st.booleans(),
)


def batch(recs, codec: Codec, producer: tuple[int, int, int], transactional: bool) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, transactional, *producer, batch_size=1 << 30)
    for i, (ts, key, value, headers) in enumerate(recs):
        builder.append(i, ts, key, value, headers)
    return bytes(builder.build())


def general_path(buf: bytes, s: TopicSettings, **kw):
    with pytest.MonkeyPatch.context() as m:
        m.setattr(validator, "_one_batch_kept", lambda mv, job: None)
        return validate_produce(buf, s, **kw)


@settings(max_examples=400, deadline=None)
@given(
    recs=records,
    codec=st.sampled_from(list(Codec)),
    producer=st.sampled_from([(-1, -1, -1), (7, 0, 0), (7, 3, 2**31 - 5), (7, -1, 0)]),
    transactional=st.booleans(),
    topic=topic_settings,
    changes=st.lists(
        st.tuples(
            st.sampled_from(sorted(_FIELDS)),
            st.integers(-2, 127) | st.integers(-(2**15), 2**15 - 1),
        ),
        max_size=2,
    ),
    fix_crc=st.booleans(),
    flip=st.none() | st.tuples(st.integers(0, 10**6), st.integers(0, 255)),
    tail=st.sampled_from([b"", b"\x00" * 5, b"\x00" * 70]),
    native_only=st.booleans(),
)
def test_the_one_batch_path_answers_as_the_general_path(
    recs, codec, producer, transactional, topic, changes, fix_crc, flip, tail, native_only
):
    buf = bytearray(batch(recs, codec, producer, transactional))
    for name, value in changes:
        fmt, offset = _FIELDS[name]
        struct.pack_into(fmt, buf, offset, value)
    if flip is not None:
        position, byte = flip
        buf[position % len(buf)] = byte
    if fix_crc:
        struct.pack_into(">I", buf, rb.CRC_OFFSET, rb.batch_crc(buf, 0, len(buf)))
    buf += tail
    kw = dict(
        next_offset=41,
        now_ms=NOW,
        require_magic2=True,
        partition_leader_epoch=5,
        native_only=native_only,
    )
    assert validate_produce(bytes(buf), topic, **kw) == general_path(bytes(buf), topic, **kw)


@pytest.mark.parametrize("codec", list(Codec))
@pytest.mark.parametrize("lat", [False, True])
def test_a_producers_batch_takes_the_one_batch_path(codec, lat, monkeypatch):
    """The path is taken where it should be (else the property above compares the general
    path with itself): an idempotent producer's batch, in every codec, either timestamp type,
    with a header max timestamp the records do not have (corrected, as Kafka does)."""
    taken = []
    one_batch_kept = validator._one_batch_kept
    monkeypatch.setattr(
        validator,
        "_one_batch_kept",
        lambda mv, job: taken.append(one_batch_kept(mv, job)) or taken[-1],
    )
    buf = bytearray(
        batch([(NOW + i, b"k", b"v" * 40, []) for i in range(20)], codec, (7, 1, 9), False)
    )
    struct.pack_into(">q", buf, rb.MAX_TIMESTAMP_OFFSET, NOW + 1000)
    struct.pack_into(">I", buf, rb.CRC_OFFSET, rb.batch_crc(buf, 0, len(buf)))
    topic = TopicSettings(
        magic=2,
        timestamp_type=TimestampType.LOG_APPEND_TIME if lat else TimestampType.CREATE_TIME,
    )
    result = validate_produce(bytes(buf), topic, next_offset=100, now_ms=NOW + 50)
    assert isinstance(taken[0], ValidatedRecords)
    assert result == taken[0]
    header = rb.read_header(result.buffer)
    assert (header.base_offset, result.last_offset) == (100, 119)
    assert header.max_timestamp == result.max_timestamp == (NOW + 50 if lat else NOW + 19)
    assert rb.batch_crc(result.buffer, 0, len(result.buffer)) == header.crc
    assert result.producer_batches[0].last_sequence == 28
