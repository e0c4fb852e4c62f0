"""The framing every message format shares: a message set's entries, read shallowly.

A log segment or a fetch response is a sequence of entries, each starting with
``offset int64, size int32`` (LOG_OVERHEAD, 12 bytes) and holding a message of magic 0 or 1
(:mod:`protocol.legacy`) or a record batch of magic 2 (:mod:`protocol.recordbatch`, KIP-98),
whose magic byte sits 16 bytes into the entry in every format. :func:`iter_shallow` walks the
entries without CRC checks or decompression, yielding a :class:`ShallowEntry` per entry for the
readers of each format to open. Attribute bits 0-2 hold the codec in every magic, bit 3 the
timestamp type in magic 1 and 2.

Buffers may be ``bytes``, ``bytearray``, ``memoryview`` or ``mmap``; iterators release their
memoryview when they finish or are closed, so an mmap can be closed afterwards. Malformed input
raises :class:`CorruptRecordError` with the byte offset of the bad entry; nothing else escapes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Iterator, NamedTuple

from protocol import recordbatch as rb
from protocol.compression import Codec
from protocol.errors import CorruptRecordError

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12


class TimestampType(IntEnum):
    """Attribute bit 3 of a magic-1 message or a v2 batch."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


NO_TIMESTAMP = -1

LOG_OVERHEAD = 12

MIN_MESSAGE_SIZE = 14

# Message size without key and value bytes, by magic.
MESSAGE_OVERHEAD = (14, 22)

CODEC_MASK = 0x07

TIMESTAMP_TYPE_BIT = 0x08

_LOG_HEADER = struct.Struct(">qi")  # offset, size

_MSG_HEADER = struct.Struct(">Ibb")  # crc, magic, attributes (at entry + 12)

I64 = struct.Struct(">q")

I32 = struct.Struct(">i")

U32 = struct.Struct(">I")

# crc, attributes, lastOffsetDelta, baseTimestamp, maxTimestamp of a v2 batch (at entry + 17)
_V2_FIELDS = struct.Struct(">Ihiqq")


class ShallowEntry(NamedTuple):
    """One top-level entry of a message set, read without CRC check or decompression.

    ``position`` is where its 12-byte log overhead starts, ``size`` the message size (the
    entry is ``12 + size`` bytes). ``offset`` is the entry's last offset: a message's own, a
    compressed wrapper's (its last inner offset, KIP-31), a v2 batch's baseOffset +
    lastOffsetDelta. ``timestamp`` is a magic-1 message's, a v2 batch's maxTimestamp, else
    ``NO_TIMESTAMP``. For a v2 batch ``attributes`` is its int16 attributes and ``crc`` its
    CRC-32C.
    """

    offset: int
    position: int
    size: int
    magic: int
    attributes: int
    timestamp: int
    crc: int

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic >= 1 and self.attributes & TIMESTAMP_TYPE_BIT:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def next_position(self) -> int:
        return self.position + LOG_OVERHEAD + self.size


@dataclass(frozen=True, slots=True)
class Message:
    """A logical message as a consumer sees it.

    ``offset`` is absolute; ``timestamp``/``timestamp_type`` are the wrapper's when the wrapper
    says LogAppendTime; magic-0 messages have ``NO_TIMESTAMP`` and ``CREATE_TIME``. ``codec``
    is the codec of the wrapper the message came from (``NONE`` for a top-level message), or
    of the record batch. ``headers`` (key, value) pairs exist in record batches only.
    """

    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    magic: int
    codec: Codec
    headers: rb.Headers = ()


def view(buf: Buffer) -> memoryview:
    mv = memoryview(buf)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def iter_shallow(buf: Buffer, position: int = 0) -> Iterator[ShallowEntry]:
    """Yield the top-level entries of ``buf`` from byte ``position``.

    Stops silently at an incomplete trailing entry (fewer bytes left than its size says, as
    fetch responses and crashed appends leave). Raises :class:`CorruptRecordError` for a size
    below 14 bytes, a magic-1 message too small to hold its timestamp, or a v2 batch shorter
    than its header. Other magics are yielded (``timestamp`` -1) for the caller to refuse. No
    CRC check, no decompression.
    """
    mv = view(buf)
    try:
        n = len(mv)
        pos = position
        unpack_log = _LOG_HEADER.unpack_from
        unpack_msg = _MSG_HEADER.unpack_from
        unpack_ts = I64.unpack_from
        unpack_v2 = _V2_FIELDS.unpack_from
        while pos + LOG_OVERHEAD <= n:
            offset, size = unpack_log(mv, pos)
            if size < MIN_MESSAGE_SIZE:
                raise CorruptRecordError(
                    f"entry at byte {pos} (offset {offset}) has size {size}, below the "
                    f"{MIN_MESSAGE_SIZE}-byte minimum message",
                    offset=pos,
                )
            end = pos + LOG_OVERHEAD + size
            if end > n:
                return
            crc, magic, attributes = unpack_msg(mv, pos + LOG_OVERHEAD)
            if magic == rb.MAGIC:
                if size < rb.MIN_BATCH_LENGTH:
                    raise CorruptRecordError(
                        f"record batch at byte {pos} (base offset {offset}) has length {size}, "
                        f"below the {rb.MIN_BATCH_LENGTH}-byte batch header",
                        offset=pos,
                    )
                crc, attributes, last_delta, _, timestamp = unpack_v2(mv, pos + rb.CRC_OFFSET)
                yield ShallowEntry(
                    offset + last_delta, pos, size, magic, attributes, timestamp, crc
                )
                pos = end
                continue
            if magic == 1:
                if size < MESSAGE_OVERHEAD[1]:
                    raise CorruptRecordError(
                        f"entry at byte {pos} (offset {offset}) has size {size}, below the "
                        f"{MESSAGE_OVERHEAD[1]}-byte minimum of a magic-1 message",
                        offset=pos,
                    )
                (timestamp,) = unpack_ts(mv, pos + 18)
            else:
                timestamp = NO_TIMESTAMP
            yield ShallowEntry(offset, pos, size, magic, attributes, timestamp, crc)
            pos = end
    finally:
        mv.release()
