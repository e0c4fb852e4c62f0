"""Where client quotas are kept, as Kafka keeps them.

Every entity's quota configs are a map of Kafka config names to their values as strings, under
the entity's path (broker/quotas/manager.py's entity_path: ``users/<u>``,
``users/<u>/clients/<c>``, ``clients/<c>``, names sanitized, ``<default>`` for a default).

- A single broker keeps them all in ``<first log dir>/chronolog-client-quotas.json``::

      {"version": 1, "entities": {"users/alice": {"producer_byte_rate": "1048576"},
                                  "clients/<default>": {"consumer_byte_rate": "2097152"}}}

  replaced whole on every change through storage.durable.write_atomically (tmp file, fsync,
  rename, directory fsync), so a crash leaves the old or the new file. An entity whose last
  config is removed is left out.
- A broker in a cluster keeps them in ZooKeeper as Kafka's ZooKeeper mode does (AdminZkClient's
  changeClientIdConfig and changeUserOrUserClientIdConfig): ``/config/<path>`` holds
  ``{"version":1,"config":{...}}`` and a ``/config/changes/config_change_<seq>`` notification
  names ``<path>``; every broker re-reads the entity on it (broker/cluster/config_changes.py).
  Kafka's other user configs in the same node (SCRAM credentials) are kept as they are.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import structlog
import trio

from broker.errors import StartupError
from broker.quotas.manager import Entity, entity_path, parse_entity_path
from storage.durable import write_atomically

if TYPE_CHECKING:
    from broker.cluster.zk import ZooKeeper

logger = structlog.get_logger(__name__)

QUOTA_FILE = "chronolog-client-quotas.json"
FORMAT_VERSION = 1


class FileQuotaStore:
    """A single broker's quota file (see the module docstring). ``load`` and ``save`` do file
    I/O: call them in a worker thread."""

    def __init__(self, log_dir: str) -> None:
        self.path = os.path.join(log_dir, QUOTA_FILE)

    def load(self) -> dict[Entity, dict[str, str]]:
        """Every entity's configs; {} without a file. Raises StartupError for a file that is
        not one of ours, naming it."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return {}
        try:
            doc = json.loads(raw)
            if doc.get("version") != FORMAT_VERSION:
                raise ValueError(f"version {doc.get('version')!r}, expected {FORMAT_VERSION}")
            result: dict[Entity, dict[str, str]] = {}
            for path, config in doc["entities"].items():
                entity = parse_entity_path(path)
                if entity is None or not isinstance(config, dict):
                    raise ValueError(f"{path!r} is not a user or client-id quota entity")
                result[entity] = {str(k): str(v) for k, v in config.items()}
            return result
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StartupError(
                f"client quota file {self.path} is unreadable ({exc}); fix or remove it "
                "(removing it drops every client quota)"
            ) from None

    def save(self, entities: dict[Entity, dict[str, str]]) -> None:
        """Replace the file with ``entities`` (fsynced before it returns)."""
        doc = {
            "version": FORMAT_VERSION,
            "entities": {
                entity_path(e): dict(c) for e, c in sorted(entities.items(), key=_order) if c
            },
        }
        write_atomically(self.path, json.dumps(doc, indent=1, sort_keys=False).encode() + b"\n")


def _order(item: tuple[Entity, dict[str, str]]) -> str:
    return entity_path(item[0])


class ZkQuotaStore:
    """A cluster's quota znodes (see the module docstring); trio thread, ZooKeeper calls in
    worker threads through the cluster's ZkClient. Raises kazoo's exceptions."""

    def __init__(self, zk: ZooKeeper) -> None:
        self.zk = zk

    async def load(self) -> dict[Entity, dict[str, str]]:
        """Every user and client-id entity with quota configs in ZooKeeper."""
        found: dict[Entity, dict[str, str]] = {}
        for root in ("users", "clients"):
            for name in await self._children(f"/config/{root}"):
                await self._read_into(found, f"{root}/{name}")
                if root == "users":
                    for client in await self._children(f"/config/users/{name}/clients"):
                        await self._read_into(found, f"users/{name}/clients/{client}")
        return found

    async def read(self, path: str) -> dict[str, str]:
        """One entity's whole config (quotas and any other user configs), {} when absent."""
        from broker.cluster.zk import ZkDataError, parse_entity_config

        got = await self.zk.get_or_none(f"/config/{path}")
        if got is None:
            return {}
        try:
            return parse_entity_config(f"/config/{path}", got[0])
        except ZkDataError as exc:
            logger.error("ignoring an unreadable client quota config in ZooKeeper", error=str(exc))
            return {}

    async def save(self, path: str, config: dict[str, str]) -> None:
        """Write the entity's whole config and announce it to every broker."""
        from broker.cluster.zk import (
            CONFIG_CHANGE_PREFIX,
            CONFIG_CHANGES,
            config_change_json,
            topic_config_json,
        )

        await self.zk.create_or_set(f"/config/{path}", topic_config_json(config))
        await self.zk.create(
            f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}", config_change_json(path), sequence=True
        )

    async def _children(self, path: str) -> list[str]:
        return await self.zk.children(path)  # [] when the node does not exist

    async def _read_into(self, found: dict[Entity, dict[str, str]], path: str) -> None:
        entity = parse_entity_path(path)
        if entity is not None:
            config = await self.read(path)
            if config:
                found[entity] = config
        await trio.lowlevel.checkpoint()
