"""Worker threads beside the event loop, at a lower CPU priority than the loop's own thread.

Every blocking or CPU-heavy step the broker takes off the loop (storage calls that may wait on
the disk, validation of large compressed batches, lazy down-conversion, the cleaner) runs
through :func:`run_sync`, in trio's thread cache. The first time a thread runs such a step it
lowers its own priority by ``WORKER_NICE_INCREMENT`` (Linux: per-thread nice). The loop routes
every client's requests, so when the workers keep both cores busy the kernel should run the
loop first. Measured with bench/bench_isolation.py on this 2-core machine, three pairs of
runs alternated with the parent commit: a well-behaved client's p50 beside 20 Fetch v2 readers
fell from 3.8-3.9 to 1.9-2.2 ms and its p99 from 9.4-11 to 6.0-9.5 ms; with 200 slowloris
connections added, p99 from 9.7-21 to 5.4-7.5 ms; the readers got 48-56 MB/s through against
52-55 (bench/results/isolation.json, ``worker_nice*`` and ``before_worker_nice*``).

A thread's priority cannot be raised again without privileges, so a lowered thread stays low
for whatever it runs later. trio's thread cache also serves the ZooKeeper calls
(broker/cluster/zk.py, which uses trio directly so that they can be abandoned on cancellation)
and trio's getaddrinfo; in a lowered thread they wait on the network as before.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

import structlog
import trio

logger = structlog.get_logger(__name__)

T = TypeVar("T")

# Nice is relative to the process's: 10 steps is a CPU weight of about a tenth of the loop's
# thread (CFS weights 1024 at nice 0, 110 at nice 10).
WORKER_NICE_INCREMENT = 10
_MAX_NICE = 19

_thread = threading.local()
_failure_logged = False


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def conversion_threads(num_io_threads: int) -> int:
    """How many fetch down-conversions run at once: ``num.io.threads`` (Kafka's request
    handler pool, 8 by default), but at most one per usable core. A conversion holds the GIL
    between its C calls (decompression, building messages, compression), so threads beyond the
    cores only queue for the GIL ahead of the event loop. bench/bench_isolation.py beside 20
    Fetch v2 readers on 2 cores: 8 threads p99 15.8 ms and 46 MB/s, 2 threads 3.0 ms, 63 MB/s."""
    return max(1, min(num_io_threads, usable_cores()))


async def run_sync(
    fn: Callable[..., T], *args: object, limiter: trio.CapacityLimiter | None = None
) -> T:
    """``fn(*args)`` in a worker thread at lowered priority; at most ``limiter``'s tokens of
    such calls at once (trio's default limiter when None). As trio.to_thread.run_sync: the
    caller waits for the call to finish even if cancelled, and ``fn``'s exception is raised in
    the caller."""
    return await trio.to_thread.run_sync(_lowered, fn, args, limiter=limiter)


def _lowered(fn: Callable[..., T], args: tuple[object, ...]) -> T:
    if not getattr(_thread, "lowered", False):
        _thread.lowered = True
        _lower_this_thread()
    return fn(*args)


def _lower_this_thread() -> None:
    """Lower the calling thread's priority (Linux only: elsewhere PRIO_PROCESS with a thread id
    would name a process). A failure leaves the thread as it was and is logged once."""
    global _failure_logged
    if sys.platform != "linux":
        return
    tid = threading.get_native_id()
    try:
        now = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(_MAX_NICE, now + WORKER_NICE_INCREMENT))
    except OSError as exc:
        if not _failure_logged:
            _failure_logged = True
            logger.warning(
                "cannot lower the worker threads' CPU priority; they compete with the event "
                "loop as equals",
                error=repr(exc),
                action="none needed; under CPU contention client latency may be higher",
            )
