"""Committed offsets beside their partitions' log ends: what consumer lag is made of, for the
/metrics gauges (broker/metrics.py) and the console's group pages (broker/console)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, NamedTuple

from broker.slices import Slices

if TYPE_CHECKING:
    from broker.groups.offsets import OffsetCache
    from storage.log import Log


class CommittedAndEnd(NamedTuple):
    """One committed (topic, partition) of a group and its log end; ``log_end`` None when this
    broker has no such partition (its topic was deleted, or another broker leads it)."""

    topic: str
    partition: int
    committed: int
    log_end: int | None

    @property
    def lag(self) -> int | None:
        return None if self.log_end is None else max(self.log_end - self.committed, 0)


async def committed_and_ends(
    offsets: OffsetCache,
    group: str,
    get_log: Callable[[str, int], Log | None],
    slices: Slices | None = None,
) -> list[CommittedAndEnd]:
    """``group``'s committed offsets (a negative one left out) with their log ends, unsorted.
    The group's offsets are copied at once, so a commit landing meanwhile shows whole or not at
    all; the log ends are read in ``slices`` (a group can have committed on every partition;
    a caller walking several groups passes one ``Slices`` for all of them)."""
    slices = slices or Slices()
    rows = []
    for (topic, partition), committed in offsets.of_group(group).items():
        await slices.turn()
        if committed.offset < 0:
            continue
        log = get_log(topic, partition)
        rows.append(
            CommittedAndEnd(
                topic, partition, committed.offset, log.log_end_offset if log is not None else None
            )
        )
    return rows
