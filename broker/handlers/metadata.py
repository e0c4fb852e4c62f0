"""Metadata v0-v13 and DescribeTopicPartitions v0 (KIP-966: the same partition view, paged).

Metadata answers are the same in every version, each version writing the fields it has: the one
broker, which is the controller and every partition's leader (leader epoch 0), topic ids
(KIP-516, v10+), and no authorized-operations sets (Kafka's "not requested" value) since there is
no authorizer. v10+ requests may name topics by id; an unknown id answers UNKNOWN_TOPIC_ID.
v13's top-level error code (Kafka 4.1 sets it only to ask a client to rebootstrap, KIP-1102) is
always 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import structlog

from broker.config import topic_name_error
from broker.errors import STORAGE_FAILURES
from broker.slices import Slices
from broker.context import INTERNAL_TOPICS, BrokerContext, InvalidTopicNameError, TopicExistsError
from protocol.api import Request
from protocol.errors import ErrorCode

logger = structlog.get_logger(__name__)

NO_AUTHORIZED_OPERATIONS = -2147483648  # Kafka's "not requested / unknown" value


def _partitions(ctx: BrokerContext, name: str, count: int) -> list[dict[str, Any]]:
    node = ctx.config.broker_id
    # Asked per partition only while some log dir is offline.
    offline = ctx.is_offline if ctx.log_manager.offline_dirs else (lambda topic, p: False)
    return [
        {
            "error_code": 0,
            "partition_index": p,
            "leader_id": node,
            "leader_epoch": 0,
            "replica_nodes": [node],
            "isr_nodes": [node],
            "offline_replicas": [],
        }
        if not offline(name, p)
        else {
            # Its only replica's log dir failed (KIP-112): no leader, as Kafka reports it.
            "error_code": int(ErrorCode.LEADER_NOT_AVAILABLE),
            "partition_index": p,
            "leader_id": -1,
            "leader_epoch": 0,
            "replica_nodes": [node],
            "isr_nodes": [],
            "offline_replicas": [node],
        }
        for p in range(count)
    ]


async def handle_metadata(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    version = request.header.api_version
    requested = request.body.topics
    allow_create = request.body.allow_auto_topic_creation if version >= 4 else True
    if requested is None or (version == 0 and len(requested) == 0):
        wanted = [(name, None) for name in ctx.topics.names()]
    else:
        wanted = list(
            dict.fromkeys((t.name, t.topic_id if t.name is None else None) for t in requested)
        )
    topics = []
    slices = Slices()  # a topic is never split
    for name, topic_id in wanted:
        await slices.turn()
        error, partitions = ErrorCode.NONE, []
        topic = ctx.topics.get(name) if name is not None else ctx.topics.by_id(topic_id)
        if topic is not None:
            name, partitions = topic.name, _partitions(ctx, topic.name, topic.partitions)
        elif name is None:
            error = ErrorCode.UNKNOWN_TOPIC_ID
        elif topic_name_error(name):
            error = ErrorCode.INVALID_TOPIC_EXCEPTION
        elif name in INTERNAL_TOPICS:
            # Only the group coordinator creates it, with its own configs (compacted, no
            # retention), as it starts: until then it is "not yet available".
            error = ErrorCode.LEADER_NOT_AVAILABLE
        elif ctx.config.auto_create_topics_enable and allow_create and not ctx.stopping:
            error = await _auto_create(ctx, name)
        else:
            error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        topics.append(
            {
                "error_code": int(error),
                "name": name,
                "topic_id": topic.topic_id if topic is not None else None,
                "is_internal": name in INTERNAL_TOPICS,
                "partitions": partitions,
                "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
            }
        )
    config = ctx.config
    return {
        "throttle_time_ms": 0,
        "brokers": [
            {
                "node_id": config.broker_id,
                "host": config.advertised_host,
                "port": config.advertised_port,
                "rack": None,
            }
        ],
        "cluster_id": ctx.cluster_id,
        "controller_id": config.broker_id,
        "topics": topics,
        "cluster_authorized_operations": NO_AUTHORIZED_OPERATIONS,
        "error_code": 0,
    }


async def _auto_create(ctx: BrokerContext, name: str) -> ErrorCode:
    """Create a topic with the broker defaults; like Kafka, the first answer is
    LEADER_NOT_AVAILABLE and the client asks again."""
    try:
        await ctx.create_topic(name, ctx.config.num_partitions)
    except TopicExistsError:
        pass  # created concurrently by another request: also "not yet available" to this one
    except InvalidTopicNameError:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    except STORAGE_FAILURES as exc:  # the client retries, the operator reads why
        logger.error(
            "auto-creating topic failed",
            topic=name,
            error=repr(exc),
            action="check the log dirs are writable and have space",
        )
    return ErrorCode.LEADER_NOT_AVAILABLE


# Kafka's max.request.partition.size.limit default: DescribeTopicPartitions answers at most this
# many partitions whatever the request's limit (chronolog only reports the setting).
PARTITION_SIZE_LIMIT = 2000

PartitionsOf = Callable[[str], list[dict[str, Any]] | None]


def describe_topic_partitions_answer(
    request: Request,
    all_names: Iterable[str],
    partitions_of: PartitionsOf,
    topic_id_of: Callable[[str], Any],
) -> dict[str, Any]:
    """DescribeTopicPartitions as Kafka's DescribeTopicPartitionsRequestHandler pages it: the
    named topics (every topic when none is named) from the cursor on, sorted by name, with at
    most ``response_partition_limit`` partitions (1..2000) in all; next_cursor names the first
    partition left out. A named topic that does not exist answers UNKNOWN_TOPIC_OR_PARTITION
    (INVALID_TOPIC_EXCEPTION for an invalid name); listing every topic skips such errors. A
    cursor whose topic is not among those named, or with a negative partition, fails the whole
    request with INVALID_REQUEST on every named topic, as Kafka answers it.
    ``partitions_of(name)``: Metadata's partition entries of a topic, None if it does not
    exist."""
    body = request.body
    every = not body.topics
    cursor = body.cursor
    first_topic = cursor.topic_name if cursor is not None else ""
    names = all_names if every else {t.name for t in body.topics}
    wanted = sorted(n for n in names if n >= first_topic)
    if cursor is not None and (
        (not every and first_topic not in wanted) or cursor.partition_index < 0
    ):
        return {
            "throttle_time_ms": 0,
            "topics": [
                {
                    "error_code": int(ErrorCode.INVALID_REQUEST),
                    "name": t.name,
                    "is_internal": False,
                    "partitions": [],
                }
                for t in body.topics
            ],
            "next_cursor": None,
        }
    remaining = max(min(PARTITION_SIZE_LIMIT, body.response_partition_limit), 1)
    topics: list[dict[str, Any]] = []
    next_cursor = None
    for name in wanted:
        if remaining == 0:
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        partitions = partitions_of(name)
        if partitions is None:
            if not every:
                error = (
                    ErrorCode.INVALID_TOPIC_EXCEPTION
                    if topic_name_error(name)
                    else (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                )
                topics.append(
                    {
                        "error_code": int(error),
                        "name": name,
                        "is_internal": name in INTERNAL_TOPICS,
                        "partitions": [],
                    }  # fmt: skip
                )
            continue
        start = cursor.partition_index if cursor is not None and name == first_topic else 0
        page = partitions[start : start + remaining]
        topics.append(
            {
                "error_code": 0,
                "name": name,
                "topic_id": topic_id_of(name),
                "is_internal": name in INTERNAL_TOPICS,
                # Kafka sets no partition error here, whether a leader is known or not
                "partitions": [
                    dict(p, error_code=0, eligible_leader_replicas=[], last_known_elr=[])
                    for p in page
                ],
                "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
            }
        )
        if start + remaining < len(partitions):
            next_cursor = {"topic_name": name, "partition_index": start + remaining}
            break
        remaining -= len(page)
    return {"throttle_time_ms": 0, "topics": topics, "next_cursor": next_cursor}


async def handle_describe_topic_partitions(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    def partitions_of(name: str) -> list[dict[str, Any]] | None:
        topic = ctx.topics.get(name)
        return None if topic is None else _partitions(ctx, name, topic.partitions)

    def topic_id_of(name: str) -> Any:
        topic = ctx.topics.get(name)
        return None if topic is None else topic.topic_id

    return describe_topic_partitions_answer(request, ctx.topics.names(), partitions_of, topic_id_of)
