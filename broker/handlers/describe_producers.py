"""DescribeProducers v0 (KIP-664): the producers a partition knows.

Per partition, from its producer state (storage/producer_state.py): producer id, epoch, last
sequence, last batch's timestamp, the coordinator epoch of its last transaction marker and the
first offset of its ongoing transaction (-1: none), which is what kafka-transactions.sh
find-hanging looks for. Errors per partition
as Kafka's ReplicaManager.activeProducerState gives them: UNKNOWN_TOPIC_OR_PARTITION, in a
cluster NOT_LEADER_OR_FOLLOWER on a broker that does not lead it, KAFKA_STORAGE_ERROR for an
offline log dir.
"""

from __future__ import annotations

from typing import Any

from broker.context import BrokerContext
from protocol.api import Request
from protocol.errors import ErrorCode


async def _partition(ctx: BrokerContext, topic: str, partition: int) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "partition_index": partition,
        "error_code": int(ErrorCode.NONE),
        "error_message": None,
        "active_producers": [],
    }
    if ctx.replication.leader_epoch(topic, partition) is None:
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
        producers = log.producer_state().active_producers()
    answer["active_producers"] = [p._asdict() for p in producers]
    return answer


async def handle_describe_producers(ctx: BrokerContext, request: Request) -> dict[str, Any]:
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
