"""The log cleaner's threads: compaction of topics with cleanup.policy=compact, scheduled here and
done by storage/cleaner.py (Kafka's LogCleaner threads).

``log.cleaner.threads`` tasks run in the background nursery. Each repeatedly picks the compacted
log with the highest dirty ratio that is due (storage.cleaner.plan_cleaning under each log's
lock, choose_filthiest) and cleans it: the offset map and the ``.cleaned`` files are built in a
worker thread without the partition lock; only each swap (and the brief planning and finishing)
holds it, so produce and fetch wait at most for a few renames. When no log is due the task sleeps
``log.cleaner.backoff.ms``. Each task has its share of ``log.cleaner.dedupe.buffer.size``; all
share one I/O throttle (``log.cleaner.io.max.bytes.per.second``). Cancelling the nursery (broker
shutdown) sets the cleaners' stop event, so a cleaning in a worker thread gives up at its next
read and removes its ``.cleaned`` files.

Errors: a disk failure takes the log dir offline (BrokerContext.storage_failed); a cleaning that
fails otherwise (a corrupt segment, a bug) marks the partition uncleanable until a restart, as
Kafka does, and says so in the log; a cleaning made stale by a truncation, deletion or retention
is simply dropped and done again later.
"""

from __future__ import annotations

import threading

import structlog
import trio

from broker import workers
from broker.context import BrokerContext
from storage.cleaner import (
    Cleaner,
    CleaningAbortedError,
    CleaningJob,
    CleaningPlan,
    CleaningResult,
    Throttler,
    choose_filthiest,
    plan_cleaning,
)

logger = structlog.get_logger(__name__)

MB = 1024 * 1024


def start(ctx: BrokerContext, nursery: trio.Nursery) -> list[Cleaner]:
    """Start the cleaner tasks in ``nursery`` (none when log.cleaner.enable is false or
    log.cleaner.threads is 0); returns their Cleaners."""
    config = ctx.config
    threads = config.log_cleaner_threads
    if not config.log_cleaner_enable or threads == 0:
        logger.info("log cleaner disabled: compacted topics are not compacted")
        return []
    stopped = threading.Event()
    throttler = Throttler(config.log_cleaner_io_max_bytes_per_second, sleep=stopped.wait)
    try:
        cleaners = [
            Cleaner(config.log_cleaner_dedupe_buffer_size // threads, throttler, stopped)
            for _ in range(threads)
        ]
    except ValueError as exc:
        logger.error("log cleaner not started", error=str(exc))
        return []
    nursery.start_soon(_stop_on_cancel, stopped)
    for number, cleaner in enumerate(cleaners):
        nursery.start_soon(_run, ctx, cleaner, number)
    logger.info(
        "log cleaner started",
        threads=threads,
        dedupe_buffer_bytes_per_thread=config.log_cleaner_dedupe_buffer_size // threads,
        keys_per_pass=cleaners[0].offset_map.max_entries,
        io_max_bytes_per_second=config.log_cleaner_io_max_bytes_per_second,
    )
    return cleaners


async def _stop_on_cancel(stopped: threading.Event) -> None:
    try:
        await trio.sleep_forever()
    finally:
        stopped.set()


async def _run(ctx: BrokerContext, cleaner: Cleaner, number: int) -> None:
    backoff = ctx.config.log_cleaner_backoff_ms / 1000
    while True:
        try:
            result = await clean_filthiest(ctx, cleaner)
        except Exception:  # a bug must not stop the thread: the partition is already marked
            logger.exception("log cleaner pass failed", thread=number)
            result = None
        if result is None:
            await trio.sleep(backoff)


async def clean_filthiest(ctx: BrokerContext, cleaner: Cleaner) -> CleaningResult | None:
    """One pass of a cleaner thread: clean the dirtiest due log; None when none was due (or
    its cleaning was dropped or failed, which is logged)."""
    now = ctx.clock()
    plan = choose_filthiest(await _plans(ctx, now))
    if plan is None:
        return None
    manager = ctx.log_manager.cleaning
    progress = manager.begin(plan.key)
    if progress is None:
        return None  # another thread took it meanwhile
    try:
        return await _clean(ctx, CleaningJob(plan, cleaner, manager, progress, now))
    finally:
        manager.end(plan.key)


async def _plans(ctx: BrokerContext, now: int) -> list[CleaningPlan]:
    manager = ctx.log_manager
    plans = []
    for log in manager.all_logs():
        key = (log.topic, log.partition)
        if (
            not log.config.compact
            or key in manager.cleaning.uncleanable
            or manager.cleaning.in_progress(key)
        ):
            continue
        failure = plan = None
        async with ctx.locked_log(*key) as locked:
            if locked is not log:
                continue
            try:
                plan = await workers.run_sync(plan_cleaning, log, now)
            except OSError as exc:
                failure = exc
        if failure is not None:
            await _failed(ctx, log.topic, log.partition, failure)
        elif plan is not None:
            plans.append(plan)
    return plans


async def _clean(ctx: BrokerContext, job: CleaningJob) -> CleaningResult | None:
    topic, partition = job.plan.key
    log = job.plan.log
    logger.info(
        "cleaning log",
        topic=topic,
        partition=partition,
        dirty_ratio=round(job.plan.cleanable_ratio, 3),
        overdue=job.plan.needs_compaction_now,
        first_dirty_offset=job.plan.first_dirty_offset,
        first_uncleanable_offset=job.plan.first_uncleanable_offset,
    )
    try:
        await workers.run_sync(job.build_offset_map)
        for group in job.groups:
            cleaned = await workers.run_sync(job.clean_group, group)
            try:
                async with ctx.locked_log(topic, partition) as locked:
                    if locked is not log:
                        job.discard(cleaned)
                        raise CleaningAbortedError(f"{log.name} was deleted while being cleaned")
                    swapped = await workers.run_sync(job.swap, cleaned)
            except BaseException:
                with trio.CancelScope(shield=True):
                    await workers.run_sync(job.discard, cleaned)
                raise
            if not swapped:
                break
        async with ctx.locked_log(topic, partition) as locked:
            if locked is not log:
                raise CleaningAbortedError(f"{log.name} was deleted while being cleaned")
            result = job.finish()
        log_dir = ctx.log_manager.log_dir_of(topic, partition)
        if log_dir is not None:
            await workers.run_sync(ctx.log_manager.checkpoint_cleaner, log_dir)
    except CleaningAbortedError as exc:
        logger.info("cleaning dropped", topic=topic, partition=partition, reason=str(exc))
        return None
    except OSError as exc:
        await _failed(ctx, topic, partition, exc)
        return None
    except Exception as exc:
        ctx.log_manager.cleaning.mark_uncleanable((topic, partition), repr(exc))
        logger.exception(
            "cleaning failed; the partition is not cleaned again until a restart",
            topic=topic,
            partition=partition,
            action="check the partition's segments with chronolog dump-log --verify",
        )
        return None
    _log_result(result, job)
    return result


async def _failed(ctx: BrokerContext, topic: str, partition: int, exc: OSError) -> None:
    """After a disk error, holding no partition lock (storage_failed takes them)."""
    logger.error(
        "cleaning failed on a disk error; retried later",
        topic=topic,
        partition=partition,
        error=repr(exc),
        action="check the log dir's disk",
    )
    await ctx.storage_failed(topic, partition, exc)


def _log_result(result: CleaningResult, job: CleaningJob) -> None:
    stats = result.stats
    elapsed = max(stats.elapsed_s, 1e-9)
    logger.info(
        "cleaned log" if result.swapped else "cleaning stopped: the log changed meanwhile",
        topic=result.topic,
        partition=result.partition,
        dirty_section=f"[{result.first_dirty_offset}, {result.end_offset})",
        dirty_ratio=round(job.plan.cleanable_ratio, 3),
        segments_before=stats.segments_before,
        segments_after=stats.segments_after,
        bytes_before=stats.bytes_read,
        bytes_after=stats.bytes_written,
        messages_before=stats.messages_read,
        messages_after=stats.messages_written,
        keys_mapped=stats.keys_mapped,
        map_utilization=round(stats.buffer_utilization, 4),
        seconds=round(elapsed, 3),
        mb_per_second=round((stats.bytes_read + stats.map_bytes_read) / MB / elapsed, 2),
    )
