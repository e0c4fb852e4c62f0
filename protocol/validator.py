"""Produce-side validation of one partition's message set (Kafka 0.10.1's LogValidator rules).

Pure functions: the topic's settings, the next offset and the current time are parameters.
The steps, in order (any failure rejects the whole set, nothing is accepted):

1. Shallow pass: magic above 1 (e.g. aiokafka's magic-2 batches) -> CORRUPT_MESSAGE; entry
   (12 + size) above max.message.bytes -> MESSAGE_TOO_LARGE; size below the minimum, bad CRC or
   key/value lengths not filling the message -> CORRUPT_MESSAGE. An incomplete trailing entry is
   trimmed; nothing complete -> a result with zero messages.
2. Per message (inner messages for wrappers, whose CRCs are checked too): a producer claiming
   LogAppendTime (bit 3 on a message or wrapper) -> INVALID_TIMESTAMP; on a CreateTime topic of
   magic 1, ``|timestamp - now| > max_timestamp_difference_ms`` -> INVALID_TIMESTAMP (messages
   without a timestamp, -1, are exempt, as in later Kafka: 0.10.1 rejected every up-converted
   magic-0 message under a small limit); null key on a compacted topic -> CORRUPT_MESSAGE.
   Compressed inner messages that are compressed or of another magic -> CORRUPT_MESSAGE.
3. Offsets assigned from ``next_offset``. Uncompressed sets whose magics match the topic are
   rewritten in place (offsets; under LogAppendTime also timestamp, bit 3, CRC). Compressed sets
   are rewritten in place (wrapper offset, timestamp, attributes, CRC only; the payload is never
   recompressed) when the source codec equals the target, the topic magic is 1, every entry is a
   magic-1 wrapper and each wrapper's inner offsets are exactly 0..n-1. Otherwise every message
   is converted to the topic's magic and recompressed into one wrapper with the target codec.
   Entries made bigger by conversion are checked against max.message.bytes again.

Speed: uncompressed magic-1 sets and in-place magic-1 wrappers go through one hot loop,
``scan_v1`` in protocol/_fastscan.c: one call per set (or per wrapper) checks and rewrites the
copy in place, one libdeflate CRC per message, without the GIL from 64 KiB up. It only ever
accepts; anything unusual or wrong drops to the general path, which gives the precise answer.

Result metadata: ``max_timestamp`` (magic 1: the largest timestamp, or ``now`` under
LogAppendTime; -1 at magic 0 or when no message has one) and ``offset_of_max_timestamp`` (the
shallow offset holding it, as Kafka's time index wants: the first uncompressed message with that
timestamp, or the wrapper's offset, i.e. the last inner offset; ``last_offset`` when
``max_timestamp`` is -1).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from zlib import crc32 as _crc32

from protocol import recordbatch as rb
from protocol._fastscan import scan_v1, scan_v2
from protocol.compression import Codec, decompress
from protocol.errors import CorruptRecordError, ErrorCode
from protocol.records import (
    _CODEC_MASK, _ENTRY_V1, _I32, _I64, _KEY_OFFSET, _TIMESTAMP_TYPE_BIT, _U32, LOG_OVERHEAD,
    NO_TIMESTAMP, TimestampType, _build, _check, _check_batch, _deep, _view, iter_shallow,
)

__all__ = ["TopicSettings", "ValidatedRecords", "ProducerBatch", "Rejected", "validate_produce"]

_LONG_MAX = 2 ** 63 - 1

_B = struct.Struct(">b")
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
        before = (self.timestamp_before_max_ms if self.timestamp_before_max_ms != _LONG_MAX
                  else self.max_timestamp_difference_ms)
        after = (self.timestamp_after_max_ms if self.timestamp_after_max_ms != _LONG_MAX
                 else self.max_timestamp_difference_ms)
        return now_ms - before, now_ms + after


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    """What the idempotence check needs of one appended v2 batch with a producer id."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class ValidatedRecords:
    """A validated set ready to append: ``buffer`` holds the final offsets and CRCs.

    With ``message_count`` 0 (nothing complete was sent) the buffer is empty and
    ``first_offset`` / ``last_offset`` are -1; there is nothing to append.
    ``log_append_time`` is the time written under LogAppendTime, else -1.
    """

    buffer: bytes
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
    (the broker adds topic and partition)."""

    error: ErrorCode
    reason: str


class _RejectError(Exception):
    """Raised inside the validator to abandon the set; turned into :class:`Rejected`."""

    def __init__(self, error: ErrorCode, reason: str) -> None:
        super().__init__(reason)
        self.error = error
        self.reason = reason


_EMPTY = ValidatedRecords(b"", -1, -1, NO_TIMESTAMP, -1, -1, 0)


def validate_produce(buf, settings: TopicSettings, *, next_offset: int, now_ms: int,
                     require_magic2: bool = False,
                     partition_leader_epoch: int = 0) -> ValidatedRecords | Rejected:
    """Validate a producer's message set for one partition and assign offsets from
    ``next_offset``; see the module docstring for the rules. Never raises for bad input:
    malformed bytes come back as ``Rejected(CORRUPT_MESSAGE, ...)``. ``buf`` is not modified.

    ``require_magic2`` (Produce v3+): exactly one v2 batch, as Kafka's ProduceRequest demands.
    ``partition_leader_epoch`` is written into every stored v2 batch.
    """
    mv = _view(buf)
    try:
        if require_magic2 or settings.magic == 2 or (len(mv) > 16 and mv[16] == rb.MAGIC):
            return _validate_with_batches(mv, settings, next_offset, now_ms, require_magic2,
                                          partition_leader_epoch)
        if settings.magic == 1:
            fast = _fast_v1(mv, settings, next_offset, now_ms)
            if fast is not None:
                return fast
        return _validate(mv, settings, next_offset, now_ms)
    except _RejectError as exc:
        return Rejected(exc.error, exc.reason)
    except CorruptRecordError as exc:
        return Rejected(ErrorCode.CORRUPT_MESSAGE, str(exc))
    finally:
        mv.release()


# scan_v1 modes
_TOP_CREATE_TIME = 0   # top-level messages: rewrite offsets
_TOP_LOG_APPEND = 1    # top-level messages: rewrite offsets, timestamp, bit 3, CRC
_INNER = 2             # inner messages of a wrapper: check relative offsets 0..n-1, no writes


def _fast_v1(mv, settings: TopicSettings, next_offset: int,
             now_ms: int) -> ValidatedRecords | None:
    """The common cases into a magic-1 topic: uncompressed magic-1 sets, or
    magic-1 wrappers of one codec kept as they are (decompressed to check, only the wrappers
    rewritten). Returns None at anything unusual or wrong (or a trailing partial entry),
    leaving the precise answer to the general path."""
    lat = settings.timestamp_type == TimestampType.LOG_APPEND_TIME
    diff = settings.max_timestamp_difference_ms
    lo, hi = (now_ms - diff, now_ms + diff) if not lat else (NO_TIMESTAMP, 2 ** 63 - 1)
    max_size = settings.max_message_bytes - LOG_OVERHEAD
    n = len(mv)
    if n < 26 or mv[17] & _CODEC_MASK == Codec.NONE:
        if settings.target_codec:
            return None
        out = bytearray(mv)
        scanned = scan_v1(out, n, _TOP_LOG_APPEND if lat else _TOP_CREATE_TIME,
                          next_offset, lo, hi, max_size, now_ms, settings.compacted)
        if scanned is None:
            return None
        count, max_ts, max_index = scanned
        last = next_offset + count - 1
        if lat:
            return ValidatedRecords(bytes(out), next_offset, last, now_ms, next_offset, now_ms,
                                    count)
        return ValidatedRecords(bytes(out), next_offset, last, max_ts,
                                next_offset + max_index if max_ts != NO_TIMESTAMP else last,
                                -1, count)
    return _fast_wrappers_v1(mv, settings, next_offset, now_ms, lat, lo, hi, max_size)


def _fast_wrappers_v1(mv, settings, next_offset, now_ms, lat, lo, hi, max_size):
    out = bytearray(mv)
    n = len(out)
    codec = out[17] & _CODEC_MASK
    if codec > Codec.LZ4 or settings.target_codec not in (None, codec):
        return None
    pos = 0
    off = next_offset
    max_ts, max_off = NO_TIMESTAMP, -1
    while pos + 26 <= n:
        _, size, crc, magic, attrs, ts = _ENTRY_V1.unpack_from(out, pos)
        end = pos + LOG_OVERHEAD + size
        if end > n or magic != 1 or attrs != codec or size < 22 or size > max_size:
            return None
        with memoryview(out) as omv:
            if _crc32(omv[pos + 16:end]) != crc:
                return None
            (klen,) = _I32.unpack_from(out, pos + 26)
            vpos = pos + 30 + (klen if klen > 0 else 0)
            if klen < -1 or vpos + 4 > end:
                return None
            (vlen,) = _I32.unpack_from(out, vpos)
            if vlen < 0 or vpos + 4 + vlen != end:
                return None
            try:
                inner = decompress(codec, omv[vpos + 4:end], 1, position=pos)
            except CorruptRecordError:
                return None  # the general path reports it in Kafka's order
        scanned = scan_v1(inner, len(inner), _INNER, 0, lo, hi, 2 ** 31, now_ms,
                          settings.compacted)
        if scanned is None:
            return None
        count, wrapper_max, _ = scanned
        off += count
        new_ts = now_ms if lat else wrapper_max
        new_attrs = codec | (_TIMESTAMP_TYPE_BIT if lat else 0)
        _I64.pack_into(out, pos, off - 1)
        if new_ts != ts or new_attrs != attrs:
            _ATTRS_TS.pack_into(out, pos + 17, new_attrs, new_ts)
            with memoryview(out) as omv:
                _U32.pack_into(out, pos + 12, _crc32(omv[pos + 16:end]))
        if wrapper_max > max_ts:
            max_ts, max_off = wrapper_max, off - 1
        pos = end
    if pos != n or off == next_offset:
        return None
    last = off - 1
    if lat:
        return ValidatedRecords(bytes(out), next_offset, last, now_ms, last, now_ms,
                                off - next_offset)
    return ValidatedRecords(bytes(out), next_offset, last, max_ts,
                            max_off if max_ts != NO_TIMESTAMP else last, -1, off - next_offset)


def _entry_name(entry, index: int) -> str:
    return f"message {index} at byte {entry.position}"


def _shallow_pass(mv, settings: TopicSettings) -> list:
    entries = []
    for index, entry in enumerate(iter_shallow(mv)):
        if entry.magic not in (0, 1):
            raise _RejectError(
                ErrorCode.CORRUPT_MESSAGE,
                f"{_entry_name(entry, index)} has magic {entry.magic}: this broker stores "
                f"message format magic 0 and 1 only (Kafka 0.10); magic-2 record batches need "
                f"Produce v3+, configure the client for broker version 0.10")
        if LOG_OVERHEAD + entry.size > settings.max_message_bytes:
            raise _RejectError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"{_entry_name(entry, index)} is {LOG_OVERHEAD + entry.size} bytes, above "
                f"max.message.bytes {settings.max_message_bytes}")
        _check(mv, entry, None)
        if entry.codec > Codec.LZ4:
            raise _RejectError(
                ErrorCode.CORRUPT_MESSAGE,
                f"{_entry_name(entry, index)} has unknown compression codec {entry.codec} "
                f"in its attributes")
        entries.append(entry)
    return entries


def _check_message(settings: TopicSettings, now_ms: int, where: str, magic: int, attrs: int,
                   timestamp: int, key_is_null: bool, wrapper_attrs: int = 0) -> None:
    if magic == 1 and (attrs | wrapper_attrs) & _TIMESTAMP_TYPE_BIT:
        raise _RejectError(
            ErrorCode.INVALID_TIMESTAMP,
            f"{where} claims LogAppendTime; producers must send CreateTime (attribute bit 3 "
            f"clear), the broker sets LogAppendTime")
    if (magic == 1 and settings.magic == 1
            and settings.timestamp_type == TimestampType.CREATE_TIME
            and timestamp != NO_TIMESTAMP
            and abs(timestamp - now_ms) > settings.max_timestamp_difference_ms):
        raise _RejectError(
            ErrorCode.INVALID_TIMESTAMP,
            f"{where} has timestamp {timestamp}, more than "
            f"message.timestamp.difference.max.ms={settings.max_timestamp_difference_ms} away "
            f"from the broker's time {now_ms}")
    if settings.compacted and key_is_null:
        raise _RejectError(
            ErrorCode.CORRUPT_MESSAGE,
            f"{where} has a null key; a compacted topic accepts only keyed messages")


def _validate(mv, settings: TopicSettings, next_offset: int, now_ms: int):
    entries = _shallow_pass(mv, settings)
    if not entries:
        return _EMPTY
    source = Codec.NONE
    for e in entries:
        if e.codec != Codec.NONE:  # Kafka takes the last codec seen
            source = Codec(e.codec)
    target = source if settings.target_codec is None else Codec(settings.target_codec)
    lat = settings.magic == 1 and settings.timestamp_type == TimestampType.LOG_APPEND_TIME
    if source == Codec.NONE and target == Codec.NONE:
        return _uncompressed(mv, entries, settings, next_offset, now_ms, lat)
    return _compressed(mv, entries, settings, next_offset, now_ms, lat, source, target)


def _uncompressed(mv, entries, settings, next_offset, now_ms, lat):
    for index, e in enumerate(entries):
        (klen,) = _I32.unpack_from(mv, e.position + _KEY_OFFSET[e.magic])
        _check_message(settings, now_ms, _entry_name(e, index), e.magic, e.attributes,
                       e.timestamp, klen < 0)
    last = next_offset + len(entries) - 1
    if any(e.magic != settings.magic for e in entries):
        msgs = []
        for index, t in enumerate(t for e in entries for t in _deep(mv, e, False)):
            offset, ts, _tst, key, value, magic, _codec, attrs, _ = t
            if settings.magic == 0:
                ts = NO_TIMESTAMP
            elif lat:
                ts = now_ms
            elif magic == 0:
                ts = NO_TIMESTAMP
            attrs = (attrs & ~(_TIMESTAMP_TYPE_BIT | _CODEC_MASK)) | (
                _TIMESTAMP_TYPE_BIT if lat else 0)
            msgs.append((next_offset + index, ts, attrs, key, value))
        out = _build(msgs, settings.magic, Codec.NONE, settings.timestamp_type, None)
        _recheck_sizes(out, settings)
        return _result(out, next_offset, last, msgs, settings, now_ms, lat, compressed=False)
    end = entries[-1].next_position
    out = bytearray(mv[:end])
    off = next_offset
    max_ts, max_off = NO_TIMESTAMP, last
    for e in entries:
        p = e.position
        _I64.pack_into(out, p, off)
        if lat:
            _I64.pack_into(out, p + 18, now_ms)
            _B.pack_into(out, p + 17, e.attributes | _TIMESTAMP_TYPE_BIT)
            _U32.pack_into(out, p + 12, _crc32(memoryview(out)[p + 16:p + 12 + e.size]))
        elif settings.magic == 1 and e.timestamp > max_ts:
            max_ts, max_off = e.timestamp, off
        off += 1
    if lat:
        max_ts, max_off = now_ms, next_offset
    return ValidatedRecords(bytes(out), next_offset, last, max_ts, max_off,
                            now_ms if lat else -1, len(entries))


def _compressed(mv, entries, settings, next_offset, now_ms, lat, source, target):
    in_place = (source == target and settings.magic == 1
                and all(e.magic == 1 and e.codec != Codec.NONE for e in entries))
    msgs = []          # (offset, timestamp, attributes, key, value) for a rebuild
    wrappers = []      # (entry, inner count, max inner timestamp) for in-place
    index = 0
    for e in entries:
        count = 0
        wrapper_max = NO_TIMESTAMP
        for t in _deep(mv, e, True):
            _offset, ts, _tst, key, value, magic, _codec, attrs, stored = t
            where = (f"message {index} (inner message {count} of the wrapper at byte "
                     f"{e.position})" if e.codec else _entry_name(e, index))
            _check_message(settings, now_ms, where, magic, attrs, ts, key is None,
                           e.attributes if e.codec else 0)
            if stored != count:
                in_place = False
            if magic == 1 and ts > wrapper_max:
                wrapper_max = ts
            if settings.magic == 0 or (magic == 0 and not lat):
                ts = NO_TIMESTAMP
            elif magic == 0:
                ts = now_ms
            msgs.append((next_offset + index, ts,
                         attrs & ~(_TIMESTAMP_TYPE_BIT | _CODEC_MASK), key, value))
            count += 1
            index += 1
        wrappers.append((e, count, wrapper_max))
    last = next_offset + index - 1
    if in_place:
        return _compressed_in_place(mv, wrappers, settings, next_offset, last, now_ms, lat)
    if target == Codec.NONE:
        if lat:
            msgs = [(o, now_ms, a | _TIMESTAMP_TYPE_BIT, k, v) for o, _ts, a, k, v in msgs]
        out = _build(msgs, settings.magic, Codec.NONE, settings.timestamp_type, None)
        _recheck_sizes(out, settings)
        return _result(out, next_offset, last, msgs, settings, now_ms, lat, compressed=False)
    out = _build(msgs, settings.magic, target, settings.timestamp_type, now_ms if lat else None)
    _recheck_sizes(out, settings)
    return _result(out, next_offset, last, msgs, settings, now_ms, lat, compressed=True)


def _compressed_in_place(mv, wrappers, settings, next_offset, last, now_ms, lat):
    out = bytearray(mv[:wrappers[-1][0].next_position])
    off = next_offset
    max_ts, max_off = NO_TIMESTAMP, last
    for e, count, wrapper_max in wrappers:
        off += count
        p = e.position
        _I64.pack_into(out, p, off - 1)
        ts = now_ms if lat else wrapper_max
        attrs = (e.attributes & ~_TIMESTAMP_TYPE_BIT) | (_TIMESTAMP_TYPE_BIT if lat else 0)
        if ts != e.timestamp or attrs != e.attributes:
            _I64.pack_into(out, p + 18, ts)
            _B.pack_into(out, p + 17, attrs)
            _U32.pack_into(out, p + 12, _crc32(memoryview(out)[p + 16:p + 12 + e.size]))
        if not lat and wrapper_max > max_ts:
            max_ts, max_off = wrapper_max, off - 1
    if lat:
        max_ts, max_off = now_ms, last
    return ValidatedRecords(bytes(out), next_offset, last, max_ts, max_off,
                            now_ms if lat else -1, last - next_offset + 1)


def _recheck_sizes(out: bytes, settings: TopicSettings) -> None:
    """Conversion and recompression change sizes; Kafka re-checks them against the limit."""
    for entry in iter_shallow(out):
        if LOG_OVERHEAD + entry.size > settings.max_message_bytes:
            raise _RejectError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"after conversion to magic {settings.magic} and compression "
                f"{'none' if entry.codec == 0 else Codec(entry.codec).name.lower()}, the entry "
                f"at offset {entry.offset} is {LOG_OVERHEAD + entry.size} bytes, above "
                f"max.message.bytes {settings.max_message_bytes}")


def _result(out, first, last, msgs, settings, now_ms, lat, *, compressed: bool):
    if lat:
        return ValidatedRecords(out, first, last, now_ms, last if compressed else first, now_ms,
                                len(msgs))
    max_ts, max_off = NO_TIMESTAMP, last
    if settings.magic == 1:
        for offset, ts, _a, _k, _v in msgs:
            if ts > max_ts:
                max_ts, max_off = ts, offset
        if compressed:
            max_off = last
    return ValidatedRecords(out, first, last, max_ts, max_off if max_ts != NO_TIMESTAMP else last,
                            -1, len(msgs))


# -- record batches (magic 2 in or out) --------------------------------------------------------

def _batch_header(mv, entry, settings: TopicSettings, index: int) -> rb.BatchHeader:
    """The header checks of one v2 batch (Kafka 3.9's LogValidator.validateBatch and the
    request's own checks): size, CRC-32C, codec, no transactions, CreateTime, producer fields,
    record count."""
    where = f"record batch {index} at byte {entry.position}"
    if LOG_OVERHEAD + entry.size > settings.max_message_bytes:
        raise _RejectError(ErrorCode.MESSAGE_TOO_LARGE,
                           f"{where} is {LOG_OVERHEAD + entry.size} bytes, above "
                           f"max.message.bytes {settings.max_message_bytes}")
    header = _check_batch(mv, entry, None)
    if header.codec > Codec.ZSTD:
        raise _RejectError(ErrorCode.CORRUPT_MESSAGE,
                           f"{where} has unknown compression codec {header.codec}")
    if header.is_control or header.is_transactional:
        raise _RejectError(ErrorCode.INVALID_RECORD,
                           f"{where} is {'a control' if header.is_control else 'a transactional'}"
                           f" batch: transactions are not supported by this broker")
    if header.log_append_time:
        raise _RejectError(ErrorCode.INVALID_TIMESTAMP,
                           f"{where} claims LogAppendTime; producers must send CreateTime "
                           f"(attribute bit 3 clear), the broker sets LogAppendTime")
    if header.producer_id >= 0 and (header.base_sequence < 0 or header.producer_epoch < 0):
        raise _RejectError(ErrorCode.INVALID_RECORD,
                           f"{where} has producer id {header.producer_id} but sequence "
                           f"{header.base_sequence} and epoch {header.producer_epoch}")
    if header.records_count <= 0:
        raise _RejectError(ErrorCode.INVALID_RECORD, f"{where} holds no records")
    if header.last_offset_delta != header.records_count - 1:
        raise _RejectError(ErrorCode.INVALID_RECORD,
                           f"{where} holds {header.records_count} records but its last offset "
                           f"delta is {header.last_offset_delta}")
    return header


def _batch_records(mv, entry, settings: TopicSettings, now_ms: int, index: int):
    """Check one v2 batch and each of its records as Kafka 3.9's LogValidator does; return
    (header, records)."""
    where = f"record batch {index} at byte {entry.position}"
    header = _batch_header(mv, entry, settings, index)
    records = rb.iter_records(mv, entry.position, header)
    check_time = settings.timestamp_type == TimestampType.CREATE_TIME
    earliest, latest = settings.timestamp_bounds(now_ms)
    for i, r in enumerate(records):
        if r.offset_delta != i:
            raise _RejectError(ErrorCode.INVALID_RECORD,
                               f"{where}: record {i} has offset delta {r.offset_delta}, not {i}")
        ts = header.base_timestamp + r.timestamp_delta
        if check_time and ts != NO_TIMESTAMP and not earliest <= ts <= latest:
            raise _RejectError(
                ErrorCode.INVALID_TIMESTAMP,
                f"{where}: record {i} has timestamp {ts}, outside [{earliest}, {latest}] "
                f"allowed at the broker's time {now_ms} (message.timestamp.before.max.ms / "
                f"after.max.ms / difference.max.ms)")
        if settings.compacted and r.key is None:
            raise _RejectError(ErrorCode.INVALID_RECORD,
                               f"{where}: record {i} has a null key; a compacted topic accepts "
                               f"only keyed records")
        if r.headers and settings.magic < 2:
            raise _RejectError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                               f"{where}: record {i} has headers, which message format magic "
                               f"{settings.magic} (message.format.version) cannot store")
    return header, records


def _validate_with_batches(mv, settings: TopicSettings, next_offset: int, now_ms: int,
                           require_magic2: bool, leader_epoch: int):
    """Any input into a magic-2 topic, or record batches into any topic."""
    entries = list(iter_shallow(mv))
    if require_magic2:
        if any(e.magic != rb.MAGIC for e in entries):
            raise _RejectError(ErrorCode.INVALID_RECORD,
                               "Produce v3 and later carry record batches (magic 2) only")
        if len(entries) > 1:
            raise _RejectError(ErrorCode.INVALID_RECORD,
                               f"Produce v3 and later allow exactly one record batch per "
                               f"partition; this request holds {len(entries)}")
    if not entries:
        return _EMPTY
    lat = settings.timestamp_type == TimestampType.LOG_APPEND_TIME
    if settings.magic == 2 and all(e.magic == rb.MAGIC for e in entries):
        return _batches_to_batches(mv, entries, settings, next_offset, now_ms, lat, leader_epoch)
    # Conversion: every message is checked, then rebuilt in the topic's format.
    messages = []  # (timestamp, key, value, headers)
    codec = Codec.NONE
    for index, e in enumerate(entries):
        if e.magic == rb.MAGIC:
            header, records = _batch_records(mv, e, settings, now_ms, index)
            messages += [(header.base_timestamp + r.timestamp_delta, r.key, r.value, r.headers)
                         for r in records]
            if e.codec != Codec.NONE:
                codec = Codec(e.codec)  # Kafka takes the last codec seen
            continue
        if e.magic not in (0, 1):
            raise _RejectError(ErrorCode.CORRUPT_MESSAGE,
                               f"{_entry_name(e, index)} has unknown magic {e.magic}")
        if LOG_OVERHEAD + e.size > settings.max_message_bytes:
            raise _RejectError(ErrorCode.MESSAGE_TOO_LARGE,
                               f"{_entry_name(e, index)} is {LOG_OVERHEAD + e.size} bytes, "
                               f"above max.message.bytes {settings.max_message_bytes}")
        for t in _deep(mv, e, True):
            _offset, ts, _tst, key, value, magic, _codec, attrs, _ = t
            _check_legacy_message(settings, now_ms, _entry_name(e, index), magic, attrs, ts,
                                  key is None, e.attributes if e.codec else 0)
            messages.append((ts if magic == 1 else NO_TIMESTAMP, key, value, ()))
        if e.codec != Codec.NONE:
            codec = Codec(e.codec)
    target = codec if settings.target_codec is None else Codec(settings.target_codec)
    if settings.magic < 2 and target == Codec.ZSTD:
        target = Codec.NONE  # unreachable by config (zstd needs magic 2); never write it below
    last = next_offset + len(messages) - 1
    if settings.magic == 2:
        spec = rb.BatchSpec(base_offset=next_offset, codec=target, log_append_time=lat,
                            partition_leader_epoch=leader_epoch)
        out = rb.build_batch(spec, [(i, now_ms if lat else ts, k, v, h)
                                    for i, (ts, k, v, h) in enumerate(messages)],
                             max_timestamp=now_ms if lat else None)
        max_ts = now_ms if lat else max(m[0] for m in messages)
        _recheck_sizes(out, settings)
        return ValidatedRecords(out, next_offset, last, max_ts, last, now_ms if lat else -1,
                                len(messages))
    legacy = [(next_offset + i, NO_TIMESTAMP if settings.magic == 0 else (now_ms if lat else ts),
               _TIMESTAMP_TYPE_BIT if lat and target == Codec.NONE else 0, k, v)
              for i, (ts, k, v, _h) in enumerate(messages)]
    out = _build(legacy, settings.magic, target, settings.timestamp_type,
                 now_ms if lat else None)
    _recheck_sizes(out, settings)
    return _result(out, next_offset, last, legacy, settings, now_ms, lat,
                   compressed=target != Codec.NONE)


def _check_legacy_message(settings: TopicSettings, now_ms: int, where: str, magic: int,
                          attrs: int, timestamp: int, key_is_null: bool, wrapper_attrs: int):
    """A magic-0/1 message going into a record-batch topic: the v2 rules (KIP-937 bounds)."""
    if magic == 1 and (attrs | wrapper_attrs) & _TIMESTAMP_TYPE_BIT:
        raise _RejectError(ErrorCode.INVALID_TIMESTAMP,
                           f"{where} claims LogAppendTime; producers must send CreateTime")
    earliest, latest = settings.timestamp_bounds(now_ms)
    if (magic == 1 and settings.timestamp_type == TimestampType.CREATE_TIME
            and timestamp != NO_TIMESTAMP and not earliest <= timestamp <= latest):
        raise _RejectError(ErrorCode.INVALID_TIMESTAMP,
                           f"{where} has timestamp {timestamp}, outside [{earliest}, {latest}] "
                           f"allowed at the broker's time {now_ms}")
    if settings.compacted and key_is_null:
        raise _RejectError(ErrorCode.INVALID_RECORD,
                           f"{where} has a null key; a compacted topic accepts only keyed records")


def _batches_to_batches(mv, entries, settings: TopicSettings, next_offset: int, now_ms: int,
                        lat: bool, leader_epoch: int) -> ValidatedRecords:
    """v2 batches into a v2 topic: kept as sent (offsets, leader epoch and, under
    LogAppendTime, the header's type and max timestamp rewritten in place with one CRC-32C),
    or re-encoded with the topic's codec."""
    out = bytearray()
    offset = next_offset
    max_ts, max_off = NO_TIMESTAMP, -1
    producers = []
    check_time = settings.timestamp_type == TimestampType.CREATE_TIME
    earliest, latest = settings.timestamp_bounds(now_ms)
    for index, e in enumerate(entries):
        header = _batch_header(mv, e, settings, index)
        target = header.codec if settings.target_codec is None else settings.target_codec
        # The native loop checks the records of a batch kept as sent; anything it does not
        # accept goes through the Python path for the precise answer.
        record_max = None
        if target == header.codec:
            record_max = scan_v2(rb.records_section(mv, header, e.position),
                                 header.records_count, header.base_timestamp, earliest, latest,
                                 check_time, settings.compacted)
        if record_max is None:
            header, records = _batch_records(mv, e, settings, now_ms, index)
            record_max = max((header.base_timestamp + r.timestamp_delta for r in records),
                             default=NO_TIMESTAMP)
        count = header.records_count
        start = len(out)
        if target == header.codec:
            out += mv[e.position:e.next_position]
            if not lat and record_max != header.max_timestamp:
                # Kafka corrects a header whose max timestamp disagrees with its records.
                _I64.pack_into(out, start + rb.MAX_TIMESTAMP_OFFSET, record_max)
                _U32.pack_into(out, start + rb.CRC_OFFSET,
                               rb.batch_crc(out, start, len(out)))
        else:
            spec = rb.BatchSpec(codec=Codec(target), producer_id=header.producer_id,
                                producer_epoch=header.producer_epoch,
                                base_sequence=header.base_sequence)
            out += rb.build_batch(spec, [(r.offset_delta, header.base_timestamp +
                                          r.timestamp_delta, r.key, r.value, r.headers)
                                         for r in records])
        rb.set_base_offset(out, start, offset, leader_epoch)
        if lat:
            rb.set_log_append_time(out, start, now_ms)
        batch_max = now_ms if lat else record_max
        last = offset + count - 1
        if batch_max > max_ts:
            max_ts, max_off = batch_max, last
        if header.producer_id >= 0:
            producers.append(ProducerBatch(header.producer_id, header.producer_epoch,
                                           header.base_sequence, header.last_sequence, offset,
                                           last, batch_max))
        offset += count
    _recheck_sizes(out, settings)
    last = offset - 1
    return ValidatedRecords(bytes(out), next_offset, last, max_ts,
                            max_off if max_ts != NO_TIMESTAMP else last,
                            now_ms if lat else -1, offset - next_offset, tuple(producers))
