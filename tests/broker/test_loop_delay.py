"""The event loop's delay monitor (broker/loop_delay.py): its histogram, its stall warning, and
that a step holding the loop shows up as a late wake-up."""

from __future__ import annotations

import time

import trio
from structlog.testing import capture_logs

from broker.loop_delay import BUCKETS_S, STALL_WARN_S, LoopDelay


def test_histogram_counts_each_delay_in_its_bucket_and_cumulates():
    delay = LoopDelay()
    for late in (0.0001, 0.0005, 0.003, 0.003, 0.2, 7.0, -0.001):
        delay.record(late, now=100.0)
    buckets = dict(delay.cumulative())
    assert buckets["0.0005"] == 3  # -0.001 counts as 0, and 0.0005 is at its bound (le)
    assert buckets["0.005"] == 5
    assert buckets["0.25"] == 6
    assert buckets[str(BUCKETS_S[-1])] == 6 and buckets["+Inf"] == 7
    assert delay.max_s == 7.0
    assert abs(delay.sum_s - 7.2066) < 1e-9


def test_a_stall_is_logged_once_per_ten_seconds():
    delay = LoopDelay()
    with capture_logs() as logs:
        delay.record(STALL_WARN_S, now=1000.0)
        delay.record(STALL_WARN_S * 2, now=1005.0)  # within ten seconds: counted, not logged
        delay.record(0.001, now=1011.0)
        delay.record(STALL_WARN_S, now=1011.0)
    stalls = [e for e in logs if e["event"].startswith("event loop stalled")]
    assert [e["delay_ms"] for e in stalls] == [500.0, 500.0]


async def test_a_step_that_holds_the_loop_is_seen_as_a_late_wake_up():
    delay = LoopDelay()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(delay.run)
        await trio.sleep(0.05)
        time.sleep(0.3)  # a step that does not yield, as a bug on the loop would
        await trio.sleep(0.15)
        nursery.cancel_scope.cancel()
    assert delay.max_s >= 0.2  # woken at least 0.2 s late: the step began 0.05 s after it asked
    assert sum(delay.counts) >= 2
