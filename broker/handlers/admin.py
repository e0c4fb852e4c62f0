"""CreateTopics v0 and DeleteTopics v0 (this broker is its own controller)."""

from __future__ import annotations

from collections import Counter

import structlog

from broker.config import ConfigError, topic_name_error
from broker.errors import STORAGE_FAILURES
from broker.context import INTERNAL_TOPICS, BrokerContext, InvalidTopicNameError, TopicExistsError
from protocol.api import Request
from protocol.errors import ErrorCode

logger = structlog.get_logger(__name__)


def _reject(topic: str, error: ErrorCode, reason: str) -> dict:
    logger.warning("topic creation rejected", topic=topic, error=error.name, reason=reason)
    return {"name": topic, "error_code": int(error), "error_message": reason}


async def handle_create_topics(ctx: BrokerContext, request: Request) -> dict:
    entries = request.body.topics
    counts = Counter(e.name for e in entries)
    results, seen = [], set()
    broker_id = ctx.config.broker_id
    for entry in entries:
        name = entry.name
        if name in seen:
            continue
        seen.add(name)
        if counts[name] > 1:
            results.append(
                _reject(
                    name,
                    ErrorCode.INVALID_REQUEST,
                    f"topic listed {counts[name]} times in one request",
                )
            )
            continue
        reason = topic_name_error(name)
        if reason:
            results.append(_reject(name, ErrorCode.INVALID_TOPIC_EXCEPTION, reason))
            continue
        if name in ctx.topics:
            results.append(_reject(name, ErrorCode.TOPIC_ALREADY_EXISTS, "topic already exists"))
            continue
        if name in INTERNAL_TOPICS:
            # The group coordinator creates it with the configs that keep offsets alive.
            results.append(
                _reject(
                    name, ErrorCode.INVALID_REQUEST, "internal topic: the broker creates it itself"
                )
            )
            continue
        assignment = entry.assignments
        if assignment:
            if entry.num_partitions != -1 or entry.replication_factor != -1:
                results.append(
                    _reject(
                        name,
                        ErrorCode.INVALID_REQUEST,
                        "give either replica_assignment or num_partitions and "
                        "replication_factor (-1), not both",
                    )
                )
                continue
            ids = sorted(a.partition_index for a in assignment)
            if ids != list(range(len(ids))):
                results.append(
                    _reject(
                        name,
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"partition ids {ids} are not 0..{len(ids) - 1}",
                    )
                )
                continue
            bad = [a for a in assignment if list(a.broker_ids) != [broker_id]]
            if bad:
                results.append(
                    _reject(
                        name,
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"partition {bad[0].partition_index} is assigned to "
                        f"{list(bad[0].broker_ids)}; the only broker is "
                        f"{broker_id}",
                    )
                )
                continue
            partitions = len(ids)
        else:
            if entry.num_partitions <= 0:
                results.append(
                    _reject(
                        name,
                        ErrorCode.INVALID_PARTITIONS,
                        f"num_partitions {entry.num_partitions} must be > 0",
                    )
                )
                continue
            if entry.replication_factor not in (1, -1):
                results.append(
                    _reject(
                        name,
                        ErrorCode.INVALID_REPLICATION_FACTOR,
                        f"replication_factor {entry.replication_factor}: this is a "
                        "single broker, use 1 (or -1 for the default)",
                    )
                )
                continue
            partitions = entry.num_partitions
        configs = [(c.name, c.value) for c in entry.configs]
        try:
            await ctx.create_topic(name, partitions, _config_map(configs))
        except ConfigError as exc:
            results.append(_reject(name, ErrorCode.INVALID_CONFIG, str(exc)))
            continue
        except TopicExistsError as exc:
            results.append(_reject(name, ErrorCode.TOPIC_ALREADY_EXISTS, str(exc)))
            continue
        except InvalidTopicNameError as exc:
            results.append(_reject(name, ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc)))
            continue
        except STORAGE_FAILURES as exc:
            logger.error(
                "creating topic failed",
                topic=name,
                error=repr(exc),
                action="check the log dirs are writable and have space",
            )
            results.append({"name": name, "error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR)})
            continue
        results.append({"name": name, "error_code": 0})
    return {"topics": results}


def _config_map(configs: list[tuple[str, str]]) -> dict[str, str]:
    seen: dict[str, str] = {}
    for key, value in configs:
        if key in seen:
            raise ConfigError(key, "given more than once")
        seen[key] = value
    return seen


async def handle_delete_topics(ctx: BrokerContext, request: Request) -> dict:
    results = []
    for name in dict.fromkeys(request.body.topic_names):
        if name in INTERNAL_TOPICS:
            logger.warning(
                "topic deletion rejected",
                topic=name,
                error="INVALID_REQUEST",
                reason="internal topic: the group coordinator keeps committed offsets there",
            )
            results.append({"name": name, "error_code": int(ErrorCode.INVALID_REQUEST)})
            continue
        try:
            deleted = await ctx.delete_topic(name)
        except STORAGE_FAILURES as exc:
            logger.error(
                "deleting topic failed",
                topic=name,
                error=repr(exc),
                action="check the log dirs' disk: the topic is deleted for this run, but the "
                "registry could not be rewritten, so it returns (empty) at the next start",
            )
            results.append({"name": name, "error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR)})
            continue
        if not deleted:
            logger.warning(
                "topic deletion rejected",
                topic=name,
                error="UNKNOWN_TOPIC_OR_PARTITION",
                reason="no such topic",
            )
        code = ErrorCode.NONE if deleted else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        results.append({"name": name, "error_code": int(code)})
    return {"responses": results}
