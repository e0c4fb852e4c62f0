"""What a step handed to a worker thread costs the event loop, idle and busy (issue #33: would
moving a Produce's pwrites beside the loop win a second core?).

In one trio process, by broker/workers.py's ``run_sync`` (trio.to_thread in a thread at a
lowered priority, what the broker uses) and by plain trio.to_thread.run_sync, for --seconds
each:
- ``inline``: the step on the loop's own thread, for scale;
- ``idle``: one task hands the step over and waits, again and again, the loop otherwise idle:
  wall time, the loop thread's CPU and the process's CPU a hand-off;
- ``busy``: the same task beside another that keeps the loop busy with Python work in slices
  of about --slice-us (as a loaded broker serving requests): hand-offs a second, wall time a
  hand-off (median and p99).
- ``gil_wait``: without trio, a thread that sleeps 1 ms and then wants the GIL back, beside
  a main thread doing Python work in slices of --slice-us that either never blocks or makes a
  zero-timeout select() call after each slice (as the loop's epoll does): the thread's wait
  for the GIL beyond its 1 ms, median, p99 and max.
The step is nothing, or a pwrite of --write-bytes to a file on tmpfs (the one part of a batch's
append that runs without the GIL). ``busy`` runs at the default GIL switch interval (5 ms) and
at --short-switch-ms. A thread that wants the GIL asks its holder to drop it only after a
whole switch interval in which nobody took it (CPython's take_gil); a loop that releases and
takes it again at every epoll, recv and send call restarts that wait each time, so the
thread gets the GIL only when it wins the race for it in one of those short gaps.

Writes bench/results/thread_handoff.json.

    .venv/bin/python bench/bench_thread_handoff.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_e2e import machine, write_result  # noqa: E402
from bench.bench_storage import percentile  # noqa: E402
from broker import workers  # noqa: E402

RESULT = REPO / "bench" / "results" / "thread_handoff.json"


def thread_cpu() -> float:
    return time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID)


def python_work(iterations: int) -> int:
    total = 0
    for i in range(iterations):
        total += i
    return total


def iterations_per_slice(slice_us: float) -> int:
    """How many python_work iterations take about ``slice_us`` here."""
    n = 10_000
    started = time.perf_counter()
    python_work(n)
    return max(1, int(n * slice_us / ((time.perf_counter() - started) * 1e6)))


def inline(step: Callable[[], object], seconds: float) -> dict:
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        step()
        count += 1
    return {"us_per_step": round((time.perf_counter() - started) / count * 1e6, 1)}


HandOff = Callable[[Callable[[], object]], Awaitable[object]]
HAND_OFFS: dict[str, HandOff] = {
    "workers_run_sync": workers.run_sync,
    "trio_to_thread": trio.to_thread.run_sync,
}


async def idle(hand_off: HandOff, step: Callable[[], object], seconds: float) -> dict:
    count = 0
    wall, loop, process = time.perf_counter(), thread_cpu(), time.process_time()
    while time.perf_counter() - wall < seconds:
        await hand_off(step)
        count += 1
    return {
        "handoffs": count,
        "wall_us_per_handoff": round((time.perf_counter() - wall) / count * 1e6, 1),
        "loop_cpu_us_per_handoff": round((thread_cpu() - loop) / count * 1e6, 1),
        "process_cpu_us_per_handoff": round((time.process_time() - process) / count * 1e6, 1),
    }


async def busy_loop(seconds: float, per_slice: int) -> None:
    """Slices of Python work with a checkpoint between them."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        python_work(per_slice)
        await trio.lowlevel.checkpoint()


async def busy(
    hand_off: HandOff, step: Callable[[], object], seconds: float, per_slice: int
) -> dict:
    waits: list[float] = []

    async def hand_offs() -> None:
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            await hand_off(step)
            waits.append(time.perf_counter() - started)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(busy_loop, seconds, per_slice)
        nursery.start_soon(hand_offs)
    waits.sort()
    return {
        "handoffs": len(waits),
        "handoffs_per_s": round(len(waits) / seconds, 1),
        "wall_ms_per_handoff_p50": round(statistics.median(waits) * 1000, 2),
        "wall_ms_per_handoff_p99": round(percentile(waits, 0.99) * 1000, 2),
    }


def gil_wait(seconds: float, per_slice: int, release: bool) -> dict:
    """What a thread waits for the GIL after a 1 ms sleep beside a busy main thread."""
    waits: list[float] = []
    deadline = time.perf_counter() + seconds

    def sleeper() -> None:
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            time.sleep(0.001)
            waits.append(time.perf_counter() - started - 0.001)

    thread = threading.Thread(target=sleeper)
    thread.start()
    while time.perf_counter() < deadline:
        python_work(per_slice)
        if release:
            select.select([], [], [], 0)
    thread.join()
    waits.sort()
    return {
        "wakeups": len(waits),
        "wait_ms_p50": round(statistics.median(waits) * 1000, 2),
        "wait_ms_p99": round(percentile(waits, 0.99) * 1000, 2),
        "wait_ms_max": round(waits[-1] * 1000, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--slice-us", type=float, default=100.0)
    parser.add_argument("--write-bytes", type=int, default=11_000)
    parser.add_argument("--short-switch-ms", type=float, default=0.5)
    parser.add_argument("--out", default=str(RESULT))
    args = parser.parse_args()
    directory = "/dev/shm" if Path("/dev/shm").is_dir() else None
    fd, path = tempfile.mkstemp(dir=directory)
    data = bytes(args.write_bytes)
    position = [0]

    def pwrite() -> None:
        os.pwrite(fd, data, position[0])
        position[0] = (position[0] + len(data)) % (64 << 20)  # stays within 64 MB of tmpfs

    steps: dict[str, Callable[[], object]] = {"nothing": lambda: None, "pwrite": pwrite}
    per_slice = iterations_per_slice(args.slice_us)
    default_switch = sys.getswitchinterval()

    async def run() -> dict:
        result: dict = {}
        for name, step in steps.items():
            row: dict = {"inline": inline(step, args.seconds)}
            for via, hand_off in HAND_OFFS.items():
                row[f"{via}_idle"] = await idle(hand_off, step, args.seconds)
                for switch_s in (default_switch, args.short_switch_ms / 1000):
                    sys.setswitchinterval(switch_s)
                    try:
                        row[f"{via}_busy_switch_{switch_s * 1000:g}ms"] = await busy(
                            hand_off, step, args.seconds, per_slice
                        )
                    finally:
                        sys.setswitchinterval(default_switch)
            result[name] = row
            print(name, json.dumps(row, indent=1), flush=True)
        return result

    gil = {
        "main_thread_never_blocks": gil_wait(args.seconds, per_slice, release=False),
        "main_thread_selects_after_each_slice": gil_wait(args.seconds, per_slice, release=True),
    }
    print("gil_wait", json.dumps(gil, indent=1), flush=True)
    try:
        steps_result = trio.run(run)
    finally:
        os.close(fd)
        os.unlink(path)
    write_result(
        Path(args.out),
        {
            "benchmark": "thread_handoff",
            "method": __doc__.split("\n\n")[1],
            "slice_us": args.slice_us,
            "write_bytes": args.write_bytes,
            "gil_wait": gil,
            "steps": steps_result,
            **machine(),
        },
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
