"""Log.append's cost per batch, in-process (issue #33: per-batch fixed costs bind a wide load).

v2 batches of 100 records of 100 bytes with rising timestamps, so both indexes take an entry per
batch at the default index.interval.bytes, appended round-robin to N partitions (Logs in a
temporary directory); the batches are validated beforehand, so only the append is timed. Prints
the CPU time (process_time) a batch, min and median of 15 runs of 3,000 batches, and the
descriptors the N written partitions hold. Usage: python bench/bench_log_append.py [N ...]
(default 1 1000). Nothing is written to bench/results: a figure worth keeping goes to NOTES.md.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

from protocol import recordbatch as rb
from protocol.validator import TopicSettings, ValidatedRecords, validate_produce
from storage import Log, LogConfig

NOW = 1_700_000_000_000
RUNS, BATCHES = 15, 3000


def batch(timestamp: int, offset: int) -> ValidatedRecords:
    records = [(i, timestamp, None, b"v" * 100, ()) for i in range(100)]
    result = validate_produce(
        rb.build_batch(rb.BatchSpec(), records),
        TopicSettings(magic=2),
        next_offset=offset,
        now_ms=NOW,
    )
    assert isinstance(result, ValidatedRecords), result
    return result


def measure(partitions: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        fds = len(os.listdir("/proc/self/fd"))
        logs = [
            Log(
                os.path.join(directory, f"t-{p}"),
                LogConfig(),
                clock=lambda: NOW,
                needs_recovery=False,
            )
            for p in range(partitions)
        ]
        runs, timestamp = [], NOW
        for _ in range(RUNS):
            order = [logs[i % partitions] for i in range(max(BATCHES, partitions))]
            ends = {id(log): log.log_end_offset for log in logs}
            sets = []
            for log in order:
                timestamp += 1
                sets.append(batch(timestamp, ends[id(log)]))
                ends[id(log)] += 100
            started = time.process_time()
            for log, records in zip(order, sets):
                log.append(records)
            runs.append((time.process_time() - started) / len(order) * 1e6)
        held = len(os.listdir("/proc/self/fd")) - fds
        for log in logs:
            log.close()
    runs.sort()
    print(
        f"{partitions} partitions: {runs[0]:.1f} µs a batch CPU at best, {runs[RUNS // 2]:.1f} "
        f"median; {held} descriptors held"
    )


if __name__ == "__main__":
    for n in [int(a) for a in sys.argv[1:]] or [1, 1000]:
        measure(n)
