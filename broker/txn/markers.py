"""Writing one transaction marker (a COMMIT or ABORT control batch) into a partition: what the
coordinator does for each partition of a completing transaction, and what WriteTxnMarkers asks
of a partition's leader. Kafka's ReplicaManager.appendRecords with origin COORDINATOR."""

from __future__ import annotations

import enum

import structlog
import trio

from broker import workers
from broker.context import BrokerContext
from broker.errors import STORAGE_FAILURES
from broker.txn.state import TxnMetadata
from protocol.errors import ErrorCode
from protocol.records import TimestampType
from storage.producer_state import ProducerStateError

logger = structlog.get_logger(__name__)

# How long a leader waits for its ISR to take a marker before answering REQUEST_TIMED_OUT
# (the coordinator retries); ISR shrinking after replica.lag.time.max.ms lets it through.
MARKER_REPLICATION_TIMEOUT_S = 15.0


async def write_marker(
    ctx: BrokerContext,
    topic: str,
    partition: int,
    producer_id: int,
    epoch: int,
    coordinator_epoch: int,
    commit: bool,
) -> ErrorCode:
    """Append one marker under the partition's lock, wake its waiting fetches and tell the
    group coordinator when the partition holds offsets. Returns NONE, UNKNOWN_TOPIC_OR_PARTITION
    (the topic is gone), KAFKA_STORAGE_ERROR (retry later), or the producer-state refusal
    (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED: a newer producer or coordinator
    took over, nothing to retry). In a cluster only the partition's leader appends (else
    NOT_LEADER_FOR_PARTITION), with its leader epoch, and the answer waits until the ISR has
    the marker (as Kafka appends markers with acks=all): NOT_ENOUGH_REPLICAS(_AFTER_APPEND) or
    REQUEST_TIMED_OUT otherwise, all retried by the coordinator."""
    failure: OSError | None = None
    replication = ctx.replication
    async with ctx.locked_log(topic, partition) as log:
        if log is None:
            if ctx.is_offline(topic, partition):
                return ErrorCode.KAFKA_STORAGE_ERROR
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        leader_epoch = replication.leader_epoch(topic, partition)
        if leader_epoch is None:
            return ErrorCode.NOT_LEADER_FOR_PARTITION
        registered = ctx.topics.get(topic)
        if (
            registered is not None
            and replication.short_isr(topic, partition, registered.config.min_insync_replicas)
            is not None
        ):
            return ErrorCode.NOT_ENOUGH_REPLICAS
        lat = (
            registered is not None
            and registered.settings.timestamp_type == TimestampType.LOG_APPEND_TIME
        )
        now = ctx.clock()
        try:
            if lat:  # stamped as a produce is: never backwards within the partition
                state = ctx.partition(topic, partition)
                if state.last_append_time < 0:
                    state.last_append_time = await workers.run_sync(log.latest_timestamp)
                now = state.next_append_time(now)
            offset = await workers.run_sync(
                lambda: log.append_control(
                    producer_id,
                    epoch,
                    coordinator_epoch,
                    commit,
                    leader_epoch,
                    now,
                    log_append_time=lat,
                )
            )
        except ProducerStateError as exc:
            logger.warning(
                "transaction marker refused by the partition's producer state",
                topic=topic,
                partition=partition,
                producer_id=producer_id,
                producer_epoch=epoch,
                error=exc.error_name,
                reason=str(exc),
            )
            return ErrorCode[exc.error_name]
        except OSError as exc:
            failure = exc
        except STORAGE_FAILURES as exc:
            logger.error(
                "transaction marker could not be written",
                topic=topic,
                partition=partition,
                producer_id=producer_id,
                error=repr(exc),
                action="a broker bug: report this line; the marker is retried",
            )
            return ErrorCode.KAFKA_STORAGE_ERROR
    state = ctx.partition(topic, partition)
    if failure is not None:
        state.appends_failing(failure, topic, partition)
        await ctx.storage_failed(topic, partition, failure)
        return ErrorCode.KAFKA_STORAGE_ERROR
    state.appends_succeed(topic, partition)
    state.notify()
    groups = ctx.coordinator
    if groups is not None and topic == groups.offsets_topic:
        groups.complete_transaction(producer_id, commit)
    replication.appended(topic, partition)
    return await replication.wait_for_hw(
        topic, partition, offset, trio.current_time() + MARKER_REPLICATION_TIMEOUT_S
    )


class MarkerOutcome(enum.Enum):
    """What the coordinator does with a partition after a marker's answer."""

    DONE = "done"
    RETRY = "retry"


# Kafka's TransactionMarkerRequestCompletionHandler: these are retried until the marker is in.
# UNKNOWN_TOPIC_OR_PARTITION too: a leader whose metadata has not caught up answers it; a topic
# really deleted is skipped by the next round, which no longer finds it (:func:`skip_deleted`).
RETRIABLE_MARKER_ERRORS = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.NOT_LEADER_FOR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.LEADER_NOT_AVAILABLE,
    }
)


def marker_outcome(
    error: ErrorCode, meta: TxnMetadata, topic: str, partition: int
) -> MarkerOutcome:
    """Retry the retriable errors; a refusal by the producer state (a newer producer epoch or
    coordinator wrote there) is final."""
    if error in RETRIABLE_MARKER_ERRORS:
        return MarkerOutcome.RETRY
    if error is not ErrorCode.NONE:
        logger.warning(
            "transaction marker refused; not retried",
            topic=topic,
            partition=partition,
            transactional_id=meta.transactional_id,
            error=error.name,
        )
    return MarkerOutcome.DONE


def skip_deleted(meta: TxnMetadata, topic: str, partition: int) -> None:
    """The partition is gone from the coordinator's metadata (its topic deleted): its marker is
    not sent, as Kafka's TransactionMarkerChannelManager skips a partition it no longer knows."""
    logger.warning(
        "transaction marker skipped: the partition no longer exists",
        topic=topic,
        partition=partition,
        transactional_id=meta.transactional_id,
    )
