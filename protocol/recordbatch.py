"""Kafka record batches, message format v2 (KIP-98): layout, read, build.

Binary layout (all integers big-endian; Kafka's DefaultRecordBatch.java)::

    offset  field                    size
    0       baseOffset               int64
    8       batchLength              int32   bytes after this field (entry = 12 + batchLength)
    12      partitionLeaderEpoch     int32   set by the leader; outside the CRC
    16      magic                    int8    2 (at byte 16 in every format, see entries.py)
    17      crc                      uint32  CRC-32C of bytes 21..end (attributes onwards)
    21      attributes               int16   bits 0-2 codec, 3 timestamp type (1 = LogAppendTime),
                                             4 transactional, 5 control, 6 delete horizon
    23      lastOffsetDelta          int32
    27      baseTimestamp            int64
    35      maxTimestamp             int64
    43      producerId               int64   -1 without an idempotent producer
    51      producerEpoch            int16
    53      baseSequence             int32
    57      recordsCount             int32
    61      records                  (compressed as a whole when the codec is not none)

    record  = length varint (bytes after it), attributes int8 (unused, 0),
              timestampDelta varlong, offsetDelta varint,
              keyLength varint (-1 = null), key, valueLength varint (-1 = null), value,
              headersCount varint, headers[keyLength varint, key (UTF-8),
                                           valueLength varint (-1 = null), value]

Varints are zig-zag encoded base-128 (protobuf's sint). A record's offset is baseOffset +
offsetDelta; its timestamp baseTimestamp + timestampDelta under CreateTime, and the batch's
maxTimestamp under LogAppendTime (the broker rewrites only the header, never the records).
baseOffset and partitionLeaderEpoch are outside the CRC, so a broker assigns them in place.

Malformed input raises :class:`~protocol.errors.CorruptRecordError` with the byte position of
the batch; nothing else escapes the readers.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, TypeAlias

from crc32c import crc32c

from protocol.compression import Codec, compress, decompress, decompress_transient
from protocol.errors import CorruptRecordError
from protocol.native import fastscan

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

__all__ = [
    "MAGIC",
    "BASE_OFFSET_OFFSET",
    "LENGTH_OFFSET",
    "PARTITION_LEADER_EPOCH_OFFSET",
    "MAGIC_OFFSET",
    "CRC_OFFSET",
    "ATTRIBUTES_OFFSET",
    "LAST_OFFSET_DELTA_OFFSET",
    "BASE_TIMESTAMP_OFFSET",
    "MAX_TIMESTAMP_OFFSET",
    "PRODUCER_ID_OFFSET",
    "PRODUCER_EPOCH_OFFSET",
    "BASE_SEQUENCE_OFFSET",
    "RECORDS_COUNT_OFFSET",
    "RECORD_BATCH_OVERHEAD",
    "CODEC_MASK",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_MASK",
    "CONTROL_MASK",
    "DELETE_HORIZON_MASK",
    "NO_PRODUCER_ID",
    "NO_PRODUCER_EPOCH",
    "NO_SEQUENCE",
    "NO_PARTITION_LEADER_EPOCH",
    "BatchHeader",
    "HEADER",
    "Record",
    "read_header",
    "iter_records",
    "build_empty_batch",
    "rebuild_batch",
    "batch_crc",
    "build_batch",
    "encode_varint",
    "read_varint",
    "EndTxnMarker",
    "build_end_txn_marker",
    "read_end_txn_marker",
    "stored_end_txn_marker",
    "control_type",
]

MAGIC = 2
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORD_BATCH_OVERHEAD = 61
# batchLength of a batch without records: everything after the length field.
MIN_BATCH_LENGTH = RECORD_BATCH_OVERHEAD - PARTITION_LEADER_EPOCH_OFFSET

CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

# Every header field, in order (BatchHeader's): 61 bytes.
HEADER = struct.Struct(">qiibIhiqqqhii")
assert HEADER.size == RECORD_BATCH_OVERHEAD
# From attributes to recordsCount: the CRC-covered part of the header.
_HEADER_AFTER_CRC = struct.Struct(">hiqqqhii")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")


class BatchHeader(NamedTuple):
    """The 61-byte header of a record batch, fields named as in DefaultRecordBatch."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """KIP-534: the time after which the cleaner may drop this batch's tombstones, set by
        the cleaner that first kept them (carried in baseTimestamp); None when not set."""
        if self.attributes & DELETE_HORIZON_MASK:
            return self.base_timestamp
        return None

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def last_sequence(self) -> int:
        """The sequence of the last record (int32 wrap-around, as Kafka's
        DefaultRecordBatch.incrementSequence), or -1 without a producer."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF

    @property
    def entry_size(self) -> int:
        return LENGTH_OFFSET + 4 + self.batch_length


# A record's headers: (key, value) pairs, keys decoded with surrogateescape.
Headers: TypeAlias = tuple[tuple[str, bytes | None], ...]
# One record to build: (offset_delta, timestamp, key, value, headers), timestamp absolute.
RecordInput: TypeAlias = tuple[int, int, bytes | None, bytes | None, Headers]


class Record(NamedTuple):
    """One record of a batch as stored: deltas are relative to the batch header."""

    timestamp_delta: int
    offset_delta: int
    key: bytes | None
    value: bytes | None
    headers: Headers


def read_header(buf: Buffer, position: int = 0) -> BatchHeader:
    """The header of the batch starting at ``position`` (at least 61 bytes must be there)."""
    return BatchHeader._make(HEADER.unpack_from(buf, position))


_native_crc32c: Callable[[Buffer, int, int], int] | None = fastscan.crc32c if fastscan else None


def batch_crc(buf: Buffer, position: int, end: int) -> int:
    """CRC-32C of a batch's covered bytes (attributes to ``end``); by the extension where it is
    built, which reads the range without a view and its slice (a third of this call's cost)."""
    if _native_crc32c is not None:
        return _native_crc32c(buf, position + ATTRIBUTES_OFFSET, end)
    return crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET : end])


# -- varints ---------------------------------------------------------------------------------


def encode_varint(value: int, out: bytearray) -> None:
    """Append ``value`` (a signed 64-bit integer) zig-zag encoded."""
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def read_varint(buf: bytes | bytearray | memoryview, pos: int, end: int) -> tuple[int, int]:
    """(value, next position) of the zig-zag varint at ``pos``; ValueError when it runs past
    ``end`` or beyond 10 bytes."""
    shift = 0
    result = 0
    while True:
        if pos >= end:
            raise ValueError("varint runs past the end of the records")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint is longer than 10 bytes")


def _read_bytes(
    buf: bytes | bytearray | memoryview, pos: int, end: int
) -> tuple[bytes | None, int]:
    length, pos = read_varint(buf, pos, end)
    if length < 0:
        if length != -1:
            raise ValueError(f"length {length} is negative")
        return None, pos
    if pos + length > end:
        raise ValueError(f"a {length}-byte field runs past the end of its record")
    return bytes(buf[pos : pos + length]), pos + length


def _parse_records(data: bytes | memoryview, count: int, where: str, position: int) -> list[Record]:
    """Every record of ``data`` (the uncompressed records section); it must hold exactly
    ``count`` records and nothing more."""
    records = []
    pos, n = 0, len(data)
    try:
        for _ in range(count):
            length, pos = read_varint(data, pos, n)
            end = pos + length
            if length < 0 or end > n:
                raise ValueError(f"record length {length} does not fit in the batch")
            pos += 1  # record attributes: unused
            ts_delta, pos = read_varint(data, pos, end)
            offset_delta, pos = read_varint(data, pos, end)
            key, pos = _read_bytes(data, pos, end)
            value, pos = _read_bytes(data, pos, end)
            header_count, pos = read_varint(data, pos, end)
            if header_count < 0:
                raise ValueError(f"header count {header_count} is negative")
            headers = []
            for _ in range(header_count):
                hkey, pos = _read_bytes(data, pos, end)
                if hkey is None:
                    raise ValueError("a header key is null")
                hvalue, pos = _read_bytes(data, pos, end)
                # Kafka does not check that header keys are UTF-8; keep any bytes losslessly.
                headers.append((hkey.decode("utf-8", "surrogateescape"), hvalue))
            if pos != end:
                raise ValueError(f"record has {end - pos} bytes after its headers")
            records.append(Record(ts_delta, offset_delta, key, value, tuple(headers)))
    except (ValueError, IndexError) as exc:
        raise CorruptRecordError(
            f"{where}: record {len(records)} is malformed: {exc}", offset=position
        ) from None
    if pos != n:
        raise CorruptRecordError(
            f"{where}: {n - pos} bytes follow its {count} records", offset=position
        )
    return records


POSITION_FIELDS = 8
"""record_positions' columns, per record: timestamp delta, offset delta, key start, key length
(-1 null), value start, value length (-1 null), headers start, header count."""


def record_positions(
    buf: bytes | bytearray | memoryview, start: int, end: int, count: int
) -> list[int]:
    """The fields of the ``count`` records in ``buf[start:end]`` (a records section, already
    decompressed) as POSITION_FIELDS ints per record, positions indexing ``buf``: what a
    columnar reader gathers from without a Python object per record. The C extension's
    ``record_positions`` gives the same as native int64 bytes. Raises CorruptRecordError when
    the records do not exactly fill the section."""
    out: list[int] = []
    pos = start
    try:
        for _ in range(count):
            length, pos = read_varint(buf, pos, end)
            record_end = pos + length
            if length <= 0 or record_end > end:
                raise ValueError(f"record length {length} does not fit in the batch")
            pos += 1  # record attributes: unused
            ts_delta, pos = read_varint(buf, pos, record_end)
            offset_delta, pos = read_varint(buf, pos, record_end)
            fields = [ts_delta, offset_delta]
            for _ in range(2):  # key, value
                flen, pos = read_varint(buf, pos, record_end)
                if flen < -1 or pos + flen > record_end:
                    raise ValueError(f"a {flen}-byte field does not fit in its record")
                fields += (pos, flen)
                pos += max(flen, 0)
            header_count, pos = read_varint(buf, pos, record_end)
            if header_count < 0:
                raise ValueError(f"header count {header_count} is negative")
            fields += (pos, header_count)
            for _ in range(header_count):
                hkey, pos = _read_bytes(buf, pos, record_end)
                if hkey is None:
                    raise ValueError("a header key is null")
                _, pos = _read_bytes(buf, pos, record_end)
            if pos != record_end:
                raise ValueError(f"record has {record_end - pos} bytes after its headers")
            out += fields
    except (ValueError, IndexError) as exc:
        raise CorruptRecordError(
            f"records at byte {start}: record {len(out) // 8} is malformed: {exc}", offset=start
        ) from None
    if pos != end:
        raise CorruptRecordError(
            f"records at byte {start}: {end - pos} bytes follow its {count} records", offset=start
        )
    return out


def record_fields(
    buf: Buffer, header: BatchHeader, position: int
) -> tuple[memoryview, Sequence[int]]:
    """(records section, POSITION_FIELDS ints per record indexing it) of the batch at
    ``position``: the C extension's record_positions where it is built and takes the records,
    else :func:`record_positions`, which raises CorruptRecordError for malformed ones."""
    data = memoryview(records_section(buf, header, position))
    count = header.records_count
    if fastscan is not None:
        native = fastscan.record_positions(data, 0, len(data), count)
        if native is not None:
            return data, memoryview(native).cast("q")
    return data, record_positions(data, 0, len(data), count)


def read_headers(
    buf: bytes | bytearray | memoryview, pos: int, count: int
) -> list[tuple[str, bytes | None]]:
    """``count`` headers from ``pos`` (a position from :func:`record_positions`)."""
    headers = []
    for _ in range(count):
        hkey, pos = _read_bytes(buf, pos, len(buf))
        if hkey is None:
            raise CorruptRecordError(f"a header key at byte {pos} is null", offset=pos)
        hvalue, pos = _read_bytes(buf, pos, len(buf))
        headers.append((hkey.decode("utf-8", "surrogateescape"), hvalue))
    return headers


def records_section(
    buf: Buffer, header: BatchHeader, position: int, *, transient: bool = False
) -> bytes | memoryview:
    """The batch's records section, decompressed when the batch is compressed. ``transient``:
    for a reader done with it before its thread calls again (the native scan), which lets a
    compressed section be decompressed into a buffer the thread reuses."""
    data = memoryview(buf)[position + RECORD_BATCH_OVERHEAD : position + header.entry_size]
    if header.codec == Codec.NONE:
        return data
    if transient:
        return decompress_transient(header.codec, data, MAGIC, position=position)
    return decompress(header.codec, data, MAGIC, position=position)


def iter_records(buf: Buffer, position: int = 0, header: BatchHeader | None = None) -> list[Record]:
    """The records of the batch at ``position`` (decompressed; no CRC check). Raises
    CorruptRecordError when they do not exactly fill the batch or their count differs from
    recordsCount."""
    if header is None:
        header = read_header(buf, position)
    where = f"record batch at byte {position} (offset {header.base_offset})"
    if header.records_count < 0:
        raise CorruptRecordError(
            f"{where} has a negative record count {header.records_count}", offset=position
        )
    return _parse_records(
        records_section(buf, header, position), header.records_count, where, position
    )


# -- building --------------------------------------------------------------------------------


def _encode_nullable(data: bytes | None, out: bytearray) -> None:
    """A varint length (-1 for None), then the bytes."""
    if data is None:
        encode_varint(-1, out)
    else:
        encode_varint(len(data), out)
        out += data


def encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> None:
    """Append one record (with its length prefix) to ``out``."""
    body = bytearray(b"\x00")
    encode_varint(timestamp_delta, body)
    encode_varint(offset_delta, body)
    _encode_nullable(key, body)
    _encode_nullable(value, body)
    encode_varint(len(headers), body)
    for hkey, hvalue in headers:
        _encode_nullable(hkey.encode("utf-8", "surrogateescape"), body)
        _encode_nullable(hvalue, body)
    encode_varint(len(body), out)
    out += body


@dataclass(frozen=True, slots=True)
class BatchSpec:
    """Header fields of a batch to build (the rest derive from its records).
    ``delete_horizon_ms`` >= 0 sets the delete horizon attribute (KIP-534) and makes it the
    baseTimestamp, as Kafka's cleaner writes a batch whose tombstones it keeps."""

    base_offset: int = 0
    codec: Codec = Codec.NONE
    log_append_time: bool = False
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    base_sequence: int = NO_SEQUENCE
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH
    delete_horizon_ms: int = NO_TIMESTAMP
    is_transactional: bool = False
    is_control: bool = False

    @property
    def attributes(self) -> int:
        """The attribute bits besides the codec that this spec sets."""
        return (
            (TIMESTAMP_TYPE_MASK if self.log_append_time else 0)
            | (DELETE_HORIZON_MASK if self.delete_horizon_ms >= 0 else 0)
            | (TRANSACTIONAL_MASK if self.is_transactional else 0)
            | (CONTROL_MASK if self.is_control else 0)
        )


def build_batch(
    spec: BatchSpec,
    records: Sequence[RecordInput],
    *,
    max_timestamp: int | None = None,
    last_offset_delta: int | None = None,
) -> bytes:
    """Encode one batch. ``records`` = [(offset_delta, timestamp, key, value, headers)] with
    absolute timestamps (-1 = none). baseTimestamp is the first record's timestamp (or the
    spec's delete horizon), maxTimestamp the largest (or ``max_timestamp``, e.g. the append
    time under LogAppendTime). ``last_offset_delta`` overrides the last record's offset delta:
    a compacted batch keeps its original last offset, so the producer's last sequence survives
    (Kafka's overrideLastOffset). An empty list gives a batch without records."""
    raw = bytearray()
    if spec.delete_horizon_ms >= 0:
        base_ts = spec.delete_horizon_ms
    else:
        base_ts = records[0][1] if records else NO_TIMESTAMP
    for offset_delta, ts, key, value, headers in records:
        encode_record(raw, offset_delta, ts - base_ts, key, value, headers)
    if max_timestamp is None:
        max_timestamp = max((r[1] for r in records), default=NO_TIMESTAMP)
    if last_offset_delta is None:
        last_offset_delta = records[-1][0] if records else 0
    return _assemble(spec, raw, len(records), base_ts, max_timestamp, last_offset_delta)


def _varint_size(value: int) -> int:
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    size = 1
    while v >= 0x80:
        v >>= 7
        size += 1
    return size


def rebuild_batch(
    spec: BatchSpec,
    header: BatchHeader,
    section: bytes | memoryview,
    fields: Sequence[int],
    kept: Sequence[int],
) -> bytes:
    """The batch ``header`` describes with only the records ``kept`` (their indexes, in order)
    of its records ``section`` (decompressed; ``fields`` are :func:`record_positions`' columns
    over it), under ``spec`` (its delete horizon, if set, becomes the baseTimestamp). Records
    keep their offset deltas, keys, values and headers byte for byte; only their timestamp
    deltas are re-encoded when the baseTimestamp moves (the first record is gone, or a horizon
    is set). The last offset delta is the original one (Kafka's overrideLastOffset) and
    maxTimestamp the largest kept timestamp, or the header's under LogAppendTime. What a
    compacting cleaner writes, without decoding the records into objects."""
    old_base = header.base_timestamp
    first = kept[0] * POSITION_FIELDS
    if spec.delete_horizon_ms >= 0:
        new_base = spec.delete_horizon_ms
    elif header.delete_horizon_ms is not None:
        new_base = old_base
    else:
        new_base = old_base + fields[first]
    starts = []  # where each record (its length varint) starts, and the end
    pos, end = 0, len(section)
    for _ in range(len(fields) // POSITION_FIELDS):
        starts.append(pos)
        length, after = read_varint(section, pos, end)
        pos = after + length
    starts.append(pos)
    raw = bytearray()
    max_ts = NO_TIMESTAMP
    for n in kept:
        row = n * POSITION_FIELDS
        ts = old_base + fields[row]
        if ts > max_ts:
            max_ts = ts
        if new_base == old_base:
            raw += section[starts[n] : starts[n + 1]]
            continue
        klen, kstart = fields[row + 3], fields[row + 2]
        body = bytearray(b"\x00")
        encode_varint(ts - new_base, body)
        encode_varint(fields[row + 1], body)
        body += section[kstart - _varint_size(klen) : starts[n + 1]]
        encode_varint(len(body), raw)
        raw += body
    if spec.log_append_time:
        max_ts = header.max_timestamp
    return _assemble(spec, raw, len(kept), new_base, max_ts, header.last_offset_delta)


def _assemble(
    spec: BatchSpec,
    raw: bytearray,
    count: int,
    base_ts: int,
    max_timestamp: int,
    last_offset_delta: int,
) -> bytes:
    """Header, (compressed) records ``raw`` and CRC-32C of a batch."""
    body = compress(spec.codec, raw, MAGIC) if spec.codec != Codec.NONE else raw
    attributes = int(spec.codec) | spec.attributes
    out = bytearray(
        HEADER.pack(
            spec.base_offset,
            RECORD_BATCH_OVERHEAD - LENGTH_OFFSET - 4 + len(body),
            spec.partition_leader_epoch,
            MAGIC,
            0,
            attributes,
            last_offset_delta,
            base_ts,
            max_timestamp,
            spec.producer_id,
            spec.producer_epoch,
            spec.base_sequence,
            count,
        )
    )
    out += body
    _U32.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def build_empty_batch(spec: BatchSpec, last_offset_delta: int, timestamp: int) -> bytes:
    """A batch header without records, as Kafka's cleaner keeps for a producer's last batch
    once all its records are gone (DefaultRecordBatch.writeEmptyHeader): the spec's producer
    fields, offsets, timestamp type and transactional bit, base and max timestamp
    ``timestamp``, no codec."""
    out = bytearray(
        HEADER.pack(
            spec.base_offset,
            MIN_BATCH_LENGTH,
            spec.partition_leader_epoch,
            MAGIC,
            0,
            spec.attributes & ~DELETE_HORIZON_MASK,
            last_offset_delta,
            timestamp,
            timestamp,
            spec.producer_id,
            spec.producer_epoch,
            spec.base_sequence,
            0,
        )
    )
    _U32.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def set_log_append_time(buf: bytearray, position: int, timestamp: int) -> None:
    """Turn the batch at ``position`` into a LogAppendTime batch stamped ``timestamp``: set the
    attribute bit and maxTimestamp, then recompute the CRC. The records are not touched."""
    (attributes,) = _I16.unpack_from(buf, position + ATTRIBUTES_OFFSET)
    _I16.pack_into(buf, position + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    _I64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, timestamp)
    (length,) = _I32.unpack_from(buf, position + LENGTH_OFFSET)
    end = position + LENGTH_OFFSET + 4 + length
    _U32.pack_into(buf, position + CRC_OFFSET, batch_crc(buf, position, end))


def set_base_offset(
    buf: bytearray, position: int, base_offset: int, partition_leader_epoch: int
) -> None:
    """Assign the batch's offsets and leader epoch in place (both outside the CRC)."""
    _I64.pack_into(buf, position + BASE_OFFSET_OFFSET, base_offset)
    _I32.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)


# Transaction markers (KIP-98; Kafka's EndTransactionMarker, ControlRecordType): a control batch
# (attributes transactional | control) of the producer's id and epoch, base sequence -1, holding
# one record whose
#   key   = int16 version (0), int16 type (0 ABORT, 1 COMMIT)                          4 bytes
#   value = int16 version (0), int32 coordinator epoch                                 6 bytes
# Kafka reads any key and value version >= 0 by their first fields (later versions may add more).
_CONTROL_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")
CONTROL_TYPE_ABORT = 0
CONTROL_TYPE_COMMIT = 1


class EndTxnMarker(NamedTuple):
    """What a transaction marker says: committed or aborted, by which coordinator epoch."""

    commit: bool
    coordinator_epoch: int


def build_end_txn_marker(
    marker: EndTxnMarker,
    *,
    base_offset: int,
    producer_id: int,
    producer_epoch: int,
    timestamp: int,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    log_append_time: bool = False,
) -> bytes:
    """The control batch of one transaction marker (MemoryRecords.withEndTransactionMarker),
    stamped ``timestamp``, as LogAppendTime when the topic's type is that."""
    spec = BatchSpec(
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=True,
        is_control=True,
        log_append_time=log_append_time,
    )
    key = _CONTROL_KEY.pack(0, CONTROL_TYPE_COMMIT if marker.commit else CONTROL_TYPE_ABORT)
    value = _MARKER_VALUE.pack(0, marker.coordinator_epoch)
    return build_batch(spec, [(0, timestamp, key, value, ())])


def read_end_txn_marker(record: Record) -> EndTxnMarker | None:
    """The marker a control batch's record holds; None for a control record of another type
    (Kafka 4 knows others, e.g. KRaft's leader change, which are not transaction markers).
    Raises CorruptRecordError when the key or value is too short or of a negative version."""
    key, value = record.key, record.value
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptRecordError(f"control record key of {0 if key is None else len(key)} bytes")
    version, control_type = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record key version {version}")
    if control_type not in (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT):
        return None
    if value is None or len(value) < _MARKER_VALUE.size:
        raise CorruptRecordError(
            f"transaction marker value of {0 if value is None else len(value)} bytes, "
            f"needs {_MARKER_VALUE.size}"
        )
    value_version, coordinator_epoch = _MARKER_VALUE.unpack_from(value)
    if value_version < 0:
        raise CorruptRecordError(f"transaction marker value version {value_version}")
    return EndTxnMarker(control_type == CONTROL_TYPE_COMMIT, coordinator_epoch)


def stored_end_txn_marker(buf: Buffer, position: int, header: BatchHeader) -> EndTxnMarker | None:
    """The marker of the stored control batch at ``position``; None when it holds no record (the
    cleaner emptied it), another control type (KRaft's), or a record too short to be one (a
    stored batch passed its CRC: nothing to refuse, only nothing to act on)."""
    records = iter_records(buf, position, header)
    if not records:
        return None
    try:
        return read_end_txn_marker(records[0])
    except CorruptRecordError:
        return None


def control_type(record: Record) -> int:
    """The control type of a control record's key (0 ABORT, 1 COMMIT, others), -1 when the
    key is too short to hold one."""
    key = record.key or b""
    return _CONTROL_KEY.unpack_from(key)[1] if len(key) >= _CONTROL_KEY.size else -1
