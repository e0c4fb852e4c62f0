"""Fuzz: truncated, bit-flipped and random message sets must only ever produce
CorruptRecordError (or a Rejected answer), never IndexError, struct.error, codec errors..."""

from __future__ import annotations

import struct
import zlib
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.compression import LEGACY_CODECS
from protocol.errors import CorruptRecordError, ErrorCode
from protocol.conversion import convert
from protocol.records import (
    Codec,
    MessageSetBuilder,
    TimestampType,
    check_entry,
    iter_deep,
    iter_shallow,
)
from protocol.validator import Rejected, TopicSettings, ValidatedRecords, validate_produce

NOW = 1_700_000_000_000
FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def fix_crcs(buf: bytearray) -> bytearray:
    """Recompute the CRC of every top-level entry that fits, so mutations get past the CRC
    check and reach structure parsing and decompression."""
    pos = 0
    while pos + 17 <= len(buf):
        _, size = struct.unpack_from(">qi", buf, pos)
        end = pos + 12 + size
        if size < 5 or end > len(buf):
            break
        struct.pack_into(">I", buf, pos + 12, zlib.crc32(bytes(buf[pos + 16 : end])))
        pos = end
    return buf


def exercise(buf) -> None:
    """Run every entry point over ``buf``; anything but CorruptRecordError/Rejected fails."""
    try:
        for entry in iter_shallow(buf):
            check_entry(buf, entry, 10**6)
    except CorruptRecordError as exc:
        assert exc.offset is not None
    try:
        list(iter_deep(buf))
    except CorruptRecordError as exc:
        assert exc.offset is not None
    for magic in (0, 1):
        try:
            convert(buf, magic)
        except CorruptRecordError as exc:
            assert exc.offset is not None
    for s in (
        TopicSettings(),
        TopicSettings(magic=0, target_codec=Codec.GZIP),
        TopicSettings(compacted=True, max_timestamp_difference_ms=10**9),
        TopicSettings(timestamp_type=TimestampType.LOG_APPEND_TIME, max_message_bytes=200),
    ):
        r = validate_produce(buf, s, next_offset=3, now_ms=NOW)
        assert isinstance(r, (ValidatedRecords, Rejected))
        if isinstance(r, Rejected):
            assert (
                r.error
                in (
                    ErrorCode.CORRUPT_MESSAGE,
                    ErrorCode.INVALID_TIMESTAMP,
                    ErrorCode.MESSAGE_TOO_LARGE,
                )
                and r.reason
            )
        else:  # whatever was accepted must read back cleanly
            for entry in iter_shallow(r.buffer):
                check_entry(r.buffer, entry, 10**7)
            assert len(list(iter_deep(r.buffer))) == r.message_count
        # the hot path only ever accepts what the general path accepts, identically
        with mock.patch("protocol.validator._fast_magic1", return_value=None):
            assert validate_produce(buf, s, next_offset=3, now_ms=NOW) == r


@st.composite
def message_sets(draw):
    magic = draw(st.sampled_from([0, 1]))
    codec = draw(st.sampled_from(LEGACY_CODECS))
    b = MessageSetBuilder(magic=magic, codec=codec)
    for _ in range(draw(st.integers(1, 6))):
        b.append(
            draw(st.one_of(st.none(), st.binary(max_size=30))),
            key=draw(st.one_of(st.none(), st.binary(max_size=8))),
            timestamp=draw(st.integers(NOW - 10**10, NOW + 10**10)),
        )
    buf = b.build()
    if draw(st.booleans()):
        other = MessageSetBuilder(
            magic=draw(st.sampled_from([0, 1])), codec=draw(st.sampled_from(LEGACY_CODECS))
        )
        other.append(b"second", key=b"k", timestamp=NOW)
        buf += other.build()
    return buf


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes(data):
    exercise(data)
    exercise(fix_crcs(bytearray(data)))


@FUZZ
@given(message_sets(), st.data())
def test_truncated(buf, data):
    cut = data.draw(st.integers(0, len(buf)))
    exercise(buf[:cut])
    exercise(fix_crcs(bytearray(buf[:cut])))


@FUZZ
@given(message_sets(), st.data())
def test_bit_flips(buf, data):
    mutated = bytearray(buf)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(mutated) - 1))
        mutated[i] ^= 1 << data.draw(st.integers(0, 7))
    exercise(bytes(mutated))
    exercise(fix_crcs(mutated))


@FUZZ
@given(message_sets(), st.data())
def test_byte_overwrites_with_fixed_crcs(buf, data):
    mutated = bytearray(buf)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(mutated) - 1))
        mutated[i] = data.draw(st.sampled_from([0x00, 0xFF, 0x7F, 0x80, 0x01, 0x02, 0x03]))
    exercise(fix_crcs(mutated))


@FUZZ
@given(
    st.sampled_from([Codec.GZIP, Codec.SNAPPY, Codec.LZ4]),
    st.sampled_from([0, 1]),
    st.binary(max_size=200),
)
def test_wrapper_with_arbitrary_payload(codec, magic, payload):
    from protocol.legacy import append_message

    buf = bytearray()
    append_message(buf, 0, magic, int(codec), NOW, None, payload)
    exercise(bytes(buf))
