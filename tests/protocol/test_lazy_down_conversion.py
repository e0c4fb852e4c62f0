"""Lazy down-conversion (KIP-283, protocol.conversion.LazyDownConversion): the answer a Fetch
v0-v3 reader gets is converted a chunk at a time, holds exactly the size announced before the
rest was converted, and parses, with kafka-python's reader as the independent oracle, into the
same messages a whole conversion gives, up to where it ends: cut inside a message when the
conversion is larger than the stored bytes, filled with Kafka's overflow message when smaller,
and ended there when a later batch is zstd or the stored bytes end early."""

from __future__ import annotations

import struct

import pytest
from kafka.record.memory_records import MemoryRecords

from protocol import recordbatch as rb
from protocol.compression import Codec
from protocol.conversion import CHUNK_READ_BYTES, LazyDownConversion, convert
from protocol.errors import UnsupportedCompressionError

BASE_TS = 1_700_000_000_000


def batches(count: int, per_batch: int, *, codec=Codec.NONE, headers=(), value=b"v" * 50) -> bytes:
    out, offset = [], 0
    for _ in range(count):
        records = [
            (i, BASE_TS + offset + i, b"k%d" % (offset + i), value + b"%d" % (offset + i), headers)
            for i in range(per_batch)
        ]
        out.append(rb.build_batch(rb.BatchSpec(base_offset=offset, codec=codec), records))
        offset += per_batch
    return b"".join(out)


class Reads:
    """``read`` over stored bytes, recording the sizes asked for."""

    def __init__(self, stored: bytes, shrink_to: int | None = None) -> None:
        self.stored = stored if shrink_to is None else stored[:shrink_to]
        self.sizes: list[int] = []

    def __call__(self, position: int, size: int) -> bytes:
        self.sizes.append(size)
        return self.stored[position : position + size]


def send(conversion: LazyDownConversion) -> list[bytes]:
    pieces = []
    while piece := conversion.next_piece():
        pieces.append(piece)
    assert conversion.next_piece() == b""
    return pieces


def parsed(raw: bytes) -> list[tuple]:
    """(offset, key, value, timestamp) of each whole message, as kafka-python reads them: a
    trailing partial message (a cut, or the overflow message) is not returned."""
    records, out = MemoryRecords(raw), []
    while records.has_next():
        batch = records.next_batch()
        if batch is None:
            break
        out += [(r.offset, r.key, r.value, r.timestamp) for r in batch]
    return out


def test_a_range_larger_than_a_chunk_is_converted_a_chunk_at_a_time():
    stored = batches(800, 20)  # about 1.1 MB: nine chunks
    assert len(stored) > 8 * CHUNK_READ_BYTES
    reads = Reads(stored)
    conversion = LazyDownConversion(reads, len(stored), 1)
    assert reads.sizes == [CHUNK_READ_BYTES]  # only the first chunk at construction
    whole = convert(stored, 1)
    assert len(whole) > len(stored)  # magic-1 messages outweigh v2 records here
    pieces = send(conversion)
    raw = b"".join(pieces)
    assert len(raw) == conversion.size == len(stored)  # announced: the stored size
    assert max(len(p) for p in pieces) < 2 * CHUNK_READ_BYTES
    assert max(reads.sizes) == CHUNK_READ_BYTES
    # cut where the announced size ends: the messages before the cut are the whole
    # conversion's, and the reader asks for the next offset next time
    got = parsed(raw)
    assert got == parsed(whole)[: len(got)] and len(got) > 0.7 * 16000
    assert raw == whole[: len(raw)]


def test_a_smaller_conversion_is_filled_with_the_overflow_message():
    # headers are dropped by the conversion: the converted bytes are far fewer than stored
    stored = batches(30, 10, headers=(("h", b"x" * 1000),))
    conversion = LazyDownConversion(Reads(stored), len(stored), 1)
    raw = b"".join(send(conversion))
    whole = convert(stored, 1)
    assert len(whole) < len(stored) == len(raw) == conversion.size
    assert raw[: len(whole)] == whole
    offset, size = struct.unpack_from(">qi", raw, len(whole))
    assert (offset, size) == (-1, len(stored) - len(whole) + 1)  # past the answer's end
    assert parsed(raw) == parsed(whole) and len(parsed(raw)) == 300


def test_a_first_chunk_larger_than_the_stored_bytes_is_sent_whole():
    stored = batches(3, 200, value=b"")  # tiny records: magic 1 is much larger
    conversion = LazyDownConversion(Reads(stored), len(stored), 1)
    whole = convert(stored, 1)
    assert conversion.size == len(whole) > len(stored)
    assert b"".join(send(conversion)) == whole
    assert len(parsed(whole)) == 600


def test_magic_zero_for_the_oldest_readers():
    stored = batches(50, 10, codec=Codec.GZIP)
    raw = b"".join(send(LazyDownConversion(Reads(stored), len(stored), 0)))
    got = parsed(raw)
    assert got and got == parsed(convert(stored, 0))[: len(got)]
    assert all(ts is None for *_, ts in got)  # magic 0 has no timestamps


def test_zstd_first_is_refused_and_zstd_later_ends_the_answer():
    zstd = batches(1, 10, codec=Codec.ZSTD)
    with pytest.raises(UnsupportedCompressionError):
        LazyDownConversion(Reads(zstd), len(zstd), 1)
    head = batches(150, 20, headers=(("h", b"x" * 100),))  # converts smaller: no cut
    later = rb.build_batch(
        rb.BatchSpec(base_offset=3000, codec=Codec.ZSTD),
        [(0, BASE_TS, b"z", b"zstd", ())],
    )
    stored = head + b"".join([later] * 40)  # the zstd batches start past the first chunk
    assert len(head) > CHUNK_READ_BYTES
    conversion = LazyDownConversion(Reads(stored), len(stored), 1)
    raw = b"".join(send(conversion))
    assert len(raw) == conversion.size
    # every record before the zstd batch arrives; the reader then fetches from 3000 and is
    # refused there with UNSUPPORTED_COMPRESSION_TYPE
    assert [o for o, *_ in parsed(raw)] == list(range(3000))


def test_stored_bytes_that_end_early_end_the_answer_at_the_announced_size():
    stored = batches(400, 20)
    reads = Reads(stored, shrink_to=3 * CHUNK_READ_BYTES + 1000)  # truncated meanwhile
    conversion = LazyDownConversion(reads, len(stored), 1)
    raw = b"".join(send(conversion))
    assert len(raw) == conversion.size == len(stored)
    got = parsed(raw)
    whole = parsed(convert(reads.stored, 1))
    assert got == whole[: len(got)] and len(got) >= len(whole) - 20


def test_an_entry_larger_than_a_chunk_is_converted_whole_and_a_cut_last_one_is_not():
    big = batches(1, 3, value=b"b" * (CHUNK_READ_BYTES // 2))
    small = batches(1, 5)
    stored = big + small[: len(small) // 2]  # the range ends inside its last batch
    conversion = LazyDownConversion(Reads(stored), len(stored), 1)
    raw = b"".join(send(conversion))
    assert len(raw) == conversion.size
    assert [o for o, *_ in parsed(raw)] == [0, 1, 2]


def test_control_batches_alone_give_an_overflow_message():
    marker = rb.build_batch(
        rb.BatchSpec(producer_id=7, producer_epoch=0, is_transactional=True, is_control=True),
        [(0, BASE_TS, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", ())],
    )
    conversion = LazyDownConversion(Reads(marker), len(marker), 1)
    assert conversion.size == 12
    raw = b"".join(send(conversion))
    assert struct.unpack(">qi", raw) == (-1, 61) and parsed(raw) == []
