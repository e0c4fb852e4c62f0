"""Batch and streaming writers: Arrow batches -> record batches (magic 2) -> Produce v8.

Columns (as Spark's Kafka sink): value (binary/string, required), key (binary/string),
topic (string; the topic option wins), partition (int; else murmur2(key) like Kafka's default
partitioner, round-robin for null keys), timestamp (timestamp -> CreateTime; else the write
time), headers (array<struct<key:string,value:binary>>; a topic held to an older message
format refuses them). Every produce response's error code is checked; a partition whose set exceeds the broker's
limit (RECORD_LIST_TOO_LARGE, e.g. small segment.bytes) is resent in halves. Delivery is
at-least-once: a task retried by Spark produces its rows again.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import structlog
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from client import error_name
from protocol import ErrorCode, MessageSetBuilder

from .client import BrokerClient
from .errors import BrokerResponseError, InvalidOptionError
from .options import WriteOptions, parse_write

logger = structlog.get_logger(__name__)

_COLUMN_TYPES = {
    "key": (BinaryType, StringType),
    "value": (BinaryType, StringType),
    "topic": (StringType,),
    "partition": (IntegerType,),
    "timestamp": (TimestampType, TimestampNTZType),
}
# Bytes a record takes besides its key, value and headers, at most (varints of a small record):
# to size produce requests, not exact.
_RECORD_OVERHEAD = 21
_HINTS = {
    ErrorCode.MESSAGE_TOO_LARGE: "a message exceeds the topic's max.message.bytes",
    ErrorCode.INVALID_TIMESTAMP: "a timestamp is further from the broker's clock than "
    "message.timestamp.difference.max.ms allows",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "the topic or partition does not exist",
    ErrorCode.CORRUPT_MESSAGE: "the broker rejected the message set",
    ErrorCode.INVALID_RECORD: "the broker rejected a record (e.g. a null key on a compacted topic)",
    ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT: "the topic's message.format.version predates "
    "record headers",
}


def murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 (signed 32-bit result), used by its default partitioner."""
    m, length = 0x5BD1E995, len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    words = length // 4
    for k in struct.unpack_from(f"<{words}I", data):
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = length & ~3
    rest = length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def check_schema(schema: StructType, opts: WriteOptions) -> None:
    """Raise InvalidOptionError unless ``schema`` can be written (runs on the driver)."""
    names = {f.name: f for f in schema.fields}
    if "value" not in names:
        raise InvalidOptionError(
            f"writing to chronolog needs a 'value' column (binary or string); the DataFrame has "
            f"{list(names)}"
        )
    for name, allowed in _COLUMN_TYPES.items():
        if name in names and not isinstance(names[name].dataType, allowed):
            raise InvalidOptionError(
                f"column {name!r} is {names[name].dataType.simpleString()}; it must be "
                + " or ".join(t().simpleString() for t in allowed)
            )
    if "headers" in names and not _is_headers_type(names["headers"].dataType):
        raise InvalidOptionError(
            f"column 'headers' is {names['headers'].dataType.simpleString()}; it must be "
            f"array<struct<key:string,value:binary>>"
        )
    if opts.topic is None and "topic" not in names:
        raise InvalidOptionError(
            'name the destination with .option("topic", ...) or a "topic" column'
        )


def _is_headers_type(data_type) -> bool:
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    fields = {f.name: f.dataType for f in data_type.elementType.fields}
    return (
        set(fields) == {"key", "value"}
        and isinstance(fields["key"], StringType)
        and isinstance(fields["value"], BinaryType)
    )


@dataclass
class WriteSummary(WriterCommitMessage):
    """Rows produced by one task: (topic, partition) -> count."""

    rows: dict[tuple[str, int], int] = field(default_factory=dict)


def _binary_list(batch: pa.RecordBatch, name: str) -> list | None:
    if name not in batch.schema.names:
        return None
    col = batch.column(name)
    if not pa.types.is_binary(col.type):
        col = col.cast(pa.binary())
    return col.to_pylist()


class _Producer:
    """Buffers messages per partition and produces them in sets of about ``batch_bytes``."""

    def __init__(self, client: BrokerClient, opts: WriteOptions) -> None:
        self.client, self.opts = client, opts
        self.partition_counts: dict[str, int] = {}
        self.pending: dict[tuple[str, int], list[tuple]] = {}
        self.pending_bytes = 0
        self.round_robin = 0
        self.summary = WriteSummary()

    def partitions_of(self, topic: str) -> int:
        if topic not in self.partition_counts:
            info = self.client.topics([topic], allow_create=True)[topic]
            self.partition_counts[topic] = len(info.partitions)
        return self.partition_counts[topic]

    def add_batch(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        if n == 0:
            return
        names = batch.schema.names
        values = _binary_list(batch, "value")
        keys = _binary_list(batch, "key") or [None] * n
        if self.opts.topic is not None:
            topics = [self.opts.topic] * n
        else:
            topics = batch.column("topic").to_pylist()
        parts = batch.column("partition").to_pylist() if "partition" in names else [None] * n
        now_ms = int(time.time() * 1000)
        if "timestamp" in names:
            micros = batch.column("timestamp").cast(pa.int64())
            stamps = (
                pc.fill_null(pc.floor(pc.divide(micros.cast(pa.float64()), 1000)), float(now_ms))
                .cast(pa.int64())
                .to_pylist()
            )
        else:
            stamps = [now_ms] * n
        if "headers" in names:
            headers = [
                tuple((h["key"], h["value"]) for h in row or ())
                for row in batch.column("headers").to_pylist()
            ]
        else:
            headers = [()] * n
        for value, key, topic, part, ts, hs in zip(values, keys, topics, parts, stamps, headers):
            if topic is None:
                raise InvalidOptionError("a row has a null 'topic' and no topic option is set")
            count = self.partitions_of(topic)
            if part is None:
                if key is None:
                    part = self.round_robin % count
                    self.round_robin += 1
                else:
                    part = partition_for_key(key, count)
            elif not 0 <= part < count:
                raise InvalidOptionError(
                    f"a row names partition {part} of topic {topic!r}, "
                    f"which has partitions 0..{count - 1}"
                )
            if any(k is None for k, _ in hs):
                raise InvalidOptionError("a row has a header with a null key")
            self.pending.setdefault((topic, part), []).append((value, key, ts, hs))
            self.pending_bytes += (
                _RECORD_OVERHEAD
                + len(value or b"")
                + len(key or b"")
                + sum(len(k) + len(v or b"") + 10 for k, v in hs)
            )
            if self.pending_bytes >= self.opts.batch_bytes:
                self.flush()

    def flush(self) -> None:
        by_topic: dict[str, dict[int, list[tuple]]] = {}
        for (topic, part), msgs in self.pending.items():
            by_topic.setdefault(topic, {})[part] = msgs
        self.pending, self.pending_bytes = {}, 0
        for topic, sets in by_topic.items():
            self._produce(topic, sets)

    def _produce(self, topic: str, sets: dict[int, list[tuple]]) -> None:
        while sets:
            encoded = {}
            for part, msgs in sets.items():
                builder = MessageSetBuilder(magic=2)
                for value, key, ts, hs in msgs:
                    builder.append(value, key=key, timestamp=ts, headers=hs)
                encoded[part] = builder.build()
            results = self.client.produce(
                topic, encoded, acks=self.opts.acks, timeout_ms=self.opts.produce_timeout_ms
            )
            retry: dict[int, list[tuple]] = {}
            for part, msgs in sets.items():
                code = results[part].error_code
                if code == ErrorCode.NONE:
                    key = (topic, part)
                    self.summary.rows[key] = self.summary.rows.get(key, 0) + len(msgs)
                elif code == ErrorCode.RECORD_LIST_TOO_LARGE and len(msgs) > 1:
                    half = len(msgs) // 2
                    self._produce(topic, {part: msgs[:half]})
                    retry[part] = msgs[half:]
                else:
                    raise BrokerResponseError(
                        f"producing {len(msgs)} messages to {topic}[{part}] failed: "
                        f"{error_name(code)}"
                        + (f" ({_HINTS[code]})" if code in _HINTS else "")
                        + "; nothing of that set was written",
                        error_code=code,
                    )
            sets = retry


def write_batches(opts: WriteOptions, batches: Iterator[pa.RecordBatch]) -> WriteSummary:
    with BrokerClient(opts.connect) as client:
        producer = _Producer(client, opts)
        for batch in batches:
            producer.add_batch(batch)
        producer.flush()
        return producer.summary


def _log_commit(messages, **extra) -> None:
    rows: dict[str, int] = {}
    for m in messages:
        if m is not None:
            for (topic, _), count in m.rows.items():
                rows[topic] = rows.get(topic, 0) + count
    logger.info("write committed", rows=rows, **extra)


class ChronologBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteSummary:
        return write_batches(self.opts, iterator)

    def commit(self, messages) -> None:
        _log_commit(messages)

    def abort(self, messages) -> None:
        logger.error(
            "write aborted; rows of the tasks that succeeded stay in the topics (Kafka "
            "has no transactions at 0.10)",
            tasks=len([m for m in messages if m]),
        )


class ChronologStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteSummary:
        return write_batches(self.opts, iterator)

    def commit(self, messages, batchId: int) -> None:
        _log_commit(messages, batch_id=batchId)

    def abort(self, messages, batchId: int) -> None:
        logger.error(
            "micro-batch write aborted; it will be retried and may duplicate rows", batch_id=batchId
        )


def make_writer(options, schema: StructType, overwrite: bool, *, streaming: bool):
    if overwrite:
        raise InvalidOptionError(
            "chronolog topics are append-only; use mode('append') "
            "(or outputMode('append') for streams)"
        )
    opts = parse_write(options)
    check_schema(schema, opts)
    return ChronologStreamWriter(opts) if streaming else ChronologBatchWriter(opts)
