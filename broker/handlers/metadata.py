"""ApiVersions v0 and Metadata v0-v2."""
from __future__ import annotations

import structlog

from broker.config import topic_name_error
from broker.context import (INTERNAL_TOPICS, BrokerContext, InvalidTopicNameError,
                            TopicExistsError)
from protocol.api import SUPPORTED_VERSIONS, Request
from protocol.errors import ErrorCode

log = structlog.get_logger(__name__)


def api_versions(implemented) -> list[dict]:
    """The api list: protocol's version ranges for the apis this broker dispatches."""
    return [{"api_key": int(key), "min_version": lo, "max_version": hi}
            for key, (lo, hi) in sorted(SUPPORTED_VERSIONS.items()) if key in implemented]


def make_api_versions_handler(handlers):
    """ApiVersions answers from the final dispatch table, so it advertises exactly what runs."""
    async def handle_api_versions(ctx: BrokerContext, request: Request) -> dict:
        # body None: a newer ApiVersions version; answer in the v0 layout with error 35 and the
        # list, which is what makes kafka-python and librdkafka retry at v0 (clients.md).
        error = ErrorCode.UNSUPPORTED_VERSION if request.body is None else ErrorCode.NONE
        return {"error_code": int(error), "api_versions": api_versions(handlers)}
    return handle_api_versions


def _partitions(ctx: BrokerContext, count: int) -> list[dict]:
    node = ctx.config.broker_id
    return [{"partition_error_code": 0, "partition_id": p, "leader": node,
             "replicas": [node], "isr": [node]} for p in range(count)]


async def handle_metadata(ctx: BrokerContext, request: Request) -> dict:
    version = request.header.api_version
    requested = request.body.topics
    if requested is None or (version == 0 and len(requested) == 0):
        names = ctx.topics.names()
    else:
        names = list(dict.fromkeys(requested))
    topic_metadata = []
    for name in names:
        error, partitions = ErrorCode.NONE, []
        topic = ctx.topics.get(name)
        if topic is not None:
            partitions = _partitions(ctx, topic.partitions)
        elif topic_name_error(name):
            error = ErrorCode.INVALID_TOPIC_EXCEPTION
        elif name in INTERNAL_TOPICS:
            # Only the group coordinator creates it, with its own configs (compacted, no
            # retention), as it starts: until then it is "not yet available".
            error = ErrorCode.LEADER_NOT_AVAILABLE
        elif ctx.config.auto_create_topics_enable and not ctx.stopping:
            error = await _auto_create(ctx, name)
        else:
            error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        entry = {"topic_error_code": int(error), "topic": name, "partition_metadata": partitions}
        if version >= 1:
            entry["is_internal"] = name in INTERNAL_TOPICS
        topic_metadata.append(entry)

    config = ctx.config
    if version == 0:
        return {"brokers": [{"node_id": config.broker_id, "host": config.advertised_host,
                             "port": config.advertised_port}],
                "topic_metadata": topic_metadata}
    body = {"brokers": [{"node_id": config.broker_id, "host": config.advertised_host,
                         "port": config.advertised_port, "rack": None}],
            "controller_id": config.broker_id,
            "topic_metadata": topic_metadata}
    if version >= 2:
        body["cluster_id"] = ctx.cluster_id
    return body


async def _auto_create(ctx: BrokerContext, name: str) -> ErrorCode:
    """Create a topic with the broker defaults; like Kafka, the first answer is
    LEADER_NOT_AVAILABLE and the client asks again."""
    try:
        await ctx.create_topic(name, ctx.config.num_partitions)
    except TopicExistsError:
        pass  # created concurrently by another request: also "not yet available" to this one
    except InvalidTopicNameError:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    except Exception as exc:  # storage failure: the client retries, the operator reads why
        log.error("auto-creating topic failed", topic=name, error=repr(exc),
                  action="check the log dirs are writable and have space")
    return ErrorCode.LEADER_NOT_AVAILABLE
