"""This broker's replicas (Kafka's ReplicaManager and Partition): leader or follower per
partition, as the controller's LeaderAndIsr says.

A leader:
- stamps its leader epoch into produced batches and started that epoch at its log end offset
  in the leader-epoch-checkpoint when it became leader (KIP-101);
- learns each follower's log end offset from the follower's Fetch (its fetch offset) and moves
  the high watermark to the smallest log end offset of the ISR (plus members being added);
- adds a follower to the ISR once it has caught up to the high watermark and to the start of
  the current epoch, and removes ISR followers that have not caught up with its log end for
  replica.lag.time.max.ms; each change is written to ZooKeeper conditionally on the partition
  epoch it knows (a concurrent controller change wins and arrives as LeaderAndIsr) and reported
  to the controller through /isr_change_notification;
- wakes acks=all produce requests waiting for the high watermark (:meth:`wait_for_hw`).

A follower fetches from its leader (broker/cluster/fetcher.py), after truncating its log where
it parts from the leader's (OffsetForLeaderEpoch).

High watermarks are written to each log dir's ``replication-offset-checkpoint`` (Kafka's
format) every replica.high.watermark.checkpoint.interval.ms and at shutdown, and read at start.

Concurrency: trio thread only. Log calls go through the partition lock like every handler's
(broker/context.py); the high watermark is an in-memory attribute set on the trio thread.
LeaderAndIsr and StopReplica requests are applied one at a time (``state_lock``).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
import trio
from kazoo.exceptions import BadVersionError, KazooException

from broker import collector, workers
from broker.cluster.zk import ISR_CHANGES, ISR_CHANGE_PREFIX, LeaderIsr, isr_change_json
from broker.cluster.zk import partition_state_path
from broker.errors import STORAGE_FAILURES
from protocol.errors import ErrorCode
from storage import checkpoint
from storage.checkpoint import CheckpointError

if TYPE_CHECKING:
    from broker.cluster import Cluster
    from storage import Log

logger = structlog.get_logger(__name__)

# What a periodic replica task raises and retries: its log dir, or ZooKeeper.
_TASK_FAILURES: tuple[type[Exception], ...] = (*STORAGE_FAILURES, KazooException)

HW_CHECKPOINT = "replication-offset-checkpoint"
Key = tuple[str, int]


@dataclass(eq=False)
class FollowerState:
    """What a leader knows of one follower (Kafka's Replica on the leader)."""

    leo: int = -1
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_leo: int = -1


@dataclass(eq=False)
class Replica:
    """A partition this broker holds a replica of, as the last LeaderAndIsr said."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    zk_version: int
    controller_epoch: int
    is_leader: bool
    epoch_start: int = 0  # the leader's log end offset when its epoch began
    followers: dict[int, FollowerState] = field(default_factory=dict)
    pending_isr: tuple[int, ...] | None = None  # an ISR change being written to ZooKeeper
    changed: trio.Event = field(default_factory=trio.Event)

    def wake(self) -> None:
        """Wake everything waiting for this replica's high watermark or role to change."""
        self.changed.set()
        self.changed = trio.Event()

    @property
    def maximal_isr(self) -> set[int]:
        return set(self.isr) | set(self.pending_isr or ())


class ReplicaManager:
    """See the module docstring."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.ctx = cluster.ctx
        self.broker_id = cluster.broker_id
        self.replicas: dict[Key, Replica] = {}
        self.state_lock = trio.Lock()
        self._checkpointed: dict[Key, int] = {}
        self._nursery: trio.Nursery | None = None

    # -- start-up and background -------------------------------------------------------------
    def load_checkpoints(self) -> None:
        """Read every log dir's high watermark checkpoint (blocking: a worker thread)."""
        for log_dir in self.ctx.config.log_dirs:
            path = os.path.join(log_dir, HW_CHECKPOINT)
            try:
                self._checkpointed.update(checkpoint.read_checkpoint(path))
            except CheckpointError as exc:
                logger.warning(
                    "high watermark checkpoint unreadable; followers truncate by leader epoch",
                    path=path,
                    error=str(exc),
                )

    def start(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        config = self.ctx.config
        nursery.start_soon(self._every, config.replica_lag_time_max_ms / 2, self.shrink_isrs)
        nursery.start_soon(
            self._every,
            config.replica_high_watermark_checkpoint_interval_ms,
            self.checkpoint_high_watermarks,
        )

    async def _every(self, interval_ms: float, job: Callable[[], Awaitable[None]]) -> None:
        while True:
            await trio.sleep(interval_ms / 1000)
            try:
                await job()
            except _TASK_FAILURES as exc:
                logger.warning("replica task failed; retrying", task=job.__name__, error=repr(exc))
            except Exception:  # a bug in one pass must not stop the broker
                logger.exception(
                    "replica task failed; retrying",
                    task=job.__name__,
                    action="this is a broker bug; report it with this log line",
                )

    async def checkpoint_high_watermarks(self) -> None:
        """Write replication-offset-checkpoint in every log dir (replicated logs only)."""
        manager = self.ctx.log_manager
        per_dir: dict[str, dict[Key, int]] = {d: {} for d in manager.log_dirs}
        for key in list(self.replicas):
            log = manager.get_log(*key)
            log_dir = manager.log_dir_of(*key)
            if log is not None and log.replicated and log_dir in per_dir:
                per_dir[log_dir][key] = log.high_watermark
        for log_dir, offsets in per_dir.items():
            if log_dir in manager.offline_dirs:
                continue
            path = os.path.join(log_dir, HW_CHECKPOINT)
            await workers.run_sync(checkpoint.write_checkpoint, path, offsets)

    # -- LeaderAndIsr / StopReplica ----------------------------------------------------------
    async def become(
        self, topic: str, topic_id: Any, state: Any, controller_epoch: int
    ) -> ErrorCode:
        """Apply one partition state of a LeaderAndIsr request (under ``state_lock``)."""
        key = (topic, state.partition_index)
        current = self.replicas.get(key)
        if current is not None and state.leader_epoch <= current.leader_epoch:
            logger.info(
                "ignoring a stale partition state",
                topic=topic,
                partition=key[1],
                leader_epoch=state.leader_epoch,
                current=current.leader_epoch,
            )
            return ErrorCode.STALE_CONTROLLER_EPOCH
        replicas = tuple(state.replicas)
        if self.broker_id not in replicas:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if not await self.cluster.ensure_topic(topic, key[1]):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        log = await self._ensure_log(key)
        if log is None:
            return ErrorCode.KAFKA_STORAGE_ERROR
        leading = state.leader == self.broker_id
        replica = Replica(
            topic,
            key[1],
            state.leader,
            state.leader_epoch,
            tuple(state.isr),
            replicas,
            state.partition_epoch,
            controller_epoch,
            leading,
        )
        if current is not None and not leading:
            current.is_leader = False  # no more appends here: the new leader is elsewhere
            current.wake()
        fetchers = self.cluster.fetchers
        if leading:
            fetchers.remove(key)
            now = self.ctx.clock()
            async with self.ctx.locked_log(*key) as locked:
                if locked is None:
                    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                await workers.run_sync(
                    locked.leader_epochs.assign, state.leader_epoch, locked.log_end_offset
                )
                replica.epoch_start = locked.log_end_offset
            previous = current.followers if current is not None and current.is_leader else {}
            for r in replicas:
                if r != self.broker_id:
                    replica.followers[r] = FollowerState(
                        leo=previous[r].leo if r in previous else -1,
                        last_caught_up_ms=now if r in replica.isr else 0,
                    )
            # LogAppendTime continues from the log's newest timestamp (the previous leader's).
            self.ctx.partition(*key).last_append_time = -1
            self.replicas[key] = replica
            if current is not None:
                current.is_leader = False
                current.wake()  # acks=all waiters go on waiting on the new epoch's replica
            logger.info(
                "became leader",
                topic=topic,
                partition=key[1],
                leader_epoch=state.leader_epoch,
                isr=list(replica.isr),
                log_end_offset=replica.epoch_start,
                high_watermark=log.high_watermark,
            )
            self.maybe_advance_hw(replica)
        else:
            self.replicas[key] = replica
            if state.leader >= 0:
                fetchers.add(key, state.leader, state.leader_epoch)
            else:
                fetchers.remove(key)
            logger.info(
                "became follower",
                topic=topic,
                partition=key[1],
                leader=state.leader,
                leader_epoch=state.leader_epoch,
            )
        self.ctx.partition(*key).notify()
        self.cluster.groups.role_changed(topic, key[1], leading)
        self.cluster.txns.role_changed(topic, key[1], leading)
        return ErrorCode.NONE

    async def _ensure_log(self, key: Key) -> Log | None:
        """The partition's log, created when absent, with its high watermark from the
        checkpoint (or 0) if it has none yet; None when its log dir is offline."""
        ctx = self.ctx
        topic = ctx.topics.get(key[0])
        assert topic is not None
        async with ctx.partition(*key).lock:
            log = ctx.log_manager.get_log(*key)
            if log is None:
                if ctx.log_manager.is_offline(*key):
                    return None
                try:
                    log = await workers.run_sync(
                        ctx.log_manager.create_log, key[0], key[1], topic.log_config
                    )
                    await workers.run_sync(log.assign_topic_id, topic.topic_id)
                except STORAGE_FAILURES as exc:
                    logger.error(
                        "cannot create a replica's log",
                        topic=key[0],
                        partition=key[1],
                        error=repr(exc),
                        action="check the log dirs are writable and have space",
                    )
                    return None
            if not log.replicated:
                log.update_high_watermark(self._checkpointed.get(key, 0))
            return log

    async def stop(self, key: Key, delete: bool) -> ErrorCode:
        """StopReplica: stop fetching, forget the replica; with ``delete`` remove its log."""
        self.cluster.fetchers.remove(key)
        replica = self.replicas.pop(key, None)
        if replica is not None:
            replica.is_leader = False
            replica.wake()
        self.cluster.groups.role_changed(key[0], key[1], False)
        self.cluster.txns.role_changed(key[0], key[1], False)
        self.ctx.partition(*key).notify()
        if delete:
            async with self.ctx.partition(*key).lock:
                if self.ctx.log_manager.get_log(*key) is not None:
                    try:
                        await workers.run_sync(self.ctx.log_manager.delete_log, *key)
                    except STORAGE_FAILURES as exc:
                        logger.error(
                            "cannot delete a replica's log",
                            topic=key[0],
                            partition=key[1],
                            error=repr(exc),
                        )
                        return ErrorCode.KAFKA_STORAGE_ERROR
                    collector.thaw()  # the log's objects are garbage now, perhaps frozen
            self._checkpointed.pop(key, None)
        logger.info("stopped replica", topic=key[0], partition=key[1], deleted=delete)
        return ErrorCode.NONE

    # -- the leader's side -------------------------------------------------------------------
    def leader(self, topic: str, partition: int) -> Replica | None:
        replica = self.replicas.get((topic, partition))
        return replica if replica is not None and replica.is_leader else None

    def check_epoch(self, replica: Replica | None, current_leader_epoch: int) -> ErrorCode:
        """KIP-320: a request naming another leader epoch than this leader's is refused."""
        if replica is None:
            return ErrorCode.NOT_LEADER_FOR_PARTITION
        if current_leader_epoch < 0 or current_leader_epoch == replica.leader_epoch:
            return ErrorCode.NONE
        if current_leader_epoch < replica.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.UNKNOWN_LEADER_EPOCH

    def follower_fetch(self, replica: Replica, follower: int, fetch_offset: int) -> ErrorCode:
        """A follower fetched from ``fetch_offset`` (its log end offset): Kafka's
        updateFollowerFetchState, then ISR expansion and the high watermark."""
        state = replica.followers.get(follower)
        if state is None:
            return ErrorCode.NOT_LEADER_FOR_PARTITION
        log = self.ctx.get_log(replica.topic, replica.partition)
        if log is None:
            return ErrorCode.NOT_LEADER_FOR_PARTITION
        now = self.ctx.clock()
        leader_leo = log.log_end_offset
        if fetch_offset >= leader_leo:
            state.last_caught_up_ms = now
        elif fetch_offset >= state.last_fetch_leader_leo >= 0:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.last_fetch_leader_leo = leader_leo
        state.last_fetch_ms = now
        state.leo = fetch_offset
        if (
            follower not in replica.maximal_isr
            and replica.pending_isr is None
            and fetch_offset >= log.high_watermark
            and fetch_offset >= replica.epoch_start
        ):
            self._change_isr(replica, replica.isr + (follower,), "caught up")
        self.maybe_advance_hw(replica)
        return ErrorCode.NONE

    def maybe_advance_hw(self, replica: Replica) -> None:
        """HW = the smallest log end offset of the (maximal) ISR; wakes waiters when it moves."""
        log = self.ctx.get_log(replica.topic, replica.partition)
        if log is None or not replica.is_leader:
            return
        new = log.log_end_offset
        for r in replica.maximal_isr:
            if r != self.broker_id:
                state = replica.followers.get(r)
                new = min(new, state.leo if state is not None else -1)
        if new > log.high_watermark:
            log.update_high_watermark(new)
            replica.wake()
            self.ctx.partition(replica.topic, replica.partition).notify()

    async def committed(
        self, topic: str, partition: int, last_offset: int, timeout_s: float
    ) -> ErrorCode:
        """After a local append (the group coordinator's): advance the high watermark if the
        ISR allows, then :meth:`wait_for_hw` for ``last_offset``."""
        replica = self.leader(topic, partition)
        if replica is None:
            return ErrorCode.NOT_LEADER_FOR_PARTITION
        self.maybe_advance_hw(replica)
        return await self.wait_for_hw(
            topic, partition, last_offset, trio.current_time() + timeout_s
        )

    async def wait_for_hw(
        self, topic: str, partition: int, offset: int, deadline: float
    ) -> ErrorCode:
        """acks=all: until the high watermark passes ``offset`` (NONE, or
        NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR is then below min.insync.replicas),
        leadership is lost (NOT_LEADER_FOR_PARTITION) or ``deadline`` (REQUEST_TIMED_OUT)."""
        key = (topic, partition)
        while True:
            replica = self.replicas.get(key)
            log = self.ctx.get_log(topic, partition)
            if replica is None or not replica.is_leader or log is None:
                return ErrorCode.NOT_LEADER_FOR_PARTITION
            if log.high_watermark > offset:
                t = self.ctx.topics.get(topic)
                if t is not None and len(replica.isr) < t.config.min_insync_replicas:
                    return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                return ErrorCode.NONE
            if trio.current_time() >= deadline or self.ctx.stopping:
                return ErrorCode.REQUEST_TIMED_OUT
            with trio.move_on_at(deadline):
                await replica.changed.wait()

    async def shrink_isrs(self) -> None:
        """Remove ISR followers that have not caught up for replica.lag.time.max.ms."""
        lag = self.ctx.config.replica_lag_time_max_ms
        now = self.ctx.clock()
        for replica in list(self.replicas.values()):
            if not replica.is_leader or replica.pending_isr is not None:
                continue
            slow = [
                r
                for r in replica.isr
                if r != self.broker_id
                and now - replica.followers.get(r, FollowerState()).last_caught_up_ms > lag
            ]
            if slow:
                isr = tuple(r for r in replica.isr if r not in slow)
                self._change_isr(replica, isr, f"not caught up for {lag} ms: {slow}")

    def _change_isr(self, replica: Replica, isr: tuple[int, ...], why: str) -> None:
        replica.pending_isr = isr
        assert self._nursery is not None
        self._nursery.start_soon(self._write_isr, replica, isr, why)

    async def _write_isr(self, replica: Replica, isr: tuple[int, ...], why: str) -> None:
        """Kafka 0.10.1's Partition.updateIsr: the new ISR in ZooKeeper, conditional on the
        partition epoch this leader knows; then a notification for the controller."""
        zk = self.cluster.zk
        state = LeaderIsr(
            self.broker_id, replica.leader_epoch, isr, replica.controller_epoch, replica.zk_version
        )
        try:
            stat = await zk.set(
                partition_state_path(replica.topic, replica.partition),
                state.to_json(),
                replica.zk_version,
            )
        except BadVersionError:
            logger.info(
                "ISR change refused: the partition state changed in ZooKeeper; waiting for the "
                "controller's",
                topic=replica.topic,
                partition=replica.partition,
            )
            return
        except KazooException as exc:
            logger.warning(
                "ISR change not written to ZooKeeper",
                topic=replica.topic,
                partition=replica.partition,
                error=repr(exc),
            )
            return
        finally:
            if replica.pending_isr == isr:
                replica.pending_isr = None
        if self.replicas.get((replica.topic, replica.partition)) is replica and replica.is_leader:
            logger.info(
                "ISR changed",
                topic=replica.topic,
                partition=replica.partition,
                old=list(replica.isr),
                new=list(isr),
                reason=why,
            )
            replica.isr = isr
            replica.zk_version = stat.version
            self.maybe_advance_hw(replica)
            replica.wake()
        try:
            await zk.create(
                f"{ISR_CHANGES}/{ISR_CHANGE_PREFIX}",
                isr_change_json([(replica.topic, replica.partition)]),
                sequence=True,
            )
        except KazooException as exc:
            logger.warning("ISR change notification not written", error=repr(exc))
