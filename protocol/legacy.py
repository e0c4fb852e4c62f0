"""Magic 0 and 1 messages (Kafka before 0.11): check, read and build them.

The framing they share with record batches is :mod:`protocol.entries`; :mod:`protocol.records`
dispatches over the magics.

Binary layout (all integers big-endian)::

    entry   = offset int64, size int32, message[size]               12 + size bytes
    message = crc uint32, magic int8, attributes int8,
              [timestamp int64 if magic 1],
              key_length int32, key, value_length int32, value      (length -1 = null)

The CRC32 covers magic..end of the message, not the offset or size. Attributes: bits 0-2 codec
(:class:`Codec`), bit 3 timestamp type (magic 1 only). Smallest message: 14 bytes (magic 0, null
key and value); 22 for magic 1. A compressed message (the *wrapper*) has a null key and a value
holding the compressed inner message set. Magic-1 inner offsets are relative, 0..n-1 when written
by a 0.10 producer, and the wrapper carries the absolute offset of the last inner message (KIP-31);
magic-0 inner offsets are absolute. A reader resolves them as
``absolute = wrapper_offset - last_inner_offset + inner_offset``.

Malformed input raises :class:`CorruptRecordError` with the byte offset of the bad entry.
"""

from __future__ import annotations

import struct
import zlib
from typing import TYPE_CHECKING, Iterator, NamedTuple, TypeAlias

from protocol.compression import Codec, compress, decompress
from protocol.entries import (
    I32,
    LOG_OVERHEAD,
    MESSAGE_OVERHEAD,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    U32,
    Message,
    ShallowEntry,
    TimestampType,
    iter_shallow,
    view,
)
from protocol.errors import CorruptRecordError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

# Offset of key_length from the start of an entry, by magic.
KEY_OFFSET = (LOG_OVERHEAD + 6, LOG_OVERHEAD + 14)

ENTRY_V0 = struct.Struct(">qiIbb")  # 18 bytes

ENTRY_V1 = struct.Struct(">qiIbbq")  # 26 bytes

# One magic-0/1 message to build: (absolute offset, timestamp, inner attributes, key, value).
LegacyInput: TypeAlias = tuple[int, int, int, bytes | None, bytes | None]


def check_structure(
    mv: memoryview, pos: int, size: int, magic: int, offset: int
) -> tuple[int, int, int, int]:
    """Check that key and value lengths exactly fill the message; return (key_start, key_length,
    value_start, value_length) with lengths -1 for null."""
    end = pos + LOG_OVERHEAD + size
    p = pos + KEY_OFFSET[magic]
    (klen,) = I32.unpack_from(mv, p)
    p += 4
    if klen < -1 or p + max(klen, 0) + 4 > end:
        raise CorruptRecordError(
            f"entry at byte {pos} (offset {offset}): key length {klen} does not fit in the "
            f"{size}-byte message",
            offset=pos,
        )
    kstart = p
    p += max(klen, 0)
    (vlen,) = I32.unpack_from(mv, p)
    p += 4
    if vlen < -1 or p + max(vlen, 0) != end:
        raise CorruptRecordError(
            f"entry at byte {pos} (offset {offset}): value length {vlen} does not match the "
            f"{size}-byte message ({end - p} bytes left for the value)",
            offset=pos,
        )
    return kstart, klen, p, vlen


def check_message(
    mv: memoryview, entry: ShallowEntry, max_message_bytes: int | None
) -> tuple[int, int, int, int]:
    """Every check of :func:`check_entry`; returns :func:`check_structure`'s result."""
    pos, size, magic, offset = entry.position, entry.size, entry.magic, entry.offset
    if magic not in (0, 1):
        raise CorruptRecordError(
            f"entry at byte {pos} (offset {offset}) has magic {magic}; only message format "
            f"magic 0, 1 and 2 are supported",
            offset=pos,
        )
    if size < MESSAGE_OVERHEAD[magic]:
        raise CorruptRecordError(
            f"entry at byte {pos} (offset {offset}) has size {size}, below the "
            f"{MESSAGE_OVERHEAD[magic]}-byte minimum of a magic-{magic} message",
            offset=pos,
        )
    if max_message_bytes is not None and size > max_message_bytes:
        raise CorruptRecordError(
            f"entry at byte {pos} (offset {offset}) has size {size}, above max.message.bytes "
            f"{max_message_bytes}",
            offset=pos,
        )
    end = pos + LOG_OVERHEAD + size
    if end > len(mv):
        raise CorruptRecordError(
            f"entry at byte {pos} (offset {offset}) of size {size} is truncated: the buffer "
            f"ends at byte {len(mv)}",
            offset=pos,
        )
    crc = zlib.crc32(mv[pos + 16 : end])
    if crc != entry.crc:
        raise CorruptRecordError(
            f"entry at byte {pos} (offset {offset}) fails its CRC check: stored "
            f"0x{entry.crc:08x}, computed 0x{crc:08x}",
            offset=pos,
        )
    return check_structure(mv, pos, size, magic, offset)


def _inner_entries(mv: memoryview, entry: ShallowEntry) -> tuple[bytes, list[ShallowEntry]]:
    """Decompress a wrapper and return (inner bytes, inner entries), checking nesting rules."""
    pos, offset, magic = entry.position, entry.offset, entry.magic
    _, klen, vstart, vlen = check_structure(mv, pos, entry.size, magic, offset)
    if vlen < 0:
        raise CorruptRecordError(
            f"compressed message at byte {pos} (offset {offset}) has a null value", offset=pos
        )
    inner = decompress(entry.codec, mv[vstart : vstart + vlen], magic, position=pos)
    try:
        entries = list(iter_shallow(inner))
    except CorruptRecordError as exc:
        raise CorruptRecordError(
            f"compressed message at byte {pos} (offset {offset}): inner {exc}", offset=pos
        ) from exc
    consumed = entries[-1].next_position if entries else 0
    if consumed != len(inner):
        raise CorruptRecordError(
            f"compressed message at byte {pos} (offset {offset}): decompressed inner message "
            f"set has {len(inner) - consumed} trailing bytes of an incomplete entry "
            f"at inner byte {consumed}",
            offset=pos,
        )
    if not entries:
        raise CorruptRecordError(
            f"compressed message at byte {pos} (offset {offset}) holds no messages", offset=pos
        )
    for e in entries:
        if e.codec != Codec.NONE:
            raise CorruptRecordError(
                f"compressed message at byte {pos} (offset {offset}) holds a compressed inner "
                f"message at inner byte {e.position}; only one level of compression is legal",
                offset=pos,
            )
        if e.magic != magic:
            raise CorruptRecordError(
                f"compressed message at byte {pos} (offset {offset}) has magic {magic} but its "
                f"inner message at inner byte {e.position} has magic {e.magic}",
                offset=pos,
            )
    return inner, entries


class DeepMessage(NamedTuple):
    """One message of a magic-0/1 entry as :func:`iter_legacy` yields it: a :class:`Message` plus
    what a validator needs of it as sent."""

    offset: int  # absolute (KIP-31 relative offsets resolved)
    timestamp: int  # the wrapper's under LogAppendTime
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    magic: int
    codec: Codec  # of the wrapper it came from; NONE at top level
    attributes: int  # the message's own (inner) attributes
    stored_offset: int  # as stored: relative to its wrapper for magic 1

    def as_message(self) -> Message:
        return Message(
            self.offset,
            self.timestamp,
            self.timestamp_type,
            self.key,
            self.value,
            self.magic,
            self.codec,
        )


def iter_legacy(mv: memoryview, entry: ShallowEntry, check_crc: bool) -> Iterator[DeepMessage]:
    """Every message of one magic-0/1 shallow entry (decompressed when it is a wrapper)."""
    magic = entry.magic
    if magic not in (0, 1):
        check_message(mv, entry, None)  # raises with the magic in the message
    codec = entry.codec
    if codec == Codec.NONE:
        if check_crc:
            kstart, klen, vstart, vlen = check_message(mv, entry, None)
        else:
            kstart, klen, vstart, vlen = check_structure(
                mv, entry.position, entry.size, magic, entry.offset
            )
        key = None if klen < 0 else mv[kstart : kstart + klen].tobytes()
        value = None if vlen < 0 else mv[vstart : vstart + vlen].tobytes()
        yield DeepMessage(
            entry.offset,
            entry.timestamp,
            entry.timestamp_type,
            key,
            value,
            magic,
            Codec.NONE,
            entry.attributes,
            entry.offset,
        )
        return
    if codec > Codec.LZ4:
        raise CorruptRecordError(
            f"message at byte {entry.position} (offset {entry.offset}): unknown compression "
            f"codec {codec} in attributes",
            offset=entry.position,
        )
    if check_crc:
        check_message(mv, entry, None)
    inner, entries = _inner_entries(mv, entry)
    wrapper_lat = entry.timestamp_type == TimestampType.LOG_APPEND_TIME
    base = entry.offset - entries[-1].offset if magic == 1 else 0
    imv = memoryview(inner)
    for e in entries:
        if check_crc:
            try:
                kstart, klen, vstart, vlen = check_message(imv, e, None)
            except CorruptRecordError as exc:
                raise CorruptRecordError(
                    f"compressed message at byte {entry.position} (offset {entry.offset}): "
                    f"inner {exc}",
                    offset=entry.position,
                ) from exc
        else:
            kstart, klen, vstart, vlen = check_structure(imv, e.position, e.size, magic, e.offset)
        key = None if klen < 0 else imv[kstart : kstart + klen].tobytes()
        value = None if vlen < 0 else imv[vstart : vstart + vlen].tobytes()
        # Readers take the type from the wrapper alone; inner type bits are ignored.
        if wrapper_lat:
            ts, tst = entry.timestamp, TimestampType.LOG_APPEND_TIME
        else:
            ts, tst = e.timestamp, TimestampType.CREATE_TIME
        yield DeepMessage(
            base + e.offset, ts, tst, key, value, magic, Codec(codec), e.attributes, e.offset
        )


def deep_messages(buf: Buffer, entry: ShallowEntry) -> list[DeepMessage]:
    """The messages of one magic-0/1 entry of ``buf`` (from :func:`iter_shallow`), decompressed
    when it is a wrapper, with their stored attributes; what a cleaner filters. Raises
    :class:`CorruptRecordError` as :func:`iter_deep` does; CRCs are not checked."""
    mv = view(buf)
    try:
        return list(iter_legacy(mv, entry, False))
    finally:
        mv.release()


def append_message(
    out: bytearray,
    offset: int,
    magic: int,
    attributes: int,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
) -> None:
    """Append one entry to ``out`` with a correct CRC."""
    klen = -1 if key is None else len(key)
    vlen = -1 if value is None else len(value)
    size = MESSAGE_OVERHEAD[magic] + max(klen, 0) + max(vlen, 0)
    start = len(out)
    if magic == 0:
        out += ENTRY_V0.pack(offset, size, 0, 0, attributes)
    else:
        out += ENTRY_V1.pack(offset, size, 0, 1, attributes, timestamp)
    out += I32.pack(klen)
    if klen > 0:
        out += key  # type: ignore[arg-type]  # klen > 0: key is not None
    out += I32.pack(vlen)
    if vlen > 0:
        out += value  # type: ignore[arg-type]  # vlen > 0: value is not None
    U32.pack_into(out, start + 12, zlib.crc32(memoryview(out)[start + 16 :]))


def build_legacy(
    messages: Sequence[LegacyInput],
    magic: int,
    codec: Codec,
    wrapper_type: TimestampType,
    wrapper_timestamp: int | None,
) -> bytes:
    """Encode magic-0/1 ``messages`` = [(absolute offset, timestamp, inner attributes, key,
    value)] with any gaps between offsets: uncompressed, one entry each, attributes as given;
    compressed, one wrapper at the last offset whose magic-1 inner offsets are relative to the
    first message (KIP-31, gaps kept), stamped ``wrapper_timestamp`` (None: the largest inner
    timestamp, KIP-32's CreateTime rule) with the type bit of ``wrapper_type``. Empty bytes for
    no messages."""
    codec = Codec(codec)
    out = bytearray()
    if not messages:
        return b""
    if codec == Codec.NONE:
        for offset, ts, attrs, key, value in messages:
            append_message(out, offset, magic, attrs, ts, key, value)
        return bytes(out)
    first = messages[0][0]
    for offset, ts, attrs, key, value in messages:
        append_message(out, offset - first if magic == 1 else offset, magic, attrs, ts, key, value)
    if wrapper_timestamp is None:
        wrapper_timestamp = max(m[1] for m in messages) if magic == 1 else NO_TIMESTAMP
    return wrap(out, messages[-1][0], magic, codec, wrapper_type, wrapper_timestamp)


def wrap(
    inner: Buffer,
    last_offset: int,
    magic: int,
    codec: Codec,
    wrapper_type: TimestampType,
    timestamp: int,
) -> bytes:
    """The wrapper message holding the magic-0/1 set ``inner`` compressed with ``codec``."""
    attrs = int(codec)
    if magic == 1 and wrapper_type == TimestampType.LOG_APPEND_TIME:
        attrs |= TIMESTAMP_TYPE_BIT
    wrapper = bytearray()
    append_message(
        wrapper, last_offset, magic, attrs, timestamp, None, compress(codec, inner, magic)
    )
    return bytes(wrapper)
