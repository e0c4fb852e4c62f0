"""Produce v0-v2: validate each partition's message set with its topic's settings and append it.

Validation and append of one partition run while holding the partition's lock, so offsets
assigned by the validator are exactly the log end offset at append time. A set of up to
INLINE_BYTES is validated on the trio thread and appended there too unless the append would
fsync (roll or flush.messages): a worker-thread round trip costs more than such a set's work.
Larger sets and fsyncing appends run in one worker thread call, so a slow disk stalls only that
partition and never the event loop.
"""
from __future__ import annotations

import structlog
import trio

from broker.context import INTERNAL_TOPICS, BrokerContext
from broker.errors import CloseConnectionError
from broker.topics import Topic
from protocol.api import Request
from protocol.errors import ErrorCode
from protocol.records import TimestampType
from protocol.validator import Rejected, ValidatedRecords, validate_produce

log = structlog.get_logger(__name__)


# Sets up to this size are validated on the trio thread (~0.2 ms of CPU for 100 B messages).
INLINE_BYTES = 65536


def _validate(log_, record_set, topic: Topic, now_ms: int) -> Rejected | ValidatedRecords:
    """Under the partition lock; CPU only (no file access)."""
    result = validate_produce(record_set, topic.settings, next_offset=log_.log_end_offset,
                              now_ms=now_ms)
    if isinstance(result, Rejected) or result.message_count == 0:
        return result
    size = len(result.buffer)
    if size > topic.config.segment_bytes:
        return Rejected(ErrorCode.RECORD_LIST_TOO_LARGE,
                        f"message set of {size} bytes exceeds segment.bytes "
                        f"{topic.config.segment_bytes}")
    return result


def _append(log_, result: ValidatedRecords) -> int | None:
    """Under the partition lock: append; the base offset of a segment rolled by it, or None."""
    active = log_.active_segment.base_offset
    log_.append(result)
    rolled = log_.active_segment.base_offset
    return rolled if rolled != active else None


def _validate_and_append(log_, record_set, topic: Topic, now_ms: int):
    """Runs in a worker thread under the partition lock. Returns (Rejected or ValidatedRecords,
    base offset of a segment rolled by this append or None); message_count 0 means the set held
    no complete message and nothing was appended."""
    result = _validate(log_, record_set, topic, now_ms)
    if isinstance(result, Rejected) or result.message_count == 0:
        return result, None
    return result, _append(log_, result)


async def _validate_and_append_inline(log_, record_set, topic: Topic, now_ms: int):
    """:func:`_validate_and_append` for a small set: validation on the trio thread, the append
    too unless it would fsync."""
    result = _validate(log_, record_set, topic, now_ms)
    if isinstance(result, Rejected) or result.message_count == 0:
        return result, None
    if log_.append_would_sync(result):
        return result, await trio.to_thread.run_sync(_append, log_, result)
    return result, _append(log_, result)


def _last_timestamp(log_) -> int:
    """Largest message timestamp of the newest non-empty segment (-1 if none): after a restart,
    LogAppendTime continues from here even if the wall clock went backwards meanwhile."""
    for segment in reversed(log_.segments):
        if segment.size > 0:
            return segment.max_timestamp
    return -1


async def _produce_partition(ctx: BrokerContext, topic_name: str, partition: int,
                             record_set: bytes) -> tuple[ErrorCode, int, int]:
    """(error, base_offset, log_append_time) for one partition."""
    if topic_name in INTERNAL_TOPICS:
        # Kafka 0.10.1 (ReplicaManager.appendToLocalLog) refuses client writes to internal
        # topics; here only the group coordinator writes __consumer_offsets, and its in-memory
        # offsets must match the log.
        log.warning("produce rejected", topic=topic_name, partition=partition,
                    error="INVALID_TOPIC_EXCEPTION",
                    reason="internal topic: only the broker writes it; commit offsets with "
                           "OffsetCommit instead")
        return ErrorCode.INVALID_TOPIC_EXCEPTION, -1, -1
    topic = ctx.topics.get(topic_name)
    log_ = ctx.get_log(topic_name, partition)
    if topic is None or log_ is None:
        log.warning("produce rejected", topic=topic_name, partition=partition,
                    error="UNKNOWN_TOPIC_OR_PARTITION",
                    reason="no such topic or partition; create it first")
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1
    state = ctx.partition(topic_name, partition)
    async with state.lock:
        if ctx.get_log(topic_name, partition) is not log_:
            log.warning("produce rejected", topic=topic_name, partition=partition,
                        error="UNKNOWN_TOPIC_OR_PARTITION",
                        reason="topic deleted while the produce waited for the partition; "
                               "create it again")
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1
        now = ctx.clock()
        try:
            if topic.settings.timestamp_type == TimestampType.LOG_APPEND_TIME:
                if state.last_append_time < 0:
                    state.last_append_time = await trio.to_thread.run_sync(_last_timestamp, log_)
                now = state.next_append_time(now)
            if len(record_set) <= INLINE_BYTES:
                result, rolled = await _validate_and_append_inline(log_, record_set, topic, now)
            else:
                result, rolled = await trio.to_thread.run_sync(
                    _validate_and_append, log_, record_set, topic, now)
        except Exception as exc:
            log.error("append failed", topic=topic_name, partition=partition, error=repr(exc),
                      action="check the log dir's disk; the partition may need recovery")
            return ErrorCode.UNKNOWN_SERVER_ERROR, -1, -1
    if isinstance(result, Rejected):
        log.warning("produce rejected", topic=topic_name, partition=partition,
                    error=ErrorCode(result.error).name, reason=result.reason)
        return ErrorCode(result.error), -1, -1
    if result.message_count == 0:
        return ErrorCode.NONE, -1, -1
    if rolled is not None:
        log.info("rolled new segment", topic=topic_name, partition=partition, base_offset=rolled)
    state.notify()
    return ErrorCode.NONE, result.first_offset, result.log_append_time


async def handle_produce(ctx: BrokerContext, request: Request) -> dict | None:
    body = request.body
    version = request.header.api_version
    acks = body.acks
    responses = []
    failed = False
    for topic_data in body.topic_data:
        partition_responses = []
        for data in topic_data.data:
            if acks not in (-1, 0, 1):
                error, base, ts = ErrorCode.INVALID_REQUIRED_ACKS, -1, -1
            else:
                error, base, ts = await _produce_partition(
                    ctx, topic_data.topic, data.partition, data.record_set)
            failed = failed or error != ErrorCode.NONE
            entry = {"partition": data.partition, "error_code": int(error), "base_offset": base}
            if version >= 2:
                entry["timestamp"] = ts
            partition_responses.append(entry)
        responses.append({"topic": topic_data.topic, "partition_responses": partition_responses})
    if acks not in (-1, 0, 1):
        log.warning("produce rejected", acks=acks, error="INVALID_REQUIRED_ACKS",
                    reason="acks must be -1, 0 or 1")
    if acks == 0:
        if failed:
            # As Kafka does: with acks=0 the only way to tell the producer is to close.
            raise CloseConnectionError("a produce request with acks=0 failed; closing so the "
                                       "client refreshes metadata")
        return None
    out = {"responses": responses}
    if version >= 1:
        out["throttle_time_ms"] = 0
    return out
