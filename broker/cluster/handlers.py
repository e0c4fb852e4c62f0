"""The cluster's request handlers: the inter-broker apis (LeaderAndIsr, UpdateMetadata,
StopReplica, OffsetForLeaderEpoch), and Metadata, CreateTopics, DeleteTopics and CreatePartitions
as a cluster answers them. :func:`cluster_handlers` builds the dispatch table of a broker with
zookeeper.connect: the single broker's table with these in place, and ApiVersions advertising
exactly that.

Controller requests from an older controller epoch are refused with STALE_CONTROLLER_EPOCH, and
those addressed to an earlier registration of this broker (KIP-380's broker epoch) with
STALE_BROKER_EPOCH. CreateTopics, DeleteTopics and CreatePartitions are served by any broker
(Kafka wants the controller; they only write ZooKeeper, so chronolog's tools may ask the broker
they know): replicas are assigned over the live brokers of this broker's metadata, and the
answer waits, up to the request's timeout, until this broker's metadata shows the controller
has done it (REQUEST_TIMED_OUT after that: the operation goes on). ElectLeaders and the
reassignment apis need the controller (NOT_CONTROLLER elsewhere).
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from broker.admin.changes import PartitionCountError, UnknownTopicError
from broker.cluster.assignment import AssignmentError, assign_replicas
from broker.cluster.events import ControlledShutdown, ElectLeaders, ListReassignments, Reassign
from broker.cluster.metadata import (
    handle_cluster_describe_topic_partitions,
    handle_cluster_metadata,
)
from broker.cluster.zk import DELETE_TOPICS, TopicAssignment, ZkDataError, topic_path
from broker.context import INTERNAL_TOPICS, BrokerContext
from broker.topics import Topic
from broker.handlers.admin import (
    TopicRequestError,
    create_partitions_answer,
    create_topics_answer,
)
from broker.handlers.api_versions import make_api_versions_handler
from protocol.api import ApiKey, Request
from protocol.errors import ErrorCode

if TYPE_CHECKING:  # broker.handlers imports broker.context, whose imports lead here
    from broker.handlers import Handler

logger = structlog.get_logger(__name__)

DEBUGGING_REPLICA_ID = -2


def _stale(ctx: BrokerContext, body: Any) -> ErrorCode:
    """STALE_CONTROLLER_EPOCH / STALE_BROKER_EPOCH for a request from an old controller or to
    an old registration of this broker; else NONE (and the epoch is remembered)."""
    cluster = ctx.cluster
    assert cluster is not None
    if body.controller_epoch < cluster.controller_epoch_seen:
        logger.warning(
            "refusing a request from an old controller",
            controller=body.controller_id,
            controller_epoch=body.controller_epoch,
            latest=cluster.controller_epoch_seen,
        )
        return ErrorCode.STALE_CONTROLLER_EPOCH
    # Kafka's isBrokerEpochStale: only an older registration's requests are refused (a newer
    # one is this broker's own, whose creation may not have returned here yet).
    if 0 <= body.broker_epoch < cluster.broker_epoch:
        logger.warning(
            "refusing a controller request for an earlier registration of this broker",
            broker_epoch=body.broker_epoch,
            current=cluster.broker_epoch,
        )
        return ErrorCode.STALE_BROKER_EPOCH
    cluster.controller_epoch_seen = body.controller_epoch
    return ErrorCode.NONE


async def handle_leader_and_isr(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    cluster = ctx.cluster
    assert cluster is not None
    error = _stale(ctx, body)
    topics = []
    if error == ErrorCode.NONE:
        for leader in body.live_leaders:
            cluster.addresses[leader.broker_id] = (leader.host_name, leader.port)
        async with cluster.replicas.state_lock:
            for topic in body.topic_states:
                errors = []
                for state in topic.partition_states:
                    code = await cluster.replicas.become(
                        topic.topic_name, topic.topic_id, state, body.controller_epoch
                    )
                    errors.append({"partition_index": state.partition_index, "error_code": code})
                topics.append({"topic_id": topic.topic_id, "partition_errors": errors})
    return {"error_code": int(error), "topics": topics}


async def handle_update_metadata(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    cluster = ctx.cluster
    assert cluster is not None
    error = _stale(ctx, body)
    if error == ErrorCode.NONE:
        cluster.metadata.update(body)
        for name, partitions in cluster.metadata.topics.items():
            known = ctx.topics.get(name)
            topic_id = cluster.metadata.topic_ids.get(name)
            if (
                known is None
                or known.partitions != len(partitions)
                or (topic_id is not None and known.topic_id != topic_id)
            ):
                await cluster.refresh_topic(name)  # new, or deleted and made again
        for name in ctx.topics.names():
            if name not in cluster.metadata.topics and not any(
                key[0] == name for key in cluster.replicas.replicas
            ):
                ctx.topics.remove(name)
        cluster.metadata_changed()
    return {"error_code": int(error)}


async def handle_stop_replica(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    cluster = ctx.cluster
    assert cluster is not None
    error = _stale(ctx, body)
    errors = []
    if error == ErrorCode.NONE:
        async with cluster.replicas.state_lock:
            for topic in body.topic_states:
                for p in topic.partition_states:
                    code = await cluster.replicas.stop(
                        (topic.topic_name, p.partition_index), p.delete_partition
                    )
                    errors.append(
                        {
                            "topic_name": topic.topic_name,
                            "partition_index": p.partition_index,
                            "error_code": int(code),
                        }
                    )
    return {"error_code": int(error), "partition_errors": errors}


async def handle_offset_for_leader_epoch(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    """Where a leader epoch ends in this replica's log (KIP-101); the leader answers, or any
    replica for a debugging request (replica id -2, the default below v3)."""
    cluster = ctx.cluster
    assert cluster is not None
    body = request.body
    from_leader_only = body.replica_id != DEBUGGING_REPLICA_ID
    topics = []
    for topic in body.topics:
        parts = []
        for p in topic.partitions:
            answer = {"partition": p.partition, "leader_epoch": -1, "end_offset": -1}
            replica = cluster.replicas.replicas.get((topic.topic, p.partition))
            if from_leader_only:
                error = cluster.replicas.check_epoch(
                    cluster.replicas.leader(topic.topic, p.partition), p.current_leader_epoch
                )
            else:
                error = (
                    ErrorCode.NONE if replica is not None else ErrorCode.NOT_LEADER_FOR_PARTITION
                )
            if error == ErrorCode.NONE:
                async with ctx.locked_log(topic.topic, p.partition) as log:
                    if log is None:
                        error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    else:
                        found = log.leader_epochs.end_offset_for(p.leader_epoch, log.log_end_offset)
                        answer.update(leader_epoch=found.epoch, end_offset=found.end_offset)
            parts.append({**answer, "error_code": int(error)})
        topics.append({"topic": topic.topic, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


# -- CreateTopics / DeleteTopics ----------------------------------------------------------------
class ZooKeeperTopics:
    """CreateTopics' placement in a cluster (:func:`create_topics_answer` makes the checks every
    broker makes): replicas assigned over the live brokers (rack-aware with broker.rack) or the
    request's assignments checked, the topic written to ZooKeeper, then the answer waits up to
    timeout_ms for the controller to elect every partition's leader."""

    def __init__(self, ctx: BrokerContext) -> None:
        cluster = ctx.cluster
        assert cluster is not None
        self.ctx, self.cluster = ctx, cluster
        self.brokers = {b: info.rack for b, info in cluster.metadata.brokers.items()}

    def exists(self, name: str) -> bool:
        return name in self.cluster.metadata.topics

    def replicas(self, entry: Any, partitions: int, factor: int) -> dict[int, tuple[int, ...]]:
        if entry.assignments:
            assignment = {a.partition_index: tuple(a.broker_ids) for a in entry.assignments}
            problem = _assignment_problem(assignment, self.brokers)
            if problem:
                raise TopicRequestError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
            return assignment
        partitions = self.ctx.config.num_partitions if partitions == -1 else partitions
        factor = self.ctx.config.default_replication_factor if factor == -1 else factor
        try:
            return assign_replicas(self.brokers, partitions, factor)
        except AssignmentError as exc:
            raise TopicRequestError(ErrorCode.INVALID_REPLICATION_FACTOR, str(exc)) from None

    async def create(self, topic: Topic, replicas: dict[int, tuple[int, ...]]) -> uuid.UUID:
        name = topic.name
        try:
            topic_id = await self.cluster.write_topic(
                name, replicas, dict(topic.overrides), topic.topic_id
            )
        except NodeExistsError:
            raise TopicRequestError(
                ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
            ) from None
        except KazooException as exc:
            logger.error(
                "writing a topic to ZooKeeper failed",
                topic=name,
                error=repr(exc),
                action="check the ZooKeeper connection; the topic was not created",
            )
            raise TopicRequestError(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"the broker could not write the topic to ZooKeeper ({exc!r})",
            ) from None
        logger.info(
            "created topic",
            topic=name,
            partitions=len(replicas),
            assignment={p: list(r) for p, r in sorted(replicas.items())},
            configs=dict(topic.overrides),
        )
        return topic_id

    async def settle(self, created: list[str], timeout_ms: int) -> set[str]:
        done = await self.cluster.wait_for_metadata(
            lambda cache: all(
                name in cache.topics and all(p.leader >= 0 for p in cache.topics[name].values())
                for name in created
            ),
            timeout_ms,
        )
        return set() if done else set(created)


async def handle_cluster_create_topics(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    return await create_topics_answer(ctx, request, ZooKeeperTopics(ctx))


def _assignment_problem(
    assignment: dict[int, tuple[int, ...]], brokers: dict[int, str | None]
) -> str | None:
    ids = sorted(assignment)
    if ids != list(range(len(ids))):
        return f"partition ids {ids} are not 0..{len(ids) - 1}"
    sizes = {len(r) for r in assignment.values()}
    if len(sizes) != 1:
        return "every partition must have the same number of replicas"
    for p, replicas in assignment.items():
        if not replicas or len(set(replicas)) != len(replicas):
            return f"partition {p}: replicas {list(replicas)} are empty or repeat a broker"
        unknown = [b for b in replicas if b not in brokers]
        if unknown:
            return f"partition {p}: brokers {unknown} are not alive"
    return None


async def handle_cluster_delete_topics(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    """DeleteTopics v0-v6 in a cluster: marked in /admin/delete_topics for the controller,
    which stops and deletes every replica and removes the topic; waits up to timeout_ms. v6
    names topics by name or id."""
    cluster = ctx.cluster
    assert cluster is not None
    body = request.body
    by_id = {v: k for k, v in cluster.metadata.topic_ids.items()}
    if request.header.api_version >= 6:
        wanted = [(t.name or by_id.get(t.topic_id), t.topic_id) for t in body.topics]
    else:
        wanted = [(name, None) for name in body.topic_names]
    results = []
    marked = []
    for name, topic_id in dict.fromkeys(wanted):
        known_id = None if name is None else cluster.metadata.topic_ids.get(name)
        result = {"name": name, "topic_id": topic_id or known_id}
        if name is None:
            results.append({**result, "error_code": int(ErrorCode.UNKNOWN_TOPIC_ID)})
        elif name in INTERNAL_TOPICS:
            results.append({**result, "error_code": int(ErrorCode.INVALID_REQUEST)})
        elif name not in cluster.metadata.topics:
            results.append({**result, "error_code": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)})
        else:
            try:
                await cluster.zk.create(f"{DELETE_TOPICS}/{name}", b"")
            except NodeExistsError:
                pass
            marked.append(name)
            results.append({**result, "error_code": 0})
    if marked:
        done = await cluster.wait_for_metadata(
            lambda cache: not any(name in cache.topics for name in marked), body.timeout_ms
        )
        if not done:
            for result in results:
                if result["name"] in marked:
                    result["error_code"] = int(ErrorCode.REQUEST_TIMED_OUT)
    return {"throttle_time_ms": 0, "responses": results}


async def handle_controlled_shutdown(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    """ControlledShutdown, answered by the controller: the partitions the broker still leads
    (it retries while there are any)."""
    cluster = ctx.cluster
    assert cluster is not None
    body = request.body
    controller = cluster.controller
    if controller is None:
        return {"error_code": int(ErrorCode.NOT_CONTROLLER), "remaining_partitions": []}
    answer = await controller.call(ControlledShutdown(body.broker_id, body.broker_epoch))
    if answer is None:
        return {"error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR), "remaining_partitions": []}
    error, remaining = answer
    return {
        "error_code": int(error),
        "remaining_partitions": [{"topic_name": t, "partition_index": p} for t, p in remaining],
    }


async def handle_elect_leaders(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    """ElectLeaders v0-v2 (preferred, or unclean from v1), answered by the controller."""
    cluster = ctx.cluster
    assert cluster is not None
    body = request.body
    wanted = (
        None
        if body.topic_partitions is None
        else tuple((t.topic, p) for t in body.topic_partitions for p in t.partitions)
    )
    controller = cluster.controller
    if controller is None:
        return {
            "throttle_time_ms": 0,
            "error_code": int(ErrorCode.NOT_CONTROLLER),
            "replica_election_results": [],
        }
    results = await controller.call(ElectLeaders(body.election_type, wanted))
    if results is None:
        return {
            "throttle_time_ms": 0,
            "error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR),
            "replica_election_results": [],
        }
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, p), (error, message) in results.items():
        by_topic.setdefault(topic, []).append(
            {"partition_id": p, "error_code": int(error), "error_message": message}
        )
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "replica_election_results": [
            {"topic": t, "partition_result": parts} for t, parts in by_topic.items()
        ],
    }


async def handle_alter_partition_reassignments(
    ctx: BrokerContext, request: Request
) -> dict[str, Any]:
    """AlterPartitionReassignments v0-v1 (KIP-455; v1's allow_replication_factor_change,
    KIP-860), answered by the controller once each move has started (the copy goes on;
    ListPartitionReassignments follows it)."""
    cluster = ctx.cluster
    assert cluster is not None
    body = request.body
    controller = cluster.controller
    if controller is None:
        return {
            "throttle_time_ms": 0,
            "error_code": int(ErrorCode.NOT_CONTROLLER),
            "error_message": "send it to the controller",
            "responses": [],
        }
    targets = {
        (t.name, p.partition_index): (None if p.replicas is None else tuple(p.replicas))
        for t in body.topics
        for p in t.partitions
    }
    allow_rf_change = bool(body.allow_replication_factor_change)
    results = await controller.call(Reassign(targets, allow_rf_change))
    if results is None:
        return {
            "throttle_time_ms": 0,
            "error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR),
            "error_message": "the controller failed; see its log",
            "responses": [],
        }
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, p), (error, message) in results.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": p, "error_code": int(error), "error_message": message}
        )
    return {
        "throttle_time_ms": 0,
        "allow_replication_factor_change": allow_rf_change,
        "error_code": 0,
        "error_message": None,
        "responses": [{"name": t, "partitions": parts} for t, parts in by_topic.items()],
    }


async def handle_list_partition_reassignments(
    ctx: BrokerContext, request: Request
) -> dict[str, Any]:
    cluster = ctx.cluster
    assert cluster is not None
    body = request.body
    controller = cluster.controller
    if controller is None:
        return {
            "throttle_time_ms": 0,
            "error_code": int(ErrorCode.NOT_CONTROLLER),
            "error_message": "send it to the controller",
            "topics": [],
        }
    wanted = (
        None
        if body.topics is None
        else tuple((t.name, p) for t in body.topics for p in t.partition_indexes)
    )
    ongoing = await controller.call(ListReassignments(wanted))
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, p), (replicas, adding, removing) in sorted((ongoing or {}).items()):
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": p,
                "replicas": list(replicas),
                "adding_replicas": list(adding),
                "removing_replicas": list(removing),
            }
        )
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "topics": [{"name": t, "partitions": parts} for t, parts in by_topic.items()],
    }


async def handle_cluster_create_partitions(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    """CreatePartitions v0-v3 in a cluster, as Kafka's ZkAdminManager and AdminZkClient: the
    new partitions' replicas are assigned here (or given, then checked against the live
    brokers) and written into /brokers/topics/<t>; the controller, watching it, starts them.
    The answer waits up to timeout_ms until this broker's metadata shows every new partition
    with a leader (REQUEST_TIMED_OUT after that: the partitions are still added)."""
    cluster = ctx.cluster
    assert cluster is not None
    body = request.body
    answer = await create_partitions_answer(ctx, request, _grow_topic)
    counts = {e.name: e.count for e in body.topics}
    grown = {r["name"]: counts[r["name"]] for r in answer["results"] if r["error_code"] == 0}
    if grown and not body.validate_only and body.timeout_ms > 0:
        done = await cluster.wait_for_metadata(
            lambda cache: all(
                name in cache.topics
                and len(cache.topics[name]) >= count
                and all(p.leader >= 0 for p in cache.topics[name].values())
                for name, count in grown.items()
            ),
            body.timeout_ms,
        )
        if not done:
            for result in answer["results"]:
                if result["name"] in grown:
                    result["error_code"] = int(ErrorCode.REQUEST_TIMED_OUT)
                    result["error_message"] = (
                        "the partitions are added; their leaders were not all elected in time"
                    )
    return answer


async def _grow_topic(ctx: BrokerContext, entry: Any, validate_only: bool) -> None:
    """Add partitions to ``entry.name`` up to ``entry.count`` in ZooKeeper (a conditional
    write: judged again if the assignment changed meanwhile). Raises TopicRequestError,
    UnknownTopicError, PartitionCountError."""
    cluster = ctx.cluster
    assert cluster is not None
    name = entry.name
    brokers = {b: info.rack for b, info in cluster.metadata.brokers.items()}
    given = None if entry.assignments is None else [list(a.broker_ids) for a in entry.assignments]
    try:
        while True:
            found = await cluster.zk.get_or_none(topic_path(name))
            if found is None:
                raise UnknownTopicError(f"The topic '{name}' does not exist.")
            current = TopicAssignment.from_json(name, found[0])
            if current.adding or current.removing:
                raise TopicRequestError(
                    ErrorCode.REASSIGNMENT_IN_PROGRESS,
                    f"A partition reassignment is in progress for the topic '{name}'.",
                )
            added = new_partitions(current.partitions, entry.count, given, brokers)
            if validate_only:
                return
            grown = replace(current, partitions={**current.partitions, **added})
            try:
                await cluster.zk.set(topic_path(name), grown.to_json(), found[1].version)
            except BadVersionError:
                continue
            except NoNodeError:
                raise UnknownTopicError(f"The topic '{name}' does not exist.") from None
            break
    except (KazooException, ZkDataError) as exc:
        logger.error("adding partitions in ZooKeeper failed", topic=name, error=repr(exc))
        raise TopicRequestError(
            ErrorCode.UNKNOWN_SERVER_ERROR, f"ZooKeeper failed ({exc!r}); retry"
        ) from exc
    logger.info(
        "adding partitions",
        topic=name,
        partitions=entry.count,
        before=len(current.partitions),
        assignment={p: list(r) for p, r in sorted(added.items())},
    )


def new_partitions(
    existing: dict[int, tuple[int, ...]],
    count: int,
    given: list[list[int]] | None,
    brokers: dict[int, str | None],
) -> dict[int, tuple[int, ...]]:
    """The replicas of the partitions that grow ``existing`` to ``count`` (Kafka's
    AdminZkClient.createNewPartitionsAssignment): ``given`` checked against the live
    ``brokers`` (id -> rack), or assigned as at creation with the start index where partition
    0's preferred replica is, so they continue its spread. Raises PartitionCountError,
    TopicRequestError."""
    old = len(existing)
    if count < old:
        raise PartitionCountError(
            f"Topic currently has {old} partitions, which is higher than the requested {count}."
        )
    if count == old:
        raise PartitionCountError(f"Topic already has {old} partitions.")
    adding = count - old
    factor = len(existing[0])
    if given is None:
        first = existing[0][0]
        start = next((i for i, b in enumerate(sorted(brokers)) if b >= first), 0)
        try:
            return assign_replicas(brokers, adding, factor, fixed_start=start, start_partition=old)
        except AssignmentError as exc:
            raise TopicRequestError(ErrorCode.INVALID_REPLICATION_FACTOR, str(exc)) from None
    unknown = sorted({b for replicas in given for b in replicas} - set(brokers))
    problem = None
    if unknown:
        problem = f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}."
    elif len(given) != adding:
        problem = (
            f"Increasing the number of partitions by {adding} but {len(given)} assignments "
            "provided."
        )
    for p, replicas in enumerate(given, start=old):
        if problem:
            break
        if not replicas:
            problem = f"Cannot have replication factor of 0 for partition id {p}."
        elif len(set(replicas)) != len(replicas):
            problem = (
                "Duplicate brokers not allowed in replica assignment: "
                f"{', '.join(map(str, replicas))} for partition id {p}."
            )
        elif len(replicas) != factor:
            problem = (
                "Inconsistent replication factor between partitions, partition 0 has "
                f"{factor} while partition {p} has {len(replicas)} replicas."
            )
    if problem:
        raise TopicRequestError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
    return {p: tuple(replicas) for p, replicas in enumerate(given, start=old)}


def cluster_describe_cluster(single: Handler) -> Handler:
    """DescribeCluster as the single broker answers it, with the cluster's live brokers and
    controller from the metadata cache."""

    async def handle(ctx: BrokerContext, request: Request) -> dict[str, Any]:
        answer = await single(ctx, request)
        assert answer is not None and ctx.cluster is not None  # DescribeCluster always answers
        cache = ctx.cluster.metadata
        if answer.get("error_code") == 0 and cache.brokers:
            answer["controller_id"] = cache.controller_id
            answer["brokers"] = [
                {"broker_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack}
                for b in sorted(cache.brokers.values(), key=lambda b: b.broker_id)
            ]
        return answer

    return handle


async def handle_cluster_find_coordinator(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    assert ctx.cluster is not None
    return await ctx.cluster.groups.find_coordinator(request)


async def handle_cluster_list_groups(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    assert ctx.cluster is not None
    return await ctx.cluster.groups.list_groups(request)


def cluster_handlers(handlers: Mapping[ApiKey, Handler]) -> dict[ApiKey, Handler]:
    """The dispatch table of a broker in a cluster (see the module docstring)."""
    table = dict(handlers)
    table.update(
        {
            ApiKey.METADATA: handle_cluster_metadata,
            ApiKey.DESCRIBE_TOPIC_PARTITIONS: handle_cluster_describe_topic_partitions,
            ApiKey.CREATE_TOPICS: handle_cluster_create_topics,
            ApiKey.DELETE_TOPICS: handle_cluster_delete_topics,
            ApiKey.LEADER_AND_ISR: handle_leader_and_isr,
            ApiKey.UPDATE_METADATA: handle_update_metadata,
            ApiKey.STOP_REPLICA: handle_stop_replica,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: handle_offset_for_leader_epoch,
            ApiKey.FIND_COORDINATOR: handle_cluster_find_coordinator,
            ApiKey.LIST_GROUPS: handle_cluster_list_groups,
            ApiKey.CONTROLLED_SHUTDOWN: handle_controlled_shutdown,
            ApiKey.ELECT_LEADERS: handle_elect_leaders,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: handle_alter_partition_reassignments,
            ApiKey.LIST_PARTITION_REASSIGNMENTS: handle_list_partition_reassignments,
        }
    )
    if ApiKey.CREATE_PARTITIONS in table:
        table[ApiKey.CREATE_PARTITIONS] = handle_cluster_create_partitions
    if ApiKey.DESCRIBE_CLUSTER in table:
        table[ApiKey.DESCRIBE_CLUSTER] = cluster_describe_cluster(table[ApiKey.DESCRIBE_CLUSTER])
    table[ApiKey.API_VERSIONS] = make_api_versions_handler(table)
    return table
