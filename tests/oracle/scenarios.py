"""Records with known timestamps for the tests in tests/oracle/, and the brute-force answers to
"which offset does time T start at?" computed from them, independently of any broker.

Timestamps go up one second a record but not monotonically: every 7th record is 0.7 s late and
every 11th 1.5 s early (all distinct), so a time index has entries to skip and an answer that
only looks at batch boundaries or the previous record is wrong somewhere.
"""

from __future__ import annotations

import random
import time
from typing import Any


def timed_records(
    count: int, base_ms: int | None = None, value_bytes: int = 0
) -> list[dict[str, Any]]:
    """``count`` records for JavaClients' produce op: key "k-i", value "v-i-" padded to
    ``value_bytes`` with seeded random hex (compressed batches still fill segments), the
    timestamps above from ``base_ms`` (default: an hour ago), a header "seq"."""
    base = base_ms if base_ms is not None else int(time.time() * 1000) - 3_600_000
    records = []
    for i in range(count):
        skew = (700 if i % 7 == 3 else 0) - (1500 if i % 11 == 5 else 0)
        value = f"v-{i}-"
        pad = max(0, value_bytes - len(value))
        records.append(
            {
                "key": f"k-{i}",
                "value": value + random.Random(i).randbytes(pad).hex()[:pad],
                "timestamp": base + 1000 * i + skew,
                "headers": [["seq", str(i)]],
            }
        )
    return records


def query_times(timestamps: list[int]) -> list[int]:
    """Times to ask about: before everything, every timestamp and one ms either side of some,
    and after everything."""
    asked = {min(timestamps) - 10_000, max(timestamps), max(timestamps) + 1}
    for i, t in enumerate(timestamps):
        asked.add(t)
        if i % 5 == 0:
            asked.update((t - 1, t + 1))
    return sorted(asked)


def first_at_or_after(stored: list[tuple[int, int]], target: int) -> tuple[int, int] | None:
    """Brute force over (offset, timestamp) in offset order: the first record whose timestamp
    is >= target, as (offset, timestamp), or None (what offsetsForTimes means)."""
    return next(((o, t) for o, t in stored if t >= target), None)


def max_timestamp(stored: list[tuple[int, int]]) -> tuple[int, int]:
    """The (offset, timestamp) of the first record with the largest timestamp (ListOffsets
    MAX_TIMESTAMP, KIP-734)."""
    top = max(t for _, t in stored)
    return next((o, t) for o, t in stored if t == top)
