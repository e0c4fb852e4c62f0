"""Finalized feature levels in a cluster (KIP-584) kept as Kafka's ZooKeeper mode kept them: the
``/feature`` znode (Kafka's FeatureZNode, format version 2)::

    {"version":2,"status":1,"features":{"transaction.version":{"max_version_level":1}}}

Every broker follows it through a watch (Kafka's FinalizedFeatureChangeListener), so ApiVersions
on any broker answers the same levels. An UpdateFeatures on any broker checks the update against
the znode as read and writes it conditionally on that read's version (creating it the first
time): when another change came first the write fails and the update is checked again.

Until the znode exists the defaults hold (transaction.version 2). The epoch ApiVersions answers
is the znode's data version + 1, 0 before it exists (Kafka answers the version itself, -1 before):
Kafka's clients adopt only levels of a newer epoch than they hold, and the defaults a cluster
starts with are finalized at epoch 0 on a single broker too. A feature at level 0 is left out,
as a disabled one is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import structlog
import trio
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError

from broker.cluster.zk import WatchFollower, ZooKeeper
from broker.errors import ClusterStateError
from broker.features import Features, FeatureLevels

logger = structlog.get_logger(__name__)

FEATURE_PATH = "/feature"
ZNODE_VERSION = 2
STATUS_ENABLED = 1


def feature_json(levels: Mapping[str, int]) -> bytes:
    """Kafka's FeatureZNode.encode at version 2."""
    doc = {
        "version": ZNODE_VERSION,
        "status": STATUS_ENABLED,
        "features": {name: {"max_version_level": level} for name, level in levels.items()},
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def parse_features(data: bytes) -> dict[str, int]:
    """The levels of a FeatureZNode (version 1 or 2, Kafka's decode); ValueError when it is
    not one."""
    try:
        doc = json.loads(data)
        if doc["version"] not in (1, 2):
            raise ValueError(f"unsupported version {doc['version']}")
        if doc.get("status") != STATUS_ENABLED:
            return {}  # disabled: the levels are not in force
        features: dict[str, Any] = doc["features"]
        return {
            str(name): int(levels["max_version_level"])
            for name, levels in features.items()
            if int(levels["max_version_level"]) > 0
        }
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{FEATURE_PATH} is not a feature znode ({exc}): {data[:200]!r}") from None


class ZkFeatureLevels(FeatureLevels):
    """A cluster's finalized features (see the module docstring). :meth:`load` before the
    broker serves, :meth:`start` to follow changes; trio thread only."""

    def __init__(self, zk: ZooKeeper) -> None:
        super().__init__(Features(), self._refuse_file)
        self._zk = zk
        self._follower = WatchFollower(self._adopt, "the finalized features")

    @staticmethod
    def _refuse_file(features: Features) -> None:
        raise AssertionError("a cluster's feature levels are kept in ZooKeeper, not in a file")

    async def _read(self, watch: bool = False) -> Features:
        found = await self._zk.get_or_none(FEATURE_PATH, self.wake if watch else None)
        if found is None:
            if watch:  # fires when the first change creates it
                await self._zk.exists(FEATURE_PATH, self.wake)
            return Features()
        data, stat = found
        try:
            levels = parse_features(data)
        except ValueError as exc:
            logger.error(
                "ignoring an unreadable feature znode",
                error=str(exc),
                action="write it again with kafka-features.sh upgrade/downgrade",
            )
            return self.current
        return Features(levels, stat.version + 1)

    async def load(self) -> None:
        """Read the levels once (at start-up). Raises ClusterStateError."""
        try:
            self.current = await self._read()
        except KazooException as exc:
            raise ClusterStateError(f"reading {FEATURE_PATH} failed ({exc!r})") from exc

    async def latest(self) -> Features:
        try:
            return await self._read()
        except KazooException as exc:
            raise ClusterStateError(f"reading {FEATURE_PATH} failed ({exc!r})") from exc

    async def change(self, levels: Mapping[str, int], based_on: Features) -> bool:
        data = feature_json(levels)
        try:
            if based_on.epoch == 0:
                await self._zk.create(FEATURE_PATH, data)
            else:
                await self._zk.set(FEATURE_PATH, data, version=based_on.epoch - 1)
        except (BadVersionError, NodeExistsError):
            return False
        except KazooException as exc:
            raise ClusterStateError(f"writing {FEATURE_PATH} failed ({exc!r})") from exc
        logger.info("finalized feature levels changed", levels=dict(levels))
        self.wake()
        return True

    def start(self, nursery: trio.Nursery) -> None:
        self._follower.start(nursery)

    def wake(self) -> None:
        """Read /feature again (its watch fired, a change was written here, a new session)."""
        self._follower.wake()

    async def _adopt(self) -> None:
        features = await self._read(watch=True)
        if features != self.current:
            self.current = features
            logger.info(
                "finalized feature levels adopted",
                levels=dict(features.levels),
                epoch=features.epoch,
            )


__all__ = ["FEATURE_PATH", "ZkFeatureLevels", "feature_json", "parse_features"]
