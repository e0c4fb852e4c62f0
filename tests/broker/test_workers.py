"""broker/workers.py: off-loop work runs in threads below the event loop's CPU priority, and
the broker sends its off-loop work there rather than to trio's threads directly."""

from __future__ import annotations

import os
import re
import sys
import threading
from pathlib import Path

import pytest
import trio

from broker import workers

BROKER = Path(workers.__file__).parent

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="per-thread nice is Linux's")


def _nice_of_this_thread() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@linux_only
async def test_a_worker_thread_runs_below_the_loops_priority() -> None:
    loop_nice = _nice_of_this_thread()
    seen = await workers.run_sync(_nice_of_this_thread)
    assert seen == min(19, loop_nice + workers.WORKER_NICE_INCREMENT)
    # The loop's own thread keeps its priority.
    assert _nice_of_this_thread() == loop_nice


@linux_only
async def test_a_reused_thread_is_lowered_once() -> None:
    """trio reuses its idle threads: a second call in the same thread must not lower it again
    (nice would creep to 19)."""
    loop_nice = _nice_of_this_thread()
    limiter = trio.CapacityLimiter(1)
    first = await workers.run_sync(_nice_of_this_thread, limiter=limiter)
    for _ in range(5):
        assert await workers.run_sync(_nice_of_this_thread, limiter=limiter) == first
    assert first == min(19, loop_nice + workers.WORKER_NICE_INCREMENT)


async def test_arguments_results_and_errors_pass_through() -> None:
    assert await workers.run_sync(divmod, 17, 5) == (3, 2)
    with pytest.raises(ZeroDivisionError):
        await workers.run_sync(divmod, 1, 0)


def test_the_broker_runs_its_threads_through_workers() -> None:
    """Only ZooKeeper's network waits (abandoned on cancellation) use trio's threads directly."""
    allowed = {BROKER / "workers.py", BROKER / "cluster" / "zk.py"}
    direct = [
        f"{path.relative_to(BROKER.parent)}:{n}"
        for path in sorted(BROKER.rglob("*.py"))
        if path not in allowed
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bto_thread\.run_sync\(", line)
    ]
    assert direct == [], "use broker.workers.run_sync"


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity here")
def test_conversions_at_once_are_num_io_threads_at_most_one_per_usable_core() -> None:
    cores = len(os.sched_getaffinity(0))
    assert workers.usable_cores() == cores
    assert workers.conversion_threads(1) == 1
    assert workers.conversion_threads(8) == min(8, cores)
    assert workers.conversion_threads(cores + 5) == cores
