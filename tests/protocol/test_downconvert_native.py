"""Down-conversion of record batches for Fetch v0-v3 readers by the C extension
(legacy_messages): byte-identical to the pure-Python path, read by kafka-python's legacy record
code as the records that went in, and refused exactly as the Python path refuses bad records."""

from __future__ import annotations

import sys
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.protocol.kafka_python_oracle import kp_read

from protocol import conversion
from protocol.compression import compress
from protocol.errors import CorruptRecordError
from protocol.recordbatch import BatchSpec, batch_crc, build_batch, encode_record
from protocol.conversion import convert
from protocol.records import NO_TIMESTAMP, Codec

pytest.importorskip("protocol._fastscan", reason="the C extension is not built")
if conversion._legacy_messages is None:  # CHRONOLOG_PURE_PYTHON=1
    pytest.skip("the C extension is disabled", allow_module_level=True)

CODECS = (Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4)

batch_records = st.lists(
    st.tuples(
        st.integers(-(2**20), 2**20),  # timestamp delta
        st.one_of(st.none(), st.binary(max_size=30)),
        st.one_of(st.none(), st.binary(max_size=300)),
        st.lists(
            st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))),
            max_size=2,
        ),
    ),
    min_size=1,
    max_size=25,
)


def python_convert(buf: bytes, to_magic: int) -> bytes:
    """convert() with the native path switched off."""
    native = conversion._legacy_messages
    conversion._legacy_messages = None
    try:
        return convert(buf, to_magic)
    finally:
        conversion._legacy_messages = native


def batch(recs, codec, base_offset=0, base_ts=1_700_000_000_000, lat=False) -> bytes:
    spec = BatchSpec(base_offset=base_offset, codec=codec, log_append_time=lat)
    inputs = [(i, base_ts + d, k, v, tuple(h)) for i, (d, k, v, h) in enumerate(recs)]
    return build_batch(spec, inputs)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(batch_records, st.sampled_from(CODECS), st.booleans()), min_size=1, max_size=4
    ),
    st.integers(0, 2**40),
    st.sampled_from((0, 1)),
)
def test_native_conversion_is_byte_identical_and_reads_back(batches, first_offset, to_magic):
    buf, expected, offset = b"", [], first_offset
    for recs, codec, lat in batches:
        built = batch(recs, codec, offset, lat=lat)
        buf += built
        max_ts = max(1_700_000_000_000 + d for d, *_ in recs)
        for i, (d, k, v, _h) in enumerate(recs):
            ts = (max_ts if lat else 1_700_000_000_000 + d) if to_magic == 1 else NO_TIMESTAMP
            expected.append((offset + i, ts, k, v))
        offset += len(recs) + 3  # gaps between batches, as compaction leaves them
    native = convert(buf, to_magic)
    assert native == python_convert(buf, to_magic)
    assert kp_read(native) == expected


def test_a_truncated_trailing_batch_is_kept_as_is():
    whole = batch([(0, b"k", b"v" * 100, [])], Codec.NONE)
    buf = whole + batch([(1, None, b"x" * 500, [])], Codec.NONE, base_offset=1)[:200]
    assert convert(buf, 1) == python_convert(buf, 1)
    assert kp_read(convert(buf, 1)) == [(0, 1_700_000_000_000, b"k", b"v" * 100)]


@pytest.mark.parametrize("codec", (Codec.NONE, Codec.GZIP))
def test_bad_records_are_refused_with_the_python_paths_error(codec):
    """A record length pointing past the batch: the C pass declines, Python names the fault."""
    recs = [(0, b"key", b"value", []), (1, None, b"v2", [])]
    good = batch(recs, Codec.NONE)
    section = bytearray(good[61:])
    section[0] = 0x7E  # first record's length varint: 63, past the section's end
    spec = BatchSpec(codec=codec)
    # Rebuild the batch around the bad section so its CRC is right and only the records are bad.
    bad = bytearray(build_batch(spec, [(i, 0, k, v, ()) for i, (_d, k, v, _h) in enumerate(recs)]))
    if codec == Codec.NONE:
        bad[61:] = section
    else:
        packed = compress(codec, bytes(section), 2)
        bad = bad[:61] + packed
        bad[8:12] = (len(bad) - 12).to_bytes(4, "big")
    bad[17:21] = batch_crc(bad, 0, len(bad)).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError) as native:
        convert(bytes(bad), 1)
    with pytest.raises(CorruptRecordError) as python:
        python_convert(bytes(bad), 1)
    assert str(native.value) == str(python.value)
    assert "record 0 is malformed" in str(native.value)


def test_offsets_beyond_int64_are_declined_not_wrapped():
    """base offset + delta past int64 in C: declined (the Python path decides), never wrapped."""
    section = bytearray()
    encode_record(section, 2**62, 0, None, b"v")
    assert conversion._legacy_messages(bytes(section), 1, 1, 0, False, 2**62, 0, False, 0) is None
    assert conversion._legacy_messages(bytes(section), 1, 1, 0, False, 0, 0, False, 0) is not None


def _runs_beside(convert_once, times: int) -> bool:
    """Whether this thread gets the GIL while another thread calls ``convert_once`` up to
    ``times`` times, with the switch interval so long that only a call that releases the GIL
    lets it run (many calls: on a loaded machine this thread may wait for a core)."""
    started, ran = threading.Event(), threading.Event()
    calls = []

    def worker():
        started.set()
        for _ in range(times):
            convert_once()
            calls.append(1)
            if ran.is_set():
                return

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000)
    try:
        thread = threading.Thread(target=worker)
        thread.start()
        started.wait()
        inside = len(calls) < times  # the worker has not finished: it let go of the GIL
        ran.set()
        thread.join()
    finally:
        sys.setswitchinterval(interval)
    return inside


def test_the_conversion_lets_other_threads_run():
    """The C pass releases the GIL from 64 KiB (the event loop runs meanwhile); the Python
    path, as the control, does not let the other thread in before it is done."""
    values = [(0, b"key", bytes(1000), [])] * 200
    section = batch(values, Codec.NONE)[61:]  # 200 KB of records
    assert len(section) > 65536
    assert _runs_beside(
        lambda: conversion._legacy_messages(section, 200, 1, 0, False, 0, 0, False, 0), 10_000
    )
    python = batch(values[:20], Codec.NONE)
    assert not _runs_beside(lambda: python_convert(python, 1), 20)
