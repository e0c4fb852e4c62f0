"""Turning options into offset ranges: resolve bounds through ListOffsets, check for data loss,
split large ranges. Runs on the driver (batch) or in the stream reader's planner process."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import structlog

from .client import BrokerClient
from .errors import DataLossError, InvalidOptionError, TimestampNotFoundError, UnknownTopicError
from .options import EARLIEST, LATEST, Bound, ReadOptions, TopicPartition

logger = structlog.get_logger(__name__)


@dataclass(frozen=True)
class OffsetRange:
    """Offsets [start, end) of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class PartitionOffsets:
    """What the broker reports for one partition at planning time."""

    earliest: int
    latest: int


def offsets_now(
    client: BrokerClient, tps: list[TopicPartition]
) -> dict[TopicPartition, PartitionOffsets]:
    earliest = client.list_offsets({tp: EARLIEST for tp in tps})
    latest = client.list_offsets({tp: LATEST for tp in tps})
    return {tp: PartitionOffsets(earliest[tp][1], latest[tp][1]) for tp in tps}


def resolve(
    client: BrokerClient,
    bound: Bound,
    known: Mapping[TopicPartition, PartitionOffsets],
    *,
    starting: bool,
    timestamp_strategy: str = "error",
) -> dict[TopicPartition, int]:
    """The offset ``bound`` designates in each partition of ``known``.

    Timestamps go through ListOffsets v1, i.e. the broker's time index: the earliest offset whose
    timestamp is >= the time. When no message is that late, an ending bound becomes "latest" and a
    starting bound fails (TimestampNotFoundError) unless ``timestamp_strategy`` is "latest" -
    Spark's Kafka source behaves the same way.
    """
    tps = sorted(known)
    if bound.kind == "earliest":
        return {tp: known[tp].earliest for tp in tps}
    if bound.kind == "latest":
        return {tp: known[tp].latest for tp in tps}
    option = ("starting" if starting else "ending") + {
        "offsets": "Offsets",
        "timestamp": "Timestamp",
        "timestamps": "OffsetsByTimestamp",
    }[bound.kind]
    if bound.kind in ("offsets", "timestamps"):
        given = {tp for tp, _ in bound.per_partition}
        for tp in sorted(given - set(tps)):
            raise UnknownTopicError(
                f"option {option} names {tp[0]}[{tp[1]}], but topic "
                f"{tp[0]!r} has no partition {tp[1]}"
            )
        missing = sorted(set(tps) - given)
        if missing:
            raise InvalidOptionError(
                f"option {option} must give every partition of the subscribed topics; missing "
                + ", ".join(f"{t}[{p}]" for t, p in missing)
            )
    if bound.kind == "offsets":
        out = {}
        for tp in tps:
            value = bound.for_partition(tp)
            out[tp] = (
                known[tp].earliest
                if value == EARLIEST
                else known[tp].latest
                if value == LATEST
                else value
            )
        return out
    times = {
        tp: bound.timestamp if bound.kind == "timestamp" else bound.for_partition(tp) for tp in tps
    }
    found = client.list_offsets(times)
    out = {}
    for tp in tps:
        _, offset = found[tp]
        if offset >= 0:
            out[tp] = offset
        elif not starting or timestamp_strategy == "latest":
            out[tp] = known[tp].latest
        else:
            raise TimestampNotFoundError(
                f"{tp[0]}[{tp[1]}] has no message with timestamp >= {times[tp]} ({option}); "
                f"set startingOffsetsByTimestampStrategy=latest to start such partitions at "
                f"their end instead"
            )
    return out


def check_data_loss(
    tp: TopicPartition, start: int, known: PartitionOffsets, *, fail_on_data_loss: bool
) -> int:
    """The offset to start ``tp`` at, given that retention may have deleted its beginning."""
    if start >= known.earliest:
        return start
    message = (
        f"{tp[0]}[{tp[1]}]: offsets {start}..{known.earliest - 1} were deleted by "
        f"retention (the log now starts at {known.earliest})"
    )
    if fail_on_data_loss:
        raise DataLossError(message + "; set failOnDataLoss=false to skip them and go on")
    logger.warning(
        "skipping deleted offsets",
        topic=tp[0],
        partition=tp[1],
        requested=start,
        log_start=known.earliest,
        detail=message + "; failOnDataLoss=false",
    )
    return known.earliest


def plan(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int], max_records: int
) -> list[OffsetRange]:
    """One range per partition with data, split into pieces of at most ``max_records``
    offsets (equal sizes, so tasks take similar time)."""
    if max_records < 1:
        raise ValueError(f"max_records={max_records} must be >= 1")
    ranges = []
    for tp in sorted(end):
        lo, hi = start[tp], end[tp]
        if lo > hi:
            raise InvalidOptionError(
                f"{tp[0]}[{tp[1]}]: starting offset {lo} is after ending offset {hi}"
            )
        pieces = -(-(hi - lo) // max_records)
        for i in range(pieces):
            a = lo + (hi - lo) * i // pieces
            b = lo + (hi - lo) * (i + 1) // pieces
            ranges.append(OffsetRange(tp[0], tp[1], a, b))
    return ranges


def plan_batch(client: BrokerClient, opts: ReadOptions) -> list[OffsetRange]:
    """The ranges a batch read covers."""
    tps = client.partitions(opts.topics)
    known = offsets_now(client, tps)
    start = resolve(
        client, opts.starting, known, starting=True, timestamp_strategy=opts.timestamp_strategy
    )
    end = resolve(client, opts.ending, known, starting=False)
    for tp in tps:
        if end[tp] > known[tp].latest:
            raise InvalidOptionError(
                f"endingOffsets {tp[0]}[{tp[1]}]={end[tp]} is beyond the partition's latest "
                f"offset {known[tp].latest}"
                + (
                    " (its last stable offset: read_committed reads stop before open "
                    "transactions; kafka.isolation.level=read_uncommitted reads up to the high "
                    "watermark)"
                    if opts.read_committed
                    else ""
                )
            )
        if start[tp] > end[tp]:
            raise InvalidOptionError(
                f"{tp[0]}[{tp[1]}]: starting offset {start[tp]} is after ending offset "
                f"{end[tp]}; check startingOffsets/endingOffsets"
            )
        if start[tp] < end[tp]:
            start[tp] = min(
                end[tp],
                check_data_loss(tp, start[tp], known[tp], fail_on_data_loss=opts.fail_on_data_loss),
            )
    return plan(start, end, opts.max_records_per_partition)


def rate_limit(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], limit: int
) -> dict[TopicPartition, int]:
    """End offsets that advance at most ``limit`` offsets in total from ``start``, shared in
    proportion to what each partition has available (largest remainders get the leftover), so
    the sum never exceeds the limit and no partition starves."""
    avail = {tp: max(0, latest[tp] - start[tp]) for tp in latest}
    total = sum(avail.values())
    if total <= limit:
        return dict(latest)
    shares = {tp: avail[tp] * limit // total for tp in avail}
    leftover = limit - sum(shares.values())
    by_remainder = sorted(avail, key=lambda tp: (-(avail[tp] * limit % total), tp))
    for tp in by_remainder[:leftover]:
        shares[tp] += 1
    return {tp: start[tp] + shares[tp] for tp in latest}
