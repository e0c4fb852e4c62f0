"""Committed offsets beside their log ends (broker/groups/lag.py), what the lag gauges and the
console's group pages show."""

from __future__ import annotations

from types import SimpleNamespace

import trio

from broker.groups.lag import CommittedAndEnd, committed_and_ends
from broker.groups.offsets import CommittedOffset, OffsetCache
from broker.slices import Slices


def offsets(*rows: tuple[str, str, int, int]) -> OffsetCache:
    cache = OffsetCache()
    for group, topic, partition, offset in rows:
        cache.put(group, topic, partition, CommittedOffset(offset, "", 0))
    return cache


async def test_each_committed_offset_beside_its_log_end():
    cache = offsets(("g", "t", 0, 5), ("g", "t", 1, 9), ("g", "gone", 0, 3), ("g", "t", 2, -1))
    cache.put("other", "t", 0, CommittedOffset(1, "", 0))
    ends = {("t", 0): 8, ("t", 1): 7}

    def get_log(topic: str, partition: int):
        end = ends.get((topic, partition))
        return None if end is None else SimpleNamespace(log_end_offset=end)

    rows = await committed_and_ends(cache, "g", get_log)
    assert sorted(rows) == [
        CommittedAndEnd("gone", 0, 3, None),  # a deleted topic: no log end, no lag
        CommittedAndEnd("t", 0, 5, 8),
        CommittedAndEnd("t", 1, 9, 7),
    ]  # the negative offset left out, and the other group's
    assert [r.lag for r in sorted(rows)] == [None, 3, 0]  # never negative


async def test_the_log_ends_are_read_in_slices_and_the_offsets_copied_at_once():
    """Other tasks run between partitions once a slice is used up; a commit landing meanwhile
    is not half seen."""
    cache = offsets(*(("g", "t", p, 1) for p in range(50)))
    read: list[tuple[str, int]] = []
    read_at_commit = []

    class EveryTurn(Slices):
        def due(self) -> bool:
            return True

    def get_log(topic: str, partition: int):
        read.append((topic, partition))
        return SimpleNamespace(log_end_offset=4)

    async def commit_meanwhile():
        await trio.lowlevel.checkpoint()
        read_at_commit.append(len(read))
        cache.put("g", "t", 99, CommittedOffset(1, "", 0))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(commit_meanwhile)
        rows = await committed_and_ends(cache, "g", get_log, EveryTurn())
    assert 0 < read_at_commit[0] < 50  # the commit came in the middle of the walk
    assert sorted(r.partition for r in rows) == list(range(50))
