"""Long loops on the event loop, cut into slices (issue #33: no client stalls another).

A handler that walks every partition the broker has (Metadata or DescribeLogDirs for all
topics) reads broker state that only the loop's thread may touch, so it cannot move to a
worker thread. At 10,000 partitions such a walk held the loop 9 ms (Metadata) and about
100 ms (DescribeLogDirs) in one piece; every other connection waited that long.
"""

from __future__ import annotations

from time import perf_counter

import trio

# How long a loop runs before other tasks get their turn: about a small produce's share of the
# loop many times over, short enough that nobody notices the wait.
SLICE_S = 0.001


class Slices:
    """Times one task's loop: ``await slices.turn()`` between two steps lets other tasks run
    once SLICE_S has passed since the last turn, and costs one clock read otherwise. The yield
    raises nothing (trio.lowlevel.cancel_shielded_checkpoint): a caller that was not a place
    to be cancelled before does not become one. A caller with something to do before it
    yields (send what it holds) asks ``due()`` first."""

    __slots__ = ("_ends",)

    def __init__(self) -> None:
        self._ends = perf_counter() + SLICE_S

    def due(self) -> bool:
        """True once SLICE_S has passed since the last turn."""
        return perf_counter() >= self._ends

    async def turn(self) -> None:
        if self.due():
            await trio.lowlevel.cancel_shielded_checkpoint()
            self._ends = perf_counter() + SLICE_S
