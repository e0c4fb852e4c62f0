"""Periodic storage work, run as tasks in the broker's nursery (cancelled at shutdown).

- retention every ``log.retention.check.interval.ms``: each partition under its lock;
- flush of logs whose ``flush.ms`` has passed, every ``log.flush.scheduler.interval.ms``;
- recovery-point checkpoints every ``log.flush.offset.checkpoint.interval.ms``;
- removal of ``.deleted`` files whose ``file.delete.delay.ms`` has passed (every second).

Blocking storage calls run in worker threads. A failing pass is logged and retried next period;
it never stops the broker.
"""
from __future__ import annotations

from typing import Awaitable, Callable

import structlog
import trio

from broker.context import BrokerContext

log = structlog.get_logger(__name__)

DELETE_CHECK_INTERVAL_MS = 1000


def start(ctx: BrokerContext, nursery: trio.Nursery) -> None:
    config = ctx.config
    nursery.start_soon(_every, "retention", config.log_retention_check_interval_ms,
                       lambda: run_retention(ctx))
    nursery.start_soon(_every, "flush", config.log_flush_scheduler_interval_ms,
                       lambda: flush_due(ctx))
    if config.log_flush_offset_checkpoint_interval_ms > 0:
        nursery.start_soon(_every, "checkpoint", config.log_flush_offset_checkpoint_interval_ms,
                           lambda: checkpoint(ctx))
    nursery.start_soon(_every, "delete files", DELETE_CHECK_INTERVAL_MS,
                       lambda: _each_log(ctx, "remove_deleted_files"))


async def _every(name: str, interval_ms: int, job: Callable[[], Awaitable[object]]) -> None:
    while True:
        await trio.sleep(interval_ms / 1000)
        try:
            await job()
        except Exception as exc:
            log.error("background task failed; retrying next period", task=name,
                      error=repr(exc), action="check the log dirs' disk")


def _partitions(ctx: BrokerContext):
    for name in ctx.topics.names():
        topic = ctx.topics.get(name)
        if topic is None:
            continue
        for p in range(topic.partitions):
            yield name, p


async def run_retention(ctx: BrokerContext) -> int:
    """Delete expired segments of every partition; returns how many were deleted."""
    total = 0
    for name, p in list(_partitions(ctx)):
        async with ctx.partition(name, p).lock:
            log_ = ctx.get_log(name, p)
            if log_ is None:
                continue
            deleted = await trio.to_thread.run_sync(log_.delete_expired_segments, ctx.clock())
            start = log_.log_start_offset
        if deleted:
            total += deleted
            log.info("retention deleted segments", topic=name, partition=p, segments=deleted,
                     log_start_offset=start)
    return total


async def flush_due(ctx: BrokerContext) -> None:
    """Flush every partition whose flush.ms has elapsed since its last flush."""
    await _each_log(ctx, "flush_if_due")


async def _each_log(ctx: BrokerContext, method: str) -> None:
    """Call ``Log.<method>(now_ms)`` on every partition, each under its lock in a thread."""
    for name, p in list(_partitions(ctx)):
        async with ctx.partition(name, p).lock:
            log_ = ctx.get_log(name, p)
            if log_ is not None:
                await trio.to_thread.run_sync(getattr(log_, method), ctx.clock())


async def checkpoint(ctx: BrokerContext) -> None:
    """Write the recovery-point checkpoints; the admin lock keeps topic creation and deletion
    from changing the set of logs while the worker thread walks it."""
    async with ctx.admin_lock:
        await trio.to_thread.run_sync(ctx.log_manager.checkpoint_recovery_points)
