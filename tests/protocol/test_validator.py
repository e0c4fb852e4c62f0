"""validate_produce: every rule with its exact error code; kafka-python as the oracle."""

from __future__ import annotations

import struct
import zlib

import pytest
from tests.protocol.kafka_python_oracle import kp_build, kp_read

from protocol.compression import LEGACY_CODECS
from protocol.compression import compress
from protocol.errors import ErrorCode
from protocol.records import (
    NO_TIMESTAMP,
    Codec,
    MessageSetBuilder,
    TimestampType,
    check_entry,
    iter_deep,
    iter_shallow,
)
from protocol.legacy import append_message
from protocol.validator import Rejected, TopicSettings, ValidatedRecords, validate_produce

NOW = 1_700_000_000_000
LAT = TimestampType.LOG_APPEND_TIME
CODECS = list(LEGACY_CODECS)


def deep(buf):
    return [(m.offset, m.timestamp, m.key, m.value) for m in iter_deep(buf)]


def valid(buf, settings=TopicSettings(), next_offset=0, now=NOW) -> ValidatedRecords:
    result = validate_produce(buf, settings, next_offset=next_offset, now_ms=now)
    assert isinstance(result, ValidatedRecords), result
    for entry in iter_shallow(result.buffer):
        check_entry(result.buffer, entry, 10**8)
    assert deep(result.buffer) == kp_read(result.buffer)
    return result


def rejected(buf, settings=TopicSettings(), error=ErrorCode.CORRUPT_MESSAGE, now=NOW) -> str:
    result = validate_produce(buf, settings, next_offset=0, now_ms=now)
    assert isinstance(result, Rejected), result
    assert result.error == error, result
    return result.reason


SAMPLE = [
    (NOW - 5, b"k0", b"v0"),
    (NOW - 1, b"k1", b"v1" * 30),
    (NOW - 3, None, b"v2"),
    (NOW - 1, b"k3", None),
]


def build(messages=SAMPLE, magic=1, codec=Codec.NONE, tt=TimestampType.CREATE_TIME):
    b = MessageSetBuilder(magic=magic, codec=codec, timestamp_type=tt)
    for ts, key, value in messages:
        b.append(value, key=key, timestamp=ts)
    return b.build()


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("magic", [0, 1])
def test_kafka_python_sets_validate_and_read_identically(magic, codec):
    buf = kp_build(magic, codec, SAMPLE)
    r = valid(buf, TopicSettings(magic=magic), next_offset=1000)
    assert (r.first_offset, r.last_offset, r.message_count) == (1000, 1003, 4)
    expected = [
        (1000 + i, ts if magic == 1 else NO_TIMESTAMP, k, v) for i, (ts, k, v) in enumerate(SAMPLE)
    ]
    assert kp_read(r.buffer) == expected
    if magic == 1:
        assert r.max_timestamp == NOW - 1
        # First message carrying the max; a wrapper's shallow offset is its last inner offset.
        assert r.offset_of_max_timestamp == (1001 if codec == Codec.NONE else 1003)
    else:
        assert (r.max_timestamp, r.offset_of_max_timestamp) == (NO_TIMESTAMP, 1003)
    assert r.log_append_time == -1


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4])
def test_compressed_wrapper_timestamp_becomes_max_inner_and_payload_is_not_recompressed(codec):
    buf = kp_build(1, codec, SAMPLE)  # kafka-python writes wrapper timestamp 0
    (src,) = iter_shallow(buf)
    assert src.timestamp == 0
    r = valid(buf, next_offset=10)
    (out,) = iter_shallow(r.buffer)
    assert (out.offset, out.timestamp, out.codec) == (13, NOW - 1, codec)
    assert r.buffer[26:] == buf[26:]  # key and compressed value untouched: in place


def test_first_message_wrapper_timestamp_like_librdkafka_is_corrected():
    buf = bytearray(build(codec=Codec.GZIP))
    struct.pack_into(">q", buf, 18, SAMPLE[0][0])  # librdkafka: first message's timestamp
    struct.pack_into(">I", buf, 12, __import__("zlib").crc32(bytes(buf[16:])))
    r = valid(bytes(buf))
    assert next(iter_shallow(r.buffer)).timestamp == NOW - 1 == r.max_timestamp


def test_uncompressed_log_append_time_rewrites_every_message():
    r = valid(build(), TopicSettings(timestamp_type=LAT), next_offset=5, now=NOW + 7)
    assert r.log_append_time == r.max_timestamp == NOW + 7
    assert r.offset_of_max_timestamp == 5
    msgs = list(iter_deep(r.buffer))
    assert {(m.timestamp, m.timestamp_type) for m in msgs} == {(NOW + 7, LAT)}
    assert [m.offset for m in msgs] == [5, 6, 7, 8]


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4])
def test_compressed_log_append_time_touches_only_the_wrapper(codec):
    buf = build(codec=codec)
    r = valid(buf, TopicSettings(timestamp_type=LAT), next_offset=5, now=NOW + 7)
    (w,) = iter_shallow(r.buffer)
    assert (w.offset, w.timestamp, w.timestamp_type) == (8, NOW + 7, LAT)
    assert r.buffer[26:] == buf[26:]
    assert (r.max_timestamp, r.offset_of_max_timestamp, r.log_append_time) == (NOW + 7, 8, NOW + 7)
    assert [t for _, t, _, _ in kp_read(r.buffer)] == [NOW + 7] * 4


@pytest.mark.parametrize("codec", CODECS)
def test_timestamp_too_far_rejects_whole_set(codec):
    msgs = SAMPLE + [(NOW + 1001, b"k", b"late")]
    settings = TopicSettings(max_timestamp_difference_ms=1000)
    reason = rejected(build(msgs, codec=codec), settings, ErrorCode.INVALID_TIMESTAMP)
    assert str(NOW + 1001) in reason and "message.timestamp.difference.max.ms" in reason
    # exactly at the limit, and messages without a timestamp, are fine
    ok = SAMPLE + [(NOW + 1000, b"k", b"edge"), (NO_TIMESTAMP, b"k", b"none")]
    assert valid(build(ok, codec=codec), settings).message_count == 6
    # LogAppendTime topics do not check producer timestamps
    assert valid(
        build(msgs, codec=codec),
        TopicSettings(timestamp_type=LAT, max_timestamp_difference_ms=1000),
    )


def test_timestamp_too_old_is_rejected_even_when_not_first():
    msgs = [(NOW, b"k", b"a"), (NOW - 5000, b"k", b"b")]
    rejected(
        build(msgs), TopicSettings(max_timestamp_difference_ms=1000), ErrorCode.INVALID_TIMESTAMP
    )
    msgs = [(NOW - 5000, b"k", b"a"), (NOW, b"k", b"b")]
    rejected(
        build(msgs), TopicSettings(max_timestamp_difference_ms=1000), ErrorCode.INVALID_TIMESTAMP
    )


@pytest.mark.parametrize("codec", CODECS)
def test_producer_claiming_log_append_time_is_rejected(codec):
    buf = build(codec=codec, tt=LAT)
    reason = rejected(buf, TopicSettings(), ErrorCode.INVALID_TIMESTAMP)
    assert "LogAppendTime" in reason
    rejected(buf, TopicSettings(timestamp_type=LAT), ErrorCode.INVALID_TIMESTAMP)


def test_message_too_large():
    buf = build([(NOW, b"k", b"x" * 100)])
    size = len(buf)
    assert valid(buf, TopicSettings(max_message_bytes=size)).message_count == 1
    reason = rejected(buf, TopicSettings(max_message_bytes=size - 1), ErrorCode.MESSAGE_TOO_LARGE)
    assert str(size) in reason
    # the wrapper counts, not the inner messages
    wrapped = build([(NOW, b"k", b"x" * 100)] * 3, codec=Codec.GZIP)
    rejected(
        wrapped, TopicSettings(max_message_bytes=len(wrapped) - 1), ErrorCode.MESSAGE_TOO_LARGE
    )


def test_up_conversion_growth_is_rechecked_against_the_limit():
    buf = build([(NOW, b"k", b"x" * 100)], magic=0)
    rejected(buf, TopicSettings(magic=1, max_message_bytes=len(buf)), ErrorCode.MESSAGE_TOO_LARGE)
    assert valid(buf, TopicSettings(magic=1, max_message_bytes=len(buf) + 8)).message_count == 1


@pytest.mark.parametrize("codec", CODECS)
def test_null_key_on_compacted_topic(codec):
    reason = rejected(build(codec=codec), TopicSettings(compacted=True))
    assert "null key" in reason
    keyed = [(ts, k or b"x", v) for ts, k, v in SAMPLE]
    assert valid(build(keyed, codec=codec), TopicSettings(compacted=True)).message_count == 4


def test_incomplete_trailing_entry_is_trimmed_and_nothing_complete_is_empty():
    buf = build()
    last = list(iter_shallow(buf))[-1]
    r = valid(buf[:-3], next_offset=20)
    assert (r.message_count, r.last_offset) == (3, 22)
    assert r.buffer == valid(buf[: last.position], next_offset=20).buffer
    for cut in (b"", buf[:5], buf[:11], buf[: last.size]):
        r = validate_produce(cut, TopicSettings(), next_offset=20, now_ms=NOW)
        assert r == ValidatedRecords(b"", -1, -1, -1, -1, -1, 0)


def test_size_below_minimum_and_crc_mismatch_are_corrupt():
    buf = bytearray(build())
    second = list(iter_shallow(buf))[1].position
    small = bytearray(buf)
    struct.pack_into(">i", small, second + 8, 13)
    rejected(bytes(small))
    flipped = bytearray(buf)
    flipped[second + 30] ^= 0x40
    assert "CRC" in rejected(bytes(flipped))


def _wrapper(inner: bytes, codec=Codec.GZIP, magic=1, offset=0) -> bytes:
    out = bytearray()
    append_message(out, offset, magic, int(codec), NOW, None, compress(codec, inner, magic))
    return bytes(out)


def test_inner_message_problems_are_corrupt():
    good = build()
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 1
    assert "CRC" in rejected(_wrapper(bytes(bad_crc)))
    nested = _wrapper(build(codec=Codec.GZIP))
    assert "one level" in rejected(_wrapper(nested))
    assert "magic" in rejected(_wrapper(build(magic=0), magic=1))
    for codec in (Codec.GZIP, Codec.SNAPPY, Codec.LZ4):
        garbage = bytearray()
        payload = compress(codec, good, 1)
        append_message(garbage, 0, 1, int(codec), NOW, None, payload[: len(payload) // 2])
        assert "decompress" in rejected(bytes(garbage))
    empty = bytearray()
    append_message(empty, 0, 1, int(Codec.GZIP), NOW, None, None)
    assert "null value" in rejected(bytes(empty))


def test_wrong_inner_offsets_cause_recompression_not_rejection():
    inner = bytearray()
    for i, (ts, k, v) in enumerate(SAMPLE):
        append_message(inner, 7 + 2 * i, 1, 0, ts, k, v)
    buf = _wrapper(bytes(inner), Codec.SNAPPY)
    r = valid(buf, next_offset=100)
    assert kp_read(r.buffer) == [(100 + i, ts, k, v) for i, (ts, k, v) in enumerate(SAMPLE)]
    (w,) = iter_shallow(r.buffer)
    assert w.codec == Codec.SNAPPY and w.offset == 103 and w.timestamp == NOW - 1


@pytest.mark.parametrize("source", CODECS)
@pytest.mark.parametrize("target", CODECS)
def test_target_codec(source, target):
    buf = build(codec=source)
    r = valid(buf, TopicSettings(target_codec=target), next_offset=3)
    shallow = list(iter_shallow(r.buffer))
    if target == Codec.NONE:
        assert [e.codec for e in shallow] == [0] * 4
    else:
        assert [e.codec for e in shallow] == [target]
    assert kp_read(r.buffer) == [(3 + i, ts, k, v) for i, (ts, k, v) in enumerate(SAMPLE)]
    assert r.max_timestamp == NOW - 1


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("tt", list(TimestampType))
def test_up_conversion(codec, tt):
    r = valid(
        build(magic=0, codec=codec),
        TopicSettings(magic=1, timestamp_type=tt),
        next_offset=9,
        now=NOW,
    )
    assert {e.magic for e in iter_shallow(r.buffer)} == {1}
    ts = NOW if tt == LAT else NO_TIMESTAMP
    assert kp_read(r.buffer) == [(9 + i, ts, k, v) for i, (_, k, v) in enumerate(SAMPLE)]
    assert r.max_timestamp == ts
    assert r.log_append_time == (NOW if tt == LAT else -1)


@pytest.mark.parametrize("codec", CODECS)
def test_down_conversion(codec):
    r = valid(build(codec=codec), TopicSettings(magic=0), next_offset=9)
    assert {e.magic for e in iter_shallow(r.buffer)} == {0}
    assert kp_read(r.buffer) == [(9 + i, NO_TIMESTAMP, k, v) for i, (_, k, v) in enumerate(SAMPLE)]
    assert (r.max_timestamp, r.log_append_time) == (NO_TIMESTAMP, -1)


def test_mixed_magics_are_converted():
    buf = build(SAMPLE[:2], magic=0) + build(SAMPLE[2:], magic=1)
    r = valid(buf, next_offset=0)
    assert {e.magic for e in iter_shallow(r.buffer)} == {1}
    assert [t for _, t, _, _ in kp_read(r.buffer)] == [-1, -1, NOW - 3, NOW - 1]
    assert (r.max_timestamp, r.offset_of_max_timestamp) == (NOW - 1, 3)


def test_multiple_wrappers_in_place_get_consecutive_offsets():
    buf = build(SAMPLE[:3], codec=Codec.LZ4) + build(SAMPLE[3:], codec=Codec.LZ4)
    r = valid(buf, next_offset=50)
    assert [e.offset for e in iter_shallow(r.buffer)] == [52, 53]
    assert [o for o, _, _, _ in kp_read(r.buffer)] == [50, 51, 52, 53]
    assert (r.max_timestamp, r.offset_of_max_timestamp) == (NOW - 1, 52)


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.LZ4])
def test_input_is_not_modified_and_fast_path_matches_general_path(codec):
    from unittest import mock

    buf = bytearray(build(codec=codec))
    before = bytes(buf)
    r = valid(buf, next_offset=77)
    assert bytes(buf) == before
    with mock.patch("protocol.validator._fast_magic1", return_value=None):
        assert valid(before, next_offset=77) == r


def test_magic_1_message_below_its_minimum_size_is_corrupt_even_when_lengths_seem_to_fit():
    """A 20-byte magic-1 message (minimum 22) whose value length, read past its end from the
    next entry's offset bytes, equals the -2 bytes it seems to leave: still corrupt."""
    body = struct.pack(">bbqi", 1, 0, NOW, -1) + b"\xff\xff"  # value length cut in half
    short = struct.pack(">qiI", 0, 4 + len(body), zlib.crc32(body)) + body
    following = bytearray(build())
    following[0:2] = b"\xff\xfe"  # the next entry's offset supplies the length's low bytes
    assert len(body) == 16
    rejected(short + bytes(following))


@pytest.mark.parametrize(
    "settings",
    [
        TopicSettings(),
        TopicSettings(timestamp_type=LAT),
        TopicSettings(magic=2),
        TopicSettings(magic=2, timestamp_type=LAT),
        TopicSettings(magic=0),
        TopicSettings(max_timestamp_difference_ms=2),
        TopicSettings(compacted=True),
    ],
    ids=["v1", "v1-lat", "v2", "v2-lat", "v0", "tight-time", "compacted"],
)
@pytest.mark.parametrize(
    "magic,codec",
    [(1, Codec.NONE), (1, Codec.LZ4), (2, Codec.NONE), (2, Codec.ZSTD), (0, Codec.GZIP)],
)
def test_without_the_c_extension_every_answer_is_the_same(monkeypatch, settings, magic, codec):
    """A build without a C compiler has no protocol._fastscan: the Python paths alone must give
    identical results and identical rejections."""
    import protocol.validator as validator

    buf = build(magic=magic, codec=codec)
    with_c = validate_produce(buf, settings, next_offset=9, now_ms=NOW)
    monkeypatch.setattr(validator, "scan_v1", None)
    monkeypatch.setattr(validator, "scan_v2", None)
    assert validate_produce(buf, settings, next_offset=9, now_ms=NOW) == with_c
