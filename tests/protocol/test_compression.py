"""Codecs against kafka-python's codec module, python-snappy and xxhash as oracles."""

from __future__ import annotations

import gzip
import random
import struct
import threading
import zlib

import cramjam
import lz4.block
import lz4.frame
import pytest
import xxhash
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kp

from protocol.compression import (
    Codec,
    compress,
    decompress,
    decompress_transient,
    decompressed_size_bound,
    xxh32,
)
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


# -- decompress_transient: decompress's answer or its error, faster for clients' frames ----------


def _answer(fn, frame, **kw):
    try:
        return bytes(fn(Codec.LZ4, frame, 2, **kw))
    except CorruptRecordError:
        return None


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.binary(max_size=300_000), _compressible))
def test_transient_answer_is_the_payload(payload):
    for frame in _lz4_frames(payload):
        assert bytes(decompress_transient(Codec.LZ4, frame, 2)) == payload


def test_clients_frames_are_decoded_block_by_block():
    """Java's and librdkafka's frames (independent blocks, no content size) and kafka-python's
    (with a content size) are decoded into the thread's buffer; linked or checksummed frames,
    and anything that is not one frame, by decompress."""
    payload = bytes(range(256)) * 4000
    librdkafka_like = compress(Codec.LZ4, payload, 2)
    assert librdkafka_like[4] == 0x60  # FLG: version 01, independent blocks, nothing else
    for frame in (librdkafka_like, kp.lz4_encode(payload)):
        got = decompress_transient(Codec.LZ4, frame, 2)
        assert isinstance(got, memoryview) and bytes(got) == payload
    for frame in (
        lz4.frame.compress(payload, block_linked=True),
        lz4.frame.compress(payload, block_linked=False, content_checksum=True),
        lz4.frame.compress(payload, block_linked=False, block_checksum=True),
        librdkafka_like + b"\x00",
    ):
        assert _answer(decompress_transient, frame) == _answer(decompress, frame)
        if _answer(decompress, frame) is not None:
            assert isinstance(decompress_transient(Codec.LZ4, frame, 2), bytes)


_header_or_anywhere = st.one_of(st.integers(0, 24), st.integers(0, 1 << 20))


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(st.binary(min_size=1, max_size=200_000), _compressible),
    st.sampled_from([lambda p: compress(Codec.LZ4, p, 2), kp.lz4_encode]),
    st.lists(st.tuples(_header_or_anywhere, st.integers(1, 255)), min_size=1, max_size=3),
    st.one_of(st.none(), st.integers(0, 1 << 20)),
)
def test_transient_accepts_exactly_what_decompress_accepts(payload, encode, flips, cut):
    """Damaged frames (bytes flipped in the descriptor, block sizes or data; cut short): the
    block path answers what decompress answers, or refuses with its error."""
    frame = bytearray(encode(payload))
    for pos, xor in flips:
        frame[pos % len(frame)] ^= xor
    if cut is not None:
        frame = frame[: cut % len(frame)]
    assert _answer(decompress_transient, bytes(frame)) == _answer(decompress, bytes(frame))


def test_transient_limit_and_oversized_block_are_decompress_errors():
    payload = bytes(range(256)) * 4000
    frame = compress(Codec.LZ4, payload, 2)
    with pytest.raises(CorruptRecordError, match="more than"):
        decompress_transient(Codec.LZ4, frame, 2, max_bytes=len(payload) - 1, position=3)


def _frame(
    blocks: list[tuple[int, bytes]],
    flg: int = 0x60,
    bd: int = 0x40,
    content_size: int | None = None,
):
    """An LZ4 frame (64 KiB blocks unless ``bd`` says otherwise) with a correct header checksum,
    whatever it says: ``blocks`` are (size word, data)."""
    descriptor = bytes([flg, bd])
    if content_size is not None:
        descriptor += struct.pack("<Q", content_size)
    body = b"".join(struct.pack("<I", word) + data for word, data in blocks)
    hc = bytes([(xxh32(descriptor) >> 8) & 0xFF])
    return b"\x04\x22\x4d\x18" + descriptor + hc + body + b"\x00\x00\x00\x00"


def test_transient_refuses_frames_whose_headers_lie():
    """What LZ4F refuses, the block path refuses too, though each block would decode."""
    zeros = lz4.block.compress(b"\x00" * 200_000, store_size=False)
    noise = bytes(range(256)) * 256 + b"!"  # 65,537 bytes
    incompressible = lz4.block.compress(bytes(random.Random(1).randbytes(65536)), store_size=False)
    assert len(incompressible) > 65536
    payload = b"sized" * 1000
    sized = lz4.block.compress(payload, store_size=False)
    lying = {
        "a block decoding to more than 64 KiB": _frame([(len(zeros), zeros)]),
        "a stored block over 64 KiB": _frame([(len(noise) | 0x80000000, noise)]),
        "a compressed block over 64 KiB": _frame([(len(incompressible), incompressible)]),
        "a reserved bit set in BD": _frame([(len(sized), sized)], bd=0x41),
        "a content size one too many": _frame(
            [(len(sized), sized)], flg=0x68, content_size=len(payload) + 1
        ),
    }
    for what, frame in lying.items():
        assert _answer(decompress, frame) is None, what
        assert _answer(decompress_transient, frame) is None, what
    honest = _frame([(len(sized), sized)], flg=0x68, content_size=len(payload))
    assert bytes(decompress_transient(Codec.LZ4, honest, 2)) == payload


def test_transient_buffers_belong_to_their_thread():
    payloads = [bytes([i]) * 300_000 + bytes(range(256)) * i for i in range(1, 5)]
    frames = [compress(Codec.LZ4, p, 2) for p in payloads]
    wrong = []

    def work(k):
        for _ in range(200):
            for i in (k, (k + 1) % 4):
                if bytes(decompress_transient(Codec.LZ4, frames[i], 2)) != payloads[i]:
                    wrong.append(i)

    _in_threads(work, 4)
    assert wrong == []


def _in_threads(work, count: int) -> None:
    """``work(k)`` for k in 0..count-1, each in a thread of its own, all at once."""
    threads = [threading.Thread(target=work, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _zstd_answer(fn, frame, **kw):
    try:
        return bytes(fn(Codec.ZSTD, frame, 2, **kw))
    except CorruptRecordError:
        return None


@pytest.mark.parametrize("size", [0, 1000, 3 << 20, 70 << 20])  # kept bytearray, kept mmap, own
def test_transient_zstd_is_decoded_into_the_threads_buffer(size):
    payload = bytes(range(256)) * (size // 256)
    frame = compress(Codec.ZSTD, payload, 2)
    for _ in range(2):  # the second call reuses the buffer the first one grew
        got = decompress_transient(Codec.ZSTD, memoryview(frame), 2, max_bytes=80 << 20)
        assert isinstance(got, memoryview) and got == payload
        got.release()


def test_transient_zstd_answers_or_refuses_as_decompress_does():
    payload = bytes(range(256)) * 4000
    sized = compress(Codec.ZSTD, payload, 2)
    unsized = zstandard.ZstdCompressor(write_content_size=False).compress(payload)
    two_frames = compress(Codec.ZSTD, b"first", 2) + compress(Codec.ZSTD, b"second", 2)
    lying = bytearray(sized)
    lying[5] ^= 1  # the declared content size (after magic and frame header descriptor)
    frames = {
        "sized": sized,
        "unsized (decompress decides)": unsized,
        "two frames (the first is read)": two_frames,
        "cut short": sized[:-10],
        "garbage after the magic": sized[:4] + b"\x00" * 40,
        "declared size off by one": bytes(lying),
    }
    for what, frame in frames.items():
        assert _zstd_answer(decompress_transient, frame) == _zstd_answer(decompress, frame), what
    assert _zstd_answer(decompress_transient, sized) == payload
    assert _zstd_answer(decompress_transient, two_frames) == b"first"
    assert _zstd_answer(decompress_transient, sized[:-10]) is None
    with pytest.raises(CorruptRecordError, match="more than"):
        decompress_transient(Codec.ZSTD, sized, 2, max_bytes=len(payload) - 1, position=3)


def test_zstd_from_many_threads_at_once():
    """Worker threads validate, clean and convert at once: with one zstandard (de)compressor
    shared by all, concurrent decompressions returned other threads' bytes and concurrent
    compressions crashed the process."""
    payloads = [bytes([i]) * 200_000 + random.Random(i).randbytes(200_000) for i in range(4)]
    wrong = []

    def work(k):
        for _ in range(50):
            frame = compress(Codec.ZSTD, payloads[k], 2)
            if decompress(Codec.ZSTD, frame, 2) != payloads[k]:
                wrong.append(("decompress", k))
            if bytes(decompress_transient(Codec.ZSTD, frame, 2)) != payloads[k]:
                wrong.append(("transient", k))

    _in_threads(work, 4)
    assert wrong == []


# -- decompress_transient for snappy: decompress's bytes or its error ---------------------------


def _outcome(fn, codec, data, **kw):
    """What ``fn`` answers: the bytes, or the CorruptRecordError's message and offset."""
    try:
        return bytes(fn(codec, data, 2, **kw))
    except CorruptRecordError as exc:
        return ("error", str(exc), exc.offset)


def _same_as_decompress(codec, data, **kw):
    """decompress_transient's outcome, asserted to be decompress's."""
    got = _outcome(decompress_transient, codec, data, position=9, **kw)
    assert got == _outcome(decompress, codec, data, position=9, **kw)
    return got


def _records(size: int, seed: int = 0) -> bytes:
    """``size`` bytes of JSON-like records, a producer's batch: about 3:1 under gzip."""
    rnd = random.Random(seed)
    lines = []
    total = 0
    while total < size:
        line = (
            f'{{"id":{total},"user":"u{rnd.randrange(10**6)}","score":{rnd.random():.6f},'
            f'"tags":["{rnd.choice("abcdef") * rnd.randrange(1, 9)}"]}}\n'
        )
        lines.append(line)
        total += len(line)
    return "".join(lines).encode()[:size]


def _xerial(*blocks: bytes, header: bytes = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)) -> bytes:
    return header + b"".join(struct.pack(">i", len(b)) + b for b in blocks)


@pytest.mark.parametrize("size", [0, 1, 1000, 100_000, 3 << 20])
def test_transient_snappy_is_the_payload(size):
    payload = _records(size)
    framings = {
        "ours (xerial)": compress(Codec.SNAPPY, payload, 2),
        "kafka-python xerial": kp.snappy_encode(payload),
        "raw": kp.snappy_encode(payload, xerial_compatible=False),
    }
    for what, data in framings.items():
        for view in (data, memoryview(b"xx" + data)[2:]):
            got = decompress_transient(Codec.SNAPPY, view, 2)
            assert isinstance(got, memoryview) and got == payload, what


def test_transient_snappy_answers_or_refuses_as_decompress_does():
    payload = _records(100_000)
    ours = compress(Codec.SNAPPY, payload, 2)
    block = bytes(cramjam.snappy.compress_raw(b"block" * 100))
    raw = bytes(cramjam.snappy.compress_raw(payload))
    cases = {
        "xerial": ours,
        "two xerial streams": ours + compress(Codec.SNAPPY, b"tail", 2),
        "header only": ours[:16],
        "magic and less than a header (raw)": ours[:12],
        "an empty block": _xerial(block, b"", block),
        "a negative block length": _xerial(block) + struct.pack(">i", -1),
        "a block overrunning the stream": _xerial(block)[:-1],
        "a truncated block length": _xerial(block) + b"\x00\x00",
        "a bad block": _xerial(block, b"\xff" * 20),
        "a block shorter than it declares": _xerial(block[:-3]),
        "a bad block then a bad length": _xerial(b"\xff" * 20) + b"\x00",
        "raw": raw,
        "raw cut short": raw[:-5],
        "garbage": b"garbage",
        "empty": b"",
    }
    for what, data in cases.items():
        got = _same_as_decompress(Codec.SNAPPY, data)
        if what in ("xerial", "raw"):
            assert got == payload, what
    for limit in (len(payload), len(payload) - 1):
        for data in (ours, raw):
            _same_as_decompress(Codec.SNAPPY, data, max_bytes=limit)


# The transient paths that decode into the thread's buffer themselves, with an encoder each.
_TRANSIENT_ENCODERS = {
    "snappy, xerial": (Codec.SNAPPY, lambda p: kp.snappy_encode(p, xerial_compatible=True)),
    "snappy, raw": (Codec.SNAPPY, lambda p: kp.snappy_encode(p, xerial_compatible=False)),
    "gzip": (Codec.GZIP, lambda p: compress(Codec.GZIP, p, 2)),
}


@pytest.mark.parametrize("encoding", list(_TRANSIENT_ENCODERS))
@settings(max_examples=300, deadline=None)
@given(
    st.one_of(st.binary(max_size=100_000), _compressible),
    st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(1, 255)), min_size=1, max_size=3),
    st.one_of(st.none(), st.integers(0, 1 << 20)),
)
def test_transient_decoding_accepts_exactly_what_decompress_accepts(encoding, payload, flips, cut):
    codec, encode = _TRANSIENT_ENCODERS[encoding]
    data = bytearray(encode(payload))
    for pos, xor in flips:
        data[pos % len(data)] ^= xor
    if cut is not None:
        data = data[: cut % len(data)]
    _same_as_decompress(codec, bytes(data))


@pytest.mark.parametrize("encoding", list(_TRANSIENT_ENCODERS))
def test_transient_decoding_from_many_threads_at_once(encoding):
    codec, encode = _TRANSIENT_ENCODERS[encoding]
    payloads = [_records(300_000 + 1000 * k, seed=k) for k in range(4)]
    streams = [encode(p) for p in payloads]
    wrong = []

    def work(k):
        for _ in range(20):
            for i in (k, (k + 1) % 4):
                if bytes(decompress_transient(codec, streams[i], 2)) != payloads[i]:
                    wrong.append(i)

    _in_threads(work, 4)
    assert wrong == []


# -- decompress_transient for gzip: zlib decodes, into the thread's buffer ----------------------


def _gzip_encoders(payload: bytes) -> dict[str, bytes]:
    return {
        "ours (zlib, wbits 31)": compress(Codec.GZIP, payload, 2),
        "gzip module": gzip.compress(payload, mtime=0),
        "kafka-python": kp.gzip_encode(payload),
        "zlib level 1": zlib.compress(payload, 1, wbits=31),
    }


@pytest.mark.parametrize("size", [0, 1, 1000, 100_000, 3 << 20])  # kept bytearray, kept mmap
def test_transient_gzip_is_the_payload(size):
    payload = _records(size)
    for what, data in _gzip_encoders(payload).items():
        for buffer in (data, memoryview(b"xx" + data)[2:], bytearray(data)):
            assert bytes(decompress_transient(Codec.GZIP, buffer, 2)) == payload, what


def test_transient_gzip_answers_or_refuses_as_decompress_does():
    payload = _records(200_000)
    ours = compress(Codec.GZIP, payload, 2)
    isize_at = len(ours) - 4
    cases = {
        "one member": ours,
        "two members": ours + gzip.compress(b"tail"),
        "trailing bytes": ours + b"\x00\x01",
        "trailing bytes after a long member": ours + b"x" * (20 << 10),
        "ISIZE one less": ours[:isize_at] + struct.pack("<I", len(payload) - 1),
        "ISIZE one more": ours[:isize_at] + struct.pack("<I", len(payload) + 1),
        "a wrong CRC-32": ours[: isize_at - 4] + b"\x00\x00\x00\x00" + ours[isize_at:],
        "cut in the trailer": ours[:-2],
        "cut in the data": ours[: len(ours) // 2],
        "damaged data": ours[:100] + bytes(b ^ 0x55 for b in ours[100:140]) + ours[140:],
        "a header only": ours[:10],
        "garbage": b"garbage that is long enough",
        "empty": b"",
    }
    for what, data in cases.items():
        got = _same_as_decompress(Codec.GZIP, data)
        if what in ("one member", "trailing bytes", "trailing bytes after a long member"):
            assert got == payload, what
    for limit in (len(payload), len(payload) - 1):
        _same_as_decompress(Codec.GZIP, ours, max_bytes=limit)
