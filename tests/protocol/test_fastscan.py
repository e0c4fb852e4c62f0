"""scan_v1, the validator's native hot loop: its contract checked against kafka-python's record
code and a plain-Python re-reading of the same bytes (brute force over every message)."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.protocol.kafka_python_oracle import kp_build, kp_read

scan_v1 = pytest.importorskip("protocol._fastscan", reason="the C extension is not built").scan_v1

NOW = 1_700_000_000_000
CREATE, LOG_APPEND, INNER = 0, 1, 2
WIDE = (-(2**63), 2**63 - 1)

messages_strategy = st.lists(
    st.tuples(
        st.one_of(st.just(-1), st.integers(0, 2**62)),
        st.one_of(st.none(), st.binary(max_size=20)),
        st.one_of(st.none(), st.binary(max_size=200)),
    ),
    min_size=1,
    max_size=30,
)


def scan(buf, mode=CREATE, first=0, lo=WIDE[0], hi=WIDE[1], max_size=2**31, keyed=False):
    out = bytearray(buf)
    return scan_v1(out, len(out), mode, first, lo, hi, max_size, NOW, keyed), out


@settings(max_examples=150, deadline=None)
@given(messages_strategy, st.integers(0, 2**40))
def test_create_time_assigns_offsets_and_finds_the_first_largest_timestamp(msgs, first):
    (count, max_ts, max_index), out = scan(kp_build(1, 0, msgs), first=first)
    timestamps = [ts for ts, _k, _v in msgs]
    assert count == len(msgs)
    assert max_ts == max(timestamps)
    assert max_index == (timestamps.index(max_ts) if max_ts != -1 else -1)
    assert kp_read(out) == [(first + i, ts, k, v) for i, (ts, k, v) in enumerate(msgs)]


@settings(max_examples=100, deadline=None)
@given(messages_strategy)
def test_log_append_time_rewrites_timestamp_bit_and_crc(msgs):
    (count, _, _), out = scan(kp_build(1, 0, msgs), mode=LOG_APPEND, first=5)
    assert count == len(msgs)
    assert kp_read(out) == [(5 + i, NOW, k, v) for i, (_ts, k, v) in enumerate(msgs)]
    pos = 0
    while pos < len(out):
        (size,) = struct.unpack_from(">i", out, pos + 8)
        assert out[pos + 17] == 0x08  # attributes: LogAppendTime
        assert struct.unpack_from(">I", out, pos + 12)[0] == zlib.crc32(
            out[pos + 16 : pos + 12 + size]
        )
        pos += 12 + size


@settings(max_examples=100, deadline=None)
@given(messages_strategy)
def test_inner_mode_accepts_relative_offsets_and_writes_nothing(msgs):
    buf = kp_build(1, 0, msgs)
    result, out = scan(buf, mode=INNER)
    assert result is not None and result[0] == len(msgs)
    assert bytes(out) == buf


def test_inner_mode_refuses_offsets_that_are_not_0_to_n_minus_1():
    buf = bytearray(kp_build(1, 0, [(NOW, b"k", b"a"), (NOW, b"k", b"b")]))
    struct.pack_into(">q", buf, 0, 1)  # offsets are not covered by the CRC
    assert scan(buf, mode=INNER)[0] is None
    assert scan(buf, mode=CREATE)[0] is not None


@settings(max_examples=300, deadline=None)
@given(messages_strategy, st.data())
def test_one_flipped_byte_after_the_offset_is_never_accepted_silently(msgs, data):
    """A flipped byte in the CRC-covered part or the CRC itself fails the CRC; in the size it
    breaks the framing. Only offsets (rewritten anyway) are not checked."""
    buf = bytearray(kp_build(1, 0, msgs))
    offset_fields, pos = set(), 0
    while pos < len(buf):
        offset_fields.update(range(pos, pos + 8))
        pos += 12 + struct.unpack_from(">i", buf, pos + 8)[0]
    i = data.draw(st.integers(0, len(buf) - 1).filter(lambda i: i not in offset_fields))
    buf[i] ^= data.draw(st.integers(1, 255))
    assert scan(buf)[0] is None


@pytest.mark.parametrize("cut", [1, 10, 33, 34])
def test_a_partial_trailing_message_is_refused(cut):
    buf = kp_build(1, 0, [(NOW, b"k", b"v" * 40)] * 3)
    assert scan(buf[:-cut])[0] is None


def test_timestamp_window_keyed_topics_size_limit_and_foreign_magic():
    buf = kp_build(1, 0, [(NOW - 10, None, b"v"), (-1, b"k", b"w")])
    assert scan(buf, lo=NOW - 10, hi=NOW)[0] is not None
    assert scan(buf, lo=NOW - 9, hi=NOW)[0] is None  # outside the allowed difference
    assert scan(buf, lo=NOW + 1, hi=NOW + 2)[0] is None  # -1 is exempt, NOW - 10 is not
    assert scan(buf, keyed=True)[0] is None  # null key on a compacted topic
    assert scan(kp_build(1, 0, [(NOW, b"k", b"v")]), keyed=True)[0] is not None
    assert scan(buf, max_size=22)[0] is None  # a message above max.message.bytes
    assert scan(kp_build(0, 0, [(None, b"k", b"v")]))[0] is None
    assert scan(kp_build(1, 1, [(NOW, b"k", b"v")]))[0] is None  # a gzip wrapper
    assert scan(b"")[0] is None


def test_limits_beyond_int64_saturate():
    buf = kp_build(1, 0, [(2**63 - 1, None, b"v")])
    (count, max_ts, _), _ = scan(buf, lo=NOW - 2**63 + 1, hi=NOW + 2**63 - 1)
    assert (count, max_ts) == (1, 2**63 - 1)


def test_bad_arguments_raise_clear_errors():
    buf = kp_build(1, 0, [(NOW, None, b"v")])
    with pytest.raises(TypeError, match="must be writable"):
        scan_v1(buf, len(buf), CREATE, 0, 0, 1, 100, NOW, False)  # bytes are read-only
    assert scan_v1(buf, len(buf), INNER, 0, 0, NOW, 100, NOW, False) == (1, NOW, 0)
    with pytest.raises(ValueError, match="outside the buffer"):
        scan_v1(bytearray(buf), len(buf) + 1, CREATE, 0, 0, 1, 100, NOW, False)
    with pytest.raises(ValueError, match="unknown scan mode 3"):
        scan_v1(bytearray(buf), len(buf), 3, 0, 0, 1, 100, NOW, False)


@pytest.mark.parametrize("size", [0, 1, 65535, 65536, 3 << 20])
def test_extend_appends_like_plus_equals_below_and_above_the_gil_threshold(size):
    extend = pytest.importorskip("protocol._fastscan").extend
    data = bytes(i % 251 for i in range(size))
    out = bytearray(b"head")
    extend(out, memoryview(b"xx" + data)[2:])
    assert out == b"head" + data


def test_extend_refuses_what_plus_equals_refuses():
    extend = pytest.importorskip("protocol._fastscan").extend
    with pytest.raises(TypeError):
        extend(b"bytes are immutable", b"x")
    out = bytearray(b"abc")
    with memoryview(out), pytest.raises(BufferError):  # an exported bytearray cannot grow
        extend(out, b"x" * 100_000)
    assert out == b"abc"


@settings(max_examples=300, deadline=None)
@given(
    st.binary(max_size=300) | st.sampled_from([bytes(range(256)) * 300, b"\xff" * 70_000]),
    st.integers(0, 400),
    st.integers(0, 80_000),
    st.booleans(),
)
def test_crc32c_is_the_crc32c_packages_by_the_cpu_and_by_the_tables(data, start, end, portable):
    """Both ways (SSE4.2's instruction where the CPU has it, the slicing-by-8 tables) over any
    range, cut to the buffer as a slice is; above 64 KiB the GIL is released."""
    from crc32c import crc32c as reference

    crc32c = pytest.importorskip("protocol._fastscan").crc32c
    assert crc32c(data, start, end, portable) == reference(data[start:end])
    assert crc32c(memoryview(b"ab" + data)[2:], start, end, portable) == reference(data[start:end])


def test_crc32c_refuses_a_negative_range():
    crc32c = pytest.importorskip("protocol._fastscan").crc32c
    with pytest.raises(ValueError, match="negative range"):
        crc32c(b"abc", -1, 2)
