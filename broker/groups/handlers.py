"""Request handlers for the group apis, merged into the broker's dispatch table.

Each is ``async def handler(ctx, request) -> dict``: ``request.body`` is the decoded body
(Kafka's JSON field names in snake_case), the dict is the response body. Before the
coordinator has started (``ctx.coordinator`` is None) every api answers
GROUP_COORDINATOR_NOT_AVAILABLE, which clients retry. A member's client_host (DescribeGroups)
is the peer address the server put in ``broker.context.client_host`` ("/127.0.0.1", as Kafka's
KafkaApis passes ``clientAddress.toString``).

OffsetFetch v0 and OffsetCommit v0 use the same store as v1+: Kafka 0.10.1 kept v0 offsets in
ZooKeeper, which this broker does not have.
"""

from __future__ import annotations

from broker.context import client_host
from broker.groups.coordinator import GroupCoordinator
from broker.groups.state import UNKNOWN_MEMBER_ID
from protocol.api import ApiKey, Request
from protocol.errors import ErrorCode

_NOT_AVAILABLE = int(ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE)


def _coordinator(ctx) -> GroupCoordinator | None:
    coordinator = getattr(ctx, "coordinator", None)
    return coordinator if coordinator is not None and coordinator.active else None


async def handle_find_coordinator(ctx, request: Request) -> dict:
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return {"error_code": _NOT_AVAILABLE, "node_id": -1, "host": "", "port": -1}
    node_id, host, port = coordinator.node
    return {"error_code": 0, "node_id": node_id, "host": host, "port": port}


async def handle_join_group(ctx, request: Request) -> dict:
    body = request.body
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return _join_response(body.member_id, _NOT_AVAILABLE)
    rebalance_timeout = (
        body.rebalance_timeout_ms if request.header.api_version >= 1 else body.session_timeout_ms
    )
    result = await coordinator.join(
        body.group_id,
        body.member_id,
        client_id=request.header.client_id or "",
        client_host=client_host.get(),
        session_timeout_ms=body.session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout,
        protocol_type=body.protocol_type,
        protocols=[(p.name, p.metadata) for p in body.protocols],
    )
    return {
        "error_code": int(result.error),
        "generation_id": result.generation_id,
        "protocol_name": result.protocol,
        "leader": result.leader_id,
        "member_id": result.member_id,
        "members": [{"member_id": mid, "metadata": meta} for mid, meta in result.members],
    }


def _join_response(member_id: str, error: int) -> dict:
    return {
        "error_code": error,
        "generation_id": 0,
        "protocol_name": "",
        "leader": "",
        "member_id": member_id,
        "members": [],
    }


async def handle_sync_group(ctx, request: Request) -> dict:
    body = request.body
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return {"error_code": _NOT_AVAILABLE, "assignment": b""}
    assignments = {a.member_id: a.assignment for a in body.assignments}
    result = await coordinator.sync(body.group_id, body.generation_id, body.member_id, assignments)
    return {"error_code": int(result.error), "assignment": result.assignment}


async def handle_heartbeat(ctx, request: Request) -> dict:
    body = request.body
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return {"error_code": _NOT_AVAILABLE}
    return {
        "error_code": int(coordinator.heartbeat(body.group_id, body.member_id, body.generation_id))
    }


async def handle_leave_group(ctx, request: Request) -> dict:
    body = request.body
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return {"error_code": _NOT_AVAILABLE}
    return {"error_code": int(coordinator.leave(body.group_id, body.member_id))}


async def handle_offset_commit(ctx, request: Request) -> dict:
    body = request.body
    version = request.header.api_version
    entries = [
        (
            t.name,
            p.partition_index,
            p.committed_offset,
            p.committed_metadata,
            p.commit_timestamp if version == 1 else -1,
        )
        for t in body.topics
        for p in t.partitions
    ]
    coordinator = _coordinator(ctx)
    if coordinator is None:
        errors = [ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE] * len(entries)
    else:
        if version == 0:
            generation, member = -1, UNKNOWN_MEMBER_ID
        else:
            generation, member = body.generation_id_or_member_epoch, body.member_id
        # v2's retention_time_ms -1 means the broker's offsets.retention.minutes.
        retention = (
            body.retention_time_ms if version >= 2 and body.retention_time_ms != -1 else None
        )
        errors = await coordinator.commit_offsets(
            body.group_id, member, generation, retention, entries
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


async def handle_offset_fetch(ctx, request: Request) -> dict:
    body = request.body
    wanted = [(t.name, p) for t in body.topics for p in t.partition_indexes]
    coordinator = _coordinator(ctx)
    if coordinator is None:
        answers = [(-1, "", _NOT_AVAILABLE)] * len(wanted)
    else:
        answers = []
        for (topic, partition), po in zip(wanted, coordinator.fetch_offsets(body.group_id, wanted)):
            t = ctx.topics.get(topic)
            if request.header.api_version == 0 and (t is None or not 0 <= partition < t.partitions):
                # v0 (Kafka: ZooKeeper) answers unknown partitions with error 3.
                answers.append((-1, "", int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)))
            else:
                answers.append((po.offset, po.metadata, int(po.error)))
    it = iter(answers)
    responses = []
    for t in body.topics:
        parts = []
        for p in t.partition_indexes:
            offset, metadata, error = next(it)
            parts.append(
                {
                    "partition_index": p,
                    "committed_offset": offset,
                    "metadata": metadata,
                    "error_code": error,
                }
            )
        responses.append({"name": t.name, "partitions": parts})
    return {"topics": responses}


async def handle_describe_groups(ctx, request: Request) -> dict:
    coordinator = _coordinator(ctx)
    groups = []
    for group_id in request.body.groups:
        if coordinator is None:
            groups.append(
                {
                    "error_code": _NOT_AVAILABLE,
                    "group_id": group_id,
                    "group_state": "",
                    "protocol_type": "",
                    "protocol_data": "",
                    "members": [],
                }
            )
            continue
        error, s = coordinator.describe(group_id)
        assert s is not None
        groups.append(
            {
                "error_code": int(error),
                "group_id": group_id,
                "group_state": s.state,
                "protocol_type": s.protocol_type,
                "protocol_data": s.protocol,
                "members": [
                    {
                        "member_id": m.member_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata,
                        "member_assignment": m.assignment,
                    }
                    for m in s.members
                ],
            }
        )
    return {"groups": groups}


async def handle_list_groups(ctx, request: Request) -> dict:
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return {"error_code": _NOT_AVAILABLE, "groups": []}
    error, overview = coordinator.list_groups()
    return {
        "error_code": int(error),
        "groups": [{"group_id": g, "protocol_type": pt} for g, pt in overview],
    }


GROUP_HANDLERS = {
    ApiKey.FIND_COORDINATOR: handle_find_coordinator,
    ApiKey.JOIN_GROUP: handle_join_group,
    ApiKey.SYNC_GROUP: handle_sync_group,
    ApiKey.HEARTBEAT: handle_heartbeat,
    ApiKey.LEAVE_GROUP: handle_leave_group,
    ApiKey.OFFSET_COMMIT: handle_offset_commit,
    ApiKey.OFFSET_FETCH: handle_offset_fetch,
    ApiKey.DESCRIBE_GROUPS: handle_describe_groups,
    ApiKey.LIST_GROUPS: handle_list_groups,
}
