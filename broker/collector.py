"""Short pauses of Python's cyclic garbage collector at many partitions: what survives a full
collection is frozen, out of the collector's sight, until a thaw.

A full (generation 2) collection visits every container object the collector tracks, holding the
GIL: nothing else runs, the event loop included. At 10,000 partitions (logs, segments, indexes,
their state) a full collection took 68-94 ms on this 2-core machine and found nothing to
collect, and while clients asked for Metadata of every partition one ran about every 60 ms: the
answers' tens of thousands of objects outlive the young collections they cause, so the old
generation keeps growing by the quarter that triggers a full one. A client's ApiVersions round
trip beside them: p50 82 ms (bench/bench_metadata_stall.py, bench/results/metadata_stall.json).

After each full collection every survivor is reachable, so :func:`install` freezes them all
(``gc.freeze``, which moves the collector's lists, O(1)); the next full collections visit only
what was created since (4-6 ms there). What is frozen and later becomes cyclic garbage (a
deleted topic's partitions, a long-lived connection once closed) is not collected while frozen:
:func:`thaw` gives it back to the collector, which the broker does after deleting partitions
and every THAW_INTERVAL_S, each costing one full collection's pause when it next comes.
"""

from __future__ import annotations

import gc
from typing import Any

__all__ = ["THAW_INTERVAL_S", "install", "settle", "thaw"]

# Bounds what frozen objects turned garbage can hold (connections closed since the last thaw) at
# one full pause per interval.
THAW_INTERVAL_S = 600.0


def _freeze_after_full_collection(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info["generation"] == 2:
        gc.freeze()


def install() -> None:
    """Freeze the survivors of every full collection from now on (once per process)."""
    if _freeze_after_full_collection not in gc.callbacks:
        gc.callbacks.append(_freeze_after_full_collection)


def settle() -> None:
    """Once installed, collect (and so freeze) now: after the logs are loaded, before clients
    are served, so the first full collection's pause is nobody's wait."""
    if _freeze_after_full_collection in gc.callbacks:
        gc.collect()


def thaw() -> None:
    """Let the next full collection visit the frozen objects again (and collect those that
    became garbage); it freezes the survivors once more."""
    gc.unfreeze()
