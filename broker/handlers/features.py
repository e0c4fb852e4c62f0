"""UpdateFeatures v0-v2 (KIP-584): finalize feature levels as Kafka 4.1's controller does
(broker/features.py has the rules and where a single broker keeps the levels;
broker/cluster/features.py where a cluster keeps them). Any broker of a cluster serves it: the
levels are written with the ZooKeeper version they were checked against, so of two updates at
once the second is checked again on the first's levels."""

from __future__ import annotations

from typing import Any

from broker.context import BrokerContext
from broker.errors import ClusterStateError
from broker.features import FeatureUpdate, FeatureUpdateError, UpgradeType, updated
from protocol.api import Request
from protocol.errors import ErrorCode


def _upgrade_type(update: Any) -> UpgradeType:
    """v1+'s upgrade_type; at v0 its default, UPGRADE: Kafka 4.1's controller reads only that
    field, so v0's allow_downgrade downgrades nothing there either."""
    try:
        return UpgradeType(update.upgrade_type)
    except ValueError:
        return UpgradeType.UNKNOWN


async def handle_update_features(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body, version = request.body, request.header.api_version
    updates = [
        FeatureUpdate(u.feature, u.max_version_level, _upgrade_type(u))
        for u in body.feature_updates
    ]
    try:
        while True:  # until the update is refused, changes nothing, or wins over any other
            current = await ctx.features.latest()
            levels = updated(current, updates, ctx.config.broker_id)
            if levels is None or body.validate_only:
                break
            if await ctx.features.change(levels, current):
                break
    except ClusterStateError as exc:  # ZooKeeper (a cluster's levels) could not be reached
        return {
            "throttle_time_ms": 0,
            "error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR),
            "error_message": f"the update failed: {exc}; retry it",
            "results": [],
        }
    except FeatureUpdateError as exc:
        return {
            "throttle_time_ms": 0,
            "error_code": int(exc.code),
            "error_message": "The update failed for all features since the following "
            f"feature had an error: {exc.message}",
            "results": [],
        }
    # v0-v1 list every feature's result on success, its message Errors.NONE's "NONE"; v2 has no
    # results (Kafka 4.1's controller).
    results = [{"feature": u.name, "error_code": 0, "error_message": "NONE"} for u in updates]
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "results": results if version <= 1 else [],
    }
