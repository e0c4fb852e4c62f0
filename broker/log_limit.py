"""Log lines a client can cause by the thousand, let through once per key per interval.

A producer that writes to a missing topic names every partition of it in every request, and each
refusal was a warning line: about 20 µs of the event loop apiece, so one such client with 100
partitions cost every other client 2 ms a request, and filled the log with the same line. Kafka
logs these refusals at debug level only (KafkaApis.handleProduceRequest); chronolog still warns
once what happened, to which topic, and how many like it were left out since.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable

# Distinct keys remembered at most (a client inventing topic names must not grow memory):
# beyond it the counts start over, which at worst lets a few more lines through.
MAX_KEYS = 10_000


class OncePerInterval:
    """Decides which of a repeated log line's occurrences are written: the first for a key,
    then the first after ``interval_s`` has passed since the last one written. ``clock``:
    seconds, monotonic (injected for tests)."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._last: dict[Hashable, tuple[float, int]] = {}  # key -> (written at, left out since)

    def admit(self, key: Hashable) -> int | None:
        """None to leave this occurrence out; otherwise write it, with the number of
        occurrences left out since the last one written for ``key`` (0 the first time)."""
        now = self._clock()
        seen = self._last.get(key)
        if seen is not None and now - seen[0] < self.interval_s:
            self._last[key] = (seen[0], seen[1] + 1)
            return None
        if seen is None and len(self._last) >= MAX_KEYS:
            self._last.clear()
        self._last[key] = (now, 0)
        return 0 if seen is None else seen[1]
