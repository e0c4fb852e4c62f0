"""Storage benchmarks: append throughput, search by timestamp, recovery scan, idle partitions.

* append: 100-byte messages (magic 1, no key) in 16 KiB validated sets, appended to one Log;
  once with segment.bytes 1 GiB (no roll, so no fsync) and once with 4 MiB segments (a roll,
  hence an fsync of the old segment, every 4 MiB). Sets are validated before timing; median of
  3 rounds.
* search: offset_for_timestamp on a log of 1,000 segments (out-of-order CreateTime within each
  segment), reopened first; p50/p99 per search for the same 2,000 targets twice: the first pass
  loads indexes lazily as it touches them, the second runs warm.
* recovery: a log written without a clean shutdown is reopened with recovery point 0; MB/s of
  the CRC-checking scan that rebuilds the indexes.
* idle partitions: 10,000 partition directories (one small sealed segment each, clean-shutdown
  marker and checkpoint present) opened by LogManager.startup() in a fresh subprocess, so its
  RSS is clean: open time, RSS growth per partition, file descriptors held.

Rates are given per second of wall time and of this process's CPU time (the machine is shared,
so CPU time is the steadier figure). Appends run on the disk under the temp dir (fsync is real);
the search, recovery and idle-partition data sets are built on tmpfs (/dev/shm) when present,
because building them takes thousands of fsyncs (every roll fsyncs) that would blow the time
budget while the measured operations read from the page cache either way. Runtime is bounded
(about a minute on an idle 2-core machine).

Usage: python bench/bench_storage.py [--partitions 10000] [--append-mib 48]
Writes bench/results/storage.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import structlog

from protocol.records import MessageSetBuilder
from protocol.validator import TopicSettings, ValidatedRecords, validate_produce
from storage import Log, LogConfig, LogManager
from storage.checkpoint import write_checkpoint, write_clean_shutdown_marker

RESULTS = Path(__file__).resolve().parent / "results" / "storage.json"
NOW = 1_700_000_000_000
VALUE = bytes(range(100))
SET_BYTES = 16 * 1024
MIB = 1024 * 1024


def quiet() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))


def make_sets(
    count: int, *, start_offset: int = 0, spread_ms: int = 0, rng: random.Random | None = None
) -> list[ValidatedRecords]:
    """``count`` validated 16 KiB sets of 100-byte messages with consecutive offsets."""
    per_set = SET_BYTES // (12 + 22 + 4 + 4 + len(VALUE))
    sets, offset = [], start_offset
    for i in range(count):
        b = MessageSetBuilder(magic=1)
        for j in range(per_set):
            jitter = rng.randrange(spread_ms) if rng and spread_ms else 0
            b.append(VALUE, timestamp=NOW + i * 1000 + jitter)
        v = validate_produce(b.build(), TopicSettings(), next_offset=offset, now_ms=NOW)
        assert isinstance(v, ValidatedRecords)
        sets.append(v)
        offset = v.last_offset + 1
    return sets


def clock() -> int:
    return NOW + 10**6


def bench_append(
    tmp: str, sets: list[ValidatedRecords], segment_bytes: int, rounds: int = 3
) -> dict:
    """Median of ``rounds`` runs, each appending every set to a fresh log."""
    messages = sum(v.message_count for v in sets)
    nbytes = sum(len(v.buffer) for v in sets)
    runs = []
    for r in range(rounds):
        directory = os.path.join(tmp, f"append{segment_bytes}.{r}-0")
        log = Log(
            directory, LogConfig(segment_bytes=segment_bytes), clock=clock, needs_recovery=False
        )
        cpu, wall = time.process_time(), time.perf_counter()
        for v in sets:
            log.append(v)
        runs.append((time.perf_counter() - wall, time.process_time() - cpu))
        segments = len(log.segments)
        log.close()
        shutil.rmtree(directory)
    wall = sorted(w for w, _ in runs)[rounds // 2]
    cpu = sorted(c for _, c in runs)[rounds // 2]
    return {
        "segment_bytes": segment_bytes,
        "segments": segments,
        "messages": messages,
        "bytes": nbytes,
        "seconds": round(wall, 3),
        "messages_per_s": round(messages / wall),
        "mb_per_s": round(nbytes / wall / MIB, 1),
        "messages_per_cpu_s": round(messages / cpu),
        "mb_per_cpu_s": round(nbytes / cpu / MIB, 1),
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def bench_search(tmp: str, segments: int, searches: int) -> dict:
    directory = os.path.join(tmp, "search-0")
    rng = random.Random(5)
    log = Log(directory, LogConfig(index_interval_bytes=4096), clock=clock, needs_recovery=False)
    for v in make_sets(segments, spread_ms=5000, rng=rng):
        log.append(v)
        log.roll()
    last = NOW + segments * 1000 + 5000
    log.close()
    log = Log(directory, log.config, clock=clock, needs_recovery=False)
    targets = [rng.randrange(NOW, last + 1000) for _ in range(searches)]
    passes = {}
    for name in ("cold", "warm"):  # cold: indexes load lazily on first touch
        latencies = []
        found = 0
        for target in targets:
            start = time.perf_counter()
            result = log.offset_for_timestamp(target)
            latencies.append(time.perf_counter() - start)
            found += result is not None
        passes[name] = {
            "p50_us": round(percentile(latencies, 0.5) * 1e6),
            "p99_us": round(percentile(latencies, 0.99) * 1e6),
            "max_us": round(max(latencies) * 1e6),
        }
    log.close()
    shutil.rmtree(directory)
    return {
        "segments": segments,
        "searches": searches,
        "found": found,
        "p50_us": passes["warm"]["p50_us"],
        "p99_us": passes["warm"]["p99_us"],
        "first_pass_after_open": passes["cold"],
    }


def bench_recovery(tmp: str, sets: list[ValidatedRecords]) -> dict:
    directory = os.path.join(tmp, "recovery-0")
    log = Log(directory, LogConfig(segment_bytes=16 * MIB), clock=clock, needs_recovery=False)
    for v in sets:
        log.append(v)
    log.close()
    size = sum(
        os.path.getsize(os.path.join(directory, n))
        for n in os.listdir(directory)
        if n.endswith(".log")
    )
    cpu, wall = time.process_time(), time.perf_counter()
    log = Log(directory, log.config, clock=clock, needs_recovery=True, recovery_point=0)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert log.log_end_offset == sets[-1].last_offset + 1
    log.close()
    shutil.rmtree(directory)
    return {
        "bytes": size,
        "seconds": round(wall, 3),
        "mb_per_s": round(size / wall / MIB, 1),
        "mb_per_cpu_s": round(size / cpu / MIB, 1),
    }


def build_idle_layout(root: str, partitions: int) -> None:
    """What a clean shutdown of ``partitions`` one-message partitions leaves on disk."""
    template = os.path.join(root, "template-0")
    log = Log(template, LogConfig(), clock=clock, needs_recovery=False)
    b = MessageSetBuilder(magic=1)
    b.append(VALUE, timestamp=NOW)
    log.append(validate_produce(b.build(), TopicSettings(), next_offset=0, now_ms=NOW))
    log.close()
    log_dir = os.path.join(root, "logs")
    os.makedirs(log_dir)
    for p in range(partitions):
        shutil.copytree(template, os.path.join(log_dir, f"idle-{p}"))
    write_checkpoint(
        os.path.join(log_dir, "recovery-point-offset-checkpoint"),
        {("idle", p): 1 for p in range(partitions)},
    )
    write_clean_shutdown_marker(log_dir)


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def child_open(log_dir: str) -> None:
    """Run in a fresh interpreter: open every log and print figures as JSON."""
    quiet()
    before_rss, before_fds = rss_kib(), len(os.listdir("/proc/self/fd"))
    manager = LogManager([log_dir], lambda topic: LogConfig(), clock)
    start = time.perf_counter()
    manager.startup()
    seconds = time.perf_counter() - start
    after_rss, after_fds = rss_kib(), len(os.listdir("/proc/self/fd"))
    n = len(manager.all_logs())
    print(
        json.dumps(
            {
                "partitions": n,
                "open_seconds": round(seconds, 2),
                "rss_before_mib": round(before_rss / 1024, 1),
                "rss_after_mib": round(after_rss / 1024, 1),
                "rss_per_partition_kib": round((after_rss - before_rss) / n, 2),
                "fds_held": after_fds - before_fds,
            }
        )
    )


def bench_idle(tmp: str, partitions: int) -> dict:
    root = os.path.join(tmp, "idle")
    start = time.perf_counter()
    build_idle_layout(root, partitions)
    built = time.perf_counter() - start
    out = subprocess.run(
        [sys.executable, __file__, "--child-open", os.path.join(root, "logs")],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    shutil.rmtree(root)
    result = json.loads(out.strip().splitlines()[-1])
    result["layout_build_seconds"] = round(built, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--append-mib", type=int, default=64)
    parser.add_argument("--search-segments", type=int, default=1000)
    parser.add_argument("--child-open", metavar="LOG_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_open:
        child_open(args.child_open)
        return
    quiet()
    tmp = tempfile.mkdtemp(prefix="bench-storage-")
    scratch = tempfile.mkdtemp(
        prefix="bench-storage-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
    )
    phases: dict[str, float] = {}

    def timed(name, fn, *fn_args):
        start = time.perf_counter()
        result = fn(*fn_args)
        phases[name] = round(time.perf_counter() - start, 1)
        return result

    try:
        sets = timed("prepare_sets", make_sets, args.append_mib * MIB // SET_BYTES)
        results = {
            "append_no_roll": timed("append_no_roll", bench_append, tmp, sets, 1024 * MIB),
            "append_roll_4mib_fsync": timed("append_roll", bench_append, tmp, sets, 4 * MIB),
            "search_1000_segments": timed(
                "search", bench_search, scratch, args.search_segments, 2000
            ),
            "recovery_scan": timed(
                "recovery", bench_recovery, scratch, sets[: 32 * MIB // SET_BYTES]
            ),
            "idle_partitions": timed("idle", bench_idle, scratch, args.partitions),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
    results["phase_seconds"] = phases
    results["data_dirs"] = {"append": "disk (temp dir)", "other": scratch.rsplit("/", 1)[0]}
    results["machine"] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 1),
        "note": "shared machine; CPU-time rates are the steadier figures",
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    a, r = results["append_no_roll"], results["append_roll_4mib_fsync"]
    s, rec, idle = (
        results["search_1000_segments"],
        results["recovery_scan"],
        results["idle_partitions"],
    )
    rows = [
        (
            "append, no roll",
            f"{a['messages_per_s']:,} msg/s  {a['mb_per_s']} MB/s wall; "
            f"{a['messages_per_cpu_s']:,} msg/s  {a['mb_per_cpu_s']} MB/s CPU",
        ),
        (
            "append, 4 MiB roll+fsync",
            f"{r['messages_per_s']:,} msg/s  {r['mb_per_s']} MB/s wall; "
            f"{r['messages_per_cpu_s']:,} msg/s  {r['mb_per_cpu_s']} "
            f"MB/s CPU ({r['segments']} segments)",
        ),
        (
            "timestamp search, 1000 seg",
            f"p50 {s['p50_us']} us  p99 {s['p99_us']} us "
            f"(first pass after open: p50 "
            f"{s['first_pass_after_open']['p50_us']} us  p99 "
            f"{s['first_pass_after_open']['p99_us']} us)",
        ),
        ("recovery scan", f"{rec['mb_per_s']} MB/s wall, {rec['mb_per_cpu_s']} MB/s CPU"),
        (
            f"open {idle['partitions']:,} idle partitions",
            f"{idle['open_seconds']} s, RSS +{idle['rss_per_partition_kib']} KiB/partition "
            f"({idle['rss_after_mib']} MiB total), {idle['fds_held']} fds held",
        ),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
