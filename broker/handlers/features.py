"""UpdateFeatures v0-v2 (KIP-584): finalize feature levels as Kafka 4.1's controller does
(broker/features.py has the rules and where the levels are kept)."""

from __future__ import annotations

from typing import Any

from broker.context import BrokerContext
from broker.features import FeatureUpdate, FeatureUpdateError, UpgradeType, updated
from protocol.api import Request


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
        levels = updated(ctx.features.current, updates, ctx.config.broker_id)
    except FeatureUpdateError as exc:
        return {
            "throttle_time_ms": 0,
            "error_code": int(exc.code),
            "error_message": "The update failed for all features since the following feature "
            f"had an error: {exc.message}",
            "results": [],
        }
    if levels is not None and not body.validate_only:
        await ctx.features.change(levels)
    # v0-v1 list every feature's result on success, its message Errors.NONE's "NONE"; v2 has no
    # results (Kafka 4.1's controller).
    results = [{"feature": u.name, "error_code": 0, "error_message": "NONE"} for u in updates]
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "results": results if version <= 1 else [],
    }
