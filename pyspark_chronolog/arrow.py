"""Fetched record sets -> Arrow record batches with exactly the Spark schema, without a Python
object per message.

A fetched set may hold record batches (magic 2) and older message sets (magic 0/1) side by
side, as a log does; the reader takes each as stored (Fetch v4+).

Record batches (protocol/recordbatch.py owns their layout): the batch header gives the base
offset and timestamps; the records section (decompressed when the batch is) is walked once by
``record_positions`` (the C extension's, or protocol.recordbatch's pure-Python twin), which
gives where each record's key, value and headers lie, so numpy computes offsets and timestamps
(the batch's max timestamp for every record of a LogAppendTime batch) and the key and value
columns are laid over the buffer. Control batches yield no rows. Headers are decoded only when
the ``headers`` column is asked for (option includeHeaders), and only for records that have
some.

read_committed (KIP-98) skips whole batches as Kafka's consumer does (CompletedFetch): the fetch
answer lists each aborted transaction in the fetched range as (producer id, first offset); taken
in order of first offset, a transaction's producer becomes aborted once a batch reaches its first
offset, its transactional batches are skipped until its ABORT marker, and the marker clears it.
Skipped batches and markers still move the next offset past them.

Magic 1, uncompressed (Kafka 0.10.1, bytes from the entry start):
  0 offset int64 | 8 size int32 | 12 crc uint32 | 16 magic int8 | 17 attributes int8 |
  18 timestamp int64 | 26 key_length int32 (-1 null) | 30 key | value_length int32 | value
Entry length = 12 + size; size = 22 + key bytes + value bytes. One Python loop walks the size
fields to find entry positions; numpy gathers every header field at once; key and value columns
come from an Arrow binary array laid over the buffer whose offsets alternate [value start, value
end, next value start, ...], so ``take`` of the even elements copies the bytes in C++. A
compressed wrapper is decompressed (protocol.compression) and its inner set parsed the same way,
with KIP-31 relative offsets made absolute and a LogAppendTime wrapper's time applied. Magic 0,
and wrappers that break a nesting rule, go through protocol.records.iter_deep (which raises the
precise error).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import partial
from typing import Mapping, Sequence

import numpy as np
import pyarrow as pa

from protocol import LOG_OVERHEAD, MIN_MESSAGE_SIZE, CorruptRecordError, iter_deep, iter_shallow
from protocol import recordbatch as rb
from protocol.compression import decompress
from protocol.native import fastscan

SPARK_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
SPARK_SCHEMA_WITH_HEADERS = SPARK_SCHEMA + ", headers array<struct<key:string,value:binary>>"
HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
)
ARROW_SCHEMA_WITH_HEADERS = ARROW_SCHEMA.append(pa.field("headers", HEADERS_TYPE))

_SIZE = struct.Struct(">i")
_V1_OVERHEAD = 22  # message bytes besides key and value, magic 1
_TIMESTAMP_TYPE_BIT = 0x08
_CODEC_MASK = 0x07


def _positions(mv: memoryview) -> np.ndarray:
    """Start of every complete top-level entry; an incomplete trailing entry (fetch responses
    cut one off at max_bytes) is ignored."""
    out = []
    append = out.append
    unpack = _SIZE.unpack_from
    pos, n = 0, len(mv)
    while pos + LOG_OVERHEAD <= n:
        size = unpack(mv, pos + 8)[0]
        if size < MIN_MESSAGE_SIZE:
            raise CorruptRecordError(
                f"message at byte {pos} has size {size} < {MIN_MESSAGE_SIZE}", offset=pos
            )
        if pos + LOG_OVERHEAD + size > n:
            break
        append(pos)
        pos += LOG_OVERHEAD + size
    return np.array(out, dtype=np.int64)


def _binary_column(buffer: pa.Buffer, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """pa.binary() array of the ``lengths[i]`` bytes at ``starts[i]`` (length -1 = null).

    ``starts`` increase and ranges do not overlap, so [s0, e0, s1, e1, ...] is a valid offsets
    buffer over ``buffer`` whose even elements are the wanted values.
    """
    n = len(starts)
    if n == 0:
        return pa.array([], pa.binary())
    ends = starts + np.maximum(lengths, 0)
    offsets = np.empty(2 * n, dtype=np.int32)
    offsets[0::2] = starts
    offsets[1::2] = ends
    valid = np.zeros(2 * n - 1, dtype=bool)
    valid[0::2] = lengths >= 0
    validity = pa.array(valid).buffers()[1]
    laid = pa.Array.from_buffers(pa.binary(), 2 * n - 1, [validity, pa.py_buffer(offsets), buffer])
    return laid.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int64)))


def _constant_string(value: str, n: int) -> pa.Array:
    raw = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)]
    )


def _batch(
    topic: str,
    partition: int,
    key: pa.Array,
    value: pa.Array,
    offsets: np.ndarray,
    timestamps_ms: np.ndarray,
    ts_types: np.ndarray,
    headers: pa.Array | None = None,
) -> pa.RecordBatch:
    n = len(offsets)
    columns = [
        key,
        value,
        _constant_string(topic, n),
        pa.array(np.full(n, partition, dtype=np.int32)),
        pa.array(offsets.astype(np.int64)),
        pa.array(timestamps_ms.astype(np.int64) * 1000, type=pa.timestamp("us", tz="UTC")),
        pa.array(ts_types.astype(np.int32)),
    ]
    if headers is None:
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
    return pa.RecordBatch.from_arrays(columns + [headers], schema=ARROW_SCHEMA_WITH_HEADERS)


def _headers_column(chunk: _Chunk | None, rows: np.ndarray) -> pa.Array:
    """The headers of ``rows`` of ``chunk`` (None: rows without headers, magic 0/1)."""
    n = len(rows)
    if chunk is None or chunk.header_count is None or not np.any(chunk.header_count[rows]):
        return pa.ListArray.from_arrays(
            pa.array(np.zeros(n + 1, dtype=np.int32)), pa.array([], HEADERS_TYPE.value_type)
        )
    buf = chunk.buffer
    values = []
    for start, count in zip(chunk.header_start[rows].tolist(), chunk.header_count[rows].tolist()):
        # Kafka does not require UTF-8 keys; Spark (a Java String) shows U+FFFD for bad bytes.
        values.append(
            [
                {
                    "key": key.encode("utf-8", "surrogateescape").decode("utf-8", "replace"),
                    "value": value,
                }
                for key, value in rb.read_headers(buf, start, count)
            ]
            if count
            else []
        )
    return pa.array(values, HEADERS_TYPE)


def _be(u8: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Signed big-endian integers of ``width`` (4 or 8) bytes at each of ``pos``, as int64."""
    raw = u8[pos[:, None] + np.arange(width, dtype=np.int64)]
    return raw.view(f">i{width}").reshape(-1).astype(np.int64)


@dataclass
class _Chunk:
    """Fields of consecutive messages or records of one buffer (positions index it)."""

    buffer: bytes
    offsets: np.ndarray
    timestamps: np.ndarray
    ts_types: np.ndarray
    key_start: np.ndarray
    key_len: np.ndarray
    value_start: np.ndarray
    value_len: np.ndarray
    last_offset: int = -1  # of the entries: a batch's may lie past its last record
    header_start: np.ndarray | None = None  # record batches only
    header_count: np.ndarray | None = None


def _fields(buf: bytes, u8: np.ndarray, pos: np.ndarray, where: str) -> _Chunk:
    """Parse the entries at ``pos``, checking key/value lengths against each size field."""
    sizes = _be(u8, pos + 8, 4)
    key_len = _be(u8, pos + 26, 4)
    key_start = pos + 30
    value_len_at = key_start + np.maximum(key_len, 0)
    bad = (key_len < -1) | (value_len_at + 4 > pos + LOG_OVERHEAD + sizes)
    value_len = np.zeros_like(key_len)
    if not np.any(bad):
        value_len = _be(u8, value_len_at, 4)
        bad = (value_len < -1) | (
            _V1_OVERHEAD + np.maximum(key_len, 0) + np.maximum(value_len, 0) != sizes
        )
    if np.any(bad):
        at = int(pos[np.argmax(bad)])
        raise CorruptRecordError(
            f"{where}: message at byte {at} has key/value lengths that do not match its size",
            offset=at,
        )
    offsets = _be(u8, pos, 8)
    return _Chunk(
        buf,
        offsets,
        _be(u8, pos + 18, 8),
        ((u8[pos + 17] >> 3) & 1).astype(np.int64),
        key_start,
        key_len,
        value_len_at + 4,
        value_len,
        int(offsets.max()),
    )


def _unwrap(buf: bytes, u8: np.ndarray, pos: np.ndarray, where: str) -> _Chunk | None:
    """The inner messages of the compressed wrapper at ``pos`` (one position) with absolute
    offsets (KIP-31) and the wrapper's LogAppendTime applied; None when the wrapper breaks a
    nesting rule, so that iter_deep raises its precise error."""
    wrapper = _fields(buf, u8, pos, where)
    codec = int(u8[pos[0] + 17]) & _CODEC_MASK
    if wrapper.value_len[0] < 0 or codec > 3:
        return None
    vstart = int(wrapper.value_start[0])
    inner = decompress(
        codec, memoryview(buf)[vstart : vstart + int(wrapper.value_len[0])], 1, position=int(pos[0])
    )
    ipos = _positions(memoryview(inner))
    if not len(ipos):
        return None
    iu8 = np.frombuffer(inner, dtype=np.uint8)
    last_end = int(ipos[-1]) + LOG_OVERHEAD + int(_be(iu8, ipos[-1:] + 8, 4)[0])
    if (
        last_end != len(inner)
        or np.any(iu8[ipos + rb.MAGIC_OFFSET] != 1)
        or np.any(iu8[ipos + 17] & _CODEC_MASK)
    ):
        return None
    chunk = _fields(inner, iu8, ipos, f"{where} (inside the wrapper at byte {int(pos[0])})")
    chunk.offsets = wrapper.offsets[0] - chunk.offsets[-1] + chunk.offsets
    chunk.last_offset = int(wrapper.offsets[0])
    if wrapper.ts_types[0] == 1:
        chunk.timestamps = np.full_like(chunk.timestamps, wrapper.timestamps[0])
        chunk.ts_types = np.ones_like(chunk.ts_types)
    return chunk


def _skipped_batches(
    buf: bytes,
    headers: Mapping[int, rb.BatchHeader],
    aborted: Sequence[tuple[int, int]],
    where: str,
) -> set[int]:
    """Positions of the batches of aborted transactions among ``headers`` (position -> header,
    in log order), given the fetch's ``aborted`` (producer id, first offset) pairs."""
    pending = sorted(aborted, key=lambda txn: txn[1])
    taken = 0
    producers: set[int] = set()
    skipped = set()
    for position, h in headers.items():
        if h.producer_id < 0:
            continue
        while taken < len(pending) and pending[taken][1] <= h.last_offset:
            producers.add(pending[taken][0])
            taken += 1
        if h.is_control:
            if h.records_count and _is_abort_marker(buf, position, h, where):
                producers.discard(h.producer_id)
        elif h.is_transactional and h.producer_id in producers:
            skipped.add(position)
    return skipped


def _is_abort_marker(buf: bytes, position: int, h: rb.BatchHeader, where: str) -> bool:
    """Whether the control batch at ``position`` is an ABORT marker (its first record says)."""
    try:
        marker = rb.read_end_txn_marker(rb.iter_records(buf, position, h)[0])
    except CorruptRecordError as exc:
        raise CorruptRecordError(
            f"{where}: control batch at byte {position} (offset {h.base_offset}): {exc}",
            offset=position,
        ) from None
    return marker is not None and not marker.commit


def _record_batch(
    buf: bytes, position: int, h: rb.BatchHeader, where: str, *, skip: bool = False
) -> _Chunk:
    """The records of the v2 batch at ``position`` (none for a control batch, nor when
    ``skip``: an aborted transaction's batch under read_committed)."""
    empty = np.zeros(0, dtype=np.int64)
    if h.is_control or skip:
        return _Chunk(buf, empty, empty, empty, empty, empty, empty, empty, h.last_offset)
    start, end = position + rb.RECORD_BATCH_OVERHEAD, position + h.entry_size
    data = buf
    if h.codec:
        data = decompress(h.codec, memoryview(buf)[start:end], rb.MAGIC, position=position)
        start, end = 0, len(data)
    raw = (
        fastscan.record_positions(data, start, end, h.records_count)
        if fastscan is not None
        else None
    )
    if raw is None:  # no extension, or malformed: the Python walk raises the precise error
        try:
            fields = np.array(
                rb.record_positions(data, start, end, h.records_count), dtype=np.int64
            )
        except CorruptRecordError as exc:
            raise CorruptRecordError(
                f"{where}: record batch at byte {position}: {exc}", offset=position
            ) from None
    else:
        fields = np.frombuffer(raw, dtype=np.int64)
    f = fields.reshape(-1, rb.POSITION_FIELDS)
    n = len(f)
    if h.log_append_time:
        timestamps, ts_types = np.full(n, h.max_timestamp), np.ones(n, dtype=np.int64)
    else:
        timestamps, ts_types = h.base_timestamp + f[:, 0], np.zeros(n, dtype=np.int64)
    return _Chunk(
        data,
        h.base_offset + f[:, 1],
        timestamps,
        ts_types,
        f[:, 2],
        f[:, 3],
        f[:, 4],
        f[:, 5],
        h.last_offset,
        f[:, 6],
        f[:, 7],
    )


def _legacy_chunks(buf: bytes, u8: np.ndarray, pos: np.ndarray, where: str) -> list | None:
    """Chunks of consecutive magic-1 entries (uncompressed runs and wrappers); None when a
    wrapper needs iter_deep's precise handling."""
    chunks = []
    first = 0
    for wrapper in [*np.flatnonzero(u8[pos + 17] & _CODEC_MASK), len(pos)]:
        if first < wrapper:
            chunks.append(_fields(buf, u8, pos[first:wrapper], where))
        if wrapper < len(pos):
            inner = _unwrap(buf, u8, pos[wrapper : wrapper + 1], where)
            if inner is None:
                return None
            chunks.append(inner)
        first = wrapper + 1
    return chunks


def decode(
    record_set: bytes,
    topic: str,
    partition: int,
    *,
    start: int,
    end: int,
    window: tuple[int | None, int | None] = (None, None),
    include_headers: bool = False,
    aborted: Sequence[tuple[int, int]] | None = None,
) -> tuple[pa.RecordBatch | None, int]:
    """Rows of ``record_set`` with start <= offset < end (and, when given, timestamp in
    [window[0], window[1])), plus the offset to fetch next; with ``include_headers`` the batch
    has the ``headers`` column. ``aborted`` (read_committed only): the fetch answer's aborted
    transactions, (producer id, first offset); their records are dropped.

    The next offset is one past the last complete entry seen (a batch's last offset, even when
    compaction removed its last records; at least ``start``; ``end`` once the range is done); it
    equals ``start`` when the set holds no complete entry. Raises CorruptRecordError for entries
    that contradict their own sizes or cannot be decompressed.
    """
    pos = _positions(memoryview(record_set))
    if len(pos) == 0:
        return None, start
    u8 = np.frombuffer(record_set, dtype=np.uint8)
    magics = u8[pos + rb.MAGIC_OFFSET]
    # Anything the vectorised walk does not handle is decoded message by message instead.
    deep = partial(
        _decode_deep,
        record_set,
        topic,
        partition,
        start=start,
        end=end,
        window=window,
        include_headers=include_headers,
        aborted=aborted,
    )
    if not np.all((magics == 1) | (magics == rb.MAGIC)):
        return deep()
    where = f"{topic}[{partition}] fetched set"
    headers = {p: rb.read_header(record_set, p) for p in pos[magics == rb.MAGIC].tolist()}
    skipped = _skipped_batches(record_set, headers, aborted, where) if aborted else set()
    chunks = []
    run = 0  # first entry of the current run of magic-1 entries
    for i in [*np.flatnonzero(magics == rb.MAGIC), len(pos)]:
        if run < i:
            legacy = _legacy_chunks(record_set, u8, pos[run:i], where)
            if legacy is None:
                return deep()
            chunks += legacy
        if i < len(pos):
            p = int(pos[i])
            chunks.append(_record_batch(record_set, p, headers[p], where, skip=p in skipped))
        run = i + 1
    last = max(c.last_offset for c in chunks)
    next_offset = min(end, max(start, last + 1))
    lo, hi = window
    parts = []
    for c in chunks:
        keep = (c.offsets >= start) & (c.offsets < end)
        if lo is not None:
            keep &= c.timestamps >= lo
        if hi is not None:
            keep &= c.timestamps < hi
        rows = np.flatnonzero(keep)
        if len(rows):
            buffer = pa.py_buffer(c.buffer)
            parts.append(
                (
                    _binary_column(buffer, c.key_start[rows], c.key_len[rows]),
                    _binary_column(buffer, c.value_start[rows], c.value_len[rows]),
                    c.offsets[rows],
                    c.timestamps[rows],
                    c.ts_types[rows],
                    _headers_column(c, rows) if include_headers else None,
                )
            )
    if not parts:
        return None, next_offset
    if len(parts) == 1:
        return _batch(topic, partition, *parts[0]), next_offset
    return _batch(
        topic,
        partition,
        pa.concat_arrays([p[0] for p in parts]),
        pa.concat_arrays([p[1] for p in parts]),
        *(np.concatenate([p[i] for p in parts]) for i in (2, 3, 4)),
        pa.concat_arrays([p[5] for p in parts]) if include_headers else None,
    ), next_offset


def _decode_deep(
    record_set: bytes,
    topic: str,
    partition: int,
    *,
    start: int,
    end: int,
    window: tuple[int | None, int | None],
    include_headers: bool,
    aborted: Sequence[tuple[int, int]] | None,
) -> tuple[pa.RecordBatch | None, int]:
    lo, hi = window
    where = f"{topic}[{partition}] fetched set"
    # Batches yield no message when they are markers or emptied by compaction: their headers
    # still move the next offset on, and read_committed skips aborted ones by offset range.
    batch_headers = {
        e.position: rb.read_header(record_set, e.position)
        for e in iter_shallow(record_set)
        if e.magic == rb.MAGIC
    }
    last = max([start - 1] + [h.last_offset for h in batch_headers.values()])
    skipped = [
        (batch_headers[p].base_offset, batch_headers[p].last_offset)
        for p in (_skipped_batches(record_set, batch_headers, aborted, where) if aborted else ())
    ]
    offsets, timestamps, ts_types, keys, values, headers = [], [], [], [], [], []
    for m in iter_deep(record_set):
        last = max(last, m.offset)
        if m.offset < start or m.offset >= end:
            continue
        if any(first <= m.offset <= final for first, final in skipped):
            continue
        if (lo is not None and m.timestamp < lo) or (hi is not None and m.timestamp >= hi):
            continue
        offsets.append(m.offset)
        timestamps.append(m.timestamp)
        ts_types.append(int(m.timestamp_type))
        keys.append(m.key)
        values.append(m.value)
        headers.append(
            [
                {"key": k.encode("utf-8", "surrogateescape").decode("utf-8", "replace"), "value": v}
                for k, v in m.headers
            ]
        )
    next_offset = min(end, max(start, last + 1))
    if not offsets:
        return None, next_offset
    return _batch(
        topic,
        partition,
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        np.array(offsets),
        np.array(timestamps),
        np.array(ts_types),
        pa.array(headers, HEADERS_TYPE) if include_headers else None,
    ), next_offset
