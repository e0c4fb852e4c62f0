"""The transaction apis (KIP-98, KIP-447, KIP-664, KIP-890, KIP-994), answered as Kafka 4.1
answers them: AddPartitionsToTxn v0-5 (v4+ batched, with verify-only checks), AddOffsetsToTxn
v0-4, EndTxn v0-5, TxnOffsetCommit v0-5 (through the group coordinator), DescribeTransactions
v0, ListTransactions v0-2, and WriteTxnMarkers v1 (the coordinator's own request to partition
leaders; a single broker writes its markers directly, but serves the api as Kafka does).

The coordinator (broker/txn/coordinator.py) decides; these functions only map the wire shapes.
Until the coordinator has loaded its state the apis answer COORDINATOR_NOT_AVAILABLE; in a
ZooKeeper cluster a broker that does not lead the id's ``__transaction_state`` partition answers
NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS while it loads it), all retried by clients.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

import structlog
import trio

from broker.context import BrokerContext
from broker.groups.coordinator import OFFSETS_PARTITION, OFFSETS_TOPIC, CommitEntry
from broker.txn.markers import write_marker
from protocol.api import ApiKey, Request
from protocol.errors import ErrorCode
from protocol.schemas import Body

if TYPE_CHECKING:  # broker.txn.coordinator imports broker.handlers, which imports this module
    from broker.handlers import Handler
    from broker.txn.coordinator import TransactionCoordinator

logger = structlog.get_logger(__name__)


def _coordinator(ctx: BrokerContext) -> TransactionCoordinator | None:
    return ctx.txn_coordinator


def _topic_error(ctx: BrokerContext, topic: str, partition: int) -> ErrorCode:
    t = ctx.topics.get(topic)
    if t is None or not 0 <= partition < t.partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return ErrorCode.NONE


async def _add_partitions(
    ctx: BrokerContext,
    tid: str,
    producer_id: int,
    epoch: int,
    topics: list[Body],
    verify_only: bool,
    broker_request: bool = False,
) -> list[dict[str, Any]]:
    """One transaction's AddPartitionsToTxn: per-topic results."""
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    coordinator = _coordinator(ctx)
    if coordinator is None:
        errors = {tp: ErrorCode.NOT_COORDINATOR_FOR_GROUP for tp in wanted}
    elif verify_only:
        errors = coordinator.verify_partitions(tid, producer_id, epoch, wanted)
    else:
        unknown = {tp: _topic_error(ctx, *tp) for tp in wanted}
        if any(unknown.values()):
            # Kafka refuses the whole request: the unknown ones with their error, the rest with
            # OPERATION_NOT_ATTEMPTED.
            errors = {
                tp: e if e is not ErrorCode.NONE else ErrorCode.OPERATION_NOT_ATTEMPTED
                for tp, e in unknown.items()
            }
        else:
            # A broker's v4+ add (a produce or TxnOffsetCommit at transaction version 2, KIP-890
            # part 2) speaks for a client at version 2, as Kafka 4.1 takes it.
            error = await coordinator.add_partitions(
                tid, producer_id, epoch, wanted, client_version=2 if broker_request else None
            )
            errors = {tp: error for tp in wanted}
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), error in errors.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "partition_error_code": int(error)}
        )
    return [{"name": name, "results_by_partition": parts} for name, parts in by_topic.items()]


async def handle_add_partitions_to_txn(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    if request.header.api_version <= 3:
        results = await _add_partitions(
            ctx,
            body.v3_and_below_transactional_id,
            body.v3_and_below_producer_id,
            body.v3_and_below_producer_epoch,
            body.v3_and_below_topics,
            verify_only=False,
        )
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": results}
    out = []
    for txn in body.transactions:
        results = await _add_partitions(
            ctx,
            txn.transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            txn.topics,
            txn.verify_only,
            broker_request=True,
        )
        out.append({"transactional_id": txn.transactional_id, "topic_results": results})
    return {"throttle_time_ms": 0, "error_code": 0, "results_by_transaction": out}


async def handle_add_offsets_to_txn(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return {"throttle_time_ms": 0, "error_code": int(ErrorCode.NOT_COORDINATOR_FOR_GROUP)}
    # The group's offsets partition (there is one), wherever its group coordinator runs.
    error = await coordinator.add_partitions(
        body.transactional_id,
        body.producer_id,
        body.producer_epoch,
        [(OFFSETS_TOPIC, OFFSETS_PARTITION)],
    )
    return {"throttle_time_ms": 0, "error_code": int(error)}


async def handle_end_txn(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    version = request.header.api_version
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return {"throttle_time_ms": 0, "error_code": int(ErrorCode.NOT_COORDINATOR_FOR_GROUP)}
    error, producer_id, epoch = await coordinator.end_txn(
        body.transactional_id,
        body.producer_id,
        body.producer_epoch,
        body.committed,
        client_version=2 if version >= 5 else 1,
    )
    if version < 2 and error is ErrorCode.PRODUCER_FENCED:
        error = ErrorCode.INVALID_PRODUCER_EPOCH  # older clients do not know PRODUCER_FENCED
    return {
        "throttle_time_ms": 0,
        "error_code": int(error),
        "producer_id": producer_id,
        "producer_epoch": epoch,
    }


# What a verification's answer becomes for a TxnOffsetCommit below v5, as Kafka's: trouble at
# the transaction coordinator (NOT_ENOUGH_REPLICAS for a produce) as COORDINATOR_NOT_AVAILABLE,
# which the client retries; the offsets partition missing from the transaction as
# INVALID_TXN_STATE (these clients do not know TRANSACTION_ABORTABLE).
_VERIFICATION_ERRORS = {
    ErrorCode.NOT_COORDINATOR_FOR_GROUP: ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE,
    ErrorCode.CONCURRENT_TRANSACTIONS: ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE,
    ErrorCode.GROUP_LOAD_IN_PROGRESS: ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE,
    ErrorCode.TRANSACTION_ABORTABLE: ErrorCode.INVALID_TXN_STATE,
}


async def _offsets_in_transaction(
    coordinator: TransactionCoordinator, body: Body, partition: tuple[str, int], add: bool
) -> ErrorCode:
    """The transaction coordinator's word on a TxnOffsetCommit's offsets partition: added to
    the ongoing transaction (``add``, v5+) or verified to be in it."""
    error = await coordinator.check_produce(
        body.transactional_id, body.producer_id, body.producer_epoch, partition, add=add
    )
    return error if add else _VERIFICATION_ERRORS.get(error, error)


async def handle_txn_offset_commit(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    groups = ctx.coordinator
    entries = [
        CommitEntry(
            t.name,
            p.partition_index,
            p.committed_offset,
            p.committed_metadata,
            leader_epoch=p.committed_leader_epoch,
        )
        for t in body.topics
        for p in t.partitions
    ]
    coordinator = _coordinator(ctx)
    if groups is None:
        errors = [ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE] * len(entries)
    else:
        verify = None
        # Transaction version 2 (KIP-890 part 2): no AddOffsetsToTxn, the offsets partition
        # joins the transaction here; before it, the client added it and it is verified (part
        # 1). Asked of the id's coordinator (in a cluster maybe another broker) under the
        # offsets log's lock, by the group coordinator.
        add = request.header.api_version >= 5
        if coordinator is not None and (
            add or ctx.config.transaction_partition_verification_enable
        ):
            verify = functools.partial(
                _offsets_in_transaction,
                coordinator,
                body,
                (groups.offsets_topic, groups.partition_for(body.group_id)),
                add,
            )
        errors = await groups.txn_commit_offsets(
            body.group_id,
            body.producer_id,
            body.producer_epoch,
            entries,
            member_id=body.member_id,
            generation_id=body.generation_id,
            group_instance_id=body.group_instance_id,
            verify=verify,
        )
    if request.header.api_version < 2:
        errors = [
            ErrorCode.INVALID_PRODUCER_EPOCH if e is ErrorCode.PRODUCER_FENCED else e
            for e in errors
        ]
    topics: dict[str, list[dict[str, Any]]] = {}
    for entry, error in zip(entries, errors):
        topics.setdefault(entry.topic, []).append(
            {"partition_index": entry.partition, "error_code": int(error)}
        )
    return {
        "throttle_time_ms": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
    }


async def handle_describe_transactions(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    coordinator = _coordinator(ctx)
    states = []
    for tid in request.body.transactional_ids:
        if coordinator is None:
            error, meta = ErrorCode.NOT_COORDINATOR_FOR_GROUP, None
        else:
            await coordinator.ensure_active()
            error, meta = coordinator.describe(tid)
        state = {
            "error_code": int(error),
            "transactional_id": tid,
            "transaction_state": "",
            "transaction_timeout_ms": 0,
            "transaction_start_time_ms": -1,
            "producer_id": -1,
            "producer_epoch": -1,
            "topics": [],
        }
        if meta is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(meta.partitions):
                by_topic.setdefault(topic, []).append(partition)
            state.update(
                transaction_state=meta.state.label,
                transaction_timeout_ms=meta.timeout_ms,
                transaction_start_time_ms=meta.start_ms,
                producer_id=meta.producer_id,
                producer_epoch=meta.producer_epoch,
                topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            )
        states.append(state)
    return {"throttle_time_ms": 0, "transaction_states": states}


async def handle_list_transactions(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    from broker.txn.state import TxnState

    body = request.body
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return {"throttle_time_ms": 0, "error_code": int(ErrorCode.NOT_COORDINATOR_FOR_GROUP)}
    await coordinator.ensure_active()
    if not coordinator.active:
        return {"throttle_time_ms": 0, "error_code": int(ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE)}
    unknown = [s for s in body.state_filters if TxnState.from_label(s) is None]
    pattern = body.transactional_id_pattern
    try:
        matcher = re.compile(pattern) if pattern else None
    except re.error:
        return {"throttle_time_ms": 0, "error_code": int(ErrorCode.INVALID_REQUEST)}
    listing = coordinator.machine.listing(
        states=body.state_filters,
        producer_ids=body.producer_id_filters,
        min_duration_ms=body.duration_filter,
        now_ms=ctx.clock(),
    )
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "unknown_state_filters": unknown,
        "transaction_states": [
            {
                "transactional_id": m.transactional_id,
                "producer_id": m.producer_id,
                "transaction_state": m.state.label,
            }
            for m in listing
            if matcher is None or matcher.fullmatch(m.transactional_id)
        ],
    }


async def handle_write_txn_markers(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    """Markers sent by a transaction coordinator: written to each named partition, all at
    once (in a cluster each answer waits for its partition's ISR, so one slow follower does
    not hold the others back past the coordinator's timeout)."""
    errors: dict[tuple[int, str, int], ErrorCode] = {}

    async def write(i: int, marker: Body, topic: str, partition: int) -> None:
        errors[(i, topic, partition)] = await write_marker(
            ctx,
            topic,
            partition,
            marker.producer_id,
            marker.producer_epoch,
            marker.coordinator_epoch,
            marker.transaction_result,
        )

    async with trio.open_nursery() as nursery:
        for i, marker in enumerate(request.body.markers):
            for t in marker.topics:
                for p in t.partition_indexes:
                    nursery.start_soon(write, i, marker, t.name, p)
    results = []
    for i, marker in enumerate(request.body.markers):
        topics = [
            {
                "name": t.name,
                "partitions": [
                    {"partition_index": p, "error_code": int(errors[(i, t.name, p)])}
                    for p in t.partition_indexes
                ],
            }
            for t in marker.topics
        ]
        results.append({"producer_id": marker.producer_id, "topics": topics})
    return {"markers": results}


TXN_HANDLERS: dict[ApiKey, Handler] = {
    ApiKey.ADD_PARTITIONS_TO_TXN: handle_add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: handle_add_offsets_to_txn,
    ApiKey.END_TXN: handle_end_txn,
    ApiKey.TXN_OFFSET_COMMIT: handle_txn_offset_commit,
    ApiKey.DESCRIBE_TRANSACTIONS: handle_describe_transactions,
    ApiKey.LIST_TRANSACTIONS: handle_list_transactions,
    ApiKey.WRITE_TXN_MARKERS: handle_write_txn_markers,
}
