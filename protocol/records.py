"""Kafka message sets of any magic: check, read and build them, dispatching on each entry's
magic to :mod:`protocol.legacy` (magic 0 and 1) or :mod:`protocol.recordbatch` (magic 2).

This is the public face of message sets: it re-exports the shared framing of
:mod:`protocol.entries` and the legacy builders, so callers import from one place;
:mod:`protocol.conversion` converts between magics.

Buffers may be ``bytes``, ``bytearray``, ``memoryview`` or ``mmap``; iterators release their
memoryview when they finish or are closed, so an mmap can be closed afterwards. Malformed input
raises :class:`CorruptRecordError` with the byte offset of the bad entry; nothing else escapes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, cast

from protocol import recordbatch as rb
from protocol.compression import Codec
from protocol.entries import (
    I64,
    LOG_OVERHEAD,
    MIN_MESSAGE_SIZE,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    Message,
    ShallowEntry,
    TimestampType,
    iter_shallow,
    view,
)
from protocol.errors import CorruptRecordError
from protocol.legacy import (
    DeepMessage,
    LegacyInput,
    build_legacy,
    check_message,
    deep_messages,
    iter_legacy,
)

if TYPE_CHECKING:
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
    "first_offset",
]


def check_batch(
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
    mv = view(buf)
    try:
        if entry.magic == rb.MAGIC:
            check_batch(mv, entry, max_message_bytes)
        else:
            check_message(mv, entry, max_message_bytes)
    finally:
        mv.release()


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
    mv = view(buf)
    try:
        for entry in iter_shallow(mv, position):
            if entry.magic == rb.MAGIC:
                yield from batch_messages(mv, entry)
                continue
            for m in iter_legacy(mv, entry, False):
                yield m.as_message()
    finally:
        mv.release()


def batch_messages(mv: memoryview, entry: ShallowEntry) -> Iterator[Message]:
    """The records of one v2 batch as Messages (none for a control batch)."""
    header = rb.read_header(mv, entry.position)
    if header.is_control:
        return
    codec = _codec(header, entry.position)
    lat = header.log_append_time
    tst = TimestampType.LOG_APPEND_TIME if lat else TimestampType.CREATE_TIME
    for r in rb.iter_records(mv, entry.position, header):
        ts = header.max_timestamp if lat else header.base_timestamp + r.timestamp_delta
        yield Message(
            header.base_offset + r.offset_delta, ts, tst, r.key, r.value, rb.MAGIC, codec, r.headers
        )


def _codec(header: rb.BatchHeader, position: int) -> Codec:
    """The batch's codec; CorruptRecordError for one no Kafka version defines."""
    if header.codec > Codec.ZSTD:
        raise CorruptRecordError(
            f"record batch at byte {position} (base offset {header.base_offset}): unknown "
            f"compression codec {header.codec} in attributes",
            offset=position,
        )
    return Codec(header.codec)


def batch_first_at(
    mv: memoryview, entry: ShallowEntry, timestamp: int, min_offset: int
) -> tuple[int, int] | None:
    """(timestamp, offset) of the first of :func:`batch_messages` with timestamp >=
    ``timestamp`` and offset >= ``min_offset``, None when none is, read from the records'
    positions (:func:`rb.record_fields`) without an object per record: a time index lookup
    passes over up to an index interval of records. Raises CorruptRecordError as
    batch_messages does for a batch it cannot read."""
    header = rb.read_header(mv, entry.position)
    if header.is_control:
        return None
    _codec(header, entry.position)
    _, fields = rb.record_fields(mv, header, entry.position)
    lat, base_ts, base_offset = header.log_append_time, header.base_timestamp, header.base_offset
    for i in range(0, len(fields), rb.POSITION_FIELDS):
        ts = header.max_timestamp if lat else base_ts + fields[i]
        offset = base_offset + fields[i + 1]
        if ts >= timestamp and offset >= min_offset:
            return ts, offset
    return None


def first_offset(buf: Buffer, entry: ShallowEntry) -> int:
    """The first logical offset of ``entry``: a v2 batch's baseOffset, a message's own offset,
    a compressed wrapper's first inner offset (this decompresses)."""
    mv = view(buf)
    try:
        if entry.magic == rb.MAGIC:
            base_offset: int = I64.unpack_from(mv, entry.position)[0]
            return base_offset
        if entry.codec == Codec.NONE:
            return entry.offset
        return next(iter_legacy(mv, entry, False)).offset
    finally:
        mv.release()


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
        # build_batch's inputs (rb.RecordInput) at magic 2, else build_legacy's (LegacyInput)
        self._messages: list[rb.RecordInput | LegacyInput] = []

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
            attrs = TIMESTAMP_TYPE_BIT
        self._messages.append((offset, timestamp, attrs, key, value))
        return offset

    def __len__(self) -> int:
        return len(self._messages)

    def build(self) -> bytes:
        """The encoded set (empty bytes when nothing was appended)."""
        if self.magic == 2:
            records = cast("list[rb.RecordInput]", self._messages)
            return rb.build_batch(self._batch, records) if records else b""
        messages = cast("list[LegacyInput]", self._messages)
        return build_legacy(messages, self.magic, self.codec, self.timestamp_type, None)
