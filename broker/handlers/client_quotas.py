"""DescribeClientQuotas (api 48) and AlterClientQuotas (api 49), v0-v1 as Kafka 4.1.1 serves
them (KIP-546), answered as Kafka's ZooKeeper-mode broker answers them (ZkAdminManager): the
filter's semantics, the per-entry errors and their texts. The quotas live in ``ctx.quotas``
(broker/quotas/); the ACL checks (DESCRIBE_CONFIGS / ALTER_CONFIGS on the cluster) are
broker/security/rules.py's. ``throttle_time_ms`` is filled in by the server (broker/quotas/
throttle.py)."""

from __future__ import annotations

from typing import Any

import structlog
from kazoo.exceptions import KazooException

from broker.context import BrokerContext
from broker.quotas import Op, QuotaRequestError, entity_parts
from protocol import Request
from protocol.errors import ErrorCode

logger = structlog.get_logger(__name__)


async def handle_describe_client_quotas(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    components = [(c.entity_type, c.match_type, c.match) for c in body.components]
    try:
        found = ctx.quotas.describe(components, body.strict)
    except QuotaRequestError as exc:
        return {
            "throttle_time_ms": 0,
            "error_code": int(exc.code),
            "error_message": str(exc),
            "entries": None,
        }
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "entries": [
            {
                "entity": [{"entity_type": t, "entity_name": n} for t, n in entity_parts(entity)],
                "values": [{"key": k, "value": v} for k, v in values.items()],
            }
            for entity, values in found
        ],
    }


async def handle_alter_client_quotas(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    """Each entry is checked on its own (one refused entry does not stop the others); the valid
    ones are stored together (one file write, or one znode and notification each) unless
    ``validate_only``."""
    quotas = ctx.quotas
    results: list[tuple[int, str | None]] = []
    # entity -> its config once the request's entries for it are applied
    changes: dict[tuple[str | None, str | None], dict[str, str]] = {}
    async with quotas.lock:
        for entry in request.body.entries:
            parts = [(e.entity_type, e.entity_name) for e in entry.entity]
            ops = [Op(o.key, o.value, o.remove) for o in entry.ops]
            try:
                entity, config = quotas.check_alteration(parts, ops, changes)
            except QuotaRequestError as exc:
                results.append((int(exc.code), str(exc)))
                continue
            results.append((0, None))
            changes[entity] = config
        if changes and not request.body.validate_only:
            try:
                await quotas.save(list(changes.items()))
            except (OSError, KazooException) as exc:
                logger.error(
                    "cannot store client quotas; nothing changed",
                    error=repr(exc),
                    action="check the first log dir's disk (or ZooKeeper) and retry",
                )
                failed = (
                    int(ErrorCode.UNKNOWN_SERVER_ERROR),
                    f"storing the quotas failed: {exc!r}",
                )
                results = [failed if code == 0 else (code, msg) for code, msg in results]
    return {
        "throttle_time_ms": 0,
        "entries": [
            {
                "error_code": code,
                "error_message": message,
                "entity": [
                    {"entity_type": e.entity_type, "entity_name": e.entity_name}
                    for e in entry.entity
                ],
            }
            for entry, (code, message) in zip(request.body.entries, results)
        ],
    }
