"""Batch and micro-batch readers. Planning talks to the broker through ListOffsets; read() runs
in Spark's Python workers, opens its own connection and yields Arrow record batches (one per
Fetch response), closing the connection when the iterator ends or is abandoned."""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa
import structlog
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from client import error_name
from protocol import ErrorCode

from .arrow import decode
from .client import BrokerClient
from .errors import BrokerResponseError, DataLossError
from .options import ReadOptions, TopicPartition, parse_read
from .planning import (
    OffsetRange,
    PartitionOffsets,
    check_data_loss,
    offsets_now,
    plan,
    plan_batch,
    rate_limit,
    resolve,
)

logger = structlog.get_logger(__name__)

# A fetch that returns only part of one message is retried with a larger limit, up to this.
_MAX_FETCH_BYTES = 256 * 1024 * 1024


class RangePartition(InputPartition):
    """One Spark task: offsets [start, end) of one topic partition (picklable); the range is
    ``.value``."""

    def __init__(self, rng: OffsetRange) -> None:
        super().__init__(rng)


def reading_client(opts: ReadOptions) -> BrokerClient:
    """A client at the read's isolation level, so planning and fetching agree on where the
    partition ends (the last stable offset for read_committed, else the high watermark)."""
    return BrokerClient(opts.connect, read_committed=opts.read_committed)


def read_partition(opts: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    # Spark hands a bare InputPartition(None) to read() when planning found no ranges.
    if partition.value is None:
        return iter(())
    return read_range(opts, partition.value)


def read_range(opts: ReadOptions, rng: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Fetch ``rng`` and yield its rows as Arrow batches.

    Offsets that retention deleted while the query ran raise DataLossError, or with
    failOnDataLoss=false are skipped with a warning. A range end beyond what the broker holds
    (the log was truncated after planning) is treated the same way. read_committed drops the
    records of aborted transactions (the fetch names them); markers are never rows.
    """
    tp = (rng.topic, rng.partition)
    pos, max_bytes = rng.start, opts.max_partition_fetch_bytes
    with reading_client(opts) as client:
        while pos < rng.end:
            result = client.fetch(tp, pos, max_bytes)
            if result.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                pos = _after_out_of_range(client, opts, rng, pos)
                continue
            if result.error_code != ErrorCode.NONE:
                raise BrokerResponseError(
                    f"fetch of {rng.topic}[{rng.partition}] at offset {pos} failed: "
                    f"{error_name(result.error_code)}",
                    error_code=result.error_code,
                )
            batch, next_pos = decode(
                result.record_set,
                rng.topic,
                rng.partition,
                start=pos,
                end=rng.end,
                window=opts.window,
                include_headers=opts.include_headers,
                aborted=result.aborted_transactions if opts.read_committed else None,
            )
            if batch is not None:
                yield batch
            # read_committed fetches stop at the last stable offset, not the high watermark.
            visible, bound = (
                (result.last_stable_offset, "last stable offset")
                if opts.read_committed
                else (result.high_watermark, "high watermark")
            )
            if next_pos > pos:
                pos = next_pos
            elif result.record_set and max_bytes < _MAX_FETCH_BYTES:
                max_bytes *= 2  # one message larger than the fetch limit
            elif pos >= visible:
                pos = _lost_tail(opts, rng, pos, visible)
            else:
                raise BrokerResponseError(
                    f"fetch of {rng.topic}[{rng.partition}] at offset {pos} returned no "
                    f"complete message ({len(result.record_set)} bytes, limit {max_bytes}) "
                    f"although the {bound} is {visible}",
                    error_code=ErrorCode.CORRUPT_MESSAGE,
                )


def _after_out_of_range(client: BrokerClient, opts: ReadOptions, rng: OffsetRange, pos: int) -> int:
    tp = (rng.topic, rng.partition)
    known = offsets_now(client, [tp])[tp]
    if pos < known.earliest:
        return min(
            rng.end, check_data_loss(tp, pos, known, fail_on_data_loss=opts.fail_on_data_loss)
        )
    return _lost_tail(opts, rng, pos, known.latest)


def _lost_tail(opts: ReadOptions, rng: OffsetRange, pos: int, latest: int) -> int:
    message = (
        f"{rng.topic}[{rng.partition}]: offsets {pos}..{rng.end - 1} were planned but "
        f"the log now ends at {latest} (truncated or deleted and recreated)"
    )
    if opts.fail_on_data_loss:
        raise DataLossError(message + "; set failOnDataLoss=false to skip them")
    logger.warning(
        "skipping offsets the broker no longer has",
        topic=rng.topic,
        partition=rng.partition,
        detail=message,
    )
    return rng.end


class ChronologBatchReader(DataSourceReader):
    """spark.read: ranges fixed at planning time from the options."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[RangePartition]:
        with reading_client(self.opts) as client:
            ranges = plan_batch(client, self.opts)
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts, partition)


def _to_json(offsets: dict[TopicPartition, int]) -> dict:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def _from_json(offsets: dict) -> dict[TopicPartition, int]:
    return {(topic, int(p)): int(o) for topic, parts in offsets.items() for p, o in parts.items()}


class ChronologStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """spark.readStream: offsets {"topic": {"partition": next offset}} as in Spark's Kafka
    source, checkpointed by Spark. Partitions that appear later start at their earliest offset.
    """

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._target: dict[TopicPartition, int] | None = None

    def _latest(self, client: BrokerClient) -> dict[TopicPartition, PartitionOffsets]:
        return offsets_now(client, client.partitions(self.opts.topics))

    def initialOffset(self) -> dict:
        with reading_client(self.opts) as client:
            known = self._latest(client)
            start = resolve(
                client,
                self.opts.starting,
                known,
                starting=True,
                timestamp_strategy=self.opts.timestamp_strategy,
            )
        return _to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.opts.max_offsets_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        with reading_client(self.opts) as client:
            self._target = {tp: k.latest for tp, k in self._latest(client).items()}
        logger.info("availableNow target recorded", target=_to_json(self._target))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = _from_json(start)
        with reading_client(self.opts) as client:
            known = self._latest(client)
        latest = {tp: k.latest for tp, k in known.items()}
        if self._target is not None:
            latest = {
                tp: min(off, self._target.get(tp, known[tp].earliest)) for tp, off in latest.items()
            }
        for tp in latest:
            if tp not in begin:
                begin[tp] = known[tp].earliest
            latest[tp] = max(latest[tp], begin[tp])
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        # partitions that vanished keep their last offset so the checkpoint stays complete
        for tp, off in begin.items():
            latest.setdefault(tp, off)
        return _to_json(latest)

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        begin, stop = _from_json(start), _from_json(end)
        with reading_client(self.opts) as client:
            tps = [tp for tp in stop if stop[tp] > begin.get(tp, -1)]
            known = offsets_now(client, tps) if tps else {}
        starts = {}
        for tp in tps:
            first = begin.get(tp, known[tp].earliest)
            starts[tp] = min(
                stop[tp],
                check_data_loss(
                    tp, first, known[tp], fail_on_data_loss=self.opts.fail_on_data_loss
                ),
            )
        return [
            RangePartition(r)
            for r in plan(starts, {tp: stop[tp] for tp in tps}, self.opts.max_records_per_partition)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: Spark's checkpoint holds the offsets, the broker keeps no state."""


def batch_reader(options) -> ChronologBatchReader:
    return ChronologBatchReader(parse_read(options))


def stream_reader(options) -> ChronologStreamReader:
    return ChronologStreamReader(parse_read(options, streaming=True))
