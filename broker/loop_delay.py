"""How long the event loop keeps a ready task waiting (issue #33: no client stalls another).

One task asks to wake every INTERVAL_S and records how late it woke, as Node's
monitorEventLoopDelay does. Whatever runs on the loop without yielding (a long handler step, a
big decode) delays that wake-up exactly as it delays every connection's next request, so the
histogram samples the wait the loop adds to requests at moments unrelated to them, without
touching the request path.
A delay of STALL_WARN_S or more is logged (at most once per WARN_EVERY_S): the broker broke its
own rule that nothing on the loop takes long. ``/metrics`` shows the histogram as
``chronolog_event_loop_delay_seconds``. Ten wake-ups a second: an idle broker's CPU goes from
0.0005 to 0.003 of a core (at 100 a second, Node's default, it was 0.02: a wake-up of the
loop costs about 0.3 ms of CPU here).
"""

from __future__ import annotations

from bisect import bisect_left

import structlog
import trio

logger = structlog.get_logger(__name__)

INTERVAL_S = 0.1
STALL_WARN_S = 0.5
WARN_EVERY_S = 10.0
# Upper bounds of the histogram's buckets, in seconds (a last one, +Inf, holds the rest).
BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class LoopDelay:
    """The delay histogram (``counts`` per bucket of BUCKETS_S and one for +Inf, ``sum_s``,
    ``max_s``) and :meth:`run`, the task that fills it. Trio thread only."""

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS_S) + 1)
        self.sum_s = 0.0
        self.max_s = 0.0
        self._warned_at = -WARN_EVERY_S

    def record(self, late_s: float, now: float) -> None:
        """One wake-up ``late_s`` seconds late, at trio time ``now``."""
        late_s = max(late_s, 0.0)
        self.counts[bisect_left(BUCKETS_S, late_s)] += 1
        self.sum_s += late_s
        self.max_s = max(self.max_s, late_s)
        if late_s >= STALL_WARN_S and now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            logger.warning(
                "event loop stalled: a task ran without yielding and every client waited",
                delay_ms=round(late_s * 1000, 1),
                action="a broker bug (work that belongs in a worker thread): report this line "
                "with what the broker was serving at the time",
            )

    def cumulative(self) -> list[tuple[str, int]]:
        """(upper bound, count at or below it) per bucket, +Inf last: Prometheus' buckets."""
        out, total = [], 0
        for bound, count in zip([*map(str, BUCKETS_S), "+Inf"], self.counts):
            total += count
            out.append((bound, total))
        return out

    async def run(self) -> None:
        """Measure until cancelled."""
        while True:
            asked = trio.current_time() + INTERVAL_S
            await trio.sleep_until(asked)
            now = trio.current_time()
            self.record(now - asked, now)


__all__ = ["LoopDelay", "BUCKETS_S", "INTERVAL_S", "STALL_WARN_S"]
