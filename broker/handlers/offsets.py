"""ListOffsets v0 (legacy segment offsets) and v1 (KIP-79: first offset with timestamp >= t)."""
from __future__ import annotations

from collections import Counter

import structlog
import trio

from broker.context import BrokerContext
from protocol.api import Request
from protocol.errors import ErrorCode

log = structlog.get_logger(__name__)

LATEST, EARLIEST = -1, -2


async def _lookup(ctx: BrokerContext, topic: str, partition: int, timestamp: int, max_num: int,
                  version: int):
    """v1: (error, timestamp, offset); v0: (error, offsets)."""
    missing = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1) if version else \
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])
    log_ = ctx.get_log(topic, partition)
    if log_ is None:
        return missing
    if version >= 1 and timestamp not in (LATEST, EARLIEST) and ctx.topics.get(topic).config.magic == 0:
        log.warning("offset lookup rejected", topic=topic, partition=partition,
                    error="UNSUPPORTED_FOR_MESSAGE_FORMAT",
                    reason="topic's message.format.version predates 0.10.0; messages carry no "
                           "timestamps")
        return ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, -1, -1
    async with ctx.partition(topic, partition).lock:
        if ctx.get_log(topic, partition) is not log_:
            return missing
        try:
            if version == 0:
                offsets = await trio.to_thread.run_sync(
                    log_.legacy_offsets_before, timestamp, max_num)
                return ErrorCode.NONE, list(offsets)
            if timestamp == LATEST:
                return ErrorCode.NONE, -1, log_.high_watermark
            if timestamp == EARLIEST:
                return ErrorCode.NONE, -1, log_.log_start_offset
            found = await trio.to_thread.run_sync(log_.offset_for_timestamp, timestamp)
        except Exception as exc:
            log.error("offset lookup failed", topic=topic, partition=partition,
                      timestamp=timestamp, error=repr(exc),
                      action="check the log dir's disk and dump-log --verify")
            return (ErrorCode.UNKNOWN_SERVER_ERROR, -1, -1) if version else \
                (ErrorCode.UNKNOWN_SERVER_ERROR, [])
    if found is None:
        return ErrorCode.NONE, -1, -1
    return ErrorCode.NONE, found.timestamp, found.offset


async def handle_list_offsets(ctx: BrokerContext, request: Request) -> dict:
    version = request.header.api_version
    counts = Counter((t.topic, p.partition) for t in request.body.topics for p in t.partitions)
    grouped: dict[str, list[dict]] = {}
    seen = set()
    for t in request.body.topics:
        parts = grouped.setdefault(t.topic, [])
        for p in t.partitions:
            key = (t.topic, p.partition)
            if key in seen:
                continue  # v0 collapses duplicates, v1 answers error 42 once
            seen.add(key)
            if version >= 1 and counts[key] > 1:
                log.warning("offset lookup rejected", topic=t.topic, partition=p.partition,
                            error="INVALID_REQUEST", reason="partition listed more than once")
                parts.append({"partition": p.partition, "error_code": int(ErrorCode.INVALID_REQUEST),
                              "timestamp": -1, "offset": -1})
                continue
            if version == 0:
                error, offsets = await _lookup(ctx, t.topic, p.partition, p.timestamp,
                                               p.max_num_offsets, 0)
                parts.append({"partition": p.partition, "error_code": int(error),
                              "offsets": offsets})
            else:
                error, ts, offset = await _lookup(ctx, t.topic, p.partition, p.timestamp, 0, 1)
                parts.append({"partition": p.partition, "error_code": int(error),
                              "timestamp": ts, "offset": offset})
    return {"responses": [{"topic": name, "partition_responses": parts}
                          for name, parts in grouped.items()]}
