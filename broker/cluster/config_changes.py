"""Config changes in a cluster, made as Kafka's ZooKeeper mode makes them (AdminZkClient's
changeTopicConfig and changeBrokerConfig) and followed as its brokers follow them (ZkConfigManager
and ZkNodeChangeNotificationListener).

A change writes the entity's whole config, ``{"version":1,"config":{..}}``, to
``/config/topics/<t>``, ``/config/brokers/<default>`` (the cluster-wide dynamic broker configs)
or ``/config/brokers/<id>`` (one broker's), then announces it with a sequential
``/config/changes/config_change_<seq>`` node naming the entity (``{"version":2,
"entity_path":"topics/<t>"}``). The broker that made the change applies it at once as well.

Every broker watches ``/config/changes``. For the notifications newer than the last it handled,
it reads each entity's config again and applies it (broker/admin/changes.py: a topic's running
logs; the dynamic broker layers, then every topic's effective config), so ZooKeeper's latest
config wins whatever order the notifications come in. At start it handles every notification
still there: the configs were read before the logs loaded, these cover what changed since.
Each broker deletes notifications older than 15 minutes (Kafka's changeExpirationMs).
Notifications for users and clients reload that entity's client quotas (broker/quotas/);
those for entities chronolog has no configs for (ips) are ignored.

On the controller's broker a topic's new config, or new dynamic broker configs, also reach the
controller: ``unclean.leader.election.enable`` turned on elects leaders for offline partitions
(Kafka's enableTopicUncleanLeaderElection).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING

import structlog
import trio
from kazoo.exceptions import KazooException

from broker.admin.changes import adopt_dynamic_broker_configs, adopt_topic_overrides
from broker.cluster.events import ConfigsChanged
from broker.cluster.zk import (
    CONFIG_BROKERS,
    CONFIG_CHANGE_PREFIX,
    CONFIG_CHANGES,
    CONFIG_TOPICS,
    DEFAULT_BROKER_ENTITY,
    WatchFollower,
    ZkDataError,
    config_change_json,
    notification_sequence,
    parse_config_change,
    parse_entity_config,
    topic_config_json,
)
from broker.config import ConfigError
from broker.errors import ClusterStateError

if TYPE_CHECKING:
    from broker.cluster import Cluster

logger = structlog.get_logger(__name__)

ROOTS = {"topics": CONFIG_TOPICS, "brokers": CONFIG_BROKERS}


class ConfigChanges:
    """Writes this broker's config changes to ZooKeeper and follows everyone's; see the module
    docstring. Trio thread only."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.zk = cluster.zk
        self.last_handled = -1  # the sequence number of the newest notification handled
        self._follower = WatchFollower(self._handle_new, "config changes")

    # -- writes and reads --------------------------------------------------------------------
    async def save_topic_config(self, topic: str, overrides: Mapping[str, str]) -> None:
        """Make ``overrides`` the topic's configs in ZooKeeper and tell every broker. Raises
        ClusterStateError."""
        await self._save("topics", topic, overrides)

    async def save_broker_configs(self, layer: Mapping[str, str], *, per_broker: bool) -> None:
        """Make ``layer`` the cluster-wide dynamic broker configs, or with ``per_broker`` this
        broker's own, in ZooKeeper and tell every broker. Raises ClusterStateError."""
        entity = str(self.cluster.broker_id) if per_broker else DEFAULT_BROKER_ENTITY
        await self._save("brokers", entity, layer)

    async def _save(self, kind: str, name: str, config: Mapping[str, str]) -> None:
        path = f"{ROOTS[kind]}/{name}"
        try:
            await self.zk.create_or_set(path, topic_config_json(config))
            await self.zk.create(
                f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}",
                config_change_json(f"{kind}/{name}"),
                sequence=True,
            )
        except KazooException as exc:
            logger.error(
                "writing a config change to ZooKeeper failed",
                path=path,
                error=repr(exc),
                action="check ZooKeeper is reachable, then retry the change",
            )
            raise ClusterStateError(f"writing {path} to ZooKeeper failed ({exc!r})") from exc

    async def read_topic_config(self, topic: str) -> dict[str, str] | None:
        """The topic's overrides as ZooKeeper holds them now (None: unreadable). Raises
        ClusterStateError."""
        try:
            return await self._read("topics", topic)
        except KazooException as exc:
            raise ClusterStateError(f"reading the configs of topic {topic!r} failed") from exc

    async def read_broker_configs(self) -> tuple[dict[str, str], dict[str, str]]:
        """(cluster-wide default, this broker's own) dynamic broker configs in ZooKeeper."""
        default = await self._read("brokers", DEFAULT_BROKER_ENTITY)
        own = await self._read("brokers", str(self.cluster.broker_id))
        return default or {}, own or {}

    async def _read(self, kind: str, name: str) -> dict[str, str] | None:
        """An entity's config ({} when it has none), None when the node is unreadable
        (logged)."""
        path = f"{ROOTS[kind]}/{name}"
        found = await self.zk.get_or_none(path)
        if found is None:
            return {}
        try:
            return parse_entity_config(path, found[0])
        except ZkDataError as exc:
            logger.error("ignoring an unreadable config in ZooKeeper", error=str(exc))
            return None

    # -- following the notifications ---------------------------------------------------------
    def start(self, nursery: trio.Nursery) -> None:
        self._follower.start(nursery)

    def wake(self) -> None:
        """Look at /config/changes again (its watch fired, or a new ZooKeeper session)."""
        self._follower.wake()

    async def _handle_new(self) -> None:
        nodes = await self.zk.children(CONFIG_CHANGES, watch=self.wake)
        entities: list[tuple[str, str]] = []
        newest = self.last_handled
        for node in nodes:
            sequence = notification_sequence(node, CONFIG_CHANGE_PREFIX)
            if sequence is None or sequence <= self.last_handled:
                continue
            newest = max(newest, sequence)
            path = f"{CONFIG_CHANGES}/{node}"
            found = await self.zk.get_or_none(path)
            if found is None:
                continue  # expired and deleted meanwhile
            try:
                entity = parse_config_change(path, found[0])
            except ZkDataError as exc:
                logger.warning("ignoring a config change notification", error=str(exc))
                continue
            if entity not in entities:
                entities.append(entity)
        for kind, name in entities:
            try:
                await self._apply(kind, name)
            except KazooException:
                raise  # handled again from the start, after a pause
            except Exception:  # a bug must not stop this broker following config changes
                logger.exception(
                    "applying a config change failed",
                    entity=f"{kind}/{name}",
                    action="this is a broker bug; report it with this log line",
                )
        self.last_handled = newest
        await self.zk.purge_notifications(CONFIG_CHANGES, nodes)

    async def _apply(self, kind: str, name: str) -> None:
        ctx = self.cluster.ctx
        if kind in ("users", "clients"):  # client quotas (broker/quotas/)
            await ctx.quotas.reload(f"{kind}/{name}")
            return
        if kind not in ROOTS:
            logger.info("config change ignored: chronolog has no such configs", entity=kind)
            return
        # Read by the adopt functions under the admin lock: a change this broker makes
        # meanwhile (a request, under that lock) is not undone by an older read.
        read = partial(self._read, kind, name)
        try:
            if kind == "topics":
                await adopt_topic_overrides(ctx, name, read)
            elif name == DEFAULT_BROKER_ENTITY:
                await adopt_dynamic_broker_configs(ctx, read, per_broker=False)
            elif name == str(self.cluster.broker_id):
                await adopt_dynamic_broker_configs(ctx, read, per_broker=True)
            else:
                return  # another broker's own configs
        except ConfigError as exc:
            logger.error(
                "cannot apply configs changed in ZooKeeper; keeping the current ones",
                entity=f"{kind}/{name}",
                error=str(exc),
                action="fix them with kafka-configs.sh or chronolog configs",
            )
            return
        controller = self.cluster.controller
        if controller is not None:
            controller.post(ConfigsChanged(name if kind == "topics" else None))
