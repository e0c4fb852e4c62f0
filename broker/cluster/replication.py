"""ZkReplication: broker/replication.py's Replication for a broker of a ZooKeeper cluster, over
the Cluster's replica manager, metadata and config changes (Kafka's ReplicaManager and
ZkAdminManager as the request paths see them). Trio thread only; no resources of its own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import structlog
import trio

from broker.cluster.handlers import cluster_handlers
from broker.errors import STORAGE_FAILURES
from broker.replication import Handlers
from protocol import CLUSTER_VERSIONS
from protocol.api import ApiKey
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.cluster import Cluster
    from broker.context import BrokerContext
    from broker.topics import Topic
    from storage import Log

logger = structlog.get_logger(__name__)

LEAVE_TIMEOUT_S = 5.0  # closing the ZooKeeper session at shutdown, at most


class ZkReplication:
    """See the module docstring; built by ``Cluster.attach`` as ``ctx.replication``."""

    durable_by_replicas = True
    batch_produce_answers = False

    def __init__(self, cluster: Cluster, ctx: BrokerContext) -> None:
        self.cluster = cluster
        self.ctx = ctx

    def handlers(self, base: Handlers) -> Handlers:
        return cluster_handlers(base)

    def api_versions(self, base: dict[ApiKey, tuple[int, int]]) -> dict[ApiKey, tuple[int, int]]:
        return {**base, **CLUSTER_VERSIONS}

    def broker_address(self, broker_id: int, listener: str) -> tuple[str, int] | None:
        """From the controller's UpdateMetadata, which carries every broker's listeners."""
        info = self.cluster.metadata.brokers.get(broker_id)
        return None if info is None else info.address(listener)

    async def start(self, nursery: trio.Nursery, port: int) -> None:
        """Register in ZooKeeper and join the controller election; the coordinators start
        there too and load the partitions this broker comes to lead."""
        await self.cluster.start(nursery, port)

    async def controlled_shutdown(self) -> None:
        await self.cluster.controlled_shutdown()

    async def leave(self) -> None:
        """Checkpoint the high watermarks and close the ZooKeeper session (this broker's
        registration goes at once, so the controller moves its leaderships without waiting for
        the session timeout)."""
        try:
            await self.cluster.replicas.checkpoint_high_watermarks()
        except STORAGE_FAILURES as exc:
            logger.warning("could not checkpoint high watermarks at shutdown", error=repr(exc))
        with trio.move_on_after(LEAVE_TIMEOUT_S):
            await self.cluster.stop()

    async def create_topic(self, name: str, partitions: int, overrides: Mapping[str, str]) -> Topic:
        return await self.cluster.create_topic(name, partitions, overrides)

    async def delete_topic(self, name: str) -> bool:
        return await self.cluster.delete_topic(name)

    async def save_topic(self, new: Topic, old: Topic) -> None:
        """Written to ZooKeeper and announced to every broker (ClusterStateError when it
        cannot be); ``ctx.topics`` follows only once it is stored."""
        await self.cluster.config_changes.save_topic_config(new.name, new.overrides)
        self.ctx.topics.put(new)

    async def stored_topic_overrides(self, name: str) -> dict[str, str] | None:
        """What ZooKeeper holds, as Kafka's ZkAdminManager edits it."""
        return await self.cluster.config_changes.read_topic_config(name)

    async def save_broker_configs(
        self,
        layer: Mapping[str, str],
        *,
        per_broker: bool,
        cluster_default: Mapping[str, str],
        own: Mapping[str, str],
    ) -> None:
        await self.cluster.config_changes.save_broker_configs(layer, per_broker=per_broker)

    def leader_epoch(self, topic: str, partition: int) -> int | None:
        replica = self.cluster.replicas.leader(topic, partition)
        return None if replica is None else replica.leader_epoch

    def short_isr(self, topic: str, partition: int, min_insync: int) -> list[int] | None:
        replica = self.cluster.replicas.leader(topic, partition)
        if replica is None or len(replica.isr) >= min_insync:
            return None
        return list(replica.isr)

    def appended(self, topic: str, partition: int) -> None:
        replicas = self.cluster.replicas
        replica = replicas.leader(topic, partition)
        if replica is not None:
            replicas.maybe_advance_hw(replica)

    async def wait_for_hw(
        self, topic: str, partition: int, last_offset: int, deadline: float
    ) -> ErrorCode:
        return await self.cluster.replicas.wait_for_hw(topic, partition, last_offset, deadline)

    async def offsets_committed(self, last_offset: int) -> ErrorCode | None:
        return await self.cluster.groups.committed(last_offset)

    def follower_id(self, replica_id: int) -> int:
        return replica_id

    def fetch_check(
        self,
        topic: str,
        partition: int,
        leader_epoch: int,
        fetch_offset: int,
        replica_id: int,
        log: Log | None,
    ) -> tuple[ErrorCode, int | None]:
        """Followers (replica_id >= 0) fetch from the leader at the epoch they know and report
        their log end offset (the fetch offset); consumers read from the leader up to the high
        watermark; a debugging reader (-2) reads any replica up to its high watermark."""
        replicas = self.cluster.replicas
        if replica_id == -2:
            if (topic, partition) not in replicas.replicas or log is None:
                return ErrorCode.NOT_LEADER_FOR_PARTITION, None
            return ErrorCode.NONE, log.high_watermark
        replica = replicas.leader(topic, partition)
        error = replicas.check_epoch(replica, leader_epoch)
        if error != ErrorCode.NONE or log is None:
            return error, None
        assert replica is not None  # check_epoch refuses a missing one
        if replica_id >= 0:
            return replicas.follower_fetch(replica, replica_id, fetch_offset), None
        return ErrorCode.NONE, log.high_watermark

    def offsets_check(
        self, topic: str, partition: int, replica_id: int, leader_epoch: int
    ) -> tuple[ErrorCode, bool, bool]:
        """Consumers ask the leader and see what is committed; a follower (its replica id)
        asks the leader for its log end; a debugging reader (-2) any replica."""
        replicas = self.cluster.replicas
        if replica_id == -2:
            replica = replicas.replicas.get((topic, partition))
            error = ErrorCode.NONE if replica is not None else ErrorCode.NOT_LEADER_FOR_PARTITION
        else:
            error = replicas.check_epoch(replicas.leader(topic, partition), leader_epoch)
        return error, replica_id == -1, replica_id != -1

    def replica_epoch(self, topic: str, partition: int) -> int:
        replica = self.cluster.replicas.replicas.get((topic, partition))
        return replica.leader_epoch if replica is not None else -1


__all__ = ["ZkReplication"]
