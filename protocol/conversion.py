"""Converting message sets between magics: down for old consumers (Fetch v0-v3 read magic 0
or 1), up for old producers writing into a v2 log, as Kafka's LogValidator and down-conversion do.

The down-conversion of a v2 batch runs in the C extension without the GIL when it is built
(protocol/_fastscan.c ``legacy_messages``), else in Python, byte for byte the same. A fetch
answer is down-converted lazily, a chunk at a time as it is sent (:class:`LazyDownConversion`,
KIP-283), so a connection holds one chunk, not the whole answer converted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, TypeAlias

from protocol import recordbatch as rb
from protocol.compression import Codec
from protocol.entries import (
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    CODEC_MASK,
    TIMESTAMP_TYPE_BIT,
    Message,
    ShallowEntry,
    TimestampType,
    iter_shallow,
    view,
)
from protocol.errors import CorruptRecordError, UnsupportedCompressionError
from protocol.legacy import DeepMessage, LegacyInput, build_legacy, iter_legacy, wrap
from protocol.native import fastscan
from protocol.records import batch_messages, check_batch, check_entry

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

_INT32_MAX = 2**31 - 1
# Stored bytes converted at a time by LazyDownConversion (a soft limit: a larger entry is
# converted whole); Kafka's LazyDownConversionRecordsSend.MAX_READ_SIZE.
CHUNK_READ_BYTES = 128 * 1024

# legacy_messages(records, count, magic, attrs, relative, base_offset, base_ts, lat, lat_ts)
#   -> (messages, first offset, last offset, max timestamp) | None; None: the Python path.
_LegacyMessages: TypeAlias = Callable[
    ["Buffer", int, int, int, bool, int, int, bool, int], tuple[bytes, int, int, int] | None
]

_legacy_messages: _LegacyMessages | None = fastscan.legacy_messages if fastscan else None


def _converted(m: DeepMessage) -> LegacyInput:
    """A message of another magic as a build_legacy input: no timestamp (up-conversion has none to
    give, down-conversion drops it) and no type or codec bits."""
    return (
        m.offset,
        NO_TIMESTAMP,
        m.attributes & ~(TIMESTAMP_TYPE_BIT | CODEC_MASK),
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
    messages = list(batch_messages(mv, entry))
    if not messages:
        return b""
    lat = messages[0].timestamp_type == TimestampType.LOG_APPEND_TIME and to_magic == 1
    attrs = TIMESTAMP_TYPE_BIT if lat and codec == Codec.NONE else 0
    legacy = [
        (m.offset, m.timestamp if to_magic == 1 else NO_TIMESTAMP, attrs, m.key, m.value)
        for m in messages
    ]
    wrapper_type = TimestampType.LOG_APPEND_TIME if lat else TimestampType.CREATE_TIME
    return build_legacy(legacy, to_magic, codec, wrapper_type, None)


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
        TIMESTAMP_TYPE_BIT if lat and codec == Codec.NONE else 0,
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
    return wrap(inner, last, to_magic, codec, wrapper_type, max_ts)


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
    mv = view(buf)
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
                check_batch(mv, entry, None)
                out.append(_batch_as_legacy(mv, entry, to_magic))
            elif to_magic == rb.MAGIC:
                messages = [m.as_message() for m in iter_legacy(mv, entry, True)]
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
                msgs = [_converted(m) for m in iter_legacy(mv, entry, True)]
                out.append(
                    build_legacy(
                        msgs, to_magic, Codec(entry.codec), TimestampType.CREATE_TIME, None
                    )
                )
        if run:
            out.append(_legacy_as_batch(run, Codec.NONE))
        out.append(mv[end:])
        return b"".join(out)
    finally:
        mv.release()


class LazyDownConversion:
    """The records of one partition's Fetch answer for a reader below Fetch v4, converted to
    ``to_magic`` a chunk at a time as the answer is sent, as Kafka's LazyDownConversionRecords
    (KIP-283): the answer holds :attr:`size` bytes, announced before any but the first chunk is
    converted, so memory per connection is one chunk (about CHUNK_READ_BYTES), not the whole
    answer.

    ``read(position, size)`` gives the stored bytes ``[position, position + size)`` of the
    range (fewer only when the file ended sooner); ``stored_bytes`` is the range's length. The
    first chunk is converted at construction, which raises UnsupportedCompressionError (zstd)
    or CorruptRecordError as a whole conversion would, so the partition answers with the error.
    :attr:`size` is the stored length, or the first chunk's converted length when larger (so a
    reader always gets at least that whole chunk), as Kafka sizes it.

    What :meth:`next_piece` gives beyond what fits is cut off (the reader takes a partial
    message at the end as the end, and fetches from there next time); what it lacks once the
    records are converted (converted messages are often smaller than batches, or a later batch
    is zstd or unreadable) is filled with Kafka's overflow message: offset -1 and a size larger
    than what remains, which readers take for a partial message. Not thread-safe: one sender.
    """

    def __init__(self, read: Callable[[int, int], bytes], stored_bytes: int, to_magic: int) -> None:
        if to_magic not in (0, 1):
            raise ValueError(f"down-conversion is to magic 0 or 1, not {to_magic}")
        self._read = read
        self._end = stored_bytes
        self.to_magic = to_magic
        self._position = 0  # the next stored byte to convert
        self._sent = 0
        # A later chunk that cannot be converted (zstd, bad bytes) ends the answer there: the
        # reader fetches from it next and is answered the error then.
        self._stopped = False
        first = self._next_converted()
        self._pending: bytes | None = first
        if first is not None:
            self.size = max(stored_bytes, len(first))
        else:  # stored records, none convertible (control batches): an overflow message
            self.size = LOG_OVERHEAD if stored_bytes else 0

    def next_piece(self) -> bytes:
        """The next bytes of the answer (CPU: run it beside the event loop); b"" once
        :attr:`size` bytes were given."""
        remaining = self.size - self._sent
        if remaining <= 0:
            return b""
        piece = self._pending
        self._pending = None
        if piece is None and not self._stopped:
            try:
                piece = self._next_converted()
            except (UnsupportedCompressionError, CorruptRecordError):
                self._stopped = True
        if piece is None:
            piece = _overflow(remaining)
        piece = piece[:remaining]
        self._sent += len(piece)
        return piece

    def _next_converted(self) -> bytes | None:
        """The next non-empty chunk converted, None at the end of the complete entries."""
        while self._position < self._end:
            data = self._read(self._position, min(CHUNK_READ_BYTES, self._end - self._position))
            entries = list(iter_shallow(data))
            if not entries:  # one entry larger than a chunk, or an incomplete last one
                if len(data) < LOG_OVERHEAD:
                    return None
                whole = LOG_OVERHEAD + int.from_bytes(data[8:12], "big", signed=True)
                if whole <= len(data) or self._position + whole > self._end:
                    return None
                data = self._read(self._position, whole)
                entries = list(iter_shallow(data))
                if not entries:
                    return None  # the file ended sooner
            # A zstd batch ends the chunk before it, so the records ahead of it are sent; as the
            # chunk's first, its conversion raises UnsupportedCompressionError.
            zstd = next(
                (i for i, e in enumerate(entries) if e.magic == rb.MAGIC and e.codec == Codec.ZSTD),
                None,
            )
            if zstd:
                entries = entries[:zstd]
            consumed = entries[-1].next_position
            self._position += consumed
            converted = convert(data[:consumed], self.to_magic)
            if converted:
                return converted
        return None


def _overflow(remaining: int) -> bytes:
    """Kafka's overflow message (LazyDownConversionRecordsSend.buildOverflowBatch): offset -1
    and a size past the end of the answer, zeros after; cut to ``remaining`` by the caller."""
    size = max(remaining + 1, rb.RECORD_BATCH_OVERHEAD)
    body = max(LOG_OVERHEAD, min(remaining + 1, CHUNK_READ_BYTES))
    return (
        (-1).to_bytes(8, "big", signed=True) + size.to_bytes(4, "big") + bytes(body - LOG_OVERHEAD)
    )
