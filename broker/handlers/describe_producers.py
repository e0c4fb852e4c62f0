"""DescribeProducers v0 (KIP-664): the idempotent producers a partition knows.

Per partition, from its producer state (storage/producer_state.py, what the log keeps of each
producer's last batch): producer id, epoch, last sequence, last batch's timestamp. chronolog has
no transactions, so coordinator_epoch and current_txn_start_offset are -1. Errors per partition
as Kafka's ReplicaManager.activeProducerState gives them: UNKNOWN_TOPIC_OR_PARTITION, in a
cluster NOT_LEADER_OR_FOLLOWER on a broker that does not lead it, KAFKA_STORAGE_ERROR for an
offline log dir.
"""

from __future__ import annotations

from broker.context import BrokerContext
from protocol.api import Request
from protocol.errors import ErrorCode


async def _partition(ctx: BrokerContext, topic: str, partition: int) -> dict:
    answer: dict = {
        "partition_index": partition,
        "error_code": int(ErrorCode.NONE),
        "error_message": None,
        "active_producers": [],
    }
    if ctx.cluster is not None and ctx.cluster.replicas.leader(topic, partition) is None:
        answer["error_code"] = int(ErrorCode.NOT_LEADER_FOR_PARTITION)
        return answer
    async with ctx.locked_log(topic, partition) as log:
        if log is None:
            offline = ctx.is_offline(topic, partition)
            code = (
                ErrorCode.KAFKA_STORAGE_ERROR if offline else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
            answer["error_code"] = int(code)
            return answer
        batches = log.producer_state().last_batches()
    answer["active_producers"] = [
        {
            "producer_id": pid,
            "producer_epoch": epoch,
            "last_sequence": last_sequence,
            "last_timestamp": max_timestamp,
            "coordinator_epoch": -1,
            "current_txn_start_offset": -1,
        }
        for pid, epoch, _first, last_sequence, _offset, max_timestamp in batches
    ]
    return answer


async def handle_describe_producers(ctx: BrokerContext, request: Request) -> dict:
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": t["name"],
                "partitions": [await _partition(ctx, t["name"], p) for p in t["partition_indexes"]],
            }
            for t in request.body.topics
        ],
    }
