"""kafka-python's legacy record code as the independent oracle for our message sets."""

from __future__ import annotations

from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from protocol.records import NO_TIMESTAMP, iter_deep


def kp_read(buf) -> list[tuple]:
    """(offset, timestamp, key, value) of every message, as kafka-python's consumer sees them."""
    records = MemoryRecords(bytes(buf))
    out = []
    while records.has_next():
        batch = records.next_batch()
        if batch is None:
            break
        for r in batch:
            ts = NO_TIMESTAMP if r.timestamp is None else r.timestamp
            out.append((r.offset, ts, r.key, r.value))
    return out


def kp_build(magic: int, codec: int, messages: list[tuple]) -> bytes:
    """A set as kafka-python's producer builds it from (timestamp, key, value) tuples: offsets
    0..n-1, wrapper offset 0."""
    b = LegacyRecordBatchBuilder(magic, codec, 10**7)
    for i, (ts, key, value) in enumerate(messages):
        b.append(i, ts, key, value)
    return bytes(b.build())


def ours(buf) -> list[tuple]:
    """(offset, timestamp, key, value) of every message, as our deep iteration sees them."""
    return [(m.offset, m.timestamp, m.key, m.value) for m in iter_deep(buf)]
