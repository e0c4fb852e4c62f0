"""CreateTopics v0-v7, DeleteTopics v0-v6 and CreatePartitions v0-v3 (this broker is its own
controller), answered as Kafka 3.9's ZooKeeper-mode broker answers them (KafkaApis,
ZkAdminManager), with these differences: creation is complete when the answer is sent, so a
``timeout_ms`` <= 0 answers NONE rather than REQUEST_TIMED_OUT (as a KRaft controller does);
replica assignments naming another broker than this one are refused (Kafka would create
partitions without a live replica); ``__consumer_offsets`` is neither created, deleted nor
given partitions by request (the group coordinator owns it and maps groups to its partitions).

Each topic is judged on its own; the answer names what is wrong with it (``error_message``, v1+)
and the log says it once. ``validate_only`` runs every check without creating anything.
CreateTopics and CreatePartitions are one pipeline each for a single broker and a cluster: the
checks are made here, and only where the topic goes differs (:class:`TopicPlacement`; the
cluster's places it in ZooKeeper, broker/cluster/handlers.py).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import structlog

from broker.admin.changes import PartitionCountError, UnknownTopicError, add_partitions
from broker.admin.configs import topic_entries
from broker.config import ConfigError, parse_topic_configs, topic_name_error
from broker.context import INTERNAL_TOPICS, BrokerContext, InvalidTopicNameError, TopicExistsError
from broker.errors import STORAGE_FAILURES
from broker.topics import Topic
from protocol.api import Request
from protocol.errors import ErrorCode

logger = structlog.get_logger(__name__)

CLUSTER_METADATA_TOPIC = "__cluster_metadata"  # KRaft's; Kafka refuses to create it by request
ZERO_UUID = uuid.UUID(int=0)
# Kafka 4.1's controller takes at most 10,000 records a request (QuorumController's
# MAX_RECORDS_PER_USER_OP): CreateTopics asking more partitions than that is refused with this
# text. Kafka answers CreatePartitions past it with UNKNOWN_SERVER_ERROR and no text; chronolog
# refuses it as CreateTopics (README departures), before creating a million logs for one request.
MAX_PARTITIONS_PER_REQUEST = 10_000
_EXCESSIVE = "Excessively large number of partitions per request."


class TopicRequestError(Exception):
    """Raised while judging one topic of an admin request: ``code`` and ``str(exc)`` are its
    answer."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def config_error_message(exc: ConfigError) -> str:
    """A ConfigError as Kafka words it, naming the key."""
    if exc.reason.startswith("unknown") and exc.reason.endswith("config"):
        kind = exc.reason.removeprefix("unknown").removesuffix("config").strip()
        return f"Unknown {kind + ' ' if kind else ''}config name: {exc.key}"
    return f"Invalid value for configuration {exc.key}: {exc.reason}"


def collisions(ctx: BrokerContext, name: str) -> list[str]:
    """Existing topics whose name equals ``name`` once '.' and '_' are confused (Kafka refuses
    them: metric names cannot tell them apart)."""
    if "." not in name and "_" not in name:
        return []
    flat = name.replace(".", "_")
    return [t for t in ctx.topics.names() if t != name and t.replace(".", "_") == flat]


def _rejected(name: str | None, code: ErrorCode, message: str, what: str) -> None:
    logger.warning(what, topic=name, error=code.name, reason=message)


# -- CreateTopics --------------------------------------------------------------------------------


class TopicPlacement(Protocol):
    """Where CreateTopics puts a topic that passed the checks every broker makes: this broker's
    own logs (:class:`LocalTopics`), or ZooKeeper in a cluster (broker/cluster/handlers.py)."""

    def exists(self, name: str) -> bool:
        """Whether a topic of this name exists already."""
        ...

    def replicas(self, entry: Any, partitions: int, factor: int) -> dict[int, tuple[int, ...]]:
        """The replicas of each partition: the request's assignments checked, or assigned
        ``partitions`` x ``factor`` (-1: the broker's defaults). Raises TopicRequestError."""
        ...

    async def create(self, topic: Topic, replicas: dict[int, tuple[int, ...]]) -> uuid.UUID:
        """Create it; its topic id. Raises TopicRequestError."""
        ...

    async def settle(self, created: list[str], timeout_ms: int) -> set[str]:
        """Wait up to ``timeout_ms`` until the created topics can be used; those that cannot."""
        ...


class LocalTopics:
    """A single broker: it is every partition's only replica, and its logs exist when
    ``create`` returns."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def exists(self, name: str) -> bool:
        return name in self.ctx.topics

    def replicas(self, entry: Any, partitions: int, factor: int) -> dict[int, tuple[int, ...]]:
        broker_id = self.ctx.config.broker_id
        if entry.assignments:
            replicas = {a.partition_index: tuple(a.broker_ids) for a in entry.assignments}
            if len(replicas) != len(entry.assignments) or sorted(replicas) != list(
                range(len(replicas))
            ):
                raise TopicRequestError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    "partitions should be a consecutive 0-based integer sequence",
                )
            for partition, brokers in sorted(replicas.items()):
                if brokers != (broker_id,):
                    raise TopicRequestError(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"partition {partition} is assigned to brokers {list(brokers)}, but the "
                        f"only broker is {broker_id}: assign every partition to [{broker_id}]",
                    )
            return replicas
        partitions = self.ctx.config.num_partitions if partitions == -1 else partitions
        factor = 1 if factor == -1 else factor
        if factor > 1:
            raise TopicRequestError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Replication factor: {factor} larger than available brokers: 1.",
            )
        return {p: (broker_id,) for p in range(partitions)}

    async def create(self, topic: Topic, replicas: dict[int, tuple[int, ...]]) -> uuid.UUID:
        name = topic.name
        try:
            created = await self.ctx.create_topic(name, topic.partitions, topic.overrides)
        except TopicExistsError:
            raise TopicRequestError(
                ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
            ) from None
        except InvalidTopicNameError as exc:
            raise TopicRequestError(ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc)) from None
        except ConfigError as exc:
            raise TopicRequestError(ErrorCode.INVALID_CONFIG, config_error_message(exc)) from None
        except STORAGE_FAILURES as exc:
            logger.error(
                "creating topic failed",
                topic=name,
                error=repr(exc),
                action="check the log dirs are writable and have space",
            )
            raise TopicRequestError(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"the broker could not create the topic's logs ({exc}); see the broker log",
            ) from None
        return created.topic_id

    async def settle(self, created: list[str], timeout_ms: int) -> set[str]:
        return set()  # the logs exist once create returned


def _new_topic(
    ctx: BrokerContext, placement: TopicPlacement, entry: Any
) -> tuple[Topic, dict[int, tuple[int, ...]]]:
    """Check one CreatableTopic as Kafka's ZkAdminManager does; the Topic it would create (not
    registered) and its replicas. Raises TopicRequestError."""
    name = entry.name
    if name == CLUSTER_METADATA_TOPIC:
        raise TopicRequestError(
            ErrorCode.INVALID_REQUEST,
            f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited.",
        )
    if placement.exists(name):
        raise TopicRequestError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    nulls = [c.name for c in entry.configs if c.value is None]
    if nulls:
        raise TopicRequestError(
            ErrorCode.INVALID_CONFIG,
            f"Null value not supported for topic configs: {','.join(nulls)}",
        )
    if entry.assignments and (entry.num_partitions != -1 or entry.replication_factor != -1):
        raise TopicRequestError(
            ErrorCode.INVALID_REQUEST,
            "Both numPartitions or replicationFactor and replicasAssignments were set. "
            "Both cannot be used at the same time.",
        )
    if not entry.assignments:
        if entry.num_partitions == 0 or entry.num_partitions < -1:
            raise TopicRequestError(
                ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
            )
        if entry.replication_factor == 0 or entry.replication_factor < -1:
            raise TopicRequestError(
                ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
            )
    if max(entry.num_partitions, len(entry.assignments or ())) > MAX_PARTITIONS_PER_REQUEST:
        raise TopicRequestError(ErrorCode.POLICY_VIOLATION, _EXCESSIVE)
    replicas = placement.replicas(entry, entry.num_partitions, entry.replication_factor)
    if not replicas:
        raise TopicRequestError(
            ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
        )
    reason = topic_name_error(name)
    if reason:
        raise TopicRequestError(ErrorCode.INVALID_TOPIC_EXCEPTION, reason)
    if name in INTERNAL_TOPICS:
        raise TopicRequestError(
            ErrorCode.INVALID_REQUEST,
            f"{name} is an internal topic: the broker creates it itself",
        )
    colliding = collisions(ctx, name)
    if colliding:
        raise TopicRequestError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic '{name}' collides with existing topics: {', '.join(colliding)}",
        )
    try:
        # a key given twice: the last value counts, as in Kafka's Properties
        overrides = parse_topic_configs({c.name: c.value for c in entry.configs})
        return ctx.topics.make_topic(name, len(replicas), overrides), replicas
    except ConfigError as exc:
        raise TopicRequestError(ErrorCode.INVALID_CONFIG, config_error_message(exc)) from None


def _created(ctx: BrokerContext, topic: Topic, topic_id: uuid.UUID, factor: int) -> dict[str, Any]:
    layers = ctx.dynamic_configs.layers()
    return {
        "name": topic.name,
        "topic_id": topic_id,
        "error_code": 0,
        "error_message": None,
        "num_partitions": topic.partitions,
        "replication_factor": factor,
        "configs": [
            e.created_topic_config() for e in topic_entries(topic.overrides, topic.config, layers)
        ],
    }


def _failed(name: str, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {
        "name": name,
        "topic_id": ZERO_UUID,
        "error_code": int(code),
        "error_message": message,
        "num_partitions": -1,
        "replication_factor": -1,
        "configs": [],
    }


async def create_topics_answer(
    ctx: BrokerContext, request: Request, placement: TopicPlacement
) -> dict[str, Any]:
    """CreateTopics' answer, one pipeline for every broker: each topic checked by
    :func:`_new_topic`, created by ``placement``, then given ``timeout_ms`` to settle (a
    cluster's controller elects the leaders): REQUEST_TIMED_OUT for those that did not, while
    their creation goes on, as Kafka answers."""
    body = request.body
    validate_only = bool(body.validate_only)
    counts = Counter(e.name for e in body.topics)
    results: list[dict[str, Any]] = []
    created: list[str] = []
    for entry in body.topics:
        name = entry.name
        try:
            if counts[name] > 1:
                raise TopicRequestError(
                    ErrorCode.INVALID_REQUEST, "Found multiple entries for this topic."
                )
            topic, replicas = _new_topic(ctx, placement, entry)
            factor = len(replicas[0])
            if validate_only:
                results.append(_created(ctx, topic, ZERO_UUID, factor))
                continue
            topic_id = await placement.create(topic, replicas)
        except TopicRequestError as exc:
            _rejected(name, exc.code, str(exc), "topic creation rejected")
            results.append(_failed(name, exc.code, str(exc)))
            continue
        created.append(name)
        results.append(_created(ctx, topic, topic_id, factor))
    late = await placement.settle(created, body.timeout_ms) if created else set()
    for i, result in enumerate(results):
        if result["name"] in late:
            message = (
                f"Topic '{result['name']}' is being created: its leaders were not elected "
                f"within the request's timeout_ms ({body.timeout_ms})"
            )
            _rejected(result["name"], ErrorCode.REQUEST_TIMED_OUT, message, "topic creation late")
            results[i] = _failed(result["name"], ErrorCode.REQUEST_TIMED_OUT, message)
    return {"throttle_time_ms": 0, "topics": results}


async def handle_create_topics(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    return await create_topics_answer(ctx, request, LocalTopics(ctx))


# -- DeleteTopics --------------------------------------------------------------------------------


async def _delete_one(ctx: BrokerContext, name: str) -> tuple[ErrorCode, str | None]:
    if name in INTERNAL_TOPICS:
        message = (
            f"{name} is an internal topic: the group coordinator keeps committed offsets there"
        )
        _rejected(name, ErrorCode.INVALID_REQUEST, message, "topic deletion rejected")
        return ErrorCode.INVALID_REQUEST, message
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
        return ErrorCode.UNKNOWN_SERVER_ERROR, f"the broker could not delete the logs ({exc})"
    if not deleted:
        message = f"Topic `{name}` to delete does not exist"
        _rejected(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, message, "topic deletion rejected")
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, message
    return ErrorCode.NONE, None


async def handle_delete_topics(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    wanted: list[tuple[str | None, uuid.UUID]]
    if request.header.api_version < 6:
        wanted = [(name, ZERO_UUID) for name in body.topic_names]
    else:
        wanted = [(t.name, t.topic_id) for t in body.topics]
    if any(name is not None and topic_id != ZERO_UUID for name, topic_id in wanted):
        # Kafka fails the whole request (InvalidRequestException).
        both = "Topic name and topic ID can not both be specified."
        logger.warning("topic deletion rejected", error="INVALID_REQUEST", reason=both)
        return {
            "throttle_time_ms": 0,
            "responses": [
                {
                    "name": name,
                    "topic_id": topic_id,
                    "error_code": int(ErrorCode.INVALID_REQUEST),
                    "error_message": both,
                }
                for name, topic_id in wanted
            ],
        }
    results = []
    done: dict[str, tuple[ErrorCode, str | None]] = {}  # a name given twice is deleted once
    message: str | None
    for name, topic_id in wanted:
        if topic_id != ZERO_UUID:
            topic = ctx.topics.by_id(topic_id)
            name = topic.name if topic is not None else None
        if name is None:
            code, message = ErrorCode.UNKNOWN_TOPIC_ID, f"no topic has the id {topic_id}"
            _rejected(None, code, message, "topic deletion rejected")
        else:
            if name not in done:
                done[name] = await _delete_one(ctx, name)
            code, message = done[name]
        results.append(
            {
                "name": name,
                "topic_id": topic_id,
                "error_code": int(code),
                "error_message": message,
            }
        )
    return {"throttle_time_ms": 0, "responses": results}


# -- CreatePartitions ----------------------------------------------------------------------------


async def _add_partitions(ctx: BrokerContext, entry: Any, validate_only: bool) -> None:
    """Raises TopicRequestError, UnknownTopicError, PartitionCountError."""
    name = entry.name
    topic = ctx.topics.get(name)
    if topic is None:
        raise UnknownTopicError(f"The topic '{name}' does not exist.")
    added = entry.count - topic.partitions
    if entry.assignments is not None and added > 0:
        brokers = {b for a in entry.assignments for b in a.broker_ids}
        unknown = sorted(brokers - {ctx.config.broker_id})
        if unknown:
            raise TopicRequestError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.",
            )
        if len(entry.assignments) != added:
            raise TopicRequestError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Increasing the number of partitions by {added} but "
                f"{len(entry.assignments)} assignments provided.",
            )
    await add_partitions(ctx, name, entry.count, validate_only=validate_only)


async def handle_create_partitions(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    return await create_partitions_answer(ctx, request, _add_partitions)


async def create_partitions_answer(
    ctx: BrokerContext,
    request: Request,
    add: Callable[[BrokerContext, Any, bool], Awaitable[None]],
) -> dict[str, Any]:
    """CreatePartitions' answer: each topic judged and grown by ``add(ctx, entry,
    validate_only)``, which raises TopicRequestError, UnknownTopicError, PartitionCountError
    or a storage failure (a cluster's adds its partitions in ZooKeeper)."""
    body = request.body
    validate_only = bool(body.validate_only)
    counts = Counter(t.name for t in body.topics)
    results, answered = [], set()
    for entry in body.topics:
        name = entry.name
        if counts[name] > 1:
            if name in answered:
                continue  # answered once per name, as Kafka's map of results is
            answered.add(name)
            code, message = ErrorCode.INVALID_REQUEST, "Duplicate topic in request."
        else:
            code, message = ErrorCode.NONE, None
            try:
                if name in INTERNAL_TOPICS:
                    raise TopicRequestError(
                        ErrorCode.INVALID_REQUEST,
                        f"{name} is an internal topic: the group coordinator maps groups to its "
                        "partitions",
                    )
                topic = ctx.topics.get(name)
                if (
                    topic is not None
                    and entry.count - topic.partitions > MAX_PARTITIONS_PER_REQUEST
                ):
                    raise TopicRequestError(ErrorCode.POLICY_VIOLATION, _EXCESSIVE)
                await add(ctx, entry, validate_only)
            except TopicRequestError as exc:
                code, message = exc.code, str(exc)
            except UnknownTopicError as exc:
                code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(exc)
            except PartitionCountError as exc:
                code, message = ErrorCode.INVALID_PARTITIONS, str(exc)
            except STORAGE_FAILURES as exc:
                logger.error(
                    "adding partitions failed",
                    topic=name,
                    error=repr(exc),
                    action="check the log dirs are writable and have space; the missing "
                    "partition logs are created at the next start",
                )
                code = ErrorCode.UNKNOWN_SERVER_ERROR
                message = f"the broker could not create the new partition logs ({exc})"
        if code != ErrorCode.NONE:
            _rejected(name, code, message or "", "adding partitions rejected")
        results.append({"name": name, "error_code": int(code), "error_message": message})
    return {"throttle_time_ms": 0, "results": results}
