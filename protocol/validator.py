"""Produce-side validation of one partition's message set: Kafka 0.10.1's LogValidator rules for
magic 0/1 and Kafka 3.9's for record batches (magic 2), in both directions.

Pure functions: the topic's settings, the next offset and the current time are parameters. Any
failure rejects the whole set; nothing is accepted.

Checks, per entry then per message (inner messages of wrappers and records of batches, whose CRCs
are checked too): unknown magic -> CORRUPT_MESSAGE; entry (12 + size) above max.message.bytes ->
MESSAGE_TOO_LARGE; bad size, CRC, layout or codec -> CORRUPT_MESSAGE; a producer claiming
LogAppendTime -> INVALID_TIMESTAMP; on a CreateTime topic, a timestamp outside
[now - before, now + after] (message.timestamp.before/after.max.ms, KIP-937, each falling back to
message.timestamp.difference.max.ms) -> INVALID_TIMESTAMP (messages without a timestamp, -1, are
exempt; as in 0.10.1, magic-0/1 messages into a magic-0 topic are not checked); a null key on a
compacted topic -> CORRUPT_MESSAGE (magic 0/1 into a magic-0/1 topic) or INVALID_RECORD; batches:
control or transactional, bad producer fields, record count or offset deltas -> INVALID_RECORD;
headers into a magic-0/1 topic -> UNSUPPORTED_FOR_MESSAGE_FORMAT. An incomplete trailing entry
is trimmed; nothing complete -> a result with zero messages.

One path per input shape, each assigning offsets from ``next_offset``, all ending in one result
builder (:func:`_result`):

1. ``_messages_kept``: uncompressed magic-0/1 messages of the topic's magic, no topic codec:
   rewritten in place (offsets; under LogAppendTime also timestamp, bit 3, CRC).
2. ``_wrappers_kept``: magic-1 wrappers into a magic-1 topic, codec unchanged, each wrapper's
   inner offsets exactly 0..n-1: only the wrappers are rewritten (offset, timestamp,
   attributes, CRC); the payload is never recompressed.
3. ``_batches_kept``: record batches into a record-batch topic: offsets, leader epoch and,
   under LogAppendTime, type and max timestamp set in the header with one CRC-32C; no
   per-record rewrite. A batch whose codec differs from the topic's is re-encoded.
4. ``_converted``: anything else (mixed magics, another format or codec): every message is
   rebuilt in the topic's format and codec, and entries made bigger are checked against
   max.message.bytes again.

Speed: the native loops of protocol/_fastscan.c (optional: without a C compiler the Python code
gives the same answers) check a whole uncompressed magic-1 set, each wrapper's inner set
(``scan_v1``) or a batch's records (``scan_v2``) in one call, without the GIL from 64 KiB up.
They only ever accept; anything unusual or wrong drops to the Python checks, which give the
precise answer.

Result metadata: ``max_timestamp`` (the largest timestamp, ``now`` under LogAppendTime; -1 at
magic 0 or when no message has one) and ``offset_of_max_timestamp`` (the shallow offset holding
it, as Kafka's time index wants: the first uncompressed message with that timestamp, or the
wrapper's or batch's last offset; ``last_offset`` when ``max_timestamp`` is -1).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple
from zlib import crc32 as _crc32

from protocol import recordbatch as rb
from protocol.compression import (
    MAX_DECOMPRESSED_BYTES,
    Codec,
    decompress,
    decompress_transient,
    decompressed_size_bound,
)
from protocol.errors import CorruptRecordError, ErrorCode
from protocol.entries import (
    CODEC_MASK,
    I32,
    I64,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    U32,
    ShallowEntry,
    TimestampType,
    iter_shallow,
    view,
)
from protocol.legacy import ENTRY_V1, KEY_OFFSET, build_legacy, check_message, iter_legacy
from protocol.records import check_batch

from protocol.native import fastscan

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeAlias

    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

    # scan_v1(buf, n, mode, first_offset, lo, hi, max_size, now_ms, keyed)
    #   -> (count, max_ts, max_index) | None
    _ScanV1: TypeAlias = Callable[
        [Buffer, int, int, int, int, int, int, int, bool], tuple[int, int, int] | None
    ]
    # scan_v2(records, count, base_ts, lo, hi, check_time, keyed) -> max_ts | None
    _ScanV2: TypeAlias = Callable[[Buffer, int, int, int, int, bool, bool], int | None]
    # keep_v2(batch, records, next_offset, leader_epoch, lo, hi, check_time, keyed, max_bytes,
    #         target_codec, lat_ms)
    #   -> (stored, count, max_ts, producer_id, producer_epoch, base_sequence, last_sequence,
    #       transactional) | None
    _KeepV2: TypeAlias = Callable[
        [Buffer, Buffer | None, int, int, int, int, bool, bool, int, int, int],
        tuple[bytes, int, int, int, int, int, int, bool] | None,
    ]

# The native scans, or None (protocol/native.py): the Python paths then give the same answers.
scan_v1: _ScanV1 | None = fastscan.scan_v1 if fastscan else None
scan_v2: _ScanV2 | None = fastscan.scan_v2 if fastscan else None
keep_v2: _KeepV2 | None = fastscan.keep_v2 if fastscan else None

_CODEC_BYTE = rb.ATTRIBUTES_OFFSET + 1  # a batch's codec: the low byte of its int16 attributes


def _extend(out: bytearray, data: Buffer) -> None:
    """``out += data``; by the extension, the copy of a large batch is made without the GIL."""
    out += data


extend: Callable[[bytearray, Buffer], None] = fastscan.extend if fastscan else _extend

__all__ = [
    "TopicSettings",
    "ValidatedRecords",
    "ProducerBatch",
    "Rejected",
    "validate_produce",
    "scanned_bytes_bound",
]

_LONG_MAX = 2**63 - 1

_ATTRS_TS = struct.Struct(">bq")  # attributes, timestamp: 9 bytes at entry + 17


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """The topic configs the validator applies (Kafka names: message.format.version ->
    ``magic`` 0, 1 or 2, message.timestamp.type, message.timestamp.difference.max.ms,
    message.timestamp.before.max.ms / after.max.ms (KIP-937), max.message.bytes,
    compression.type (None = "producer"), cleanup.policy=compact).

    As in Kafka 3.9's LogConfig, a before/after bound left at its default (Long.MAX_VALUE)
    falls back to message.timestamp.difference.max.ms: :meth:`timestamp_bounds`."""

    magic: int = 1
    timestamp_type: TimestampType = TimestampType.CREATE_TIME
    max_timestamp_difference_ms: int = _LONG_MAX
    max_message_bytes: int = 1000012
    target_codec: Codec | None = None
    compacted: bool = False
    timestamp_before_max_ms: int = _LONG_MAX
    timestamp_after_max_ms: int = _LONG_MAX

    def timestamp_bounds(self, now_ms: int) -> tuple[int, int]:
        """The [earliest, latest] CreateTime accepted at ``now_ms``."""
        before = (
            self.timestamp_before_max_ms
            if self.timestamp_before_max_ms != _LONG_MAX
            else self.max_timestamp_difference_ms
        )
        after = (
            self.timestamp_after_max_ms
            if self.timestamp_after_max_ms != _LONG_MAX
            else self.max_timestamp_difference_ms
        )
        return now_ms - before, now_ms + after


# The results built for every batch are NamedTuples: as immutable as a frozen dataclass, built in
# a fifth of its time (1.4 us for eight fields, a cost each batch of a wide Produce repeated).
class ProducerBatch(NamedTuple):
    """What the producer state check needs of one appended v2 batch with a producer id
    (``is_transactional``: part of the producer's ongoing transaction, KIP-98)."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int
    is_transactional: bool = False


class ValidatedRecords(NamedTuple):
    """A validated set ready to append: ``buffer`` holds the final offsets and CRCs.

    With ``message_count`` 0 (nothing complete was sent) the buffer is empty and
    ``first_offset`` / ``last_offset`` are -1; there is nothing to append.
    ``log_append_time`` is the time written under LogAppendTime, else -1.
    """

    buffer: bytes | bytearray
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    message_count: int
    producer_batches: tuple[ProducerBatch, ...] = ()


@dataclass(frozen=True, slots=True)
class Rejected:
    """The whole set is refused with ``error``; ``reason`` says what was wrong for a person
    (the broker adds topic and partition). ``record_errors``: KIP-467's (index of the record in
    its batch, what is wrong with it) for every refused record of the batch that failed, as
    Kafka's LogValidator lists them, so a client can tell the bad records from the rest (Produce
    v8+ answers them); empty when the set failed as a whole."""

    error: ErrorCode
    reason: str
    record_errors: tuple[tuple[int, str], ...] = ()


class _RejectError(Exception):
    """Raised inside the validator to abandon the set; turned into :class:`Rejected`."""

    def __init__(
        self, error: ErrorCode, reason: str, record_errors: tuple[tuple[int, str], ...] = ()
    ) -> None:
        super().__init__(reason)
        self.error = error
        self.reason = reason
        self.record_errors = record_errors


_EMPTY = ValidatedRecords(b"", -1, -1, NO_TIMESTAMP, -1, -1, 0)


class _Job(NamedTuple):
    """What every path needs of one call. ``lat``: the topic stamps LogAppendTime (a magic-0
    topic has no timestamps at all); [earliest, latest]: the CreateTime bounds at ``now_ms``."""

    settings: TopicSettings
    next_offset: int
    now_ms: int
    leader_epoch: int
    lat: bool
    earliest: int
    latest: int
    native_only: bool = False


class _Declined(Exception):
    """Raised under ``native_only`` where the native scan declines a batch's records."""


class _Checked(NamedTuple):
    """One message or record as sent, after its checks: what a conversion rebuilds."""

    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: rb.Headers


class _Wrapper(NamedTuple):
    """A checked magic-1 wrapper that may be kept as sent: its inner messages are magic 1 with
    relative offsets exactly 0..messages-1, so only the wrapper needs rewriting."""

    position: int
    end: int
    attributes: int
    timestamp: int
    messages: int
    max_timestamp: int


def validate_produce(
    buf: Buffer,
    settings: TopicSettings,
    *,
    next_offset: int,
    now_ms: int,
    require_magic2: bool = False,
    partition_leader_epoch: int = 0,
    native_only: bool = False,
) -> ValidatedRecords | Rejected | None:
    """Validate a producer's message set for one partition and assign offsets from
    ``next_offset``; see the module docstring for the rules. Never raises for bad input:
    malformed bytes come back as ``Rejected(CORRUPT_MESSAGE, ...)``. ``buf`` is not modified.

    ``require_magic2`` (Produce v3+): exactly one v2 batch, as Kafka's ProduceRequest demands.
    ``partition_leader_epoch`` is written into every stored v2 batch.
    ``native_only``: None instead of an answer where the native scan declines a batch kept in
    its codec, whose precise answer would then come from the Python path record by record (a
    cost :func:`scanned_bytes_bound` does not bound); the caller validates again without it
    where that cost may run. Never None without it.
    """
    earliest, latest = settings.timestamp_bounds(now_ms)
    job = _Job(
        settings,
        next_offset,
        now_ms,
        partition_leader_epoch,
        settings.magic >= 1 and settings.timestamp_type == TimestampType.LOG_APPEND_TIME,
        earliest,
        latest,
        native_only,
    )
    mv = view(buf)
    try:
        if (
            settings.magic == 1
            and not require_magic2
            and scan_v1 is not None
            and len(mv) > 17
            and mv[16] == 1
        ):
            fast = _fast_magic1(mv, job)
            if fast is not None:
                return fast
        if settings.magic == rb.MAGIC:
            one = _one_batch_kept(mv, job)
            if one is not None:
                return one
        entries = _entries(mv, settings, require_magic2)
        if not entries:
            return _EMPTY
        if settings.magic == 2 and all(e.magic == rb.MAGIC for e in entries):
            return _batches_kept(mv, entries, job)
        if settings.target_codec in (None, Codec.NONE) and all(
            e.magic == settings.magic and e.codec == Codec.NONE for e in entries
        ):
            return _messages_kept(mv, entries, job)
        return _checked_then_kept_or_converted(mv, entries, job)
    except _RejectError as exc:
        return Rejected(exc.error, exc.reason, exc.record_errors)
    except CorruptRecordError as exc:
        return Rejected(ErrorCode.CORRUPT_MESSAGE, str(exc))
    except _Declined:
        return None
    finally:
        mv.release()


def scanned_bytes_bound(buf: bytes | bytearray | memoryview, settings: TopicSettings) -> int | None:
    """An upper bound on the record bytes :func:`validate_produce` decompresses and scans for
    ``buf``, read from headers only, when ``buf`` is one record batch that the native scan
    checks and that is kept in its own codec (path 3 without re-encoding): then the work of
    ``validate_produce(..., native_only=True)`` is proportional to the bound. None for every
    other shape (older formats, several batches,
    a conversion, no native scan). A batch whose codec headers bound nothing (a zstd frame
    without its size, bytes that are not one LZ4 frame) counts as MAX_DECOMPRESSED_BYTES, the
    most the validator ever decompresses."""
    n = len(buf)
    if (
        scan_v2 is None
        or settings.magic != rb.MAGIC
        or n < rb.RECORD_BATCH_OVERHEAD
        or buf[rb.MAGIC_OFFSET] != rb.MAGIC
        or I32.unpack_from(buf, rb.LENGTH_OFFSET)[0] != n - LOG_OVERHEAD
    ):
        return None
    codec = buf[_CODEC_BYTE] & rb.CODEC_MASK
    if settings.target_codec is not None and settings.target_codec != codec:
        return None
    if not codec:  # the records as they are
        return n - rb.RECORD_BATCH_OVERHEAD
    bound = decompressed_size_bound(codec, memoryview(buf)[rb.RECORD_BATCH_OVERHEAD :])
    return MAX_DECOMPRESSED_BYTES if bound is None else bound


def _result(
    out: bytes | bytearray,
    job: _Job,
    count: int,
    max_ts: int,
    max_off: int,
    producers: tuple[ProducerBatch, ...] = (),
) -> ValidatedRecords:
    """The one result builder. Under LogAppendTime the caller passes ``now_ms`` as
    ``max_ts``; with no timestamp at all (-1) the offset of the max is the last offset."""
    first = job.next_offset
    last = first + count - 1
    return ValidatedRecords(
        out,  # a bytearray is not copied again: nothing changes it once validated
        first,
        last,
        max_ts,
        max_off if max_ts != NO_TIMESTAMP else last,
        job.now_ms if job.lat else -1,
        count,
        producers,
    )


# -- checks ------------------------------------------------------------------------------------


def _where(entry: ShallowEntry, index: int) -> str:
    kind = "record batch" if entry.magic == rb.MAGIC else "message"
    return f"{kind} {index} at byte {entry.position}"


def _entries(mv: memoryview, settings: TopicSettings, require_magic2: bool) -> list[ShallowEntry]:
    """The complete top-level entries (a trailing partial one is dropped), each checked for
    magic, size against max.message.bytes, CRC and layout."""
    entries = list(iter_shallow(mv))
    if require_magic2:
        if any(e.magic != rb.MAGIC for e in entries):
            raise _RejectError(
                ErrorCode.INVALID_RECORD, "Produce v3 and later carry record batches (magic 2) only"
            )
        if len(entries) > 1:
            raise _RejectError(
                ErrorCode.INVALID_RECORD,
                f"Produce v3 and later allow exactly one record batch per "
                f"partition; this request holds {len(entries)}",
            )
    for index, e in enumerate(entries):
        if e.magic not in (0, 1, rb.MAGIC):
            raise _RejectError(
                ErrorCode.CORRUPT_MESSAGE, f"{_where(e, index)} has unknown magic {e.magic}"
            )
        if LOG_OVERHEAD + e.size > settings.max_message_bytes:
            raise _RejectError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"{_where(e, index)} is {LOG_OVERHEAD + e.size} bytes, above "
                f"max.message.bytes {settings.max_message_bytes}",
            )
        if e.magic == rb.MAGIC:
            _batch_header(mv, e, _where(e, index))
            continue
        check_message(mv, e, None)
        if e.codec > Codec.LZ4:
            raise _RejectError(
                ErrorCode.CORRUPT_MESSAGE,
                f"{_where(e, index)} has unknown compression codec {e.codec} in its attributes",
            )
    return entries


def _batch_header(mv: memoryview, entry: ShallowEntry, where: str) -> rb.BatchHeader:
    """The header checks of one v2 batch (Kafka 3.9's LogValidator.validateBatch and the
    request's own checks): CRC-32C, codec, no transactions, CreateTime, producer fields,
    record count. Transactional batches are accepted from producers with an id; control
    batches (transaction markers) only ever come from the transaction coordinator, never in a
    Produce request."""
    header = check_batch(mv, entry, None)
    if header.codec > Codec.ZSTD:
        raise _RejectError(
            ErrorCode.CORRUPT_MESSAGE, f"{where} has unknown compression codec {header.codec}"
        )
    if header.is_control:
        raise _RejectError(
            ErrorCode.INVALID_RECORD,
            f"{where} is a control batch: transaction markers are written by the transaction "
            f"coordinator, not produced",
        )
    if header.is_transactional and header.producer_id < 0:
        raise _RejectError(
            ErrorCode.INVALID_RECORD,
            f"{where} is transactional but has no producer id",
        )
    if header.log_append_time:
        raise _RejectError(
            ErrorCode.INVALID_TIMESTAMP,
            f"{where} claims LogAppendTime; producers must send CreateTime "
            f"(attribute bit 3 clear), the broker sets LogAppendTime",
        )
    if header.producer_id >= 0 and (header.base_sequence < 0 or header.producer_epoch < 0):
        raise _RejectError(
            ErrorCode.INVALID_RECORD,
            f"{where} has producer id {header.producer_id} but sequence "
            f"{header.base_sequence} and epoch {header.producer_epoch}",
        )
    if header.records_count <= 0:
        raise _RejectError(ErrorCode.INVALID_RECORD, f"{where} holds no records")
    if header.last_offset_delta != header.records_count - 1:
        raise _RejectError(
            ErrorCode.INVALID_RECORD,
            f"{where} holds {header.records_count} records but its last offset "
            f"delta is {header.last_offset_delta}",
        )
    return header


def _violation(
    job: _Job,
    timestamp: int,
    key_is_null: bool,
    from_batch: bool,
    claims_log_append_time: bool = False,
) -> tuple[ErrorCode, str] | None:
    """The per-message rules, for magic-0/1 messages and v2 records alike: None, or the error
    and what is wrong (the caller says where). The error codes are those the sender's era
    knows: Kafka 0.10.1's CORRUPT_MESSAGE for a null key in a message into a magic-0/1 topic,
    3.9's INVALID_RECORD otherwise. 0.10.1 checks CreateTime only on magic-1 topics; record
    batches are always checked."""
    settings = job.settings
    if claims_log_append_time:
        return (
            ErrorCode.INVALID_TIMESTAMP,
            "claims LogAppendTime; producers must send "
            "CreateTime (attribute bit 3 clear), the broker sets LogAppendTime",
        )
    if (
        timestamp != NO_TIMESTAMP
        and not job.earliest <= timestamp <= job.latest
        and settings.timestamp_type == TimestampType.CREATE_TIME
        and (from_batch or settings.magic >= 1)
    ):
        return (
            ErrorCode.INVALID_TIMESTAMP,
            f"has timestamp {timestamp}, outside [{job.earliest}, {job.latest}] allowed at "
            f"the broker's time {job.now_ms} (message.timestamp.difference.max.ms="
            f"{settings.max_timestamp_difference_ms}, before.max.ms / after.max.ms)",
        )
    if settings.compacted and key_is_null:
        legacy = not from_batch and settings.magic < 2
        return (
            ErrorCode.CORRUPT_MESSAGE if legacy else ErrorCode.INVALID_RECORD,
            "has a null key; a compacted topic accepts only keyed messages",
        )
    return None


def _reject(where: str, violation: tuple[ErrorCode, str]) -> _RejectError:
    return _RejectError(violation[0], f"{where} {violation[1]}")


def _batch_records(
    mv: memoryview, entry: ShallowEntry, job: _Job, where: str
) -> tuple[rb.BatchHeader, list[rb.Record]]:
    """One v2 batch's records, each checked as Kafka 3.9's LogValidator does: every record
    breaking a per-record rule is listed (KIP-467) before the batch is refused, with
    INVALID_TIMESTAMP when any of them has a bad timestamp, else INVALID_RECORD."""
    header = rb.read_header(mv, entry.position)
    records = rb.iter_records(mv, entry.position, header)
    refused: list[tuple[int, ErrorCode, str]] = []
    for i, r in enumerate(records):
        if r.offset_delta != i:
            raise _RejectError(
                ErrorCode.INVALID_RECORD,
                f"{where}: record {i} has offset delta {r.offset_delta}, not {i}",
            )
        bad = _violation(job, header.base_timestamp + r.timestamp_delta, r.key is None, True)
        if bad:
            refused.append((i, *bad))
            continue
        if r.headers and job.settings.magic < 2:
            raise _RejectError(
                ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                f"{where}: record {i} has headers, which message format magic "
                f"{job.settings.magic} (message.format.version) cannot store",
            )
    if refused:
        errors = tuple((i, f"record {i} {what}") for i, _, what in refused)
        shown = "; ".join(what for _, what in errors[:3])
        raise _RejectError(
            ErrorCode.INVALID_TIMESTAMP
            if any(code == ErrorCode.INVALID_TIMESTAMP for _, code, _ in refused)
            else ErrorCode.INVALID_RECORD,
            f"{where}: {len(refused)} of its {len(records)} records refused"
            + (f" (the first three: {shown})" if len(refused) > 3 else f": {shown}"),
            errors,
        )
    return header, records


# -- path 1: magic-0/1 messages kept as sent (uncompressed, the topic's magic) -----------------


def _messages_kept(mv: memoryview, entries: list[ShallowEntry], job: _Job) -> ValidatedRecords:
    for index, e in enumerate(entries):
        (klen,) = I32.unpack_from(mv, e.position + KEY_OFFSET[e.magic])
        bad = _violation(
            job, e.timestamp, klen < 0, False, e.timestamp_type == TimestampType.LOG_APPEND_TIME
        )
        if bad:
            raise _reject(_where(e, index), bad)
    out = bytearray(mv[: entries[-1].next_position])
    off = job.next_offset
    max_ts, max_off = NO_TIMESTAMP, -1
    for e in entries:
        p = e.position
        I64.pack_into(out, p, off)
        if job.lat:
            _ATTRS_TS.pack_into(out, p + 17, e.attributes | TIMESTAMP_TYPE_BIT, job.now_ms)
            U32.pack_into(out, p + 12, _crc32(memoryview(out)[p + 16 : e.next_position]))
        elif e.timestamp > max_ts:
            max_ts, max_off = e.timestamp, off
        off += 1
    if job.lat:
        max_ts, max_off = job.now_ms, job.next_offset
    return _result(out, job, len(entries), max_ts, max_off)


# -- path 2: magic-1 wrappers kept as sent (only the wrapper rewritten) --------------------------


def _wrappers_kept(mv: memoryview, wrappers: list[_Wrapper], job: _Job) -> ValidatedRecords:
    """Each wrapper gets the absolute offset of its last inner message and, when they change,
    its timestamp (the largest inner one, or the append time) and type bit, with a new CRC;
    the compressed payload is never touched."""
    out = bytearray()
    extend(out, mv[: wrappers[-1].end])
    off = job.next_offset
    max_ts, max_off = NO_TIMESTAMP, -1
    for w in wrappers:
        off += w.messages
        I64.pack_into(out, w.position, off - 1)
        ts = job.now_ms if job.lat else w.max_timestamp
        attrs = (w.attributes & ~TIMESTAMP_TYPE_BIT) | (TIMESTAMP_TYPE_BIT if job.lat else 0)
        if ts != w.timestamp or attrs != w.attributes:
            _ATTRS_TS.pack_into(out, w.position + 17, attrs, ts)
            U32.pack_into(out, w.position + 12, _crc32(memoryview(out)[w.position + 16 : w.end]))
        if w.max_timestamp > max_ts:
            max_ts, max_off = w.max_timestamp, off - 1
    count = off - job.next_offset
    if job.lat:
        max_ts, max_off = job.now_ms, off - 1
    return _result(out, job, count, max_ts, max_off)


# -- path 3: record batches into a record-batch topic ----------------------------------------


def _batches_kept(mv: memoryview, entries: list[ShallowEntry], job: _Job) -> ValidatedRecords:
    """Kept as sent (offsets, leader epoch and, under LogAppendTime, the header's type and max
    timestamp rewritten in place with one CRC-32C), or re-encoded with the topic's codec."""
    settings = job.settings
    out = bytearray()
    offset = job.next_offset
    max_ts, max_off = NO_TIMESTAMP, -1
    producers = []
    check_time = settings.timestamp_type == TimestampType.CREATE_TIME
    reencoded = False  # sizes change only then: batches kept as sent were checked by _entries
    for index, e in enumerate(entries):
        where = _where(e, index)
        header = rb.read_header(mv, e.position)
        target = header.codec if settings.target_codec is None else settings.target_codec
        # The native loop checks the records of a batch kept as sent; anything it does not
        # accept goes through the Python path for the precise answer.
        record_max = None
        if target == header.codec and scan_v2 is not None:
            record_max = scan_v2(
                rb.records_section(mv, header, e.position, transient=True),
                header.records_count,
                header.base_timestamp,
                job.earliest,
                job.latest,
                check_time,
                settings.compacted,
            )
        if record_max is None:
            if job.native_only:
                raise _Declined
            header, records = _batch_records(mv, e, job, where)
            record_max = max(
                (header.base_timestamp + r.timestamp_delta for r in records), default=NO_TIMESTAMP
            )
        count = header.records_count
        start = len(out)
        header_max = header.max_timestamp
        if target == header.codec:
            extend(out, mv[e.position : e.next_position])
        else:
            reencoded = True
            spec = rb.BatchSpec(
                codec=Codec(target),
                producer_id=header.producer_id,
                producer_epoch=header.producer_epoch,
                base_sequence=header.base_sequence,
            )
            out += rb.build_batch(
                spec,
                [
                    (
                        r.offset_delta,
                        header.base_timestamp + r.timestamp_delta,
                        r.key,
                        r.value,
                        r.headers,
                    )
                    for r in records
                ],
            )
            header_max = record_max  # build_batch wrote it
        batch_max = _stamped(out, start, offset, record_max, header_max, job)
        last = offset + count - 1
        if batch_max > max_ts:
            max_ts, max_off = batch_max, last
        if header.producer_id >= 0:
            producers.append(
                ProducerBatch(
                    header.producer_id,
                    header.producer_epoch,
                    header.base_sequence,
                    header.last_sequence,
                    offset,
                    last,
                    batch_max,
                    header.is_transactional,
                )
            )
        offset += count
    if reencoded:
        _recheck_sizes(out, settings)
    return _result(out, job, offset - job.next_offset, max_ts, max_off, tuple(producers))


def _stamped(
    out: bytearray, start: int, first: int, record_max: int, header_max: int, job: _Job
) -> int:
    """Finish the v2 batch at out[start:]: its base offset and leader epoch set, then either
    LogAppendTime stamped or, as Kafka does, a header max timestamp that disagrees with its
    records corrected (with its CRC-32C). Returns the batch's max timestamp as stored."""
    rb.set_base_offset(out, start, first, job.leader_epoch)
    if job.lat:
        rb.set_log_append_time(out, start, job.now_ms)
        return job.now_ms
    if record_max != header_max:
        I64.pack_into(out, start + rb.MAX_TIMESTAMP_OFFSET, record_max)
        U32.pack_into(out, start + rb.CRC_OFFSET, rb.batch_crc(out, start, len(out)))
    return record_max


def _one_batch_kept(mv: memoryview, job: _Job) -> ValidatedRecords | None:
    """Path 3 for what producers send nearly always, in one native call (``keep_v2``): exactly
    one v2 batch, kept in its codec, that passes every check. None for anything else, wrong or
    unusual (including a batch the native scan declines, and every batch where the extension
    is not built), which the general path then answers precisely. Its results equal the
    general path's (tests/protocol/test_validator_one_batch.py); it skips that path's per-entry
    lists, names and second header read, the fixed cost every batch of a wide Produce pays. A
    compressed batch's records are decompressed first, bounded as every decompression is."""
    keep = keep_v2
    if keep is None or len(mv) < rb.RECORD_BATCH_OVERHEAD:
        return None
    settings = job.settings
    target = settings.target_codec
    codec = mv[_CODEC_BYTE] & CODEC_MASK
    records = None
    if codec:
        if codec > Codec.ZSTD or (target is not None and target != codec):
            return None
        try:
            records = decompress_transient(
                codec, mv[rb.RECORD_BATCH_OVERHEAD :], rb.MAGIC, position=0
            )
        except CorruptRecordError:
            return None
    kept = keep(
        mv,
        records,
        job.next_offset,
        job.leader_epoch,
        job.earliest,
        job.latest,
        not job.lat,  # a record-batch topic's CreateTime bounds apply unless it stamps
        settings.compacted,
        settings.max_message_bytes,
        -1 if target is None else target,
        job.now_ms if job.lat else -1,
    )
    if kept is None:
        return None
    stored, count, max_ts, producer_id, epoch, base_sequence, last_sequence, transactional = kept
    first = job.next_offset
    last = first + count - 1
    producers = (
        (
            ProducerBatch(
                producer_id,
                epoch,
                base_sequence,
                last_sequence,
                first,
                last,
                max_ts,
                transactional,
            ),
        )
        if producer_id >= 0
        else ()
    )
    return _result(stored, job, count, max_ts, last, producers)


# -- path 4: everything else is checked, then kept as wrappers or converted ----------------------


def _checked_then_kept_or_converted(
    mv: memoryview, entries: list[ShallowEntry], job: _Job
) -> ValidatedRecords:
    """Check every message; keep magic-1 wrappers as sent when the topic is magic 1, the codec
    stays and each wrapper's inner offsets are 0..n-1; otherwise rebuild everything in the
    topic's format and codec (Kafka takes the last codec seen when the topic says
    "producer")."""
    settings = job.settings
    checked: list[_Checked] = []
    wrappers: list[_Wrapper] = []
    keepable = settings.magic == 1
    source = Codec.NONE
    for index, e in enumerate(entries):
        if e.codec != Codec.NONE:
            source = Codec(e.codec)
        if e.magic == rb.MAGIC:
            keepable = False
            header, records = _batch_records(mv, e, job, _where(e, index))
            checked += [
                _Checked(header.base_timestamp + r.timestamp_delta, r.key, r.value, r.headers)
                for r in records
            ]
            continue
        keepable = keepable and e.magic == 1 and e.codec != Codec.NONE
        count, wrapper_max = 0, NO_TIMESTAMP
        wrapper_attributes = e.attributes if e.codec else 0
        # _entries checked the entry itself; a wrapper's inner messages are checked here.
        for m in iter_legacy(mv, e, e.codec != Codec.NONE):
            claims_lat = m.magic == 1 and bool(
                (m.attributes | wrapper_attributes) & TIMESTAMP_TYPE_BIT
            )
            bad = _violation(
                job, m.timestamp if m.magic == 1 else NO_TIMESTAMP, m.key is None, False, claims_lat
            )
            if bad:
                raise _reject(
                    f"message {len(checked)} (inner message {count} of the wrapper at "
                    f"byte {e.position})"
                    if e.codec
                    else _where(e, index),
                    bad,
                )
            keepable = keepable and m.stored_offset == count
            if m.magic == 1 and m.timestamp > wrapper_max:
                wrapper_max = m.timestamp
            checked.append(
                _Checked(m.timestamp if m.magic == 1 else NO_TIMESTAMP, m.key, m.value, ())
            )
            count += 1
        if keepable:
            wrappers.append(
                _Wrapper(e.position, e.next_position, e.attributes, e.timestamp, count, wrapper_max)
            )
    target = source if settings.target_codec is None else Codec(settings.target_codec)
    if keepable and target == source:
        return _wrappers_kept(mv, wrappers, job)
    return _converted(checked, job, target)


def _converted(checked: list[_Checked], job: _Job, target: Codec) -> ValidatedRecords:
    """Checked messages rebuilt in the topic's format: one v2 batch, or magic-0/1 messages
    (one wrapper when compressed), offsets from ``next_offset``."""
    settings, now, lat = job.settings, job.now_ms, job.lat
    first, count = job.next_offset, len(checked)
    last = first + count - 1
    if settings.magic == 2:
        spec = rb.BatchSpec(
            base_offset=first,
            codec=target,
            log_append_time=lat,
            partition_leader_epoch=job.leader_epoch,
        )
        out = rb.build_batch(
            spec,
            [
                (i, now if lat else m.timestamp, m.key, m.value, m.headers)
                for i, m in enumerate(checked)
            ],
            max_timestamp=now if lat else None,
        )
        _recheck_sizes(out, settings)
        return _result(out, job, count, now if lat else max(m.timestamp for m in checked), last)
    if target == Codec.ZSTD:
        target = Codec.NONE  # unreachable by config (zstd needs magic 2); never write it below
    if settings.magic == 0:
        stored = [NO_TIMESTAMP] * count
    else:
        stored = [now if lat else m.timestamp for m in checked]
    type_bit = TIMESTAMP_TYPE_BIT if lat and target == Codec.NONE else 0
    out = build_legacy(
        [
            (first + i, ts, type_bit, m.key, m.value)
            for i, (ts, m) in enumerate(zip(stored, checked))
        ],
        settings.magic,
        target,
        settings.timestamp_type,
        now if lat else None,
    )
    _recheck_sizes(out, settings)
    if lat:
        return _result(out, job, count, now, last if target != Codec.NONE else first)
    max_ts = max(stored)
    max_off = last if target != Codec.NONE else first + stored.index(max_ts)
    return _result(out, job, count, max_ts, max_off)


def _recheck_sizes(out: Buffer, settings: TopicSettings) -> None:
    """Conversion and recompression change sizes; Kafka re-checks them against the limit."""
    for entry in iter_shallow(out):
        if LOG_OVERHEAD + entry.size > settings.max_message_bytes:
            raise _RejectError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"after conversion to magic {settings.magic} and compression "
                f"{'none' if entry.codec == 0 else Codec(entry.codec).name.lower()}, the entry "
                f"at offset {entry.offset} is {LOG_OVERHEAD + entry.size} bytes, above "
                f"max.message.bytes {settings.max_message_bytes}",
            )


# -- the native fast path for magic-1 topics ---------------------------------------------------

# scan_v1 modes
_TOP_CREATE_TIME = 0  # top-level messages: rewrite offsets
_TOP_LOG_APPEND = 1  # top-level messages: rewrite offsets, timestamp, bit 3, CRC
_INNER = 2  # inner messages of a wrapper: check relative offsets 0..n-1, no writes


def _fast_magic1(mv: memoryview, job: _Job) -> ValidatedRecords | None:
    """Paths 1 and 2 through ``scan_v1`` for the common magic-1 inputs: an uncompressed set
    (checked and rewritten in one call) or wrappers of one codec kept as sent (each inner set
    checked in one call). None at anything unusual or wrong, or a trailing partial entry:
    the Python paths then give the precise answer."""
    assert scan_v1 is not None, "the caller checks that the extension is there"
    settings = job.settings
    lo, hi = (NO_TIMESTAMP, _LONG_MAX) if job.lat else (job.earliest, job.latest)
    max_size = settings.max_message_bytes - LOG_OVERHEAD
    n = len(mv)
    codec = mv[17] & CODEC_MASK
    if codec == Codec.NONE:
        if settings.target_codec:
            return None
        out = bytearray(mv)
        scanned = scan_v1(
            out,
            n,
            _TOP_LOG_APPEND if job.lat else _TOP_CREATE_TIME,
            job.next_offset,
            lo,
            hi,
            max_size,
            job.now_ms,
            settings.compacted,
        )
        if scanned is None:
            return None
        count, max_ts, max_index = scanned
        if job.lat:
            return _result(out, job, count, job.now_ms, job.next_offset)
        return _result(out, job, count, max_ts, job.next_offset + max_index)
    if codec > Codec.LZ4 or settings.target_codec not in (None, codec):
        return None
    wrappers = []
    pos = 0
    while pos + 26 <= n:
        _, size, crc, magic, attrs, ts = ENTRY_V1.unpack_from(mv, pos)
        end = pos + LOG_OVERHEAD + size
        if end > n or magic != 1 or attrs != codec or size < 22 or size > max_size:
            return None
        if _crc32(mv[pos + 16 : end]) != crc:
            return None
        (klen,) = I32.unpack_from(mv, pos + 26)
        vpos = pos + 30 + (klen if klen > 0 else 0)
        if klen < -1 or vpos + 4 > end:
            return None
        (vlen,) = I32.unpack_from(mv, vpos)
        if vlen < 0 or vpos + 4 + vlen != end:
            return None
        try:
            inner = decompress(codec, mv[vpos + 4 : end], 1, position=pos)
        except CorruptRecordError:
            return None  # the Python path reports it in Kafka's order
        scanned = scan_v1(
            inner, len(inner), _INNER, 0, lo, hi, 2**31, job.now_ms, settings.compacted
        )
        if scanned is None:
            return None
        wrappers.append(_Wrapper(pos, end, attrs, ts, scanned[0], scanned[1]))
        pos = end
    if pos != n or not wrappers:
        return None
    return _wrappers_kept(mv, wrappers, job)
