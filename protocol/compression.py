"""Compression codecs of Kafka message sets and record batches, as the Java client writes them.

For magic 0/1 the compressed bytes are the value of a wrapper message and decompress to a message
set of inner entries; for magic 2 they are a record batch's records section. Layouts:

- gzip: an RFC 1952 stream (Java's GZIPOutputStream). Several concatenated members are read as
  one stream, as GZIPInputStream does.
- snappy: xerial framing (what Kafka's Java client writes): a 16-byte header
  ``0x82 'SNAPPY' 0x00, int32 version=1, int32 compat=1``, then blocks ``int32 length, raw snappy
  block`` of at most 32 KiB of input each. librdkafka may send raw (unframed) snappy instead; both
  are accepted on read, xerial is written.
- lz4: an LZ4 frame with independent 64 KiB blocks, no content size, no checksums. The header
  checksum byte HC is ``(xxh32(descriptor) >> 8) & 0xFF``; Kafka before KIP-57 hashed the 4 magic
  bytes too, and magic-0 message sets keep that broken value. We write the broken HC for magic 0
  and the correct one for magic 1; on read, magic 0 accepts any HC (Kafka ignores it there) and
  magic 1 requires the correct one, as Kafka 0.10 does. Record batches use the magic-1 rules.
- zstd (KIP-110, record batches only): one zstandard frame, level 3 as Kafka's default.

Every failure to decode raises :class:`~protocol.errors.CorruptRecordError` carrying the byte
offset of the wrapper message; no codec library exception escapes.
"""

from __future__ import annotations

import functools
import mmap
import struct
import threading
import zlib
from enum import IntEnum
from typing import TYPE_CHECKING, NamedTuple

import cramjam
import lz4.frame
import zstandard

from protocol.errors import CorruptRecordError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

__all__ = [
    "Codec",
    "LEGACY_CODECS",
    "MAX_DECOMPRESSED_BYTES",
    "compress",
    "decompress",
    "decompress_transient",
    "xxh32",
]


class Codec(IntEnum):
    """Attribute bits 0-2 of a message: the codec of its value."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4  # KIP-110: record batches (magic 2) only


# The codecs message format magic 0 and 1 can hold.
LEGACY_CODECS = (Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4)


_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # xerial SnappyOutputStream's default block size
_I32 = struct.Struct(">i")

_LZ4_MAGIC = b"\x04\x22\x4d\x18"  # 0x184D2204 little-endian

# Kafka has no limit; we refuse wrappers expanding beyond this (CORRUPT_MESSAGE) so that a
# small bomb cannot exhaust the broker's memory. Far above what a producer batch holds.
MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024
_CHUNK = 1 << 20  # decompress in steps so memory follows the output, not the limit
# LZ4 spends at least one input byte per 255 output bytes (a match length's extension bytes),
# so a frame this many times smaller than the limit decompresses in one call without a check.
_LZ4_MAX_RATIO = 255
_LZ4_MAX_HEADER = 19  # magic 4, FLG, BD, content size 8, dictionary id 4, HC

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of ``data``; only used for the few bytes of an LZ4 frame descriptor."""
    n = len(data)
    i = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed & _M32
        v4 = (seed - _P1) & _M32
        while i + 16 <= n:
            a, b, c, d = struct.unpack_from("<4I", data, i)
            v1 = (_rotl((v1 + a * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl((v2 + b * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl((v3 + c * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl((v4 + d * _P2) & _M32, 13) * _P1) & _M32
            i += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while i + 4 <= n:
        (w,) = struct.unpack_from("<I", data, i)
        h = (_rotl((h + w * _P3) & _M32, 17) * _P4) & _M32
        i += 4
    while i < n:
        h = (_rotl((h + data[i] * _P5) & _M32, 11) * _P1) & _M32
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


def _gzip_compress(data: Buffer) -> bytes:
    co = zlib.compressobj(6, zlib.DEFLATED, 31)
    return co.compress(data) + co.flush()


def _too_big(limit: int) -> ValueError:
    return ValueError(f"it decompresses to more than {limit} bytes (decompression bomb?)")


def _gzip_decompress(data: Buffer, limit: int) -> bytes:
    parts = []
    total = 0
    rest = bytes(data)
    while True:
        d = zlib.decompressobj(31)
        pending = rest
        while not d.eof:
            chunk = d.decompress(pending, min(limit - total + 1, _CHUNK))
            pending = d.unconsumed_tail
            if not chunk and not pending and not d.eof:
                raise ValueError("gzip stream is truncated")
            total += len(chunk)
            if total > limit:
                raise _too_big(limit)
            parts.append(chunk)
        rest = d.unused_data
        # GZIPInputStream ignores trailing bytes that are not another member header.
        if len(rest) < 2 or rest[:2] != b"\x1f\x8b":
            return b"".join(parts)


def _snappy_compress(data: Buffer) -> bytes:
    out = bytearray(_XERIAL_HEADER)
    mv = memoryview(data)
    for start in range(0, len(mv), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(mv[start : start + _XERIAL_BLOCK]))
        out += _I32.pack(len(block))
        out += block
    return bytes(out)


def _snappy_raw(block: bytes, room: int, limit: int) -> bytes:
    if cramjam.snappy.decompress_raw_len(block) > room:  # the length a raw block declares
        raise _too_big(limit)
    return bytes(cramjam.snappy.decompress_raw(block))


def _is_xerial(data: bytes | memoryview) -> bool:
    return len(data) >= 16 and data[:8] == _XERIAL_MAGIC


def _xerial_blocks(data: bytes | memoryview) -> Iterator[tuple[int, int]]:
    """Where each raw block of a xerial stream lies, ``(start, end)``, in order. Lazily: a
    ValueError for a framing error comes after the blocks before it."""
    pos = 16
    n = len(data)
    while pos < n:
        if data[pos : pos + 8] == _XERIAL_MAGIC:  # concatenated xerial streams
            pos += 16
            continue
        if pos + 4 > n:
            raise ValueError(f"xerial snappy block length truncated at {pos}")
        (length,) = _I32.unpack_from(data, pos)
        pos += 4
        if length < 0 or pos + length > n:
            raise ValueError(
                f"xerial snappy block of {length} bytes at {pos - 4} overruns the {n}-byte stream"
            )
        yield pos, pos + length
        pos += length


def _snappy_decompress(data: Buffer, limit: int) -> bytes:
    data = bytes(data)
    if not _is_xerial(data):
        return _snappy_raw(data, limit, limit)
    parts = []
    total = 0
    for start, end in _xerial_blocks(data):
        parts.append(_snappy_raw(data[start:end], limit - total, limit))
        total += len(parts[-1])
    return b"".join(parts)


def _lz4_hc_position(flg: int) -> int:
    """Where the header checksum byte is: after magic(4) FLG BD, the content size (8) and the
    dictionary id (4) when FLG announces them."""
    return 6 + (8 if flg & _LZ4_CONTENT_SIZE else 0) + (4 if flg & _LZ4_DICT_ID else 0)


@functools.lru_cache(maxsize=64)
def _lz4_header_checksum(descriptor: bytes) -> int:
    """The HC byte over ``descriptor`` (FLG through the dictionary id; magic 0 hashed the
    magic number too). Cached: a producer writes the same few descriptors into every batch,
    and xxh32 in Python costs several µs a request."""
    return (xxh32(descriptor) >> 8) & 0xFF


def _lz4_compress(data: Buffer, magic: int) -> bytes:
    # The buffer as it is: lz4 reads it without the GIL, and a copy here would hold it.
    frame: bytes = lz4.frame.compress(
        data,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )
    if magic != 0:
        return frame
    # Descriptor is magic(4) FLG BD HC; Kafka < 0.10 hashed the magic bytes too.
    return frame[:6] + bytes([_lz4_header_checksum(frame[0:6])]) + frame[7:]


def _lz4_decompress(data: bytes | bytearray | memoryview, magic: int, limit: int) -> bytes:
    head = bytes(data[:_LZ4_MAX_HEADER])
    if len(head) < 7 or head[0:4] != _LZ4_MAGIC:
        raise ValueError("not an LZ4 frame (bad magic number)")
    flg = head[4]
    hc_pos = _lz4_hc_position(flg)
    if len(head) <= hc_pos:
        raise ValueError("LZ4 frame descriptor truncated")
    correct = _lz4_header_checksum(head[4:hc_pos])
    frame = data
    if head[hc_pos] != correct:
        if magic != 0:
            broken = _lz4_header_checksum(head[0:hc_pos])
            hint = (
                " (it is the pre-KIP-57 checksum, valid only in magic-0 message sets)"
                if head[hc_pos] == broken
                else ""
            )
            raise ValueError(
                f"LZ4 frame header checksum 0x{head[hc_pos]:02x} is wrong, "
                f"expected 0x{correct:02x}{hint}"
            )
        frame = bytearray(data)
        frame[hc_pos] = correct
    if len(frame) * _LZ4_MAX_RATIO <= limit:
        whole: bytes = lz4.frame.decompress(frame)  # cannot exceed the limit: one call, one buffer
        return whole
    d = lz4.frame.LZ4FrameDecompressor()
    parts = []
    total = 0
    pending = bytes(frame)
    while not d.eof:
        chunk = d.decompress(pending, max_length=min(limit - total + 1, _CHUNK))
        pending = b""
        if not chunk and d.needs_input and not d.eof:
            raise ValueError("LZ4 frame is truncated")
        total += len(chunk)
        if total > limit:
            raise _too_big(limit)
        parts.append(chunk)
    return b"".join(parts)


# The most output one input byte can give, for codecs whose frames do not bound it themselves:
# DEFLATE codes a 258-byte match in as few as 2 bits (1032:1); snappy's densest element is a
# 3-byte copy of 64 bytes.
_GZIP_MAX_RATIO = 1032
_SNAPPY_MAX_RATIO = 64 / 3
# LZ4 frame descriptor: BD bits 4-6 name the largest block; FLG bit 4 adds a 4-byte checksum to
# every block, bit 2 one to the frame; a block size's top bit marks a stored block.
_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}
_LZ4_BLOCK_CHECKSUM = 0x10
_LZ4_CONTENT_SIZE = 0x08
_LZ4_CONTENT_CHECKSUM = 0x04
_LZ4_DICT_ID = 0x01
_LZ4_STORED_BLOCK = 0x80000000
# FLG of the frames decompress_transient decodes itself: version 01, independent blocks; no
# block or content checksum, reserved bit or dictionary (a content size is allowed). BD: only
# bits 4-6 (the block size) may be set.
_LZ4_PLAIN_MASK = 0xF7
_LZ4_PLAIN = 0x60
_LZ4_BD_RESERVED = 0x8F
_U32_LE = struct.Struct("<I")
_U64_LE = struct.Struct("<Q")


class _Lz4Frame(NamedTuple):
    """One LZ4 frame's layout, read from its headers: ``hc`` is the header checksum's position,
    ``blocks`` each block's data position and size word (top bit: stored)."""

    flg: int
    bd: int
    hc: int
    block_max: int
    blocks: list[tuple[int, int]]

    @property
    def size_bound(self) -> int:
        """The most its blocks can hold: as many as there are, each at most ``block_max``."""
        return len(self.blocks) * self.block_max


def _lz4_frame(data: bytes | bytearray | memoryview) -> _Lz4Frame | None:
    """The layout of ``data`` walking the block headers only; None unless it is exactly one
    frame."""
    n = len(data)
    if n < 7 or bytes(data[0:4]) != _LZ4_MAGIC:
        return None
    flg, bd = data[4], data[5]
    block_max = _LZ4_BLOCK_MAX.get((bd >> 4) & 0x07)
    if block_max is None:
        return None
    hc = _lz4_hc_position(flg)
    pos = hc + 1
    trailer = 4 if flg & _LZ4_BLOCK_CHECKSUM else 0
    blocks: list[tuple[int, int]] = []
    while pos + 4 <= n:
        (word,) = _U32_LE.unpack_from(data, pos)
        pos += 4
        if word == 0:  # end mark
            pos += 4 if flg & _LZ4_CONTENT_CHECKSUM else 0
            return _Lz4Frame(flg, bd, hc, block_max, blocks) if pos == n else None
        blocks.append((pos, word))
        pos += (word & ~_LZ4_STORED_BLOCK) + trailer
    return None


def _lz4_size_bound(data: bytes | bytearray | memoryview) -> int | None:
    """Blocks times the frame's largest block; None unless the bytes are exactly one frame."""
    frame = _lz4_frame(data)
    return None if frame is None else frame.size_bound


# decompress_transient's per-thread output buffers (worker threads end after 10 s idle, and
# their buffers with them): a bytearray up to 2 MiB, an anonymous mmap beyond, grown to the
# largest output up to 64 MiB; a larger one gets an mmap of its own. An mmap because its pages
# are faulted in by the decompressor, which has left the GIL, and unmapped without the GIL
# too: bytearray(50 MB) zero-fills with the GIL held (about 20 ms here), and freeing a 50 MB
# buffer holds it 1.5-3 ms, all of it time the event loop cannot run.
_TRANSIENT_KEPT_BYTES = 2 << 20
_TRANSIENT_MAPPED_KEPT_BYTES = 64 << 20
_transient = threading.local()


def decompress_transient(
    codec: int,
    data: bytes | bytearray | memoryview,
    magic: int,
    *,
    position: int = 0,
    max_bytes: int = MAX_DECOMPRESSED_BYTES,
) -> bytes | memoryview:
    """:func:`decompress`, for a reader done with the answer before its thread calls again (the
    native record scan, which keeps nothing).

    An LZ4 frame as every Kafka client writes it (independent blocks, no checksums besides the
    header's) whose blocks bound its output within ``max_bytes`` is decompressed block by block
    into a buffer the calling thread reuses, each block capped at the frame's block size. That
    takes about 60% of ``lz4.frame.decompress``'s time, which grows and copies its output when
    the frame does not declare its size. So are a zstd frame that declares its size, snappy,
    raw or xerial, and a gzip stream of one member (:func:`_zstd_into`, :func:`_snappy_into`,
    :func:`_gzip_into`). Any other input, and anything these paths do not accept whole, goes
    to :func:`decompress`, which raises its precise error.
    """
    if codec == Codec.LZ4:
        view = memoryview(data)
        frame = _lz4_frame(view)
        if (
            frame is not None
            and frame.flg & _LZ4_PLAIN_MASK == _LZ4_PLAIN
            and frame.bd & _LZ4_BD_RESERVED == 0
            and frame.size_bound <= max_bytes
        ):
            out = _lz4_blocks(view, frame, _transient_buffer(frame.size_bound))
            if out is not None:
                return out
    elif codec == Codec.ZSTD and magic >= 2:
        out = _zstd_into(data, max_bytes)
        if out is not None:
            return out
    elif codec == Codec.SNAPPY:
        out = _snappy_into(data, max_bytes)
        if out is not None:
            return out
    elif codec == Codec.GZIP:
        out = _gzip_into(data, max_bytes)
        if out is not None:
            return out
    return decompress(codec, data, magic, position=position, max_bytes=max_bytes)


def _lz4_blocks(
    data: memoryview, frame: _Lz4Frame, buf: bytearray | mmap.mmap
) -> memoryview | None:
    """``frame``'s content decoded into ``buf``; None when liblz4 refuses a block, or when the
    header checksum, a block's size or the declared content size is wrong."""
    if _lz4_header_checksum(bytes(data[4 : frame.hc])) != data[frame.hc]:
        return None
    out = memoryview(buf)
    block_max = frame.block_max
    total = 0
    for start, word in frame.blocks:
        size = word & ~_LZ4_STORED_BLOCK
        if size > block_max:
            return None
        block = data[start : start + size]
        if word & _LZ4_STORED_BLOCK:
            out[total : total + size] = block
            total += size
            continue
        try:
            total += cramjam.lz4.decompress_block_into(
                block, out[total : total + block_max], block_max
            )
        except cramjam.DecompressionError:
            return None
    if frame.flg & _LZ4_CONTENT_SIZE and _U64_LE.unpack_from(data, 6)[0] != total:
        return None
    return out[:total]


def _zstd_into(data: bytes | bytearray | memoryview, limit: int) -> memoryview | None:
    """A zstd frame that declares its size (within ``limit``) decoded into the thread's
    transient buffer: about 40% of ``decompress``'s time for a 50 MB batch, and no 50 MB
    buffer allocated and freed (freeing one holds the GIL for 1.5-3 ms). None when the frame
    does not declare its size or its content is not exactly that: :func:`decompress` decides.
    Like ``decompress``, only the first frame is read."""
    try:
        declared = zstandard.frame_content_size(data)
    except zstandard.ZstdError:
        return None
    if declared < 0 or declared > limit:
        return None
    out = memoryview(_transient_buffer(declared + 1))  # room for one byte too many
    total = 0
    try:
        with _zstd_decompressor().stream_reader(data, read_size=_ZSTD_READ_BYTES) as reader:
            while total <= declared:
                got = reader.readinto(out[total : declared + 1])
                if not got:
                    break
                total += got
    except zstandard.ZstdError:
        return None
    return out[:total] if total == declared else None


# A gzip member is fed to zlib this many bytes at a time: each call's output is then at most
# _GZIP_MAX_RATIO times as much (about 16 MiB), even for a decompression bomb.
_GZIP_INPUT_STEP = 16 << 10


def _gzip_into(data: bytes | bytearray | memoryview, limit: int) -> memoryview | None:
    """A gzip stream of one member (as Kafka clients write) decoded by zlib into the thread's
    transient buffer, sized by the member's ISIZE (its last 4 bytes: the size mod 2**32). zlib
    inflates without the GIL; what needs it here is copying each step's output, 0.1-1 ms, where
    :func:`decompress` copies the input and joins the whole output holding it (about 10 ms for
    a 50 MB batch). zlib decodes, so this accepts exactly what :func:`decompress` accepts. None
    when ISIZE is above ``limit``, zlib refuses the stream, or it is not one member of ISIZE
    bytes that ends the input: :func:`decompress` then decides."""
    view = memoryview(data)
    n = len(view)
    if n < 18:  # a member's header (10 bytes at least) and its trailer (CRC-32, ISIZE)
        return None
    (isize,) = _U32_LE.unpack_from(view, n - 4)
    if isize > limit:
        return None
    out = memoryview(_transient_buffer(isize))
    d = zlib.decompressobj(31)
    total = 0
    try:
        for start in range(0, n, _GZIP_INPUT_STEP):
            chunk = d.decompress(view[start : start + _GZIP_INPUT_STEP])
            if total + len(chunk) > isize:
                return None
            out[total : total + len(chunk)] = chunk
            total += len(chunk)
            if d.eof:
                break
    except zlib.error:
        return None
    if not d.eof or d.unused_data or start + _GZIP_INPUT_STEP < n or total != isize:
        return None
    return out[:total]


def _snappy_into(data: bytes | bytearray | memoryview, limit: int) -> memoryview | None:
    """Snappy, raw or xerial, decoded block by block into the thread's transient buffer, sized
    by the lengths the blocks declare: cramjam decodes into it without the GIL, where
    :func:`decompress` copies the input and joins the blocks with the GIL held (for a 50 MB batch:
    130 ms, the event loop held up to 10 ms; here 53 ms, 3-4 ms, the walk over 1,500 xerial
    blocks' headers). None at a framing error, a corrupt block or an output beyond ``limit``:
    :func:`decompress` then raises its precise error."""
    view = memoryview(data)
    try:
        blocks = list(_xerial_blocks(view)) if _is_xerial(view) else [(0, len(view))]
        sizes = [cramjam.snappy.decompress_raw_len(view[start:end]) for start, end in blocks]
    except (ValueError, cramjam.DecompressionError):
        return None
    total = sum(sizes)
    if total > limit:
        return None
    out = memoryview(_transient_buffer(total))
    pos = 0
    for (start, end), size in zip(blocks, sizes):
        try:
            cramjam.snappy.decompress_raw_into(view[start:end], out[pos : pos + size])
        except cramjam.DecompressionError:
            return None
        pos += size
    return out[:total]


def _transient_buffer(size: int) -> bytearray | mmap.mmap:
    """A writable buffer of at least ``size`` bytes, the calling thread's own; what it held
    before is overwritten."""
    if size > _TRANSIENT_MAPPED_KEPT_BYTES:
        return mmap.mmap(-1, size)
    if size > _TRANSIENT_KEPT_BYTES:
        mapped: mmap.mmap | None = getattr(_transient, "mapped", None)
        if mapped is None or len(mapped) < size:
            # Dropped, not closed: a view of the old one may still be alive.
            mapped = _transient.mapped = mmap.mmap(-1, size)
        return mapped
    buf: bytearray | None = getattr(_transient, "buf", None)
    if buf is None:
        buf = _transient.buf = bytearray(_TRANSIENT_KEPT_BYTES)
    return buf


def decompressed_size_bound(codec: int, data: bytes | bytearray | memoryview) -> int | None:
    """The most :func:`decompress` can return for ``data`` (a batch's records, magic 2) without
    raising, read from the codec's limits and the frame's headers without decompressing; None
    when nothing short of decompressing bounds it (a zstd frame that does not declare its size,
    bytes that are not one LZ4 frame, an unknown codec)."""
    if codec == Codec.NONE:
        return len(data)
    if codec == Codec.GZIP:
        return len(data) * _GZIP_MAX_RATIO
    if codec == Codec.SNAPPY:
        return int(len(data) * _SNAPPY_MAX_RATIO) + 1
    if codec == Codec.LZ4:
        return _lz4_size_bound(data)
    if codec == Codec.ZSTD:
        try:  # a zstd frame header is at most 18 bytes
            declared = zstandard.frame_content_size(bytes(data[:18]))
        except zstandard.ZstdError:
            return None
        return declared if declared >= 0 else None
    return None


# zstandard's (de)compressors must not be used by two threads at once: shared, concurrent
# decompressions returned wrong bytes and concurrent compressions crashed the process. Each
# thread (the event loop's, each worker's) gets its own.
_zstd = threading.local()
ZSTD_LEVEL = 3  # Kafka's default zstd level
_ZSTD_READ_BYTES = 1 << 20  # compressed bytes _zstd_into hands zstd at a time


def _zstd_compressor() -> zstandard.ZstdCompressor:
    c: zstandard.ZstdCompressor | None = getattr(_zstd, "compressor", None)
    if c is None:
        c = _zstd.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return c


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    d: zstandard.ZstdDecompressor | None = getattr(_zstd, "decompressor", None)
    if d is None:
        d = _zstd.decompressor = zstandard.ZstdDecompressor()
    return d


def _zstd_decompress(data: bytes | bytearray | memoryview, limit: int) -> bytes:
    # A frame that declares its size is allocated at that size: check it first, so a bomb
    # never gets memory; one that does not is cut off at the limit (an error then). zstandard
    # reads any buffer: a copy of a 30 MB batch as bytes would hold the GIL for about 5 ms.
    declared = zstandard.frame_content_size(data)
    if declared > limit:
        raise _too_big(limit)
    return _zstd_decompressor().decompress(data, max_output_size=limit)


def compress(codec: Codec, data: Buffer, magic: int) -> bytes:
    """Compress ``data`` (an inner message set) as Kafka's Java client would for ``magic``."""
    if codec == Codec.GZIP:
        return _gzip_compress(data)
    if codec == Codec.SNAPPY:
        return _snappy_compress(data)
    if codec == Codec.LZ4:
        return _lz4_compress(data, magic)
    if codec == Codec.ZSTD and magic >= 2:
        return _zstd_compressor().compress(memoryview(data))
    raise ValueError(f"cannot compress with codec {codec!r}")


def decompress(
    codec: int,
    data: bytes | bytearray | memoryview,
    magic: int,
    *,
    position: int = 0,
    max_bytes: int = MAX_DECOMPRESSED_BYTES,
) -> bytes:
    """Decompress a wrapper's value.

    Raises :class:`CorruptRecordError` (``offset=position``, the wrapper's byte offset) for an
    unknown codec, bytes the codec cannot decode, or output above ``max_bytes`` (checked while
    decompressing, so a bomb never gets allocated).
    """
    try:
        if codec == Codec.GZIP:
            return _gzip_decompress(data, max_bytes)
        if codec == Codec.SNAPPY:
            return _snappy_decompress(data, max_bytes)
        if codec == Codec.LZ4:
            return _lz4_decompress(data, magic, max_bytes)
        if codec == Codec.ZSTD and magic >= 2:
            return _zstd_decompress(data, max_bytes)
    except Exception as exc:  # every codec library has its own error types
        name = Codec(codec).name.lower()
        raise CorruptRecordError(
            f"message at byte {position}: cannot decompress its {name} value: {exc}",
            offset=position,
        ) from exc
    raise CorruptRecordError(
        f"message at byte {position}: unknown compression codec {codec} in attributes",
        offset=position,
    )
