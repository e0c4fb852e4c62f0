"""Periodic storage work, run as tasks in the broker's nursery (cancelled at shutdown).

- retention every ``log.retention.check.interval.ms``: each partition under its lock;
- flush of logs whose ``flush.ms`` has passed, every ``log.flush.scheduler.interval.ms``;
- recovery-point and log-start-offset checkpoints every
  ``log.flush.offset.checkpoint.interval.ms``;
- removal of ``.deleted`` files whose ``file.delete.delay.ms`` has passed (every second);
- the log cleaner's threads (broker/cleaner.py) for compacted topics;
- moves of partitions between log dirs (broker/replica_moves.py);
- a thaw of the garbage collector's frozen objects every ten minutes (broker/collector.py).

What each task does and which logs need it is storage's (storage.manager.Maintenance); this
module schedules it. Blocking storage calls run in worker threads, one per log with work, so an
idle partition costs nothing. A failing pass is logged and retried next period; it never stops
the broker.
"""

from __future__ import annotations

from typing import Awaitable, Callable

import structlog
import trio

from broker import cleaner, collector, workers
from broker.context import BrokerContext
from broker.errors import STORAGE_FAILURES
from storage import Log, Maintenance

logger = structlog.get_logger(__name__)

DELETE_CHECK_INTERVAL_MS = 1000
# Logs judged between two yields to the scheduler: at 10,000 partitions a whole walk held the
# event loop 1-6 ms (flush and file removal each run every second); a slice is well under 1 ms.
MAINTENANCE_SLICE = 1000


def start(ctx: BrokerContext, nursery: trio.Nursery) -> None:
    config = ctx.config
    nursery.start_soon(
        _every,
        "retention",
        config.log_retention_check_interval_ms,
        lambda: maintain(ctx, Maintenance.RETENTION),
    )
    nursery.start_soon(
        _every,
        "flush",
        config.log_flush_scheduler_interval_ms,
        lambda: maintain(ctx, Maintenance.FLUSH),
    )
    if config.log_flush_offset_checkpoint_interval_ms > 0:
        nursery.start_soon(
            _every,
            "checkpoint",
            config.log_flush_offset_checkpoint_interval_ms,
            lambda: checkpoint(ctx),
        )
    nursery.start_soon(
        _every,
        "delete files",
        DELETE_CHECK_INTERVAL_MS,
        lambda: maintain(ctx, Maintenance.DELETE_FILES),
    )
    nursery.start_soon(_every, "thaw", int(collector.THAW_INTERVAL_S * 1000), _thaw)
    cleaner.start(ctx, nursery)
    ctx.replica_moves.start(nursery)


async def _thaw() -> None:
    collector.thaw()


async def _every(name: str, interval_ms: int, job: Callable[[], Awaitable[object]]) -> None:
    while True:
        await trio.sleep(interval_ms / 1000)
        try:
            await job()
        except STORAGE_FAILURES as exc:
            logger.error(
                "background task failed; retrying next period",
                task=name,
                error=repr(exc),
                action="check the log dirs' disk",
            )
        except Exception:  # a bug in one job must not stop the others: Kafka's scheduler too
            logger.exception(
                "background task failed; retrying next period",
                task=name,
                action="this is a broker bug; report it with this log line",
            )


async def maintain(ctx: BrokerContext, task: Maintenance) -> int:
    """Storage's ``task`` on every log that has such work (LogManager.due, judged
    MAINTENANCE_SLICE logs at a time with a yield between), each under its partition lock in a
    worker thread; returns the sum of what LogManager.run reported."""
    total = 0
    logs = ctx.log_manager.keyed_logs()
    for start in range(0, len(logs), MAINTENANCE_SLICE):
        if start:
            await trio.lowlevel.checkpoint()
        among = logs[start : start + MAINTENANCE_SLICE]
        for key, due_log in ctx.log_manager.due(task, ctx.clock(), among):
            total += await _maintain_one(ctx, task, key, due_log)
    return total


async def _maintain_one(
    ctx: BrokerContext, task: Maintenance, key: tuple[str, int], due_log: Log
) -> int:
    """``task`` on one log under its partition lock, in a worker thread; what LogManager.run
    reported (0 if the log was deleted meanwhile)."""
    topic, partition = key
    failure: OSError | None = None
    async with ctx.locked_log(topic, partition) as log:
        if log is not due_log:
            return 0  # deleted meanwhile
        try:
            done = await workers.run_sync(ctx.log_manager.run, task, log, ctx.clock())
        except STORAGE_FAILURES as exc:
            if ctx.metrics is not None:
                ctx.metrics.storage_error(log)
            if not isinstance(exc, OSError):
                raise
            failure = exc
        start = log.log_start_offset
    if failure is not None:
        await ctx.storage_failed(topic, partition, failure)  # EIO: the log dir goes offline
        raise failure
    if task is Maintenance.RETENTION and done:
        logger.info(
            "retention deleted segments",
            topic=topic,
            partition=partition,
            segments=done,
            log_start_offset=start,
        )
    return done


async def checkpoint(ctx: BrokerContext) -> None:
    """Write the recovery-point and log-start-offset checkpoints; the admin lock keeps topic
    creation and deletion from changing the set of logs while the worker thread walks it."""
    async with ctx.admin_lock:
        await workers.run_sync(ctx.log_manager.checkpoint_recovery_points)
        await workers.run_sync(ctx.log_manager.checkpoint_log_start_offsets)
