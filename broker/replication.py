"""Replication: what the request paths ask of the broker's place in a cluster, chosen once when
the BrokerContext is built (``ctx.replication``), so handlers never ask which kind of broker
they run in.

- :class:`LocalReplication`: a single broker. It leads every partition at leader epoch 0, an
  append is committed once it is in the log (the high watermark follows the log end), topics
  and configs are files in the first log dir, and the group and transaction coordinators are
  started here and serve every partition of their topics.
- ``broker.cluster.replication.ZkReplication``: a broker of a ZooKeeper cluster (Kafka's
  ReplicaManager): only leaders append, acks=all waits for the ISR, topics and configs live in
  ZooKeeper and the coordinators follow the leadership of their topics' partitions.

Both run on the trio thread; the partition-level checks (:meth:`Replication.leader_epoch`,
:meth:`Replication.short_isr`) are made by callers holding the partition's lock, as a new
leader epoch starts under that lock too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Protocol

import structlog
import trio

from broker import collector, workers
from broker.admin.changes import put_and_save
from broker.context import BrokerContext, TopicExistsError, all_locks
from broker.groups import setup as setup_group_coordinator
from broker.topics import Topic
from broker.txn.coordinator import TransactionCoordinator
from protocol.api import ApiKey
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from storage import Log

logger = structlog.get_logger(__name__)

Handlers = dict[ApiKey, Any]
"""The dispatch table (broker/handlers/__init__.py's HANDLERS)."""


class Replication(Protocol):
    """What handlers, coordinators and the server ask of replication; see the module docstring."""

    durable_by_replicas: bool
    """True when the ISR's copies make a write durable: acks=all answers wait for them
    (:meth:`wait_for_hw`) and coordinators do not fsync, as Kafka; False when the one local
    disk is all there is."""

    batch_produce_answers: bool
    """Whether a produce's answer may wait in the connection's outbox to go out with the next
    pipelined produce's (a single broker's answers are ready at once; a cluster's acks=all
    answers wait for followers, and holding one back would delay the others)."""

    def handlers(self, base: Handlers) -> Handlers:
        """The dispatch table served, from the single broker's ``base``."""
        ...

    def api_versions(self, base: dict[ApiKey, tuple[int, int]]) -> dict[ApiKey, tuple[int, int]]:
        """The api versions served, from the single broker's ``base``."""
        ...

    def broker_address(self, broker_id: int, listener: str) -> tuple[str, int] | None:
        """Where clients of the listener named ``listener`` reach broker ``broker_id`` (None:
        unknown; answers then keep the broker's first listener)."""
        ...

    async def start(self, nursery: trio.Nursery, port: int) -> None:
        """Once the listener is bound (at advertised ``port``): start the coordinators and
        whatever replication runs in the background, in ``nursery``."""
        ...

    async def controlled_shutdown(self) -> None:
        """At shutdown, while the listener still serves: hand leaderships away."""
        ...

    async def leave(self) -> None:
        """After the connections closed, before the logs close (shielded by the caller)."""
        ...

    async def create_topic(self, name: str, partitions: int, overrides: Mapping[str, str]) -> Topic:
        """BrokerContext.create_topic once the name is checked. Raises TopicExistsError,
        ConfigError (and in a cluster AssignmentError)."""
        ...

    async def delete_topic(self, name: str) -> bool:
        """BrokerContext.delete_topic: False when the topic does not exist."""
        ...

    async def save_topic(self, new: Topic, old: Topic) -> None:
        """Persist ``new`` (``old`` with other config overrides) and put it in ``ctx.topics``;
        the caller holds the admin lock and applies the settings to the logs."""
        ...

    async def stored_topic_overrides(self, name: str) -> dict[str, str] | None:
        """The topic's overrides as the store holds them now, when it may differ from
        ``ctx.topics`` (None: take ``ctx.topics``'); what IncrementalAlterConfigs edits."""
        ...

    async def save_broker_configs(
        self,
        layer: Mapping[str, str],
        *,
        per_broker: bool,
        cluster_default: Mapping[str, str],
        own: Mapping[str, str],
    ) -> None:
        """Persist a dynamic broker config layer (``layer``: the one edited; ``cluster_default``
        and ``own``: both layers as they will be)."""
        ...

    def leader_epoch(self, topic: str, partition: int) -> int | None:
        """The leader epoch appends to (topic, partition) carry, None when this broker does not
        lead it (NOT_LEADER_FOR_PARTITION). Asked under the partition's lock."""
        ...

    def short_isr(self, topic: str, partition: int, min_insync: int) -> list[int] | None:
        """The ISR when it is smaller than ``min_insync`` (acks=all refused with
        NOT_ENOUGH_REPLICAS, nothing appended), else None."""
        ...

    def appended(self, topic: str, partition: int) -> None:
        """After an append to a partition this broker leads: advance its high watermark when
        the ISR allows."""
        ...

    async def wait_for_hw(
        self, topic: str, partition: int, last_offset: int, deadline: float
    ) -> ErrorCode:
        """acks=all: NONE once the high watermark passes ``last_offset``, else the error the
        client gets (NOT_LEADER_FOR_PARTITION, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        REQUEST_TIMED_OUT at ``deadline``, trio's clock)."""
        ...

    async def offsets_committed(self, last_offset: int) -> ErrorCode | None:
        """After the group coordinator appended to ``__consumer_offsets`` up to
        ``last_offset``: None once the write counts, else the error its client gets."""
        ...

    def follower_id(self, replica_id: int) -> int:
        """The replica id of a Fetch or ListOffsets as this broker reads it: -1 for a consumer,
        a broker id for a follower, -2 for a debugging reader."""
        ...

    def fetch_check(
        self,
        topic: str,
        partition: int,
        leader_epoch: int,
        fetch_offset: int,
        replica_id: int,
        log: Log | None,
    ) -> tuple[ErrorCode, int | None]:
        """Before reading a partition for a Fetch: (error, the offset reads stop at; None: the
        caller's default)."""
        ...

    def offsets_check(
        self, topic: str, partition: int, replica_id: int, leader_epoch: int
    ) -> tuple[ErrorCode, bool, bool]:
        """Before a ListOffsets lookup of an existing topic: (error, whether answers stop at
        the high watermark, whether LATEST is the log end offset rather than the high
        watermark)."""
        ...

    def replica_epoch(self, topic: str, partition: int) -> int:
        """The leader epoch a ListOffsets answer carries (-1: no replica here)."""
        ...


class LocalReplication:
    """A single broker: see the module docstring. Resources: none of its own; the
    coordinators it starts run in the nursery given to :meth:`start`."""

    durable_by_replicas = False
    batch_produce_answers = True

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def handlers(self, base: Handlers) -> Handlers:
        return base

    def api_versions(self, base: dict[ApiKey, tuple[int, int]]) -> dict[ApiKey, tuple[int, int]]:
        return base

    def broker_address(self, broker_id: int, listener: str) -> tuple[str, int] | None:
        return None  # (this broker's own listeners are the SecurityGate's)

    async def start(self, nursery: trio.Nursery, port: int) -> None:
        ctx = self.ctx
        ctx.coordinator = await setup_group_coordinator(ctx, nursery)
        txn_coordinator = TransactionCoordinator(ctx)
        await txn_coordinator.start(nursery)
        ctx.txn_coordinator = txn_coordinator

    async def controlled_shutdown(self) -> None:
        return None

    async def leave(self) -> None:
        return None

    async def create_topic(self, name: str, partitions: int, overrides: Mapping[str, str]) -> Topic:
        """Persist the registry, create every partition's log, then register the topic, so
        Metadata lists it only once every partition can be produced to and read (as Kafka's
        brokers learn of a topic after its leaders created their logs). The registry file is
        written first, so a crash before the logs exist is repaired at the next start-up
        (missing logs are created then); storage errors propagate."""
        ctx = self.ctx
        async with ctx.admin_lock:
            if name in ctx.topics:
                raise TopicExistsError(f"topic {name!r} already exists")
            topic = ctx.topics.make_topic(name, partitions, overrides)
            try:
                await workers.run_sync(ctx.topics.save, ctx.topics.snapshot(topic))
                for p in range(partitions):
                    async with ctx.partition(name, p).lock:
                        log = await workers.run_sync(
                            ctx.log_manager.create_log, name, p, topic.log_config
                        )
                        await workers.run_sync(log.assign_topic_id, topic.topic_id)
            except BaseException:
                with trio.CancelScope(shield=True):
                    await workers.run_sync(ctx.topics.save, ctx.topics.snapshot())
                raise
            ctx.topics.put(topic)
        logger.info(
            "created topic", topic=name, partitions=partitions, configs=dict(topic.overrides)
        )
        return topic

    async def delete_topic(self, name: str) -> bool:
        """Appends and reads on its partitions are excluded while the logs go away; waiting
        fetches are woken."""
        ctx = self.ctx
        async with ctx.admin_lock:
            topic = ctx.topics.get(name)
            if topic is None:
                return False
            ctx.topics.remove(name)
            try:
                await workers.run_sync(ctx.topics.save, ctx.topics.snapshot())
                registry_saved = True
            except OSError as exc:
                # A full disk: deleting the logs first makes the room the registry needs. A crash
                # in between brings the topic back, empty, at the next start.
                registry_saved = False
                logger.warning(
                    "cannot rewrite the topic registry; deleting the topic's logs first to make room",
                    topic=name,
                    error=repr(exc),
                )
            states = [ctx.partition(name, p) for p in range(topic.partitions)]
            async with all_locks(states):
                await workers.run_sync(ctx.log_manager.delete_topic, name)
            collector.thaw()  # the logs' objects are garbage now, perhaps frozen
            for p, state in enumerate(states):
                state.notify()
                ctx.forget_partition(name, p)
            if not registry_saved:
                await workers.run_sync(ctx.topics.save, ctx.topics.snapshot())
        logger.info("deleted topic", topic=name, partitions=topic.partitions)
        return True

    async def save_topic(self, new: Topic, old: Topic) -> None:
        await put_and_save(self.ctx, new, old)

    async def stored_topic_overrides(self, name: str) -> dict[str, str] | None:
        return None  # the registry file is written only through ctx.topics

    async def save_broker_configs(
        self,
        layer: Mapping[str, str],
        *,
        per_broker: bool,
        cluster_default: Mapping[str, str],
        own: Mapping[str, str],
    ) -> None:
        dynamic = self.ctx.dynamic_configs
        await workers.run_sync(dynamic.save, dynamic.snapshot(cluster_default, own))

    def leader_epoch(self, topic: str, partition: int) -> int | None:
        return 0

    def short_isr(self, topic: str, partition: int, min_insync: int) -> list[int] | None:
        return None  # min.insync.replicas counts replicas; a single broker has no others

    def appended(self, topic: str, partition: int) -> None:
        return None  # the log moves its high watermark to the log end itself

    async def wait_for_hw(
        self, topic: str, partition: int, last_offset: int, deadline: float
    ) -> ErrorCode:
        return ErrorCode.NONE

    async def offsets_committed(self, last_offset: int) -> ErrorCode | None:
        return None

    def follower_id(self, replica_id: int) -> int:
        return -1  # no followers: every reader is a consumer

    def fetch_check(
        self,
        topic: str,
        partition: int,
        leader_epoch: int,
        fetch_offset: int,
        replica_id: int,
        log: Log | None,
    ) -> tuple[ErrorCode, int | None]:
        return ErrorCode.NONE, None

    def offsets_check(
        self, topic: str, partition: int, replica_id: int, leader_epoch: int
    ) -> tuple[ErrorCode, bool, bool]:
        return ErrorCode.NONE, False, False

    def replica_epoch(self, topic: str, partition: int) -> int:
        return 0


__all__ = ["Replication", "LocalReplication", "Handlers"]
