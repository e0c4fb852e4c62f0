"""Request handlers for the group apis at every version Kafka 3.9 serves (DescribeGroups up to
Kafka 4.1's v6), merged into the broker's dispatch table.

Each is ``async def handler(ctx, request) -> dict``: ``request.body`` is the decoded body
(Kafka's JSON field names in snake_case, every version's fields present with defaults), the
dict is the response body (fields a version lacks are not written). Before the coordinator has
started (``ctx.coordinator`` is None) every api answers GROUP_COORDINATOR_NOT_AVAILABLE, which
clients retry. A member's client_host (DescribeGroups) is the peer address the server put in
``broker.context.client_host`` ("/127.0.0.1", as Kafka's KafkaApis passes
``clientAddress.toString``).

Version handling follows KafkaApis and GroupCoordinatorAdapter: JoinGroup v4+ of a dynamic
member requires a known member id (KIP-394), v5+ carries group.instance.id (KIP-345), v9 may
skip the assignment; SyncGroup v5+ must name the protocol type and name; LeaveGroup v3+ leaves
in batches (v0-2 answer one member's error at the top level); OffsetFetch v2+ takes a null topic
list (every committed partition), v8+ several groups; ListGroups v4+ filters by state, v5+ by
type (every group here is "classic"); DescribeGroups v6+ answers a group that does not exist
GROUP_ID_NOT_FOUND with a message (KIP-1043; older versions: no error, state Dead). Below inter.broker.protocol.version 2.3 a static member
(group.instance.id) is refused with UNSUPPORTED_VERSION by JoinGroup, SyncGroup, Heartbeat and
OffsetCommit, as KafkaApis does: the group records written then cannot hold its instance id, so it
would come back from a restart as a dynamic member. OffsetCommit v0 and OffsetFetch v0 use the same store as
v1+ (Kafka kept them in ZooKeeper, which this broker does not have). FindCoordinator answers
this broker for groups and transactional ids (key type 1) on a single broker; a cluster answers
through broker/cluster/groups.py and broker/cluster/txn.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog

from broker import workers
from broker.config import metadata_version_at_least
from broker.context import BrokerContext, client_host
from broker.groups.coordinator import CommitEntry, GroupCoordinator, PartitionOffset
from broker.groups.state import UNKNOWN_MEMBER_ID, JoinResult
from protocol.api import ApiKey, Request
from protocol.errors import ErrorCode
from protocol.schemas import Body

if TYPE_CHECKING:  # broker.handlers imports this module
    from broker.handlers import Handler

logger = structlog.get_logger(__name__)

_NOT_AVAILABLE = ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE
# An OffsetFetch answer for this many partitions or more is built in a worker thread: for all
# of a group's 10,000 partitions building it held the event loop about 35 ms.
BUILT_BESIDE_PARTITIONS = 1000
# DescribeGroups' authorized_operations when not asked for (Integer.MIN_VALUE), and when asked
# without an authorizer: every operation a group supports (READ 3, DELETE 6, DESCRIBE 8).
_OPERATIONS_NOT_REQUESTED = -(2**31)
_GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
_GROUP_KEY, _TRANSACTION_KEY, _SHARE_KEY = 0, 1, 2


def _coordinator(ctx: BrokerContext) -> GroupCoordinator | None:
    coordinator = getattr(ctx, "coordinator", None)
    return coordinator if coordinator is not None and coordinator.active else None


def _static_member_refused(ctx: BrokerContext, group_instance_id: str | None, api: str) -> bool:
    """True (and logged) for a static member below inter.broker.protocol.version 2.3-IV0."""
    ibp = ctx.config.inter_broker_protocol_version
    if group_instance_id is None or metadata_version_at_least(ibp, "2.3-IV0"):
        return False
    logger.warning(
        "static membership refused",
        api=api,
        group_instance_id=group_instance_id,
        inter_broker_protocol_version=ibp,
        error="UNSUPPORTED_VERSION",
        action="set inter.broker.protocol.version to 2.3 or later, or run the consumer without "
        "group.instance.id",
    )
    return True


# ---- FindCoordinator -------------------------------------------------------------------------


def _find(
    ctx: BrokerContext, key_type: int, version: int, key: str
) -> tuple[ErrorCode, str | None]:
    """(error, message) for one coordinator key."""
    if key_type not in (_GROUP_KEY, _TRANSACTION_KEY, _SHARE_KEY):
        return ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}"
    if key_type == _TRANSACTION_KEY:
        coordinator = ctx.txn_coordinator
        if coordinator is None or not coordinator.active:
            return (
                ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE,
                "the transaction coordinator is starting or loading; retry",
            )
    if key_type == _SHARE_KEY:
        if version < 6:
            return ErrorCode.INVALID_REQUEST, "share coordinators are asked for from v6"
        return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE, "this broker has no share coordinator"
    if _coordinator(ctx) is None:
        return _NOT_AVAILABLE, "the group coordinator is starting; retry"
    return ErrorCode.NONE, None


async def handle_find_coordinator(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    version = request.header.api_version
    if body.key_type == _TRANSACTION_KEY and ctx.txn_coordinator is not None:
        # Kafka creates __transaction_state at the first FindCoordinator for a transactional id.
        await ctx.txn_coordinator.ensure_active()
    coordinator = _coordinator(ctx)  # after the wait, as _find's is

    def answer(key: str) -> dict[str, Any]:
        error, message = _find(ctx, body.key_type, version, key)
        node_id, host, port = (-1, "", -1)
        if error is ErrorCode.NONE:
            assert coordinator is not None  # _find answers NONE only when there is one
            node_id, host, port = coordinator.node
        return {
            "node_id": node_id,
            "host": host,
            "port": port,
            "error_code": int(error),
            "error_message": message,
        }

    if version >= 4:
        return {"coordinators": [{"key": key, **answer(key)} for key in body.coordinator_keys]}
    single = answer(body.key)
    if single["error_code"] == 0:
        # Kafka sends Errors.NONE.message(), "NONE", as v1-v3's message on success.
        single["error_message"] = "NONE"
    return single


# ---- JoinGroup / SyncGroup / Heartbeat / LeaveGroup -----------------------------------------


async def handle_join_group(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    version = request.header.api_version
    if _static_member_refused(ctx, body.group_instance_id, "JoinGroup"):
        return _join_response(JoinResult(ErrorCode.UNSUPPORTED_VERSION, UNKNOWN_MEMBER_ID), version)
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return _join_response(JoinResult(_NOT_AVAILABLE, body.member_id), version)
    rebalance_timeout = body.rebalance_timeout_ms if version >= 1 else body.session_timeout_ms
    result = await coordinator.join(
        body.group_id,
        body.member_id,
        group_instance_id=body.group_instance_id,
        require_known_member_id=version >= 4 and body.group_instance_id is None,
        support_skipping_assignment=version >= 9,
        client_id=request.header.client_id or "",
        client_host=client_host.get(),
        session_timeout_ms=body.session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout,
        protocol_type=body.protocol_type,
        protocols=[(p.name, p.metadata) for p in body.protocols],
    )
    return _join_response(result, version)


def _join_response(result: JoinResult, version: int) -> dict[str, Any]:
    protocol = result.protocol
    # Before v7 the protocol name is not nullable (""); from v7 "" is sent as null.
    if version < 7:
        protocol = protocol or ""
    elif protocol == "":
        protocol = None
    return {
        "error_code": int(result.error),
        "generation_id": result.generation_id,
        "protocol_type": result.protocol_type,
        "protocol_name": protocol,
        "leader": result.leader_id,
        "skip_assignment": result.skip_assignment,
        "member_id": result.member_id,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata,
            }
            for m in result.members
        ],
    }


async def handle_sync_group(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    version = request.header.api_version
    if _static_member_refused(ctx, body.group_instance_id, "SyncGroup"):
        return {"error_code": int(ErrorCode.UNSUPPORTED_VERSION), "assignment": b""}
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return {"error_code": int(_NOT_AVAILABLE), "assignment": b""}
    if version >= 5 and (body.protocol_type is None or body.protocol_name is None):
        # From v5 the protocol type and name are mandatory (KafkaApis).
        return {"error_code": int(ErrorCode.INCONSISTENT_GROUP_PROTOCOL), "assignment": b""}
    result = await coordinator.sync(
        body.group_id,
        body.generation_id,
        body.member_id,
        {a.member_id: a.assignment for a in body.assignments},
        group_instance_id=body.group_instance_id,
        protocol_type=body.protocol_type,
        protocol=body.protocol_name,
    )
    return {
        "error_code": int(result.error),
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol,
        "assignment": result.assignment,
    }


async def handle_heartbeat(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    if _static_member_refused(ctx, body.group_instance_id, "Heartbeat"):
        return {"error_code": int(ErrorCode.UNSUPPORTED_VERSION)}
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return {"error_code": int(_NOT_AVAILABLE)}
    error = coordinator.heartbeat(
        body.group_id, body.member_id, body.generation_id, body.group_instance_id
    )
    return {"error_code": int(error)}


async def handle_leave_group(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    version = request.header.api_version
    if version >= 3:
        leaving = [(m.member_id, m.group_instance_id) for m in body.members]
    else:
        leaving = [(body.member_id, None)]
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return {"error_code": int(_NOT_AVAILABLE), "members": []}
    error, answers = await coordinator.leave(body.group_id, leaving)
    if version < 3:
        # Older clients read one error: the top-level one, else the member's.
        if error is ErrorCode.NONE and answers:
            error = answers[0].error
        return {"error_code": int(error)}
    return {
        "error_code": int(error),
        "members": [
            {
                "member_id": a.member_id,
                "group_instance_id": a.group_instance_id,
                "error_code": int(a.error),
            }
            for a in answers
        ],
    }


# ---- OffsetCommit / OffsetFetch / OffsetDelete -----------------------------------------------


async def handle_offset_commit(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    version = request.header.api_version
    entries = [
        CommitEntry(
            t.name,
            p.partition_index,
            p.committed_offset,
            p.committed_metadata,
            p.commit_timestamp if version == 1 else -1,
            p.committed_leader_epoch,
        )
        for t in body.topics
        for p in t.partitions
    ]
    coordinator = _coordinator(ctx)
    if _static_member_refused(ctx, body.group_instance_id, "OffsetCommit"):
        errors = [ErrorCode.UNSUPPORTED_VERSION] * len(entries)
    elif coordinator is None:
        errors = [_NOT_AVAILABLE] * len(entries)
    else:
        if version == 0:
            generation, member = -1, UNKNOWN_MEMBER_ID
        else:
            generation, member = body.generation_id_or_member_epoch, body.member_id
        # v2-v4's retention_time_ms: -1 lets the group's state decide when offsets expire.
        retention = (
            body.retention_time_ms if 2 <= version <= 4 and body.retention_time_ms != -1 else None
        )
        errors = await coordinator.commit_offsets(
            body.group_id,
            member,
            generation,
            retention,
            entries,
            group_instance_id=body.group_instance_id,
        )
    it = iter(errors)
    return {
        "topics": [
            {
                "name": t.name,
                "partitions": [
                    {"partition_index": p.partition_index, "error_code": int(next(it))}
                    for p in t.partitions
                ],
            }
            for t in body.topics
        ]
    }


async def _fetch_group(
    ctx: BrokerContext,
    coordinator: GroupCoordinator | None,
    group_id: str,
    topics: list[Body] | None,
    require_stable: bool,
    version: int,
) -> tuple[int, list[dict[str, Any]]]:
    """(group error, response topics) of one group; ``topics`` None = every committed one.
    The offsets are read at once; the answer for BUILT_BESIDE_PARTITIONS or more is built in
    a worker thread."""
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    offsets = (
        None
        if coordinator is None
        else coordinator.group_offsets(group_id, require_stable=require_stable)
    )
    if offsets is None:
        if version >= 2 or wanted is None:
            return int(_NOT_AVAILABLE), []
        # v0-v1 have no top-level error: it goes on every partition.
        answers = [(t, p, PartitionOffset(-1, "", _NOT_AVAILABLE)) for t, p in wanted]
        return 0, _offset_fetch_topics(answers, None)
    # v0 (Kafka: ZooKeeper) answers unknown partitions with error 3.
    known = None
    if version == 0:
        names = {t for t, _ in wanted} if wanted is not None else {t for t, _ in offsets.committed}
        known = {name: t.partitions for name in names if (t := ctx.topics.get(name)) is not None}
    listed = len(wanted) if wanted is not None else len(offsets.committed)
    if listed < BUILT_BESIDE_PARTITIONS:
        return 0, _offset_fetch_topics(offsets.answers(wanted), known)
    taken = offsets  # a closure does not keep the narrowing of ``offsets``
    return 0, await workers.run_sync(lambda: _offset_fetch_topics(taken.answers(wanted), known))


def _offset_fetch_topics(
    answers: list[tuple[str, int, PartitionOffset]], known: dict[str, int] | None
) -> list[dict[str, Any]]:
    """The response's topics; ``known`` (v0): each existing topic's partition count, an
    answer for any other partition is UNKNOWN_TOPIC_OR_PARTITION."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, partition, po in answers:
        if known is not None and po.error is ErrorCode.NONE:
            if not 0 <= partition < known.get(topic, 0):
                po = PartitionOffset(-1, "", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "committed_offset": po.offset,
                "committed_leader_epoch": po.leader_epoch,
                "metadata": po.metadata,
                "error_code": int(po.error),
            }
        )
    return [{"name": name, "partitions": parts} for name, parts in by_topic.items()]


async def handle_offset_fetch(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    version = request.header.api_version
    coordinator = _coordinator(ctx)
    if version >= 8:
        groups = []
        for g in body.groups:
            error, topics = await _fetch_group(
                ctx, coordinator, g.group_id, g.topics, body.require_stable, version
            )
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": error})
        return {"groups": groups}
    error, topics = await _fetch_group(
        ctx, coordinator, body.group_id, body.topics, body.require_stable, version
    )
    return {"topics": topics, "error_code": error}


async def handle_offset_delete(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return {"error_code": int(_NOT_AVAILABLE), "topics": []}
    answers: dict[tuple[str, int], ErrorCode] = {}
    known = []
    for t in body.topics:
        topic = ctx.topics.get(t.name)
        for p in t.partitions:
            if topic is None or not 0 <= p.partition_index < topic.partitions:
                answers[(t.name, p.partition_index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                known.append((t.name, p.partition_index))
    error, results = await coordinator.delete_offsets(body.group_id, known)
    if error is not ErrorCode.NONE:
        return {"error_code": int(error), "topics": []}
    for name, partition, err in results:
        answers[(name, partition)] = err
    return {
        "error_code": 0,
        "topics": [
            {
                "name": t.name,
                "partitions": [
                    {
                        "partition_index": p.partition_index,
                        "error_code": int(answers[(t.name, p.partition_index)]),
                    }
                    for p in t.partitions
                ],
            }
            for t in body.topics
        ],
    }


# ---- DescribeGroups / ListGroups / DeleteGroups ----------------------------------------------


async def handle_describe_groups(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    version = request.header.api_version
    coordinator = _coordinator(ctx)
    operations = (
        _GROUP_OPERATIONS
        if version >= 3 and body.include_authorized_operations
        else _OPERATIONS_NOT_REQUESTED
    )
    groups = []
    for group_id in body.groups:
        if coordinator is None:
            groups.append(
                {
                    "error_code": int(_NOT_AVAILABLE),
                    "group_id": group_id,
                    "group_state": "",
                    "protocol_type": "",
                    "protocol_data": "",
                    "members": [],
                    "authorized_operations": _OPERATIONS_NOT_REQUESTED,
                }
            )
            continue
        error, s = coordinator.describe(group_id)
        assert s is not None
        message = None
        if version >= 6 and error == ErrorCode.NONE and s.state == "Dead":
            error, message = ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
        groups.append(
            {
                "error_code": int(error),
                "error_message": message,
                "group_id": group_id,
                "group_state": s.state,
                "protocol_type": s.protocol_type,
                "protocol_data": s.protocol,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata,
                        "member_assignment": m.assignment,
                    }
                    for m in s.members
                ],
                "authorized_operations": operations,
            }
        )
    return {"groups": groups}


async def handle_list_groups(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return {"error_code": int(_NOT_AVAILABLE), "groups": []}
    error, overview = coordinator.overview(body.states_filter or (), body.types_filter or ())
    return {
        "error_code": int(error),
        "groups": [
            {
                "group_id": g.group_id,
                "protocol_type": g.protocol_type,
                "group_state": g.state,
                "group_type": g.group_type,
            }
            for g in overview
        ],
    }


async def handle_delete_groups(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    names = request.body.groups_names
    coordinator = _coordinator(ctx)
    if coordinator is None:
        results = [(g, _NOT_AVAILABLE) for g in dict.fromkeys(names)]
    else:
        results = await coordinator.delete_groups(names)
    return {"results": [{"group_id": g, "error_code": int(e)} for g, e in results]}


GROUP_HANDLERS: dict[ApiKey, Handler] = {
    ApiKey.FIND_COORDINATOR: handle_find_coordinator,
    ApiKey.JOIN_GROUP: handle_join_group,
    ApiKey.SYNC_GROUP: handle_sync_group,
    ApiKey.HEARTBEAT: handle_heartbeat,
    ApiKey.LEAVE_GROUP: handle_leave_group,
    ApiKey.OFFSET_COMMIT: handle_offset_commit,
    ApiKey.OFFSET_FETCH: handle_offset_fetch,
    ApiKey.DESCRIBE_GROUPS: handle_describe_groups,
    ApiKey.LIST_GROUPS: handle_list_groups,
    ApiKey.DELETE_GROUPS: handle_delete_groups,
    ApiKey.OFFSET_DELETE: handle_offset_delete,
}
