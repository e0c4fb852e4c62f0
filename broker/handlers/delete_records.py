"""DeleteRecords v0-v2 (KIP-107): move a partition's log start offset forward.

Offset -1 means the high watermark (everything). The new log start offset is checkpointed
(``log-start-offset-checkpoint``, atomically) before the answer goes out, so it holds after a
kill -9; the segments now wholly below it are deleted at once (retention would do it at its next
pass otherwise). Fetch below it answers OFFSET_OUT_OF_RANGE and ListOffsets earliest returns it.

Errors per partition, as Kafka's ReplicaManager gives them: UNKNOWN_TOPIC_OR_PARTITION,
OFFSET_OUT_OF_RANGE (negative, or beyond the high watermark), POLICY_VIOLATION (a topic whose
cleanup.policy lacks ``delete``: compaction owns what it keeps), KAFKA_STORAGE_ERROR (an offline
log dir, or a checkpoint that could not be written). The low watermark answered is the log start
offset after the request, -1 with an error. A partition named twice is answered once, with the
last offset given (Kafka's map).
"""

from __future__ import annotations

from typing import Any

import structlog

from broker import workers
from broker.context import BrokerContext
from broker.errors import STORAGE_FAILURES
from protocol.api import Request
from protocol.errors import ErrorCode
from storage import OffsetOutOfRangeError

logger = structlog.get_logger(__name__)

HIGH_WATERMARK = -1


def _refused(topic: str, partition: int, code: ErrorCode, reason: str) -> tuple[ErrorCode, int]:
    logger.info(
        "delete records refused", topic=topic, partition=partition, error=code.name, reason=reason
    )
    return code, -1


async def _delete(
    ctx: BrokerContext, topic: str, partition: int, offset: int
) -> tuple[ErrorCode, int]:
    """(error, low watermark) for one partition."""
    t = ctx.topics.get(topic)
    if ctx.get_log(topic, partition) is None or t is None:
        if ctx.is_offline(topic, partition):
            return _refused(topic, partition, ErrorCode.KAFKA_STORAGE_ERROR, "log dir offline")
        return _refused(topic, partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no such partition")
    if "delete" not in t.config.cleanup_policy.split(","):
        return _refused(
            topic,
            partition,
            ErrorCode.POLICY_VIOLATION,
            f"Records of partition {topic}-{partition} can not be deleted due to the "
            f"configured policy (cleanup.policy={t.config.cleanup_policy})",
        )
    failure: OSError | None = None
    async with ctx.locked_log(topic, partition) as log:
        if log is None:
            return _refused(
                topic, partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no such partition"
            )
        target = log.high_watermark if offset == HIGH_WATERMARK else offset
        if target < 0:
            return _refused(
                topic,
                partition,
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"The offset {target} for partition {topic}-{partition} is not valid",
            )
        try:
            log.increment_log_start_offset(target)
        except OffsetOutOfRangeError as exc:
            return _refused(topic, partition, ErrorCode.OFFSET_OUT_OF_RANGE, str(exc))
        log_dir = ctx.log_manager.log_dir_of(topic, partition)
        try:
            # Written even when the start did not move: a retry after a failed write saves it.
            await workers.run_sync(ctx.log_manager.checkpoint_log_start_offsets, log_dir)
        except OSError as exc:
            failure = exc
        else:
            try:
                await workers.run_sync(
                    log.delete_segments_before, log.log_start_offset, ctx.clock()
                )
            except STORAGE_FAILURES as exc:  # retention deletes them at its next pass
                logger.warning(
                    "could not delete the segments below the new log start offset",
                    topic=topic,
                    partition=partition,
                    error=repr(exc),
                    action="none: retention deletes them later; check the disk if it repeats",
                )
        low = log.log_start_offset
    if failure is not None:
        logger.error(
            "could not checkpoint the new log start offset",
            topic=topic,
            partition=partition,
            error=repr(failure),
            action="check the log dir's disk; until it is written the deleted records "
            "come back after a restart. Retry the request once the disk is fixed",
        )
        await ctx.storage_failed(topic, partition, failure)
        return ErrorCode.KAFKA_STORAGE_ERROR, -1
    logger.info("records deleted", topic=topic, partition=partition, log_start_offset=low)
    return ErrorCode.NONE, low


async def handle_delete_records(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    wanted: dict[tuple[str, int], int] = {}
    for t in request.body.topics:
        for p in t.partitions:
            wanted[(t.name, p.partition_index)] = p.offset
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in wanted.items():
        code, low = await _delete(ctx, topic, partition, offset)
        topics.setdefault(topic, []).append(
            {"partition_index": partition, "low_watermark": low, "error_code": int(code)}
        )
    return {
        "throttle_time_ms": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
    }
