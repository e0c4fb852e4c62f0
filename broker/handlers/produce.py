"""Produce v0-v13: validate each partition's records with its topic's settings and append them.

Batches from idempotent producers (a producer id, KIP-98) are checked against the partition's
producer state by the log's append itself (storage/producer_state.py), which records them: a
retried batch already stored is answered with its original offsets and not stored again; a
refused batch is answered with the error the log names (OUT_OF_ORDER_SEQUENCE_NUMBER,
INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, DUPLICATE_SEQUENCE_NUMBER).

v3+ carry exactly one record batch (magic 2) per partition; older versions message sets of magic
0/1 (or batches). The validator converts to the topic's format. v5+ answers with the log start
offset, v8+ with the reason of a rejection (error_message) and the refused records of the batch
(KIP-467 record_errors: index in the batch and why, as Kafka lists them). v13 (KIP-516) names
topics by id, as Fetch v13+ does: an id no topic has answers UNKNOWN_TOPIC_ID for each of its
partitions, and the answer names the topic by the same id.

Validation and append of one partition run while holding the partition's lock, so offsets
assigned by the validator are exactly the log end offset at append time. A set whose validation
is known to be small runs on the trio thread, and is appended there too unless the append would
fsync (roll or flush.messages): a worker-thread round trip costs more than such a set's work.
Known small: a record batch kept in its codec whose headers bound the bytes to decompress and
scan natively to INLINE_SCAN_BYTES (about 0.3 ms; a batch the native scan declines, whose
precise answer comes from a record-by-record Python check, is validated again in a thread), or
any other set of up to INLINE_BYTES. Everything else, and fsyncing appends, run in one worker
thread call, so a slow disk or a decompression bomb stalls only that partition and never the
event loop.

Nearly every partition of a non-transactional produce needs no wait at all: its lock is free, its
set is validated on the trio thread and its append does not fsync. ``_produce_now`` answers those
in one synchronous call, without the coroutines, the lock's context manager and the repeated
look-ups of ``_produce_partition`` (the full path), which takes everything else and gives the
same answers (tests/broker/test_produce_now.py).
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Any, NamedTuple

import structlog
import trio

from broker import workers
from broker.context import INTERNAL_TOPICS, BrokerContext, PartitionState
from broker.errors import STORAGE_FAILURES, CloseConnectionError
from broker.log_limit import OncePerInterval
from broker.topics import Topic
from protocol.api import Request
from protocol import recordbatch as rb
from protocol.errors import ErrorCode
from protocol.validator import Rejected, ValidatedRecords, scanned_bytes_bound, validate_produce
from storage import RecordSetTooLargeError
from storage.errors import is_disk_failure
from storage.producer_state import Duplicate, ProducerStateError

if TYPE_CHECKING:
    from broker.replication import Replication
    from storage.log import Log

logger = structlog.get_logger(__name__)


# Produce v0-v3 clients may not know KAFKA_STORAGE_ERROR (56, KIP-112) and would not retry it;
# Kafka answers them NOT_LEADER_FOR_PARTITION, which every client retries after a metadata refresh.
_OLD_STORAGE_ERROR = ErrorCode.NOT_LEADER_FOR_PARTITION

# Validated on the trio thread, cheaper than a thread hand-off (bench/NOTES.md): a batch whose
# headers bound its scanned bytes to INLINE_SCAN_BYTES, other sets up to INLINE_BYTES.
INLINE_SCAN_BYTES = 1 << 20
INLINE_BYTES = 65536


class Placement(Enum):
    """Where a set is validated: its cost against a worker-thread hand-off's."""

    THREAD = "a worker thread"
    NATIVE_INLINE = "the trio thread, by the native scan only"
    INLINE = "the trio thread"


def placement(record_set: bytes | memoryview, topic: Topic) -> Placement:
    """Where to validate ``record_set``: by its scanned-bytes bound, else by its size."""
    bound = scanned_bytes_bound(record_set, topic.settings)
    if bound is not None:
        return Placement.NATIVE_INLINE if bound <= INLINE_SCAN_BYTES else Placement.THREAD
    return Placement.INLINE if len(record_set) <= INLINE_BYTES else Placement.THREAD


# An append's result, and the base offset of a segment it rolled (else None).
_Outcome = tuple[Rejected | Duplicate | ValidatedRecords, int | None]


class _Write(NamedTuple):
    """One partition's share of a Produce, validated and appended under the partition's lock.
    ``leader_epoch`` goes into the batches (KIP-101)."""

    log: Any
    record_set: bytes
    topic: Topic
    now_ms: int
    version: int
    leader_epoch: int


def _validate(w: _Write, native_only: bool = False) -> Rejected | ValidatedRecords | None:
    """Under the partition lock; CPU only. None only with ``native_only``, as from
    validate_produce."""
    return validate_produce(
        w.record_set,
        w.topic.settings,
        next_offset=w.log.log_end_offset,
        now_ms=w.now_ms,
        require_magic2=w.version >= 3,
        partition_leader_epoch=w.leader_epoch,
        native_only=native_only,
    )


def _append(log: Log, result: ValidatedRecords, may_sync: bool = True) -> _Outcome | None:
    """Under the partition lock: append; (result, base offset of a segment rolled by it or
    None), or the Duplicate a producer's retried batch is. A set larger than segment.bytes or
    a producer's batch the log refuses (storage checks both before writing anything) is
    Rejected with RECORD_LIST_TOO_LARGE or the error the log names. None when ``may_sync`` is
    False and the append would fsync: nothing was done."""
    try:
        appended = log.append(result, may_sync=may_sync)
    except RecordSetTooLargeError as exc:
        return Rejected(ErrorCode.RECORD_LIST_TOO_LARGE, str(exc)), None
    except ProducerStateError as exc:
        return Rejected(ErrorCode[exc.error_name], str(exc)), None
    if appended is None:
        return None
    if appended.duplicate is not None:
        return appended.duplicate, None
    return result, appended.rolled


def _validate_and_append(w: _Write) -> _Outcome:
    """Runs in a worker thread under the partition lock. Returns (Rejected or ValidatedRecords,
    base offset of a segment rolled by this append or None); message_count 0 means the set held
    no complete message and nothing was appended."""
    result = _validate(w)
    assert result is not None  # None only with native_only
    if not isinstance(result, ValidatedRecords) or result.message_count == 0:
        return result, None
    return _appended(w.log, result)


def _appended(log: Log, result: ValidatedRecords) -> _Outcome:
    """:func:`_append` where it may fsync."""
    outcome = _append(log, result)
    assert outcome is not None  # None only without may_sync
    return outcome


async def _validate_and_append_inline(w: _Write, native_only: bool) -> _Outcome:
    """:func:`_validate_and_append` for a small set: validation on the trio thread, the append
    too unless it would fsync. With ``native_only``, a set the native scan declines is
    validated again, completely, in a worker thread."""
    result = _validate(w, native_only)
    if result is None:
        return await workers.run_sync(_validate_and_append, w)
    if not isinstance(result, ValidatedRecords) or result.message_count == 0:
        return result, None
    outcome = _append(w.log, result, may_sync=False)
    if outcome is None:
        return await workers.run_sync(_appended, w.log, result)
    return outcome


class _Answer(NamedTuple):
    """One partition's produce answer."""

    error: ErrorCode
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None
    last_offset: int = -1  # what an acks=all produce waits for, in a cluster
    record_errors: tuple[tuple[int, str], ...] = ()  # KIP-467, answered at v8+


# An acks=all answer waiting for the ISR: (topic index, partition index, topic name, answer).
_Wait = tuple[int, int, str, _Answer]


def _storage_error(version: int, message: str) -> _Answer:
    """KAFKA_STORAGE_ERROR, or what a Produce v0-v3 client retries instead."""
    return _Answer(
        ErrorCode.KAFKA_STORAGE_ERROR if version >= 4 else _OLD_STORAGE_ERROR, message=message
    )


# A refused produce is logged once per topic and error every this many seconds: a client writing
# to a missing topic repeats every partition in every request (broker/log_limit.py).
REJECTION_LOG_INTERVAL_S = 10.0
_rejections_logged = OncePerInterval(REJECTION_LOG_INTERVAL_S)


def _rejected(topic: str, partition: int, error: ErrorCode, reason: str, **answer: Any) -> _Answer:
    left_out = _rejections_logged.admit((topic, error))
    if left_out is not None:
        logger.warning(
            "produce rejected",
            topic=topic,
            partition=partition,
            error=error.name,
            reason=reason,
            similar_not_logged=left_out,
            log_interval_s=REJECTION_LOG_INTERVAL_S,
        )
    return _Answer(error, **answer)


def _checked(
    ctx: BrokerContext,
    topic_name: str,
    partition: int,
    record_set: bytes | None,
    version: int,
    acks: int,
) -> tuple[Topic, Log] | _Answer:
    """The partition's topic and log when a produce to it may go on, else the answer refusing
    it."""
    if topic_name in INTERNAL_TOPICS:
        # Kafka 0.10.1 (ReplicaManager.appendToLocalLog) refuses client writes to internal
        # topics; here only the group coordinator writes __consumer_offsets, and its in-memory
        # offsets must match the log.
        return _rejected(
            topic_name,
            partition,
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            "internal topic: only the broker writes it; commit offsets with OffsetCommit instead",
        )
    if record_set is None:
        return _Answer(ErrorCode.INVALID_RECORD, message="null records")
    topic = ctx.topics.get(topic_name)
    log = ctx.log_of(topic, partition)
    if topic is None or log is None:
        # Asked only on this path: a served partition pays no offline check.
        if ctx.is_offline(topic_name, partition):
            return _storage_error(version, "the partition's log dir is offline (failing disk)")
        return _rejected(
            topic_name,
            partition,
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            "no such topic or partition; create it first",
        )
    refused = _replication_refusal(ctx.replication, topic, partition, acks)
    return (topic, log) if refused is None else refused


def _produce_now(
    ctx: BrokerContext, topic_name: str, partition: int, record_set: bytes, version: int, acks: int
) -> _Answer | None:
    """The answer for one partition of a non-transactional produce when it needs no wait:
    its lock free, a set validated on the event loop and an append that does not fsync (what
    nearly every produce is). None when it would wait, or anything went wrong: then nothing was
    done (a LogAppendTime handed out is only ever a later one) and :func:`_produce_partition`
    produces it, with the precise answer. The partition's lock is only checked, not taken:
    nothing here awaits, so no other task runs until the answer is made, and a free lock means
    no worker thread holds the log (a task holds the lock while its thread runs)."""
    checked = _checked(ctx, topic_name, partition, record_set, version, acks)
    if isinstance(checked, _Answer):
        return checked
    topic, log = checked
    state = ctx.partition(topic_name, partition)
    lat = topic.log_append_time
    where = placement(record_set, topic)
    if where is Placement.THREAD or (lat and state.last_append_time < 0) or state.lock.locked():
        return None
    try:
        epoch = ctx.replication.leader_epoch(topic_name, partition)
        if epoch is None:
            return None
        now = ctx.clock()
        if lat:
            now = state.next_append_time(now)
        write = _Write(log, record_set, topic, now, version, epoch)
        result = _validate(write, native_only=where is Placement.NATIVE_INLINE)
        if result is None:
            return None
        if isinstance(result, ValidatedRecords) and result.message_count:
            outcome = _append(log, result, may_sync=False)
            if outcome is None:
                return None
            appended, rolled = outcome
        else:
            appended, rolled = result, None
        start = log.log_start_offset
    except STORAGE_FAILURES:
        return None  # appended again by _produce_partition, which answers the failure
    return _answered(ctx, topic, partition, state, appended, rolled, start, len(record_set))


async def _produce_partition(
    ctx: BrokerContext,
    topic_name: str,
    partition: int,
    record_set: bytes,
    version: int,
    acks: int = 1,
    transactional_id: str | None = None,
) -> _Answer:
    """The answer for one partition, whatever it waits for (the lock, the transaction
    coordinator, the first LogAppendTime, a worker thread)."""
    checked = _checked(ctx, topic_name, partition, record_set, version, acks)
    if isinstance(checked, _Answer):
        return checked
    topic = checked[0]
    state = ctx.partition(topic_name, partition)
    failure: OSError | None = None
    leader_epoch = 0
    async with ctx.locked_log(topic_name, partition) as log:
        if log is None:
            if ctx.is_offline(topic_name, partition):
                return _storage_error(version, "the partition's log dir went offline")
            return _rejected(
                topic_name,
                partition,
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                "topic deleted while the produce waited for the partition; create it again",
            )
        # Read under the lock: a new epoch starts (in the epoch cache) under it too.
        epoch = ctx.replication.leader_epoch(topic_name, partition)
        if epoch is None:
            return _Answer(ErrorCode.NOT_LEADER_FOR_PARTITION, message="leadership moved")
        leader_epoch = epoch
        if transactional_id is not None:
            refused = await _unverified_transaction(
                ctx, transactional_id, topic_name, partition, record_set, version
            )
            if refused is not None:
                return refused
        now = ctx.clock()
        try:
            if topic.log_append_time:
                if state.last_append_time < 0:
                    state.last_append_time = await workers.run_sync(log.latest_timestamp)
                now = state.next_append_time(now)
            write = _Write(log, record_set, topic, now, version, leader_epoch)
            where = placement(record_set, topic)
            if where is Placement.THREAD:
                result, rolled = await workers.run_sync(_validate_and_append, write)
            else:
                result, rolled = await _validate_and_append_inline(
                    write, native_only=where is Placement.NATIVE_INLINE
                )
        except OSError as exc:
            # Storage left the log as it was; the client retries KAFKA_STORAGE_ERROR. A full
            # disk heals by itself; a failing one takes its log dir offline (below).
            if ctx.metrics is not None:
                ctx.metrics.storage_error(log)
            if not is_disk_failure(exc):
                state.appends_failing(exc, topic_name, partition)
            failure = exc
        except STORAGE_FAILURES as exc:
            if ctx.metrics is not None:
                ctx.metrics.storage_error(log)
            logger.error(
                "append failed",
                topic=topic_name,
                partition=partition,
                error=repr(exc),
                action="a broker bug: report it with this line; the log is unchanged",
            )
            return _Answer(ErrorCode.UNKNOWN_SERVER_ERROR)
        else:
            start = log.log_start_offset
    if failure is not None:
        await ctx.storage_failed(topic_name, partition, failure)
        return _storage_error(version, f"the log dir cannot be written: {failure.strerror}")
    return _answered(ctx, topic, partition, state, result, rolled, start, len(record_set))


def _answered(
    ctx: BrokerContext,
    topic: Topic,
    partition: int,
    state: PartitionState,
    result: Rejected | Duplicate | ValidatedRecords,
    rolled: int | None,
    start: int,
    record_bytes: int,
) -> _Answer:
    """The answer for an append's ``result`` (the log start offset ``start`` read under the
    lock); a successful one wakes the partition's waiting fetches and counts in the metrics."""
    topic_name = topic.name
    if isinstance(result, Rejected):
        return _rejected(
            topic_name,
            partition,
            ErrorCode(result.error),
            result.reason,
            log_start_offset=start,
            message=result.reason,
            record_errors=result.record_errors,
        )
    if isinstance(result, Duplicate):
        # A producer's retry of a batch already stored: its original offsets, nothing stored.
        logger.info(
            "duplicate batch from an idempotent producer answered with its offsets",
            topic=topic_name,
            partition=partition,
            base_offset=result.first_offset,
        )
        lat = topic.log_append_time
        return _Answer(
            ErrorCode.NONE,
            result.first_offset,
            result.max_timestamp if lat else -1,
            start,
            last_offset=result.last_offset,
        )
    if result.message_count == 0:
        return _Answer(ErrorCode.NONE, log_start_offset=start)
    if rolled is not None:
        logger.info("rolled new segment", topic=topic_name, partition=partition, base_offset=rolled)
    if state.append_failure is not None:
        state.appends_succeed(topic_name, partition)
    if state.waiters:
        state.notify()
    ctx.replication.appended(topic_name, partition)
    if ctx.metrics is not None:
        ctx.metrics.produced(topic_name, result.message_count, record_bytes)
    # Positional: a NamedTuple built with keywords costs a fifth more.
    return _Answer(
        ErrorCode.NONE, result.first_offset, result.log_append_time, start, None, result.last_offset
    )


# What a coordinator's answer to a verification becomes for the producer: retriable trouble at
# the coordinator as NOT_ENOUGH_REPLICAS (Kafka's AddPartitionsToTxnManager does the same), a
# partition missing from the transaction as INVALID_TXN_STATE.
_VERIFICATION_ERRORS = {
    ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_COORDINATOR_FOR_GROUP: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.CONCURRENT_TRANSACTIONS: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.GROUP_LOAD_IN_PROGRESS: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.TRANSACTION_ABORTABLE: ErrorCode.INVALID_TXN_STATE,
}


async def _unverified_transaction(
    ctx: BrokerContext,
    transactional_id: str,
    topic: str,
    partition: int,
    record_set: bytes,
    version: int,
) -> _Answer | None:
    """A transactional batch is appended only to a partition its producer's ongoing transaction
    holds, as the coordinator says (asked under the partition's lock, so no marker can come
    between): otherwise a late or stray write could leave a transaction open in the partition
    that its coordinator never ends. Produce v12+ (transaction version 2, KIP-890 part 2) adds
    the partition to the transaction itself; older versions had the client add it first and are
    only verified (KIP-890 part 1). None when the batch may be appended."""
    coordinator = ctx.txn_coordinator
    if (
        coordinator is None
        or record_set is None
        or len(record_set) < rb.RECORD_BATCH_OVERHEAD
        or record_set[rb.MAGIC_OFFSET] != rb.MAGIC
    ):
        return None
    header = rb.read_header(record_set)
    if not header.is_transactional:
        return None
    pid, epoch = header.producer_id, header.producer_epoch
    if version < 12 and not ctx.config.transaction_partition_verification_enable:
        return None
    # Asked of the id's coordinator, in a cluster maybe another broker (broker/cluster/txn.py).
    error = await coordinator.check_produce(
        transactional_id, pid, epoch, (topic, partition), add=version >= 12
    )
    if error is ErrorCode.NONE:
        return None
    return _rejected(
        topic,
        partition,
        _VERIFICATION_ERRORS.get(error, error),
        f"transactional produce of producer {pid} epoch {epoch} refused by the transaction "
        f"coordinator ({error.name}): the partition is not in its ongoing transaction",
    )


def _replication_refusal(
    replication: Replication, topic: Topic, partition: int, acks: int
) -> _Answer | None:
    """Only the leader appends, and acks=all needs min.insync.replicas in the ISR
    (NOT_ENOUGH_REPLICAS, nothing appended)."""
    if replication.leader_epoch(topic.name, partition) is None:
        return _Answer(
            ErrorCode.NOT_LEADER_FOR_PARTITION,
            message="this broker is not the partition's leader; refresh metadata",
        )
    if acks != -1:
        return None
    min_insync = topic.config.min_insync_replicas
    isr = replication.short_isr(topic.name, partition, min_insync)
    if isr is not None:
        return _rejected(
            topic.name,
            partition,
            ErrorCode.NOT_ENOUGH_REPLICAS,
            f"ISR {isr} is smaller than min.insync.replicas {min_insync}",
        )
    return None


async def _wait_for_replicas(
    ctx: BrokerContext, timeout_ms: int, responses: list[dict[str, Any]], waits: list[_Wait]
) -> None:
    """acks=all (Kafka's produce purgatory): each appended partition's answer waits until its
    high watermark passes what was appended, within the request's timeout."""
    deadline = trio.current_time() + max(timeout_ms, 0) / 1000
    metrics = ctx.metrics
    if metrics is not None:
        metrics.produces_waiting += 1
    try:
        for t, p, name, answer in waits:
            part = responses[t]["partition_responses"][p]
            error = await ctx.replication.wait_for_hw(
                name, part["index"], answer.last_offset, deadline
            )
            if error != ErrorCode.NONE:
                logger.warning(
                    "acks=all produce not acknowledged",
                    topic=name,
                    partition=part["index"],
                    error=error.name,
                    base_offset=part["base_offset"],
                )
                part.update(error_code=int(error), error_message=error.name)
    finally:
        if metrics is not None:
            metrics.produces_waiting -= 1


async def handle_produce(ctx: BrokerContext, request: Request) -> dict[str, Any] | None:
    body = request.body
    version = request.header.api_version
    acks = body.acks
    transactional_id = body.transactional_id
    acks_valid = acks in (-1, 0, 1)
    replicas_wait = acks == -1 and ctx.replication.durable_by_replicas
    responses: list[dict[str, Any]] = []
    waits: list[_Wait] = []  # acks=all with replicas
    failed = False
    for topic_data in body.topic_data:
        partition_responses: list[dict[str, Any]] = []
        name = topic_data.name
        unknown_id = False
        if version >= 13:
            topic = ctx.topics.by_id(topic_data.topic_id)
            name, unknown_id = (topic.name, False) if topic is not None else ("", True)
        for data in topic_data.partition_data:
            index = data.index
            if not acks_valid:
                answer = _Answer(ErrorCode.INVALID_REQUIRED_ACKS)
            elif unknown_id:
                answer = _Answer(ErrorCode.UNKNOWN_TOPIC_ID, message="no topic has this id")
            else:
                answer = (
                    _produce_now(ctx, name, index, data.records, version, acks)
                    if transactional_id is None
                    else None
                ) or await _produce_partition(
                    ctx, name, index, data.records, version, acks, transactional_id
                )
                if replicas_wait and answer.last_offset >= 0:
                    waits.append((len(responses), len(partition_responses), name, answer))
            error = answer.error
            failed = failed or bool(error)  # error codes other than NONE are not 0
            partition_responses.append(
                {
                    "index": index,
                    "error_code": int(error),
                    "base_offset": answer.base_offset,
                    "log_append_time_ms": answer.log_append_time,
                    "log_start_offset": answer.log_start_offset,
                    "error_message": answer.message if error else None,
                    "record_errors": [
                        {"batch_index": i, "batch_index_error_message": message}
                        for i, message in answer.record_errors
                    ]
                    if answer.record_errors
                    else [],
                }
            )
        responses.append(
            {
                "name": name,
                "topic_id": topic_data.topic_id,
                "partition_responses": partition_responses,
            }
        )
    if waits:
        await _wait_for_replicas(ctx, body.timeout_ms, responses, waits)
    if not acks_valid:
        logger.warning(
            "produce rejected",
            acks=acks,
            error="INVALID_REQUIRED_ACKS",
            reason="acks must be -1, 0 or 1",
        )
    if acks == 0:
        if failed:
            # As Kafka does: with acks=0 the only way to tell the producer is to close.
            raise CloseConnectionError(
                "a produce request with acks=0 failed; closing so the client refreshes metadata"
            )
        return None
    return {"responses": responses, "throttle_time_ms": 0}
