"""Writing one transaction marker (a COMMIT or ABORT control batch) into a partition: what the
coordinator does for each partition of a completing transaction, and what WriteTxnMarkers asks
of a partition's leader. Kafka's ReplicaManager.appendRecords with origin COORDINATOR."""

from __future__ import annotations

import structlog
import trio

from broker.context import BrokerContext
from broker.errors import STORAGE_FAILURES
from protocol.errors import ErrorCode
from protocol.records import TimestampType
from storage.producer_state import ProducerStateError

logger = structlog.get_logger(__name__)


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
    took over, nothing to retry)."""
    failure: OSError | None = None
    async with ctx.locked_log(topic, partition) as log:
        if log is None:
            if ctx.is_offline(topic, partition):
                return ErrorCode.KAFKA_STORAGE_ERROR
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        registered = ctx.topics.get(topic)
        lat = (
            registered is not None
            and registered.settings.timestamp_type == TimestampType.LOG_APPEND_TIME
        )
        now = ctx.clock()
        try:
            if lat:  # stamped as a produce is: never backwards within the partition
                state = ctx.partition(topic, partition)
                if state.last_append_time < 0:
                    state.last_append_time = await trio.to_thread.run_sync(log.latest_timestamp)
                now = state.next_append_time(now)
            await trio.to_thread.run_sync(
                lambda: log.append_control(
                    producer_id, epoch, coordinator_epoch, commit, 0, now, log_append_time=lat
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
    return ErrorCode.NONE
