"""ListOffsets v0 (legacy segment offsets) and v1-v10 (KIP-79: first offset with timestamp >= t).
v10's timeout (KIP-1075) bounds remote-storage lookups; nothing is tiered here, so every answer
is immediate.

Special timestamps: -1 latest (the high watermark; for read_committed, v2+, the last stable
offset, KIP-98), -2 earliest, -3 the message with the largest timestamp (KIP-734, v7+), -4
earliest local (KIP-405, v8+: every segment is local, so the log start offset), -5 latest
tiered (v9+: nothing is tiered, so no offset). v4+ answers carry the leader epoch (0: the single
broker has led every partition since its creation; in a cluster the leader's current epoch).
In a cluster a consumer asks the partition's leader and sees committed messages only (below the
high watermark); see :func:`_cluster_check`.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, cast

import structlog

from broker import workers
from broker.context import BrokerContext
from broker.errors import STORAGE_FAILURES
from protocol.api import Request
from protocol.errors import ErrorCode

logger = structlog.get_logger(__name__)

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
LEADER_EPOCH = 0
# A partition's answer: v1+ (error, timestamp, offset), v0 (error, offsets).
_LookupV1 = tuple[ErrorCode, int, int]
_LookupV0 = tuple[ErrorCode, list[int]]
_Lookup = _LookupV1 | _LookupV0


async def _lookup(
    ctx: BrokerContext,
    topic: str,
    partition: int,
    timestamp: int,
    max_num: int,
    version: int,
    replica_id: int = -1,
    current_leader_epoch: int = -1,
    read_committed: bool = False,
) -> _Lookup:
    """v1: (error, timestamp, offset); v0: (error, offsets). A read_committed lookup finds
    nothing at or past the last stable offset (Kafka's lastFetchableOffset)."""
    missing: _Lookup = (
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)
        if version
        else (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])
    )
    committed_only, log_end_visible = False, False
    known = ctx.topics.get(topic)
    if known is not None:
        error, committed_only, log_end_visible = ctx.replication.offsets_check(
            topic, partition, replica_id, current_leader_epoch
        )
        if error != ErrorCode.NONE:
            return (error, -1, -1) if version else (error, [])
    if ctx.get_log(topic, partition) is None:
        if ctx.is_offline(topic, partition):
            return (
                (ErrorCode.KAFKA_STORAGE_ERROR, -1, -1)
                if version
                else (ErrorCode.KAFKA_STORAGE_ERROR, [])
            )
        return missing
    if version >= 1 and timestamp >= 0 and known is not None and known.config.magic == 0:
        logger.warning(
            "offset lookup rejected",
            topic=topic,
            partition=partition,
            error="UNSUPPORTED_FOR_MESSAGE_FORMAT",
            reason="topic's message.format.version predates 0.10.0; messages carry no timestamps",
        )
        return ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, -1, -1
    async with ctx.locked_log(topic, partition) as log:
        if log is None:
            return missing
        try:
            if version == 0:
                offsets = await workers.run_sync(log.legacy_offsets_before, timestamp, max_num)
                return ErrorCode.NONE, list(offsets)
            if timestamp == LATEST:
                if read_committed:
                    return ErrorCode.NONE, -1, log.last_stable_offset
                if log_end_visible:
                    return ErrorCode.NONE, -1, log.log_end_offset
                return ErrorCode.NONE, -1, log.high_watermark
            if timestamp in (EARLIEST, EARLIEST_LOCAL):
                return ErrorCode.NONE, -1, log.log_start_offset
            if timestamp == LATEST_TIERED:
                return ErrorCode.NONE, -1, -1
            if timestamp == MAX_TIMESTAMP:
                found = await workers.run_sync(log.offset_of_max_timestamp)
            elif timestamp < 0:
                return ErrorCode.INVALID_REQUEST, -1, -1
            else:
                found = await workers.run_sync(log.offset_for_timestamp, timestamp)
        except STORAGE_FAILURES as exc:
            if ctx.metrics is not None:
                ctx.metrics.storage_error(log)
            logger.error(
                "offset lookup failed",
                topic=topic,
                partition=partition,
                timestamp=timestamp,
                error=repr(exc),
                action="check the log dir's disk and dump-log --verify",
            )
            return (
                (ErrorCode.UNKNOWN_SERVER_ERROR, -1, -1)
                if version
                else (ErrorCode.UNKNOWN_SERVER_ERROR, [])
            )
    if found is None or (committed_only and found.offset >= log.high_watermark):
        return ErrorCode.NONE, -1, -1
    if read_committed and found.offset >= log.last_stable_offset:
        return ErrorCode.NONE, -1, -1
    return ErrorCode.NONE, found.timestamp, found.offset


async def handle_list_offsets(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    version = request.header.api_version
    topics = request.body.topics
    counts = Counter((t.name, p.partition_index) for t in topics for p in t.partitions)
    grouped: dict[str, list[dict[str, Any]]] = {}
    seen = set()
    for t in topics:
        parts = grouped.setdefault(t.name, [])
        for p in t.partitions:
            key = (t.name, p.partition_index)
            if key in seen:
                continue  # v0 collapses duplicates, v1+ answers error 42 once
            seen.add(key)
            answer = {
                "partition_index": p.partition_index,
                "timestamp": -1,
                "offset": -1,
                "leader_epoch": -1,
            }
            if version >= 1 and counts[key] > 1:
                logger.warning(
                    "offset lookup rejected",
                    topic=t.name,
                    partition=p.partition_index,
                    error="INVALID_REQUEST",
                    reason="partition listed more than once",
                )
                parts.append({**answer, "error_code": int(ErrorCode.INVALID_REQUEST)})
                continue
            if version == 0:
                error, offsets = cast(
                    _LookupV0,
                    await _lookup(
                        ctx, t.name, p.partition_index, p.timestamp, p.max_num_offsets, 0
                    ),
                )
                parts.append({**answer, "error_code": int(error), "old_style_offsets": offsets})
                continue
            error, ts, offset = cast(
                _LookupV1,
                await _lookup(
                    ctx,
                    t.name,
                    p.partition_index,
                    p.timestamp,
                    0,
                    version,
                    request.body.replica_id,
                    p.current_leader_epoch,
                    read_committed=version >= 2 and request.body.isolation_level == 1,
                ),
            )
            epoch = ctx.replication.replica_epoch(t.name, p.partition_index)
            parts.append(
                {
                    **answer,
                    "error_code": int(error),
                    "timestamp": ts,
                    "offset": offset,
                    "leader_epoch": epoch if offset >= 0 else -1,
                }
            )
    return {
        "throttle_time_ms": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in grouped.items()],
    }
