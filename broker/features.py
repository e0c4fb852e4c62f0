"""Finalized feature levels (KIP-584): what ApiVersions v3+ tells clients, and what UpdateFeatures
(``kafka-features.sh upgrade / downgrade / disable``) changes.

chronolog supports one feature, ``transaction.version`` 0-2 (KIP-890). Its finalized level tells
Kafka's 4.x clients which transaction protocol to speak: at 2 they add partitions with Produce v12
and end transactions with EndTxn v5 (an epoch bump at every end); below, with AddPartitionsToTxn.
The broker serves both protocols at any level, as Kafka 4.1.1 does (its advertised api versions do
not change with the level either). A level of 0 means not finalized: the feature is left out of
ApiVersions' finalized list. Until changed, transaction.version is finalized at 2.

The checks are Kafka 4.1's (FeatureControlManager.updateFeature), with its texts: a level below 0
or outside what is supported, a downgrade sent as an upgrade, an upgrade sent as a downgrade, all
INVALID_UPDATE_VERSION; one bad update fails them all.

A single broker keeps the levels in ``<first log dir>/chronolog-features.json``::

    {"version": 1, "epoch": 3, "features": {"transaction.version": 1}}

replaced whole on every change through storage.durable.write_atomically; the epoch (ApiVersions'
finalized_features_epoch) counts the changes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

import trio

from broker import workers
from broker.errors import StartupError
from protocol.errors import ErrorCode
from storage.durable import write_atomically

FEATURE_FILE = "chronolog-features.json"
FORMAT_VERSION = 1
TRANSACTION_VERSION = "transaction.version"
# name -> (min, max) supported level.
SUPPORTED: dict[str, tuple[int, int]] = {TRANSACTION_VERSION: (0, 2)}
DEFAULT_LEVELS: dict[str, int] = {TRANSACTION_VERSION: 2}


class UpgradeType(IntEnum):
    """UpdateFeatures v1+'s upgrade_type (Kafka's FeatureUpdate.UpgradeType)."""

    UNKNOWN = 0
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


@dataclass(frozen=True)
class FeatureUpdate:
    """One update of an UpdateFeatures request."""

    name: str
    level: int
    upgrade_type: UpgradeType


class FeatureUpdateError(Exception):
    """Raised by :func:`updated` when an update is refused: ``code`` and ``message`` are the
    answer's (the message as Kafka's controller words it)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@dataclass(frozen=True)
class Features:
    """The finalized levels (features at level 0 left out) and the epoch of the last change."""

    levels: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_LEVELS))
    epoch: int = 0

    def api_versions_fields(self) -> dict[str, object]:
        """ApiVersions v3+'s supported and finalized features."""
        return {
            "supported_features": [
                {"name": name, "min_version": lo, "max_version": hi}
                for name, (lo, hi) in SUPPORTED.items()
            ],
            "finalized_features_epoch": self.epoch,
            "finalized_features": [
                {"name": name, "min_version_level": level, "max_version_level": level}
                for name, level in self.levels.items()
            ],
        }


def updated(
    current: Features, updates: Sequence[FeatureUpdate], broker_id: int
) -> dict[str, int] | None:
    """The levels after ``updates`` (None when they change nothing). Raises FeatureUpdateError
    for the first update Kafka would refuse; then none applies."""
    levels = dict(current.levels)
    for update in updates:
        levels_or_zero = levels.get(update.name, 0)
        _check(update, levels_or_zero, broker_id)
        if update.level == 0:
            levels.pop(update.name, None)
        else:
            levels[update.name] = update.level
    return None if levels == dict(current.levels) else levels


def _check(update: FeatureUpdate, current: int, broker_id: int) -> None:
    def refused(reason: str) -> FeatureUpdateError:
        return FeatureUpdateError(
            ErrorCode.INVALID_UPDATE_VERSION,
            f"Invalid update version {update.level} for feature {update.name}. {reason}",
        )

    if update.upgrade_type == UpgradeType.UNKNOWN:
        raise refused("The controller does not support the given upgrade type.")
    if update.level < 0:
        raise refused("A feature version cannot be less than 0.")
    supported = SUPPORTED.get(update.name)
    if supported is None:
        raise refused(f"Local controller {broker_id} does not support this feature.")
    lo, hi = supported
    if not lo <= update.level <= hi:
        raise refused(f"Local controller {broker_id} only supports versions {lo}-{hi}")
    if update.level < current and update.upgrade_type == UpgradeType.UPGRADE:
        raise refused(
            "Can't downgrade the version of this feature without setting the upgrade type to "
            "either safe or unsafe downgrade."
        )
    if update.level > current and update.upgrade_type != UpgradeType.UPGRADE:
        raise refused("Can't downgrade to a newer version.")


class FeatureFile:
    """A single broker's feature file (see the module docstring). ``load`` and ``save`` do file
    I/O: call them in a worker thread."""

    def __init__(self, log_dir: str) -> None:
        self.path = os.path.join(log_dir, FEATURE_FILE)

    def load(self) -> Features:
        """The stored levels; the defaults without a file. Raises StartupError for a file that
        is not one of ours, naming it."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return Features()
        try:
            doc = json.loads(raw)
            if doc["version"] != FORMAT_VERSION:
                raise ValueError(f"format version {doc['version']}, expected {FORMAT_VERSION}")
            levels = {str(k): int(v) for k, v in doc["features"].items()}
            return Features(levels, int(doc["epoch"]))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StartupError(
                f"{self.path} is not a chronolog feature file ({exc}); move it away to start "
                "with the default feature levels"
            ) from None

    def save(self, features: Features) -> None:
        """Replace the file with ``features`` (fsynced before it returns)."""
        doc = {"version": FORMAT_VERSION, "epoch": features.epoch, "features": features.levels}
        write_atomically(self.path, json.dumps(doc, sort_keys=True).encode() + b"\n")


class FeatureLevels:
    """The broker's finalized features: ``current`` (what ApiVersions answers), :meth:`latest`
    and :meth:`change` (UpdateFeatures), which stores the new levels before it returns. Trio
    thread only; ``save`` does file I/O and runs in a worker thread. A cluster's levels live in
    ZooKeeper instead (broker/cluster/features.py overrides the two methods)."""

    def __init__(self, current: Features, save: Callable[[Features], None]) -> None:
        self.current = current
        self._save = save
        self._changing = trio.Lock()

    @classmethod
    def in_log_dir(cls, log_dir: str) -> FeatureLevels:
        """A single broker's, from its feature file (StartupError for one not ours)."""
        store = FeatureFile(log_dir)
        return cls(store.load(), store.save)

    @classmethod
    def unloaded(cls, log_dir: str) -> FeatureLevels:
        """The defaults, saved to the feature file in ``log_dir`` when changed (a context
        built without loading it)."""
        return cls(Features(), FeatureFile(log_dir).save)

    async def latest(self) -> Features:
        """The levels an update is checked against (here the broker's own)."""
        return self.current

    async def change(self, levels: Mapping[str, int], based_on: Features) -> bool:
        """Finalize ``levels`` under the next epoch, unless the levels are no longer
        ``based_on`` (another change came first: False, check the update again). OSError from
        the disk leaves them as they were."""
        async with self._changing:
            if self.current != based_on:
                return False
            new = Features(dict(levels), self.current.epoch + 1)
            await workers.run_sync(self._save, new)
            self.current = new
            return True
