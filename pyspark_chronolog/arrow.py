"""Fetched message sets -> Arrow record batches with exactly the Spark schema, without a Python
object per message.

Layout of an uncompressed magic-1 entry (Kafka 0.10.1, bytes from the entry start):
  0 offset int64 | 8 size int32 | 12 crc uint32 | 16 magic int8 | 17 attributes int8 |
  18 timestamp int64 | 26 key_length int32 (-1 null) | 30 key | value_length int32 | value
Entry length = 12 + size; size = 22 + key bytes + value bytes.

Fast path (every entry magic 1, uncompressed - what producers send by default): one Python loop
walks the size fields to find entry positions; numpy gathers every header field at once; key and
value columns come from an Arrow binary array laid over the fetched buffer whose offsets alternate
[value start, value end, next value start, ...], so `take` of the even elements copies the bytes
in C++. Anything else (compressed wrappers, magic 0) goes through protocol.records.iter_deep,
which resolves KIP-31 relative offsets and wrapper LogAppendTime.
"""
from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa

from protocol import LOG_OVERHEAD, MIN_MESSAGE_SIZE, CorruptRecordError, iter_deep

SPARK_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
                "timestamp timestamp, timestampType int")
ARROW_SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
])

_SIZE = struct.Struct(">i")
_V1_OVERHEAD = 22          # message bytes besides key and value, magic 1
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
            raise CorruptRecordError(f"message at byte {pos} has size {size} < "
                                     f"{MIN_MESSAGE_SIZE}", offset=pos)
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
    laid = pa.Array.from_buffers(pa.binary(), 2 * n - 1,
                                 [validity, pa.py_buffer(offsets), buffer])
    return laid.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int64)))


def _constant_string(value: str, n: int) -> pa.Array:
    raw = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(raw * n)])


def _batch(topic: str, partition: int, key: pa.Array, value: pa.Array, offsets: np.ndarray,
           timestamps_ms: np.ndarray, ts_types: np.ndarray) -> pa.RecordBatch:
    n = len(offsets)
    return pa.RecordBatch.from_arrays([
        key, value, _constant_string(topic, n),
        pa.array(np.full(n, partition, dtype=np.int32)),
        pa.array(offsets.astype(np.int64)),
        pa.array(timestamps_ms.astype(np.int64) * 1000, type=pa.timestamp("us", tz="UTC")),
        pa.array(ts_types.astype(np.int32)),
    ], schema=ARROW_SCHEMA)


def _be(u8: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Signed big-endian integers of ``width`` (4 or 8) bytes at each of ``pos``, as int64."""
    raw = u8[pos[:, None] + np.arange(width, dtype=np.int64)]
    return raw.view(f">i{width}").reshape(-1).astype(np.int64)


def decode(record_set: bytes, topic: str, partition: int, *, start: int, end: int,
           window: tuple[int | None, int | None] = (None, None)
           ) -> tuple[pa.RecordBatch | None, int]:
    """Rows of ``record_set`` with start <= offset < end (and, when given, timestamp in
    [window[0], window[1])), plus the offset to fetch next.

    The next offset is one past the last complete message seen (at least ``start``; ``end`` once
    the range is done); it equals ``start`` when the set holds no complete message.
    Raises CorruptRecordError for entries that contradict their own sizes.
    """
    mv = memoryview(record_set)
    pos = _positions(mv)
    if len(pos) == 0:
        return None, start
    u8 = np.frombuffer(record_set, dtype=np.uint8)
    magic = u8[pos + 16]
    attributes = u8[pos + 17]
    if np.all(magic == 1) and not np.any(attributes & _CODEC_MASK):
        offsets = _be(u8, pos, 8)
        sizes = _be(u8, pos + 8, 4)
        timestamps = _be(u8, pos + 18, 8)
        ts_types = (attributes >> 3) & 1
        key_len = _be(u8, pos + 26, 4)
        key_start = pos + 30
        value_len_at = key_start + np.maximum(key_len, 0)
        bad = (key_len < -1) | (value_len_at + 4 > pos + LOG_OVERHEAD + sizes)
        if not np.any(bad):
            value_len = _be(u8, value_len_at, 4)
            bad = (value_len < -1) | (_V1_OVERHEAD + np.maximum(key_len, 0)
                                      + np.maximum(value_len, 0) != sizes)
        if np.any(bad):
            at = int(pos[np.argmax(bad)])
            raise CorruptRecordError(
                f"{topic}[{partition}]: message at byte {at} of the fetched set has key/value "
                f"lengths that do not match its size", offset=at)
        last = int(offsets[-1])
        keep = (offsets >= start) & (offsets < end)
        lo, hi = window
        if lo is not None:
            keep &= timestamps >= lo
        if hi is not None:
            keep &= timestamps < hi
        next_offset = min(end, max(start, last + 1))
        if not np.any(keep):
            return None, next_offset
        rows = np.flatnonzero(keep)
        buffer = pa.py_buffer(record_set)
        key = _binary_column(buffer, key_start[rows], key_len[rows])
        value = _binary_column(buffer, value_len_at[rows] + 4, value_len[rows])
        return _batch(topic, partition, key, value, offsets[rows], timestamps[rows],
                      ts_types[rows]), next_offset
    return _decode_deep(record_set, topic, partition, start=start, end=end, window=window)


def _decode_deep(record_set: bytes, topic: str, partition: int, *, start: int, end: int,
                 window: tuple[int | None, int | None]) -> tuple[pa.RecordBatch | None, int]:
    lo, hi = window
    offsets, timestamps, ts_types, keys, values = [], [], [], [], []
    last = start - 1
    for m in iter_deep(record_set):
        last = max(last, m.offset)
        if m.offset < start or m.offset >= end:
            continue
        if (lo is not None and m.timestamp < lo) or (hi is not None and m.timestamp >= hi):
            continue
        offsets.append(m.offset)
        timestamps.append(m.timestamp)
        ts_types.append(int(m.timestamp_type))
        keys.append(m.key)
        values.append(m.value)
    next_offset = min(end, max(start, last + 1))
    if not offsets:
        return None, next_offset
    return _batch(topic, partition, pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
                  np.array(offsets), np.array(timestamps), np.array(ts_types)), next_offset
