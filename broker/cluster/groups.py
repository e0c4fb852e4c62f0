"""Consumer groups in a cluster: ``__consumer_offsets`` is a replicated topic
(offsets.topic.replication.factor) and the group coordinator runs on the leader of its partition,
moving with it (Kafka's GroupCoordinator.onElection / onResignation).

- The topic is created through ZooKeeper by the first FindCoordinator that finds it missing
  (with the coordinator's configs: compacted, no retention); until its leader is elected,
  FindCoordinator answers GROUP_COORDINATOR_NOT_AVAILABLE, which clients retry.
- FindCoordinator on any broker names the partition's current leader.
- When this broker becomes the partition's leader, a fresh GroupCoordinator (broker/groups/)
  replays the partition's log and serves; when it stops leading, that coordinator is shut down
  (parked joins answer NOT_COORDINATOR_FOR_GROUP) and its timers are cancelled.
- An offset commit is acknowledged once the ISR has it (the high watermark passed it), like an
  acks=all produce: a new leader's coordinator replays every commit a client was told succeeded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog
import trio
from kazoo.exceptions import KazooException, NodeExistsError

from broker.cluster.assignment import AssignmentError, assign_replicas
from broker.cluster.txn import TXN_KEY_TYPE
from broker.groups.coordinator import (
    OFFSETS_PARTITION,
    OFFSETS_TOPIC,
    OFFSETS_TOPIC_CONFIGS,
    GroupCoordinator,
)
from broker.groups.handlers import handle_find_coordinator, handle_list_groups
from protocol.api import Request
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.cluster import Cluster

logger = structlog.get_logger(__name__)

COMMIT_TIMEOUT_S = 5.0  # Kafka's offsets.commit.timeout.ms

GROUP_KEY_TYPE = 0  # FindCoordinator's key type of a consumer group (1: a transactional id)


class CoordinatorPlacement:
    """Starts and stops this broker's group coordinator as its offsets partition's leadership
    comes and goes; trio thread only."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None

    def start(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery

    def role_changed(self, topic: str, partition: int, leading: bool) -> None:
        """Called by the replica manager after every LeaderAndIsr / StopReplica."""
        if topic != OFFSETS_TOPIC or partition != OFFSETS_PARTITION:
            return
        if not leading:
            self._resign()
        elif self._scope is None and self._nursery is not None:
            self._scope = trio.CancelScope()
            self._nursery.start_soon(self._run, self._scope)

    def _resign(self) -> None:
        ctx = self.cluster.ctx
        coordinator, ctx.coordinator = ctx.coordinator, None
        if coordinator is not None:
            coordinator.shutdown()
            logger.info("group coordinator moved away with the offsets partition's leadership")
        if self._scope is not None:
            self._scope.cancel()
            self._scope = None

    async def _run(self, scope: trio.CancelScope) -> None:
        """Replay the offsets and serve until resigned (``scope`` cancelled)."""
        ctx = self.cluster.ctx
        with scope:
            coordinator = GroupCoordinator(ctx)
            cfg = ctx.config
            coordinator.node = (cfg.broker_id, cfg.advertised_host, self.cluster.me.port)
            try:
                async with trio.open_nursery() as nursery:
                    await coordinator.start(nursery)
                    ctx.coordinator = coordinator
                    logger.info("group coordinator elected with the offsets partition")
            except Exception:  # e.g. the log went away as leadership moved during the replay
                logger.exception(
                    "group coordinator stopped; clients find it again through FindCoordinator",
                    topic=OFFSETS_TOPIC,
                    partition=OFFSETS_PARTITION,
                )
                if ctx.coordinator is coordinator:
                    ctx.coordinator = None
                coordinator.shutdown()
                if self._scope is scope:
                    self._scope = None

    async def list_groups(self, request: Request) -> dict[str, Any]:
        """ListGroups in a cluster. Every group lives with the offsets partition's leader, which
        answers as a single broker does (GROUP_LOAD_IN_PROGRESS while it replays the
        partition); every other broker answers no groups and no error, as a Kafka broker that
        leads no ``__consumer_offsets`` partition does (clients ask every broker and merge)."""
        ctx = self.cluster.ctx
        if ctx.coordinator is not None and ctx.coordinator.active:
            return await handle_list_groups(ctx, request)
        if self._scope is not None:  # leading, the coordinator still replaying
            return {"error_code": int(ErrorCode.GROUP_LOAD_IN_PROGRESS), "groups": []}
        return {"error_code": int(ErrorCode.NONE), "groups": []}

    async def find_coordinator(self, request: Request) -> dict[str, Any]:
        """FindCoordinator v0-v6 in a cluster: for group keys, the offsets partition's leader
        (v4+ answer per key); transactional ids through broker/cluster/txn.py; other key types
        as a single broker answers them."""
        body = request.body
        version = request.header.api_version
        if body.key_type == TXN_KEY_TYPE:
            return await self.cluster.txns.find_coordinator(request)
        if body.key_type != GROUP_KEY_TYPE:
            return await handle_find_coordinator(self.cluster.ctx, request)
        node = await self._leader_node()
        error = ErrorCode.NONE if node is not None else ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE
        message = None if node is not None else "the group coordinator is moving or starting; retry"
        node_id, host, port = node if node is not None else (-1, "", -1)
        if version >= 4:
            return {
                "coordinators": [
                    {
                        "key": key,
                        "node_id": node_id,
                        "host": host,
                        "port": port,
                        "error_code": int(error),
                        "error_message": message,
                    }
                    for key in body.coordinator_keys
                ]
            }
        return {
            "error_code": int(error),
            "error_message": message if node is None else "NONE",
            "node_id": node_id,
            "host": host,
            "port": port,
        }

    async def _leader_node(self) -> tuple[int, str, int] | None:
        cluster = self.cluster
        info = cluster.metadata.partition(OFFSETS_TOPIC, OFFSETS_PARTITION)
        if info is None:
            await self._create_offsets_topic()
            return None
        broker = cluster.metadata.brokers.get(info.leader)
        if broker is None:
            return None
        return broker.broker_id, broker.host, broker.port

    async def _create_offsets_topic(self) -> None:
        cluster = self.cluster
        factor = cluster.config.offsets_topic_replication_factor
        brokers = {b: info.rack for b, info in cluster.metadata.brokers.items()}
        try:
            assignment = assign_replicas(brokers, OFFSETS_PARTITION + 1, factor)
        except AssignmentError as exc:
            logger.error(
                "cannot create the offsets topic yet",
                topic=OFFSETS_TOPIC,
                error=str(exc),
                action="start more brokers or lower offsets.topic.replication.factor",
            )
            return
        try:
            await cluster.write_topic(OFFSETS_TOPIC, assignment, dict(OFFSETS_TOPIC_CONFIGS))
            logger.info("created the offsets topic", topic=OFFSETS_TOPIC, replication_factor=factor)
        except NodeExistsError:
            pass
        except KazooException as exc:
            logger.error("creating the offsets topic failed", error=repr(exc))

    async def committed(self, last_offset: int) -> ErrorCode | None:
        """After the coordinator appended a commit up to ``last_offset``: None once the ISR has
        it, else the error the client gets (Kafka's mapping in GroupMetadataManager)."""
        error = await self.cluster.replicas.committed(
            OFFSETS_TOPIC, OFFSETS_PARTITION, last_offset, COMMIT_TIMEOUT_S
        )
        if error == ErrorCode.NONE:
            return None
        logger.warning(
            "offset commit not acknowledged by the ISR",
            topic=OFFSETS_TOPIC,
            partition=OFFSETS_PARTITION,
            error=error.name,
        )
        if error == ErrorCode.NOT_LEADER_FOR_PARTITION:
            return ErrorCode.NOT_COORDINATOR_FOR_GROUP
        return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE
