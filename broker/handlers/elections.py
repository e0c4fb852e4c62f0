"""ElectLeaders v0-v2, ListPartitionReassignments v0 and AlterPartitionReassignments v0-v1 on a
single broker, answered as a single-node Kafka 4.1 answers them (its controller's
ReplicationControlManager): the broker is every partition's only replica and its leader, so
an election is never needed, nothing is ever being reassigned, and the only reassignment that
can be asked is to the replicas a partition already has, which is done at once. In a cluster
broker/cluster/handlers.py answers these through the controller.
"""

from __future__ import annotations

from typing import Any

from broker.context import BrokerContext
from protocol.api import Request
from protocol.errors import ErrorCode

UNCLEAN = 1  # ElectLeaders' election_type: 0 preferred, 1 unclean


def _partition_error(ctx: BrokerContext, topic: str, partition: int) -> tuple[ErrorCode, str]:
    """Why ``topic``-``partition`` cannot be elected or reassigned: NONE when it can."""
    known = ctx.topics.get(topic)
    if known is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic}"
    if not 0 <= partition < known.partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic}-{partition}"
    return ErrorCode.NONE, ""


def _election(ctx: BrokerContext, topic: str, partition: int, unclean: bool) -> tuple[int, str]:
    error, message = _partition_error(ctx, topic, partition)
    if error != ErrorCode.NONE:
        return int(error), message
    if ctx.is_offline(topic, partition):
        # the only replica's log dir failed (KIP-112): no replica can lead it
        error = (
            ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE if unclean
            else ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
        )  # fmt: skip
        return int(error), f"The only replica of {topic}-{partition} is in an offline log dir."
    return int(ErrorCode.ELECTION_NOT_NEEDED), "Leader election not needed for topic partition."


async def handle_elect_leaders(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    """Every named partition answers ELECTION_NOT_NEEDED (its leader is its preferred and only
    replica); asked for every partition (null), each topic is listed without the partitions
    that need no election, as Kafka leaves them out."""
    body = request.body
    unclean = body.get("election_type", 0) == UNCLEAN
    results: list[dict[str, Any]] = []
    if body.topic_partitions is None:
        for name in sorted(ctx.topics.names()):
            topic = ctx.topics.get(name)
            assert topic is not None  # just listed, and nothing has run since
            elected = [_election(ctx, name, p, unclean) for p in range(topic.partitions)]
            results.append(
                {
                    "topic": name,
                    "partition_result": [
                        {"partition_id": p, "error_code": code, "error_message": message}
                        for p, (code, message) in enumerate(elected)
                        if code != ErrorCode.ELECTION_NOT_NEEDED
                    ],
                }
            )
    else:
        for entry in body.topic_partitions:
            outcomes = [(p, *_election(ctx, entry.topic, p, unclean)) for p in entry.partitions]
            results.append(
                {
                    "topic": entry.topic,
                    "partition_result": [
                        {"partition_id": p, "error_code": code, "error_message": message}
                        for p, code, message in outcomes
                    ],
                }
            )
    return {"throttle_time_ms": 0, "error_code": 0, "replica_election_results": results}


async def handle_list_partition_reassignments(
    ctx: BrokerContext, request: Request
) -> dict[str, Any]:
    """Nothing is ever being reassigned on a single broker."""
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "topics": []}


def _reassignment(
    ctx: BrokerContext, topic: str, partition: int, replicas: list[int] | None
) -> tuple[int, str | None]:
    """Kafka's checks of one target, in its order: the topic and partition, then the list."""
    known = ctx.topics.get(topic)
    if known is None:
        return int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), f"Unable to find a topic named {topic}."
    if not 0 <= partition < known.partitions:
        return (
            int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            f"Unable to find partition {topic}:{partition}.",
        )
    if replicas is None:  # a cancellation
        return int(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS), None
    if not replicas:
        return (
            int(ErrorCode.INVALID_REPLICA_ASSIGNMENT),
            "The manual partition assignment includes an empty replica list.",
        )
    node = ctx.config.broker_id
    for broker in replicas:
        if broker != node:
            return (
                int(ErrorCode.INVALID_REPLICA_ASSIGNMENT),
                f"The manual partition assignment includes broker {broker}, but no such "
                "broker is registered.",
            )
    if len(replicas) != len(set(replicas)):
        return (
            int(ErrorCode.INVALID_REPLICA_ASSIGNMENT),
            "The manual partition assignment includes duplicate replicas.",
        )
    return 0, None  # already the partition's replicas: done at once


async def handle_alter_partition_reassignments(
    ctx: BrokerContext, request: Request
) -> dict[str, Any]:
    """Each target judged on its own: to the broker itself, done; a cancellation,
    NO_REASSIGNMENT_IN_PROGRESS; another broker, INVALID_REPLICA_ASSIGNMENT."""
    responses = []
    for topic in request.body.topics:
        partitions = []
        for target in topic.partitions:
            code, message = _reassignment(ctx, topic.name, target.partition_index, target.replicas)
            partitions.append(
                {
                    "partition_index": target.partition_index,
                    "error_code": code,
                    "error_message": message,
                }
            )
        responses.append({"name": topic.name, "partitions": partitions})
    return {
        "throttle_time_ms": 0,
        # v1 (KIP-860): a target is this broker alone, so the replication factor never changes
        "allow_replication_factor_change": bool(request.body.allow_replication_factor_change),
        "error_code": 0,
        "error_message": None,
        "responses": responses,
    }
