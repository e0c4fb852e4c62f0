"""ApiVersions v0-v4: the versions this broker serves, from its final dispatch table."""

from __future__ import annotations

from broker.context import BrokerContext
from protocol.api import CLUSTER_VERSIONS, SUPPORTED_VERSIONS, Request
from protocol.errors import ErrorCode


def api_versions(implemented) -> list[dict]:
    """The api list: protocol's version ranges for the apis this broker dispatches."""
    return [
        {"api_key": int(key), "min_version": lo, "max_version": hi}
        for key, (lo, hi) in sorted({**SUPPORTED_VERSIONS, **CLUSTER_VERSIONS}.items())
        if key in implemented
    ]


def make_api_versions_handler(handlers):
    """ApiVersions answers from the final dispatch table, so it advertises exactly what runs."""

    async def handle_api_versions(ctx: BrokerContext, request: Request) -> dict:
        # body None: a newer ApiVersions version; answer in the v0 layout with error 35 and the
        # list, which is what makes kafka-python and librdkafka retry at v0 (clients.md).
        error = ErrorCode.UNSUPPORTED_VERSION if request.body is None else ErrorCode.NONE
        return {"error_code": int(error), "api_keys": api_versions(handlers), "throttle_time_ms": 0}

    return handle_api_versions
