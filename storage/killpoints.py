"""Kill points: the places inside cleaning and moves between log dirs where a crash test stops
the process.

The cleaner (storage/cleaner.py), the swap protocol (storage/swap.py) and LogManager's
swap_in_future (storage/manager.py) call :func:`reached`
with one of :data:`POINTS` at every step whose interruption leaves different files behind.
It does nothing; a test replaces it (``monkeypatch.setattr(killpoints, "reached", ...)``) with
a function that raises at the n-th call, then abandons the Log and reopens the directory, as a
kill -9 at that instant would leave it (data not yet fsynced is still in the page cache, so the
test covers the ordering of the steps, not the fsyncs). Callers look the function up on this
module at each call, so the replacement takes effect everywhere; nothing else assigns it.
"""

from __future__ import annotations

CLEANING_POINTS = (
    "cleaning",  # a cleaned segment's .cleaned files partly written
    "cleaned-written",  # .cleaned files complete and fsynced, no swap manifest yet
    "manifest-written",  # the swap manifest is durable; nothing renamed yet
    "indexes-swapped",  # index .cleaned files renamed to .swap, the .log not yet
    "log-swapped",  # the .log renamed to .swap: the swap is committed
    "replaced-deleted",  # the replaced segments renamed to .deleted
    "swap-installed",  # the .swap files renamed in; the manifest not yet removed
    "checkpoint",  # every swap complete, the checkpoint moved in memory, its file not written
)
MOVE_POINTS = (
    "move-renamed",  # a moved log renamed into place, its old copy still there
    "move-old-renamed",  # the old copy renamed -delete, the moved log's marker not yet removed
)
POINTS = CLEANING_POINTS + MOVE_POINTS


def reached(point: str) -> None:
    """Called when cleaning reaches ``point`` (one of POINTS); a no-op outside tests."""
