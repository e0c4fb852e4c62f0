"""DescribeConfigs v0-v4, AlterConfigs v0-v2 and IncrementalAlterConfigs v0-v1, for TOPIC
resources (a topic's overrides) and BROKER resources (the dynamic broker configs: an empty name
is the cluster-wide default, this broker's id its own), as Kafka 3.9's ZooKeeper-mode broker
answers them (ConfigHelper, ConfigAdminManager, ZkAdminManager).

Each resource is answered on its own. AlterConfigs replaces the resource's whole set of
overrides, IncrementalAlterConfigs edits it (SET, DELETE, APPEND and SUBTRACT, the last two for
list configs such as ``cleanup.policy``). Invalid values and unknown names answer
INVALID_CONFIG with a message naming the key (Kafka answers a bad broker value with
INVALID_REQUEST, KAFKA-13609; chronolog gives the code Kafka says it should); properties that
cannot change at run time answer INVALID_REQUEST "Cannot update these configs dynamically".
Every name Kafka 4.1 defines is known (broker/admin/kafka_configs.py): the ones chronolog does
not act on are validated with Kafka's type and bounds, stored and described, and refused as
Kafka refuses them (read-only ones not dynamically, per-broker ones at the cluster level, the
key and trust stores without a listener prefix).
BROKER_LOGGER resources (log4j levels) are not served: INVALID_REQUEST. DescribeConfigs v0's
``is_default`` is set from the source (Kafka 3.9 leaves it false). No documentation strings.

In a cluster a change is written to ZooKeeper and every broker applies it
(broker/cluster/config_changes.py); an incremental change of a topic edits the overrides
ZooKeeper holds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from broker.admin.changes import UnknownTopicError, set_dynamic_broker_configs, set_topic_overrides
from broker.admin.configs import (
    ConfigEntry,
    ResourceType,
    broker_entries,
    topic_entries,
    value_string,
)
from broker.admin.dynamic import NotDynamicError
from broker.config import (
    BROKER_KEYS,
    KAFKA_ONLY_BROKER_KEYS,
    KAFKA_ONLY_TOPIC_KEYS,
    TOPIC_ALIASES,
    TOPIC_KEYS,
    ConfigError,
    ConfigKey,
    Type,
    topic_name_error,
)
from broker.context import BrokerContext
from broker.errors import STORAGE_FAILURES, ClusterStateError
from broker.handlers.admin import config_error_message
from protocol.api import Request
from protocol.errors import ErrorCode

logger = structlog.get_logger(__name__)

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


class ResourceError(Exception):
    """Raised while handling one config resource: ``code`` and ``str(exc)`` are its answer."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _broker_level(ctx: BrokerContext, name: str, *, describing: bool = False) -> bool:
    """True for this broker's own configs (its id), False for the cluster-wide default ("")."""
    if not name:
        return False
    try:
        broker_id = int(name)
    except ValueError:
        raise ResourceError(
            ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}"
        ) from None
    if broker_id != ctx.config.broker_id:
        expected = f"{ctx.config.broker_id} or empty string" if describing else ctx.config.broker_id
        raise ResourceError(
            ErrorCode.INVALID_REQUEST,
            f"Unexpected broker id, expected {expected}, but received {name}",
        )
    return True


def _unsupported(resource_type: int) -> ResourceError:
    if resource_type == ResourceType.BROKER_LOGGER:
        return ResourceError(
            ErrorCode.INVALID_REQUEST,
            "BROKER_LOGGER configs are not served by chronolog; its log level is set at start-up",
        )
    return ResourceError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {resource_type}")


# -- DescribeConfigs -----------------------------------------------------------------------------


def _describe(ctx: BrokerContext, resource: Any) -> list[ConfigEntry]:
    kind, name = resource.resource_type, resource.resource_name
    layers = ctx.dynamic_configs.layers()
    if kind == ResourceType.TOPIC:
        reason = topic_name_error(name)
        if reason:
            raise ResourceError(ErrorCode.INVALID_TOPIC_EXCEPTION, reason)
        topic = ctx.topics.get(name)
        if topic is None:
            raise ResourceError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
            )
        return topic_entries(topic.overrides, topic.config, layers)
    if kind == ResourceType.BROKER:
        return broker_entries(layers, per_broker=_broker_level(ctx, name, describing=True))
    raise _unsupported(kind)


async def handle_describe_configs(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    include_synonyms = request.header.api_version >= 1 and bool(body.include_synonyms)
    results = []
    for resource in body.resources:
        result: dict[str, Any] = {
            "resource_type": resource.resource_type,
            "resource_name": resource.resource_name,
            "error_code": 0,
            "error_message": None,
            "configs": [],
        }
        try:
            entries = _describe(ctx, resource)
        except ResourceError as exc:
            logger.info(
                "describe configs refused",
                resource_type=resource.resource_type,
                resource=resource.resource_name,
                error=exc.code.name,
                reason=str(exc),
            )
            result.update(error_code=int(exc.code), error_message=str(exc))
        else:
            wanted = set(resource.configuration_keys or ())
            result["configs"] = [
                e.describe_result(include_synonyms)
                for e in entries
                if not wanted or e.name in wanted
            ]
        results.append(result)
    return {"throttle_time_ms": 0, "results": results}


# -- AlterConfigs and IncrementalAlterConfigs ----------------------------------------------------


def _checked(resource: Any, *, incremental: bool) -> None:
    """Kafka's ConfigAdminManager.preprocess checks of one resource's entries."""
    if len({c.name for c in resource.configs}) != len(resource.configs):
        raise ResourceError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    nulls = [
        c.name
        for c in resource.configs
        if c.value is None and not (incremental and c.config_operation == DELETE)
    ]
    if nulls:
        raise ResourceError(
            ErrorCode.INVALID_REQUEST, f"Null value not supported for : {', '.join(nulls)}"
        )


def _edited(
    current: dict[str, str],
    ops: list[tuple[str, int, str | None]],
    keys: Mapping[str, ConfigKey],
    effective: Callable[[str], str | None],
) -> dict[str, str]:
    """``current`` with IncrementalAlterConfigs' (name, operation, value) applied in order
    (ConfigAdminManager.prepareIncrementalConfigs). ``keys`` maps names to ConfigKeys;
    ``effective(name)`` is the value APPEND and SUBTRACT start from when the name is not set."""
    result = dict(current)
    for name, operation, value in ops:
        if operation == SET and value is not None:
            result[name] = value
        elif operation == DELETE:
            result.pop(name, None)
        elif operation in (APPEND, SUBTRACT) and value is not None:
            key = keys.get(name)
            if key is None:
                raise ConfigError(name, "unknown config")
            verb = "append" if operation == APPEND else "subtract"
            if key.type is not Type.LIST:
                raise ResourceError(
                    ErrorCode.INVALID_CONFIG,
                    f"Config value {verb} is not allowed for config key: {name}",
                )
            start = result.get(name, effective(name)) or ""
            items = [v for v in start.split(",") if v]
            given = value.split(",")
            if operation == APPEND:
                items += [v for v in given if v not in items]
            else:
                items = [v for v in items if v not in given]
            result[name] = ",".join(items)
        else:
            raise ResourceError(ErrorCode.INVALID_REQUEST, f"Unknown operations type {operation}")
    return result


def _operations(resource: Any, aliases: Mapping[str, str]) -> list[tuple[str, int, str | None]]:
    return [(aliases.get(c.name, c.name), c.config_operation, c.value) for c in resource.configs]


async def _alter_topic(
    ctx: BrokerContext, resource: Any, incremental: bool, validate_only: bool
) -> None:
    name = resource.resource_name
    if not name:
        raise ResourceError(ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed.")
    topic = ctx.topics.get(name)
    if topic is None:
        raise UnknownTopicError(f"The topic '{name}' does not exist.")
    if incremental:

        def effective(key: str) -> str | None:
            if key in TOPIC_KEYS:
                return value_string(
                    TOPIC_KEYS[key], getattr(topic.config, TOPIC_KEYS[key].attribute)
                )
            kafka_key = KAFKA_ONLY_TOPIC_KEYS[key]  # not acted on: the broker's value, or Kafka's
            if kafka_key.synonyms:
                return ctx.dynamic_configs.layers().value(kafka_key.synonyms[0].name)
            return value_string(kafka_key, kafka_key.default)

        stored = await ctx.replication.stored_topic_overrides(name)
        current = dict(topic.overrides) if stored is None else stored
        ops = _operations(resource, TOPIC_ALIASES)
        overrides = _edited(current, ops, {**TOPIC_KEYS, **KAFKA_ONLY_TOPIC_KEYS}, effective)
    else:
        overrides = {c.name: c.value for c in resource.configs}
    await set_topic_overrides(ctx, name, overrides, validate_only=validate_only)


async def _alter_broker(
    ctx: BrokerContext, resource: Any, incremental: bool, validate_only: bool
) -> None:
    per_broker = _broker_level(ctx, resource.resource_name)
    dynamic = ctx.dynamic_configs
    if incremental:
        current = dict(dynamic.per_broker if per_broker else dynamic.cluster_default)
        layers = dynamic.layers()
        keys = {**BROKER_KEYS, **KAFKA_ONLY_BROKER_KEYS}
        values = _edited(current, _operations(resource, {}), keys, layers.value)
    else:
        values = {c.name: c.value for c in resource.configs}
    await set_dynamic_broker_configs(
        ctx, values, per_broker=per_broker, validate_only=validate_only
    )


async def _alter(ctx: BrokerContext, request: Request, *, incremental: bool) -> dict[str, Any]:
    body = request.body
    validate_only = bool(body.validate_only)
    counts = Counter((r.resource_type, r.resource_name) for r in body.resources)
    responses = []
    for resource in body.resources:
        kind, name = resource.resource_type, resource.resource_name
        code, message = ErrorCode.NONE, None
        try:
            if counts[(kind, name)] > 1:
                raise ResourceError(
                    ErrorCode.INVALID_REQUEST, "Each resource must appear at most once."
                )
            _checked(resource, incremental=incremental)
            if kind == ResourceType.TOPIC:
                await _alter_topic(ctx, resource, incremental, validate_only)
            elif kind == ResourceType.BROKER:
                await _alter_broker(ctx, resource, incremental, validate_only)
            else:
                raise _unsupported(kind)
        except ResourceError as exc:
            code, message = exc.code, str(exc)
        except UnknownTopicError as exc:
            code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(exc)
        except NotDynamicError as exc:
            code, message = ErrorCode.INVALID_REQUEST, str(exc)
        except ConfigError as exc:
            code, message = ErrorCode.INVALID_CONFIG, config_error_message(exc)
        except ClusterStateError as exc:
            code, message = ErrorCode.UNKNOWN_SERVER_ERROR, f"the change failed: {exc}; retry it"
        except STORAGE_FAILURES as exc:
            logger.error(
                "config change not saved",
                resource_type=kind,
                resource=name,
                error=repr(exc),
                action="check the first log dir's disk (full or failing?) and retry",
            )
            code = ErrorCode.UNKNOWN_SERVER_ERROR
            message = f"the broker could not save the change ({exc}); nothing was changed"
        if code != ErrorCode.NONE:
            logger.info(
                "config change refused",
                resource_type=kind,
                resource=name,
                error=code.name,
                reason=message,
            )
        responses.append(
            {
                "error_code": int(code),
                "error_message": message,
                "resource_type": kind,
                "resource_name": name,
            }
        )
    return {"throttle_time_ms": 0, "responses": responses}


async def handle_alter_configs(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    return await _alter(ctx, request, incremental=False)


async def handle_incremental_alter_configs(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    return await _alter(ctx, request, incremental=True)
