"""ApiVersions v0-v4: the versions this broker serves, from its final dispatch table, and (v3+)
the transaction.version feature where a transaction coordinator runs."""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import TYPE_CHECKING, Any

from broker.context import BrokerContext
from protocol.api import CLUSTER_VERSIONS, SUPPORTED_VERSIONS, ApiKey, Request
from protocol.errors import ErrorCode

if TYPE_CHECKING:  # the dispatch table's package imports this module
    from broker.handlers import Handler


def api_versions(implemented: Container[ApiKey]) -> list[dict[str, Any]]:
    """The api list: protocol's version ranges for the apis this broker dispatches."""
    return [
        {"api_key": int(key), "min_version": lo, "max_version": hi}
        for key, (lo, hi) in sorted({**SUPPORTED_VERSIONS, **CLUSTER_VERSIONS}.items())
        if key in implemented
    ]


def make_api_versions_handler(handlers: Mapping[ApiKey, Handler]) -> Handler:
    """ApiVersions answers from the final dispatch table, so it advertises exactly what runs."""

    async def handle_api_versions(ctx: BrokerContext, request: Request) -> dict[str, Any]:
        # body None: a newer ApiVersions version; answer in the v0 layout with error 35 and the
        # list, which is what makes kafka-python and librdkafka retry at v0 (clients.md).
        error = ErrorCode.UNSUPPORTED_VERSION if request.body is None else ErrorCode.NONE
        body = {"error_code": int(error), "api_keys": api_versions(handlers), "throttle_time_ms": 0}
        if ctx.txn_coordinator is not None:  # KIP-584 features (broker/features.py), v3+
            body.update(ctx.features.current.api_versions_fields())
        return body

    return handle_api_versions
