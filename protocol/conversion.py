"""Converting message sets between magics: down for old consumers (Fetch v0-v3 read magic 0
or 1), up for old producers writing into a v2 log, as Kafka's LogValidator and down-conversion do.

The down-conversion of a v2 batch runs in the C extension without the GIL when it is built
(protocol/_fastscan.c ``legacy_messages``), else in Python, byte for byte the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, TypeAlias

from protocol import recordbatch as rb
from protocol.compression import Codec
from protocol.entries import (
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
