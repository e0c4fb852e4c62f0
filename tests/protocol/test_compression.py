"""Codecs against kafka-python's codec module, python-snappy and xxhash as oracles."""

from __future__ import annotations

import gzip
import struct

import cramjam
import lz4.frame
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kp

from protocol.compression import Codec, compress, decompress, decompressed_size_bound, xxh32
from protocol.errors import CorruptRecordError

PAYLOADS = [b"", b"a", b"hello world" * 10, bytes(range(256)) * 300]  # 300 spans xerial blocks


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=80), st.integers(0, 2**32 - 1))
def test_xxh32_matches_xxhash(data, seed):
    assert xxh32(data, seed) == xxhash.xxh32_intdigest(data, seed)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_gzip_interop(payload):
    ours = compress(Codec.GZIP, payload, 1)
    assert gzip.decompress(ours) == payload
    assert kp.gzip_decode(ours) == payload
    assert decompress(Codec.GZIP, kp.gzip_encode(payload), 1) == payload
    # concatenated members read as one stream, like GZIPInputStream
    assert decompress(Codec.GZIP, gzip.compress(payload) + gzip.compress(b"tail"), 1) == (
        payload + b"tail"
    )


@pytest.mark.parametrize("payload", PAYLOADS)
def test_snappy_writes_xerial_and_reads_both_framings(payload):
    ours = compress(Codec.SNAPPY, payload, 1)
    assert ours[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    if payload:  # kafka-python takes a bare 16-byte header for raw snappy
        assert kp.snappy_decode(ours) == payload
    assert decompress(Codec.SNAPPY, kp.snappy_encode(payload), 1) == payload
    raw = kp.snappy_encode(payload, xerial_compatible=False)  # librdkafka may send this
    assert decompress(Codec.SNAPPY, raw, 0) == payload
    if len(payload) > 32 * 1024:
        (first,) = struct.unpack_from(">i", ours, 16)
        assert len(cramjam.snappy.decompress_raw(ours[20 : 20 + first])) == 32 * 1024


@pytest.mark.parametrize("payload", PAYLOADS)
def test_lz4_magic0_uses_kafkas_broken_header_checksum(payload):
    ours = compress(Codec.LZ4, payload, 0)
    assert ours[6] == (xxhash.xxh32_intdigest(ours[0:6]) >> 8) & 0xFF
    assert kp.lz4_decode_old_kafka(ours) == payload
    assert decompress(Codec.LZ4, kp.lz4_encode_old_kafka(payload), 0) == payload
    # magic 0 readers ignore HC, so a correct (KIP-57) frame is accepted there too
    assert decompress(Codec.LZ4, kp.lz4_encode(payload), 0) == payload


@pytest.mark.parametrize("payload", PAYLOADS)
def test_lz4_magic1_is_a_standard_frame(payload):
    ours = compress(Codec.LZ4, payload, 1)
    assert lz4.frame.decompress(ours) == payload
    info = lz4.frame.get_frame_info(ours)
    assert info["block_linked"] is False and info["content_checksum"] is False
    assert decompress(Codec.LZ4, kp.lz4_encode(payload), 1) == payload
    with pytest.raises(CorruptRecordError, match="pre-KIP-57"):
        decompress(Codec.LZ4, kp.lz4_encode_old_kafka(payload), 1, position=40)


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4])
@pytest.mark.parametrize("magic", [0, 1])
def test_garbage_raises_corrupt_record_error_with_position(codec, magic):
    good = compress(codec, b"payload" * 100, magic)
    bads = [b"", good[: len(good) // 2], good[:8] + b"\xff" * 30]
    if codec != Codec.SNAPPY:
        bads.append(b"\x00")  # a valid raw snappy stream of nothing
    for bad in bads:
        with pytest.raises(CorruptRecordError) as info:
            decompress(codec, bad, magic, position=123)
        assert info.value.offset == 123


def test_unknown_codec_is_corrupt():
    with pytest.raises(CorruptRecordError, match="unknown compression codec 5"):
        decompress(5, b"x", 1, position=7)


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4])
@pytest.mark.parametrize("magic", [0, 1])
def test_decompression_limit(codec, magic):
    payload = b"\x00" * 200_000
    data = compress(codec, payload, magic)
    assert decompress(codec, data, magic, max_bytes=len(payload)) == payload
    with pytest.raises(CorruptRecordError, match="more than 199999 bytes"):
        decompress(codec, data, magic, max_bytes=len(payload) - 1, position=3)
    raw = kp.snappy_encode(payload, xerial_compatible=False)
    with pytest.raises(CorruptRecordError, match="more than"):
        decompress(Codec.SNAPPY, raw, magic, max_bytes=1000)


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.LZ4])
def test_bomb_is_refused_without_inflating_it(codec):
    import tracemalloc

    bomb = compress(codec, b"\x00" * (64 << 20), 1)
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError, match="decompression bomb"):
            decompress(codec, bomb, 1, max_bytes=4 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


# -- decompressed_size_bound: never below what decompress() returns -----------------------------

_compressible = st.builds(
    lambda chunk, times, tail: chunk * times + tail,
    st.binary(min_size=1, max_size=64),
    st.integers(1, 5000),
    st.binary(max_size=2000),
)


def _lz4_frames(payload: bytes) -> list[bytes]:
    """LZ4 frames as our codec, kafka-python and other LZ4F settings write them."""
    return [
        compress(Codec.LZ4, payload, 2),
        kp.lz4_encode(payload),
        lz4.frame.compress(
            payload,
            block_size=lz4.frame.BLOCKSIZE_MAX256KB,
            block_linked=True,
            block_checksum=True,
            content_checksum=True,
            store_size=True,
        ),
        lz4.frame.compress(payload, block_size=lz4.frame.BLOCKSIZE_MAX4MB, store_size=False),
    ]


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.binary(max_size=300_000), _compressible))
def test_size_bound_is_never_below_the_output(payload):
    import zstandard

    assert decompressed_size_bound(Codec.NONE, payload) == len(payload)
    framed = [
        (Codec.GZIP, compress(Codec.GZIP, payload, 2)),
        (Codec.SNAPPY, compress(Codec.SNAPPY, payload, 2)),
        (Codec.SNAPPY, kp.snappy_encode(payload, xerial_compatible=False)),
        (Codec.ZSTD, compress(Codec.ZSTD, payload, 2)),
        (Codec.ZSTD, zstandard.ZstdCompressor(level=19).compress(payload)),
    ] + [(Codec.LZ4, f) for f in _lz4_frames(payload)]
    for codec, data in framed:
        bound = decompressed_size_bound(codec, data)
        assert bound is not None, codec
        assert bound >= len(decompress(codec, data, 2)), codec


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_size_bound_holds_for_bombs(codec):
    payload = b"\x00" * (32 << 20)
    data = compress(codec, payload, 2)
    assert decompressed_size_bound(codec, data) >= len(payload)


def test_lz4_bound_counts_blocks():
    """The bound of an LZ4 frame is its blocks times the frame's block size: one block more
    than the output at most, so a producer's 1 MB batch is not mistaken for a bomb."""
    payload = bytes(range(256)) * 4000  # 1,024,000 bytes: 16 blocks of 64 KiB
    assert decompressed_size_bound(Codec.LZ4, compress(Codec.LZ4, payload, 2)) == 16 * 65536
    assert decompressed_size_bound(Codec.LZ4, kp.lz4_encode(b"")) == 0


def test_size_bound_is_none_when_the_headers_bound_nothing():
    import zstandard

    payload = b"x" * 100_000
    frame = compress(Codec.LZ4, payload, 2)
    assert decompressed_size_bound(Codec.LZ4, frame + b"\x00") is None  # trailing bytes
    assert decompressed_size_bound(Codec.LZ4, frame[:-2]) is None  # truncated
    assert decompressed_size_bound(Codec.LZ4, b"not an lz4 frame") is None
    bad_block_size = bytearray(frame)
    bad_block_size[5] = 0x30  # BD names block size 3: not a valid LZ4 frame
    assert decompressed_size_bound(Codec.LZ4, bytes(bad_block_size)) is None
    unsized = zstandard.ZstdCompressor(write_content_size=False).compress(payload)
    assert decompressed_size_bound(Codec.ZSTD, unsized) is None
    assert decompressed_size_bound(Codec.ZSTD, b"junk") is None
    assert decompressed_size_bound(7, b"x") is None
