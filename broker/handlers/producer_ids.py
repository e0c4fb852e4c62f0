"""InitProducerId v0-v5 (KIP-98; KIP-360's epoch bump from v3).

Without a transactional id (an idempotent producer), Kafka answers every request with a fresh
producer id at epoch 0, whatever id and epoch a v3+ client sends, and so does this handler. Ids
come in durable blocks (broker/producer_ids.py), never reused. With one, the transaction
coordinator (broker/txn/) answers; a broker without one (a ZooKeeper cluster, for now) refuses
with TRANSACTIONAL_ID_AUTHORIZATION_FAILED and a log line saying why.
"""

from __future__ import annotations

from typing import Any

import structlog

from broker import workers
from broker.context import BrokerContext
from protocol.api import Request
from protocol.errors import ErrorCode

logger = structlog.get_logger(__name__)


async def producer_id_ready(ctx: BrokerContext) -> bool:
    """Make sure ``ctx.producer_ids`` can hand out an id without I/O: reserve the next block
    durably when the current one is used up (under the admin lock, in a worker thread). False,
    with a log line, when the block cannot be reserved."""
    ids = ctx.producer_ids
    async with ctx.admin_lock:
        if not ids.needs_block():
            return True
        try:
            await workers.run_sync(ids.reserve_block)
        except OSError as exc:
            logger.error(
                "reserving producer ids failed",
                error=repr(exc),
                action="check the first log dir is writable and has space (in a cluster: "
                "that ZooKeeper is reachable)",
            )
            return False
    return True


async def handle_init_producer_id(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    if body.transactional_id is not None:
        return await _transactional(ctx, request)
    if not await producer_id_ready(ctx):
        return {
            "error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR),
            "producer_id": -1,
            "producer_epoch": -1,
        }
    return {"error_code": 0, "producer_id": ctx.producer_ids.next_id(), "producer_epoch": 0}


async def _transactional(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    coordinator = ctx.txn_coordinator
    if coordinator is None:  # the broker is starting: it is made before the first request
        return {
            "error_code": int(ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE),
            "producer_id": -1,
            "producer_epoch": -1,
        }
    version = request.header.api_version
    expected = (
        (body.producer_id, body.producer_epoch) if version >= 3 and body.producer_id >= 0 else None
    )
    error, producer_id, epoch = await coordinator.init_producer_id(
        body.transactional_id, body.transaction_timeout_ms, expected
    )
    if error is ErrorCode.PRODUCER_FENCED and version < 4:
        error = ErrorCode.INVALID_PRODUCER_EPOCH  # PRODUCER_FENCED is known from v4
    return {"error_code": int(error), "producer_id": producer_id, "producer_epoch": epoch}
