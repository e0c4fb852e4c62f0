"""Hypothesis properties: build/iterate round trips, conversion, validation; kafka-python reads
everything we write identically."""

from __future__ import annotations

from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from tests.protocol.kafka_python_oracle import kp_read

from protocol.compression import LEGACY_CODECS
from protocol.conversion import convert
from protocol.records import (
    NO_TIMESTAMP,
    MessageSetBuilder,
    TimestampType,
    iter_deep,
    iter_shallow,
)
from protocol.errors import ErrorCode
from protocol.validator import (
    Rejected,
    TopicSettings,
    ValidatedRecords,
    validate_produce,
)

NOW = 1_700_000_000_000
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

blobs = st.one_of(st.none(), st.binary(max_size=40))
timestamps = st.one_of(st.just(NO_TIMESTAMP), st.integers(NOW - 10**6, NOW + 10**6))
message_lists = st.lists(st.tuples(blobs, blobs, timestamps), min_size=1, max_size=12)
codecs = st.sampled_from(LEGACY_CODECS)
magics = st.sampled_from([0, 1])


def build(msgs, magic, codec, base=0):
    b = MessageSetBuilder(magic=magic, codec=codec, base_offset=base)
    for key, value, ts in msgs:
        b.append(value, key=key, timestamp=ts)
    return b.build()


def expected(msgs, magic, base):
    return [
        (base + i, ts if magic == 1 else NO_TIMESTAMP, k, v) for i, (k, v, ts) in enumerate(msgs)
    ]


@SETTINGS
@given(message_lists, magics, codecs, st.integers(0, 2**40))
def test_build_iterate_round_trip(msgs, magic, codec, base):
    buf = build(msgs, magic, codec, base)
    exp = expected(msgs, magic, base)
    assert [(m.offset, m.timestamp, m.key, m.value) for m in iter_deep(buf)] == exp
    assert kp_read(buf) == exp
    assert all(m.codec == codec and m.magic == magic for m in iter_deep(buf))


@SETTINGS
@given(message_lists, codecs, st.integers(0, 2**40))
def test_conversion_round_trip(msgs, codec, base):
    v1 = build(msgs, 1, codec, base)
    v0 = convert(v1, 0)
    assert kp_read(v0) == expected(msgs, 0, base)
    assert {e.magic for e in iter_shallow(v0)} == {0}
    assert {e.codec for e in iter_shallow(v0)} == {codec}
    up = convert(v0, 1)
    assert kp_read(up) == expected(msgs, 0, base)  # timestamps are gone for good
    assert convert(up, 1) == up


@SETTINGS
@given(
    message_lists,
    magics,
    codecs,
    st.integers(0, 2**40),
    st.sampled_from(list(TimestampType)),
    st.sampled_from([None, *LEGACY_CODECS]),
    magics,
    st.booleans(),
)
def test_validator_assigns_offsets_and_keeps_content(
    msgs, magic, codec, next_offset, tt, target, topic_magic, compacted
):
    buf = build(msgs, magic, codec)
    s = TopicSettings(
        magic=topic_magic, timestamp_type=tt, target_codec=target, compacted=compacted
    )
    r = validate_produce(buf, s, next_offset=next_offset, now_ms=NOW)
    # the fast path and the general path agree
    with mock.patch("protocol.validator._fast_magic1", return_value=None):
        assert validate_produce(buf, s, next_offset=next_offset, now_ms=NOW) == r
    if compacted and any(k is None for k, _, _ in msgs):
        assert isinstance(r, Rejected) and r.error == ErrorCode.CORRUPT_MESSAGE
        return
    assert isinstance(r, ValidatedRecords)
    got = kp_read(r.buffer)
    assert [(o, k, v) for o, _, k, v in got] == [
        (next_offset + i, k, v) for i, (k, v, _) in enumerate(msgs)
    ]
    lat = tt == TimestampType.LOG_APPEND_TIME and topic_magic == 1
    if topic_magic == 0:
        assert {t for _, t, _, _ in got} == {NO_TIMESTAMP}
    elif lat:
        assert {t for _, t, _, _ in got} == {NOW}
    elif magic == 1:
        assert [t for _, t, _, _ in got] == [ts for _, _, ts in msgs]
    assert r.max_timestamp == max((t for _, t, _, _ in got), default=NO_TIMESTAMP)
    assert r.first_offset <= r.offset_of_max_timestamp <= r.last_offset
    assert (r.first_offset, r.last_offset, r.message_count) == (
        next_offset,
        next_offset + len(msgs) - 1,
        len(msgs),
    )
    assert {e.magic for e in iter_shallow(r.buffer)} == {topic_magic}


@SETTINGS
@given(message_lists, magics, codecs)
def test_kafka_python_sets_validate(msgs, magic, codec):
    b = LegacyRecordBatchBuilder(magic, codec, 10**7)
    for i, (key, value, ts) in enumerate(msgs):
        b.append(i, None if ts == NO_TIMESTAMP else ts, key, value)
    buf = bytes(b.build())
    r = validate_produce(buf, TopicSettings(magic=magic), next_offset=5, now_ms=NOW)
    assert isinstance(r, ValidatedRecords)
    got = kp_read(r.buffer)
    assert [(o, k, v) for o, _, k, v in got] == [(5 + i, k, v) for i, (k, v, _) in enumerate(msgs)]
    assert [(m.offset, m.timestamp, m.key, m.value) for m in iter_deep(r.buffer)] == got
