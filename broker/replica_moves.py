"""Moving partitions between this broker's log dirs (AlterReplicaLogDirs, KIP-113): the trio side
of storage/replica_move.py.

``alter`` answers each partition of a request at once, as Kafka's
ReplicaManager.alterReplicaLogDirs does, and starts a task per accepted move in the broker's
background nursery. The task fills the future log in worker threads, ``ROUND_BYTES`` at a time
(so a shutdown waits for one round at most), while the partition keeps serving; once a round
found less than ``CAUGHT_UP_BYTES`` new, it takes the partition lock and swaps the future log in
(LogManager.swap_in_future, in a worker thread): appends wait for that last step only. The
copying of all moves together keeps to ``replica.alter.log.dirs.io.max.bytes.per.second`` (Kafka's
quota on its ReplicaAlterLogDirsThread, which kafka-reassign-partitions.sh
--replica-alter-log-dirs-throttle sets per broker): a round copies at most a second's worth, and
the next waits until the bytes copied so far are due.

A move a restart interrupted starts again (LogManager.interrupted_moves). A move that fails on
a disk error stops, is logged, and leaves the partition where it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog
import trio

from broker import workers
from protocol.errors import ErrorCode
from storage.errors import LogNotFoundError
from storage.replica_move import FutureLog

if TYPE_CHECKING:
    from broker.context import BrokerContext

logger = structlog.get_logger(__name__)

ROUND_BYTES = 64 << 20
CAUGHT_UP_BYTES = 4 << 20


class ReplicaMoves:
    """The moves under way; see the module docstring. Lives on the trio thread."""

    def __init__(self, ctx: BrokerContext) -> None:
        self._ctx = ctx
        self._nursery: trio.Nursery | None = None
        self._waiting: list[FutureLog] = []  # accepted before the nursery started
        self._next_round = 0.0  # trio time before which no round may start (the quota)

    def start(self, nursery: trio.Nursery) -> None:
        """Run the moves in ``nursery`` (cancelled at shutdown: the future dirs stay and the
        next start moves those partitions again), beginning with those a restart interrupted."""
        self._nursery = nursery
        manager = self._ctx.log_manager
        for (topic, partition), target in sorted(manager.interrupted_moves.items()):
            if manager.get_log(topic, partition) is not None and target not in manager.offline_dirs:
                if manager.log_dir_of(topic, partition) != target:
                    self._waiting.append(manager.start_future(topic, partition, target))
        manager.interrupted_moves.clear()
        for future in self._waiting:
            nursery.start_soon(self._run, future)
        self._waiting.clear()

    def _rate(self) -> int:
        """The quota now (AlterConfigs may change it); 0, which Kafka allows, stalls the moves
        rather than dividing by it."""
        return max(1, self._ctx.config.replica_alter_log_dirs_io_max_bytes_per_second)

    async def alter(self, topic: str, partition: int, path: str) -> ErrorCode:
        """Ask for (topic, partition) to live in the log dir ``path``: Kafka's error code for it
        (NONE once the move is under way, or when the partition is already there)."""
        manager = self._ctx.log_manager
        if path not in manager.log_dirs:
            return ErrorCode.LOG_DIR_NOT_FOUND
        if path in manager.offline_dirs or manager.is_offline(topic, partition):
            return ErrorCode.KAFKA_STORAGE_ERROR
        future = manager.future_of(topic, partition)
        if future is not None:
            if future.target_dir == path:
                return ErrorCode.NONE
            await workers.run_sync(manager.cancel_future, topic, partition)
        if manager.get_log(topic, partition) is None:
            # Kafka's ReplicaManager: a partition the cluster has but not this broker is not
            # available here (yet); one the cluster does not know is unknown.
            manager.set_preferred_dir(topic, partition, path)
            known = self._ctx.topics.get(topic)
            if known is None or not 0 <= partition < known.partitions:
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return ErrorCode.REPLICA_NOT_AVAILABLE
        if manager.log_dir_of(topic, partition) == path:
            return ErrorCode.NONE
        try:
            future = await workers.run_sync(manager.start_future, topic, partition, path)
        except LogNotFoundError:  # deleted meanwhile
            return ErrorCode.REPLICA_NOT_AVAILABLE
        if self._nursery is None:
            self._waiting.append(future)
        else:
            self._nursery.start_soon(self._run, future)
        return ErrorCode.NONE

    async def _run(self, future: FutureLog) -> None:
        ctx, manager = self._ctx, self._ctx.log_manager
        topic, partition = future.topic, future.partition
        try:
            while True:
                log = manager.get_log(topic, partition)
                if log is None or manager.future_of(topic, partition) is not future:
                    return  # deleted, taken offline or sent elsewhere meanwhile
                await trio.sleep_until(self._next_round)
                rate = self._rate()
                copied = await workers.run_sync(future.copy_round, log, min(ROUND_BYTES, rate))
                self._next_round = max(self._next_round, trio.current_time()) + copied / rate
                if future.remaining == 0 and copied < CAUGHT_UP_BYTES:
                    break
            async with ctx.locked_log(topic, partition) as locked:
                if locked is None or manager.future_of(topic, partition) is not future:
                    return
                source = manager.log_dir_of(topic, partition)
                if source == future.target_dir:  # asked for while a swap was putting it there
                    await workers.run_sync(manager.cancel_future, topic, partition)
                    return
                locked_at = trio.current_time()
                moved, doomed = await workers.run_sync(manager.swap_in_future, topic, partition)
                paused = trio.current_time() - locked_at
            ctx.partition(topic, partition).notify()
            await workers.run_sync(manager.remove_replaced, moved, doomed)
            logger.info(
                "partition moved to another log dir",
                topic=topic,
                partition=partition,
                from_dir=source,
                to_dir=future.target_dir,
                log_end_offset=moved.log_end_offset,
                appends_paused_ms=round(paused * 1000, 1),
            )
        except OSError as exc:
            if manager.future_of(topic, partition) is future:
                await workers.run_sync(manager.cancel_future, topic, partition)
            elif manager.get_log(topic, partition) is None:
                return  # the partition was deleted under the copy
            logger.error(
                "moving the partition to another log dir failed; it stays where it was",
                topic=topic,
                partition=partition,
                to_dir=future.target_dir,
                error=repr(exc),
                action="check both log dirs' disks, then ask for the move again "
                "(kafka-reassign-partitions.sh or Admin.alterReplicaLogDirs)",
            )
