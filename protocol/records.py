"""Kafka message sets: iterate, check, build and convert magic 0, 1 and 2 entries.

This module owns the magic 0/1 layout (below); :mod:`protocol.recordbatch` owns magic 2 (record
batches, KIP-98). A log or a fetch response may mix both: every entry starts with
``offset int64, size int32`` and has its magic at byte 16, so the readers here dispatch on it.

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

The magic byte sits 16 bytes into an entry in every format, so a v2 batch is recognised here
and read through protocol.recordbatch; an unknown magic is yielded for the caller to refuse.

Buffers may be ``bytes``, ``bytearray``, ``memoryview`` or ``mmap``; iterators release their
memoryview when they finish or are closed, so an mmap can be closed afterwards. Malformed input
raises :class:`CorruptRecordError` with the byte offset of the bad entry; nothing else escapes.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Callable, Iterator, NamedTuple, TypeAlias, cast

from protocol import recordbatch as rb
from protocol.compression import Codec, compress, decompress
from protocol.errors import CorruptRecordError, UnsupportedCompressionError
from protocol.native import fastscan

if TYPE_CHECKING:
    from collections.abc import Sequence

    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

__all__ = [
    "Codec",
    "TimestampType",
    "NO_TIMESTAMP",
    "LOG_OVERHEAD",
    "MIN_MESSAGE_SIZE",
    "ShallowEntry",
    "Message",
    "DeepMessage",
    "iter_shallow",
    "deep_messages",
    "build_legacy",
    "check_entry",
    "iter_deep",
    "MessageSetBuilder",
    "convert",
    "first_offset",
]


class TimestampType(IntEnum):
    """Attribute bit 3 of a magic-1 message."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


NO_TIMESTAMP = -1
LOG_OVERHEAD = 12
MIN_MESSAGE_SIZE = 14
# Message size without key and value bytes, by magic.
_MESSAGE_OVERHEAD = (14, 22)
# Offset of key_length from the start of an entry, by magic.
_KEY_OFFSET = (LOG_OVERHEAD + 6, LOG_OVERHEAD + 14)
_CODEC_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08

_LOG_HEADER = struct.Struct(">qi")  # offset, size
_MSG_HEADER = struct.Struct(">Ibb")  # crc, magic, attributes (at entry + 12)
_ENTRY_V0 = struct.Struct(">qiIbb")  # 18 bytes
_ENTRY_V1 = struct.Struct(">qiIbbq")  # 26 bytes
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
# crc, attributes, lastOffsetDelta, baseTimestamp, maxTimestamp of a v2 batch (at entry + 17)
_V2_FIELDS = struct.Struct(">Ihiqq")
_INT32_MAX = 2**31 - 1

# legacy_messages(records, count, magic, attrs, relative, base_offset, base_ts, lat, lat_ts)
#   -> (messages, first offset, last offset, max timestamp) | None; None: the Python path.
_LegacyMessages: TypeAlias = Callable[
    ["Buffer", int, int, int, bool, int, int, bool, int], tuple[bytes, int, int, int] | None
]
_legacy_messages: _LegacyMessages | None = fastscan.legacy_messages if fastscan else None

# One magic-0/1 message to build: (absolute offset, timestamp, inner attributes, key, value).
_LegacyInput: TypeAlias = tuple[int, int, int, bytes | None, bytes | None]


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
        return self.attributes & _CODEC_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic >= 1 and self.attributes & _TIMESTAMP_TYPE_BIT:
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


def _view(buf: Buffer) -> memoryview:
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
    mv = _view(buf)
    try:
        n = len(mv)
        pos = position
        unpack_log = _LOG_HEADER.unpack_from
        unpack_msg = _MSG_HEADER.unpack_from
        unpack_ts = _I64.unpack_from
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
                if size < _MESSAGE_OVERHEAD[1]:
                    raise CorruptRecordError(
                        f"entry at byte {pos} (offset {offset}) has size {size}, below the "
                        f"{_MESSAGE_OVERHEAD[1]}-byte minimum of a magic-1 message",
                        offset=pos,
                    )
                (timestamp,) = unpack_ts(mv, pos + 18)
            else:
                timestamp = NO_TIMESTAMP
            yield ShallowEntry(offset, pos, size, magic, attributes, timestamp, crc)
            pos = end
    finally:
        mv.release()


def _check_structure(
    mv: memoryview, pos: int, size: int, magic: int, offset: int
) -> tuple[int, int, int, int]:
    """Check that key and value lengths exactly fill the message; return (key_start, key_length,
    value_start, value_length) with lengths -1 for null."""
    end = pos + LOG_OVERHEAD + size
    p = pos + _KEY_OFFSET[magic]
    (klen,) = _I32.unpack_from(mv, p)
    p += 4
    if klen < -1 or p + max(klen, 0) + 4 > end:
        raise CorruptRecordError(
            f"entry at byte {pos} (offset {offset}): key length {klen} does not fit in the "
            f"{size}-byte message",
            offset=pos,
        )
    kstart = p
    p += max(klen, 0)
    (vlen,) = _I32.unpack_from(mv, p)
    p += 4
    if vlen < -1 or p + max(vlen, 0) != end:
        raise CorruptRecordError(
            f"entry at byte {pos} (offset {offset}): value length {vlen} does not match the "
            f"{size}-byte message ({end - p} bytes left for the value)",
            offset=pos,
        )
    return kstart, klen, p, vlen


def _check(
    mv: memoryview, entry: ShallowEntry, max_message_bytes: int | None
) -> tuple[int, int, int, int]:
    """Every check of :func:`check_entry`; returns :func:`_check_structure`'s result."""
    pos, size, magic, offset = entry.position, entry.size, entry.magic, entry.offset
    if magic not in (0, 1):
        raise CorruptRecordError(
            f"entry at byte {pos} (offset {offset}) has magic {magic}; only message format "
            f"magic 0, 1 and 2 are supported",
            offset=pos,
        )
    if size < _MESSAGE_OVERHEAD[magic]:
        raise CorruptRecordError(
            f"entry at byte {pos} (offset {offset}) has size {size}, below the "
            f"{_MESSAGE_OVERHEAD[magic]}-byte minimum of a magic-{magic} message",
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
    return _check_structure(mv, pos, size, magic, offset)


def _check_batch(
    mv: memoryview, entry: ShallowEntry, max_message_bytes: int | None
) -> rb.BatchHeader:
    """The checks of Kafka's DefaultRecordBatch.ensureValid (size, CRC-32C) plus a sane header;
    the records are not parsed (:func:`iter_deep` does that)."""
    pos, size = entry.position, entry.size
    where = f"record batch at byte {pos} (last offset {entry.offset})"
    if max_message_bytes is not None and size > max_message_bytes:
        raise CorruptRecordError(
            f"{where} has length {size}, above max.message.bytes {max_message_bytes}", offset=pos
        )
    end = pos + LOG_OVERHEAD + size
    if end > len(mv):
        raise CorruptRecordError(
            f"{where} of length {size} is truncated: the buffer ends at byte {len(mv)}", offset=pos
        )
    crc = rb.batch_crc(mv, pos, end)
    if crc != entry.crc:
        raise CorruptRecordError(
            f"{where} fails its CRC-32C check: stored 0x{entry.crc:08x}, computed 0x{crc:08x}",
            offset=pos,
        )
    header = rb.read_header(mv, pos)
    if header.records_count < 0 or header.last_offset_delta < 0:
        raise CorruptRecordError(
            f"{where} has record count {header.records_count} and last offset delta "
            f"{header.last_offset_delta}; neither may be negative",
            offset=pos,
        )
    return header


def check_entry(buf: Buffer, entry: ShallowEntry, max_message_bytes: int) -> None:
    """Raise :class:`CorruptRecordError` unless ``entry`` (from :func:`iter_shallow` over
    ``buf``) is sound. A magic-0/1 message: known magic, size within [minimum for its magic,
    ``max_message_bytes``] (the message size, as Kafka's recovery compares it), fully inside
    ``buf``, CRC matching, key and value lengths exactly filling the message. A v2 batch: what
    Kafka's recovery checks (length within ``max_message_bytes``, fully inside ``buf``, CRC-32C
    matching) and non-negative record count and last offset delta. Compressed contents are not
    opened; :func:`iter_deep` does that.
    """
    mv = _view(buf)
    try:
        if entry.magic == rb.MAGIC:
            _check_batch(mv, entry, max_message_bytes)
        else:
            _check(mv, entry, max_message_bytes)
    finally:
        mv.release()


def _inner_entries(mv: memoryview, entry: ShallowEntry) -> tuple[bytes, list[ShallowEntry]]:
    """Decompress a wrapper and return (inner bytes, inner entries), checking nesting rules."""
    pos, offset, magic = entry.position, entry.offset, entry.magic
    _, klen, vstart, vlen = _check_structure(mv, pos, entry.size, magic, offset)
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
    """One message of a magic-0/1 entry as :func:`_deep` yields it: a :class:`Message` plus
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


def _deep(mv: memoryview, entry: ShallowEntry, check_crc: bool) -> Iterator[DeepMessage]:
    """Every message of one magic-0/1 shallow entry (decompressed when it is a wrapper)."""
    magic = entry.magic
    if magic not in (0, 1):
        _check(mv, entry, None)  # raises with the magic in the message
    codec = entry.codec
    if codec == Codec.NONE:
        if check_crc:
            kstart, klen, vstart, vlen = _check(mv, entry, None)
        else:
            kstart, klen, vstart, vlen = _check_structure(
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
        _check(mv, entry, None)
    inner, entries = _inner_entries(mv, entry)
    wrapper_lat = entry.timestamp_type == TimestampType.LOG_APPEND_TIME
    base = entry.offset - entries[-1].offset if magic == 1 else 0
    imv = memoryview(inner)
    for e in entries:
        if check_crc:
            try:
                kstart, klen, vstart, vlen = _check(imv, e, None)
            except CorruptRecordError as exc:
                raise CorruptRecordError(
                    f"compressed message at byte {entry.position} (offset {entry.offset}): "
                    f"inner {exc}",
                    offset=entry.position,
                ) from exc
        else:
            kstart, klen, vstart, vlen = _check_structure(imv, e.position, e.size, magic, e.offset)
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
    mv = _view(buf)
    try:
        return list(_deep(mv, entry, False))
    finally:
        mv.release()


def build_legacy(
    messages: Sequence[tuple[int, int, int, bytes | None, bytes | None]],
    magic: int,
    codec: Codec,
    wrapper_type: TimestampType,
    wrapper_timestamp: int | None,
) -> bytes:
    """Encode magic-0/1 ``messages`` = [(absolute offset, timestamp, inner attributes, key,
    value)] with any gaps between offsets: uncompressed, one entry each; compressed, one wrapper
    at the last offset whose magic-1 inner offsets are relative to the first message (KIP-31,
    gaps kept), stamped ``wrapper_timestamp`` (None: the largest inner timestamp, KIP-32's
    CreateTime rule) with the type bit of ``wrapper_type``. Empty bytes for no messages."""
    return _build(messages, magic, Codec(codec), wrapper_type, wrapper_timestamp)


def iter_deep(buf: Buffer, position: int = 0) -> Iterator[Message]:
    """Yield every logical message of ``buf`` from byte ``position``, decompressing wrappers.

    Offsets are absolute (KIP-31 relative offsets resolved); a LogAppendTime wrapper's
    timestamp and type are applied to its inner messages, a LogAppendTime batch's maxTimestamp
    to its records. Raises :class:`CorruptRecordError` for an unknown magic or codec,
    undecodable compression, nested compression, inner magic different from the wrapper's,
    key/value lengths not matching the message size, or batch records that do not exactly fill
    the batch or differ in number from its record count. Control batches (transaction markers)
    yield nothing. CRCs are not checked (see :func:`check_entry`); an incomplete trailing
    top-level entry is skipped.
    """
    mv = _view(buf)
    try:
        for entry in iter_shallow(mv, position):
            if entry.magic == rb.MAGIC:
                yield from _batch_messages(mv, entry)
                continue
            for m in _deep(mv, entry, False):
                yield m.as_message()
    finally:
        mv.release()


def _batch_messages(mv: memoryview, entry: ShallowEntry) -> Iterator[Message]:
    """The records of one v2 batch as Messages (none for a control batch)."""
    header = rb.read_header(mv, entry.position)
    if header.is_control:
        return
    codec = header.codec
    if codec > Codec.ZSTD:
        raise CorruptRecordError(
            f"record batch at byte {entry.position} (base offset {header.base_offset}): unknown "
            f"compression codec {codec} in attributes",
            offset=entry.position,
        )
    codec = Codec(codec)
    lat = header.log_append_time
    tst = TimestampType.LOG_APPEND_TIME if lat else TimestampType.CREATE_TIME
    for r in rb.iter_records(mv, entry.position, header):
        ts = header.max_timestamp if lat else header.base_timestamp + r.timestamp_delta
        yield Message(
            header.base_offset + r.offset_delta, ts, tst, r.key, r.value, rb.MAGIC, codec, r.headers
        )


def first_offset(buf: Buffer, entry: ShallowEntry) -> int:
    """The first logical offset of ``entry``: a v2 batch's baseOffset, a message's own offset,
    a compressed wrapper's first inner offset (this decompresses)."""
    mv = _view(buf)
    try:
        if entry.magic == rb.MAGIC:
            base_offset: int = _I64.unpack_from(mv, entry.position)[0]
            return base_offset
        if entry.codec == Codec.NONE:
            return entry.offset
        return next(_deep(mv, entry, False)).offset
    finally:
        mv.release()


def _append_message(
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
    size = _MESSAGE_OVERHEAD[magic] + max(klen, 0) + max(vlen, 0)
    start = len(out)
    if magic == 0:
        out += _ENTRY_V0.pack(offset, size, 0, 0, attributes)
    else:
        out += _ENTRY_V1.pack(offset, size, 0, 1, attributes, timestamp)
    out += _I32.pack(klen)
    if klen > 0:
        out += key  # type: ignore[arg-type]  # klen > 0: key is not None
    out += _I32.pack(vlen)
    if vlen > 0:
        out += value  # type: ignore[arg-type]  # vlen > 0: value is not None
    _U32.pack_into(out, start + 12, zlib.crc32(memoryview(out)[start + 16 :]))


def _build(
    messages: Sequence[_LegacyInput],
    magic: int,
    codec: Codec,
    wrapper_type: TimestampType,
    wrapper_timestamp: int | None,
) -> bytes:
    """Encode ``messages`` = [(absolute offset, timestamp, inner attributes, key, value)].

    Uncompressed: one entry each, attributes as given. Compressed: one wrapper whose offset is
    the last absolute offset, magic-1 inner offsets relative to the first message, wrapper
    timestamp ``wrapper_timestamp`` (default: the largest inner timestamp), type bit from
    ``wrapper_type``.
    """
    out = bytearray()
    if not messages:
        return b""
    if codec == Codec.NONE:
        for offset, ts, attrs, key, value in messages:
            _append_message(out, offset, magic, attrs, ts, key, value)
        return bytes(out)
    first = messages[0][0]
    for offset, ts, attrs, key, value in messages:
        _append_message(out, offset - first if magic == 1 else offset, magic, attrs, ts, key, value)
    if wrapper_timestamp is None:
        wrapper_timestamp = max(m[1] for m in messages) if magic == 1 else NO_TIMESTAMP
    return _wrap(out, messages[-1][0], magic, codec, wrapper_type, wrapper_timestamp)


def _wrap(
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
        attrs |= _TIMESTAMP_TYPE_BIT
    wrapper = bytearray()
    _append_message(
        wrapper, last_offset, magic, attrs, timestamp, None, compress(codec, inner, magic)
    )
    return bytes(wrapper)


class MessageSetBuilder:
    """Accumulate messages and encode them as one message set.

    Offsets are ``base_offset, base_offset + 1, ...``. Magic 2 gives one record batch (with
    ``producer_id``, ``producer_epoch``, ``base_sequence`` and ``partition_leader_epoch`` in its
    header, and record headers). Magic 0/1 with a codec give one wrapper (offset of the last
    message; magic-1 inner offsets 0..n-1; timestamp the largest inner timestamp). With
    ``LOG_APPEND_TIME`` the type bit goes on each uncompressed message, on the wrapper or on the
    batch only, as a broker writes it; the given timestamps are taken as the append time.
    Magic 0 ignores timestamps. zstd needs magic 2.
    """

    def __init__(
        self,
        magic: int = 1,
        codec: Codec = Codec.NONE,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        base_offset: int = 0,
        *,
        producer_id: int = rb.NO_PRODUCER_ID,
        producer_epoch: int = rb.NO_PRODUCER_EPOCH,
        base_sequence: int = rb.NO_SEQUENCE,
        partition_leader_epoch: int = rb.NO_PARTITION_LEADER_EPOCH,
    ) -> None:
        if magic not in (0, 1, 2):
            raise ValueError(f"magic must be 0, 1 or 2, not {magic}")
        if magic == 0 and timestamp_type != TimestampType.CREATE_TIME:
            raise ValueError("magic-0 messages have no timestamp type")
        if magic < 2 and Codec(codec) == Codec.ZSTD:
            raise ValueError("zstd needs magic 2 (KIP-110)")
        self.magic = magic
        self.codec = Codec(codec)
        self.timestamp_type = TimestampType(timestamp_type)
        self.base_offset = base_offset
        self._batch = rb.BatchSpec(
            base_offset=base_offset,
            codec=self.codec,
            log_append_time=self.timestamp_type == TimestampType.LOG_APPEND_TIME,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            partition_leader_epoch=partition_leader_epoch,
        )
        # build_batch's inputs (rb.RecordInput) at magic 2, else _build's (_LegacyInput)
        self._messages: list[rb.RecordInput | _LegacyInput] = []

    def append(
        self,
        value: bytes | None,
        key: bytes | None = None,
        timestamp: int = NO_TIMESTAMP,
        headers: rb.Headers = (),
    ) -> int:
        """Add a message; return the offset it will have. Headers need magic 2."""
        for name, v in (("value", value), ("key", key)):
            if v is not None and not isinstance(v, (bytes, bytearray, memoryview)):
                raise TypeError(f"{name} must be bytes or None, not {type(v).__name__}")
        if headers and self.magic < 2:
            raise ValueError(f"magic {self.magic} messages cannot carry headers")
        offset = self.base_offset + len(self._messages)
        if self.magic == 0:
            timestamp = NO_TIMESTAMP
        key = None if key is None else bytes(key)
        value = None if value is None else bytes(value)
        if self.magic == 2:
            self._messages.append(
                (offset - self.base_offset, timestamp, key, value, tuple(headers))
            )
            return offset
        attrs = 0
        if (
            self.codec == Codec.NONE
            and self.magic == 1
            and self.timestamp_type == TimestampType.LOG_APPEND_TIME
        ):
            attrs = _TIMESTAMP_TYPE_BIT
        self._messages.append((offset, timestamp, attrs, key, value))
        return offset

    def __len__(self) -> int:
        return len(self._messages)

    def build(self) -> bytes:
        """The encoded set (empty bytes when nothing was appended)."""
        if self.magic == 2:
            records = cast("list[rb.RecordInput]", self._messages)
            return rb.build_batch(self._batch, records) if records else b""
        messages = cast("list[_LegacyInput]", self._messages)
        return _build(messages, self.magic, self.codec, self.timestamp_type, None)


def _converted(m: DeepMessage) -> _LegacyInput:
    """A message of another magic as a _build input: no timestamp (up-conversion has none to
    give, down-conversion drops it) and no type or codec bits."""
    return (
        m.offset,
        NO_TIMESTAMP,
        m.attributes & ~(_TIMESTAMP_TYPE_BIT | _CODEC_MASK),
        m.key,
        m.value,
    )


def _batch_as_legacy(mv: memoryview, entry: ShallowEntry, to_magic: int) -> bytes:
    """One v2 batch down-converted: its records as magic-``to_magic`` messages, one wrapper of
    the same codec when it is compressed (headers are dropped, as Kafka does)."""
    codec = Codec(entry.codec)
    if codec == Codec.ZSTD:
        raise UnsupportedCompressionError(
            f"record batch at byte {entry.position} (last offset {entry.offset}) is zstd "
            f"compressed, which message format magic {to_magic} cannot hold",
            offset=entry.position,
        )
    if _legacy_messages is not None:
        header = rb.read_header(mv, entry.position)
        if not header.is_control and header.records_count > 0 and codec <= Codec.LZ4:
            converted = _native_as_legacy(mv, entry, header, codec, to_magic)
            if converted is not None:
                return converted
    messages = list(_batch_messages(mv, entry))
    if not messages:
        return b""
    lat = messages[0].timestamp_type == TimestampType.LOG_APPEND_TIME and to_magic == 1
    attrs = _TIMESTAMP_TYPE_BIT if lat and codec == Codec.NONE else 0
    legacy = [
        (m.offset, m.timestamp if to_magic == 1 else NO_TIMESTAMP, attrs, m.key, m.value)
        for m in messages
    ]
    wrapper_type = TimestampType.LOG_APPEND_TIME if lat else TimestampType.CREATE_TIME
    return _build(legacy, to_magic, codec, wrapper_type, None)


def _native_as_legacy(
    mv: memoryview, entry: ShallowEntry, header: rb.BatchHeader, codec: Codec, to_magic: int
) -> bytes | None:
    """:func:`_batch_as_legacy` by the C extension, which builds the messages without the GIL
    (decompression and compression release it in their libraries too); None when it declines
    the records, which the Python path then reads and refuses precisely."""
    assert _legacy_messages is not None
    section = rb.records_section(mv, header, entry.position, transient=True)
    lat = header.log_append_time and to_magic == 1
    found = _legacy_messages(
        section,
        header.records_count,
        to_magic,
        _TIMESTAMP_TYPE_BIT if lat and codec == Codec.NONE else 0,
        codec != Codec.NONE and to_magic == 1,
        header.base_offset,
        header.base_timestamp,
        header.log_append_time,
        header.max_timestamp,
    )
    if isinstance(section, memoryview):
        section.release()
    if found is None:
        return None
    inner, _, last, max_ts = found
    if codec == Codec.NONE:
        return inner
    wrapper_type = TimestampType.LOG_APPEND_TIME if lat else TimestampType.CREATE_TIME
    return _wrap(inner, last, to_magic, codec, wrapper_type, max_ts)


def _legacy_as_batch(messages: list[Message], codec: Codec) -> bytes:
    """Magic-0/1 messages (one wrapper, or a run of uncompressed ones) up-converted into one
    batch without producer id, as Kafka's up-conversion writes it."""
    first = messages[0].offset
    previous = first - 1
    for m in messages:
        if not previous < m.offset <= first + _INT32_MAX:
            raise CorruptRecordError(
                f"message offsets {first}..{m.offset} cannot become one record batch: they must "
                f"increase and span at most 2^31 - 1",
                offset=0,
            )
        previous = m.offset
    lat = messages[0].timestamp_type == TimestampType.LOG_APPEND_TIME
    spec = rb.BatchSpec(base_offset=first, codec=codec, log_append_time=lat)
    return rb.build_batch(
        spec, [(m.offset - first, m.timestamp, m.key, m.value, ()) for m in messages]
    )


def convert(buf: Buffer, to_magic: int) -> bytes:
    """Return ``buf`` with every message in format ``to_magic`` (0, 1 or 2); offsets are kept.

    Entries already at ``to_magic`` are copied unchanged. Between magic 0 and 1 an uncompressed
    message is rewritten alone and a wrapper is decompressed, converted and recompressed with
    the same codec into one wrapper at the same offset; up-conversion gives timestamps -1
    (CreateTime), down-conversion drops timestamps and LogAppendTime. A v2 batch going down
    becomes its records as messages (one wrapper of its codec when compressed; timestamps and
    LogAppendTime kept at magic 1; headers dropped); zstd cannot go down
    (:class:`UnsupportedCompressionError`). Going up to 2, each wrapper becomes one batch of its
    codec and each run of uncompressed messages one uncompressed batch. An incomplete trailing
    entry is kept as is, so a reader still sees that a larger message follows.
    Raises :class:`CorruptRecordError` for anything :func:`iter_deep` refuses or a bad CRC.
    """
    if to_magic not in (0, 1, 2):
        raise ValueError(f"to_magic must be 0, 1 or 2, not {to_magic}")
    mv = _view(buf)
    try:
        out: list[Buffer] = []  # joined once: one copy of the answer, not one per append
        end = 0
        run: list[Message] = []  # uncompressed legacy messages waiting to become one batch
        for entry in iter_shallow(mv):
            end = entry.next_position
            if entry.magic == to_magic:
                if run:
                    out.append(_legacy_as_batch(run, Codec.NONE))
                    run = []
                check_entry(mv, entry, entry.size)
                out.append(mv[entry.position : end])
            elif entry.magic == rb.MAGIC:
                _check_batch(mv, entry, None)
                out.append(_batch_as_legacy(mv, entry, to_magic))
            elif to_magic == rb.MAGIC:
                messages = [m.as_message() for m in _deep(mv, entry, True)]
                if entry.codec == Codec.NONE:
                    if run and not run[-1].offset < entry.offset <= run[0].offset + _INT32_MAX:
                        out.append(_legacy_as_batch(run, Codec.NONE))
                        run = []
                    run += messages
                    continue
                if run:
                    out.append(_legacy_as_batch(run, Codec.NONE))
                    run = []
                out.append(_legacy_as_batch(messages, Codec(entry.codec)))
            else:
                msgs = [_converted(m) for m in _deep(mv, entry, True)]
                out.append(
                    _build(msgs, to_magic, Codec(entry.codec), TimestampType.CREATE_TIME, None)
                )
        if run:
            out.append(_legacy_as_batch(run, Codec.NONE))
        out.append(mv[end:])
        return b"".join(out)
    finally:
        mv.release()
