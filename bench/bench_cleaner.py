"""Log cleaner benchmark: cleaning throughput and peak memory for a log of 10^6 distinct keys.

The log: every key written ``--versions`` times in one random order (so each batch mixes
superseded and latest values and is rewritten), random 100-byte values, record batches of 1,000
records (uncompressed, and in a second run gzip),
64 MiB segments, all of it dirty. One cleaning (storage.cleaner.Cleaner.clean) runs in a fresh
subprocess with a dedupe buffer large enough for every key, so the figures are one pass: CPU
seconds, wall seconds, MB of dirty log per CPU second (Kafka's "log processed" counts the bytes
read while building the offset map and while recopying; here both are given), and the
subprocess's peak RSS above what it held before cleaning (ru_maxrss), next to the offset map's
own accounted size (OFFSET_MAP_ENTRY_BYTES per key).

The log is built on the disk under the temp dir without fsync (appends of validated sets; the
roll fsyncs are few with 64 MiB segments). Runtime: a few minutes on an idle 2-core machine.

Usage: python bench/bench_cleaner.py [--keys 1000000] [--versions 2]
Writes bench/results/cleaner.json and prints it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_e2e import machine, write_result  # noqa: E402

from protocol import recordbatch as rb  # noqa: E402
from protocol.compression import Codec  # noqa: E402
from protocol.validator import ValidatedRecords  # noqa: E402
from storage import Log, LogConfig  # noqa: E402
from storage.cleaner import OFFSET_MAP_ENTRY_BYTES, LOAD_FACTOR, Cleaner  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "cleaner.json"
NOW = 1_700_000_000_000
MIB = 1024 * 1024
BATCH = 1000
SEGMENT_BYTES = 64 * MIB


def quiet() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))


def config() -> LogConfig:
    return LogConfig(cleanup_policy="compact", segment_bytes=SEGMENT_BYTES, file_delete_delay_ms=0)


def build(directory: str, keys: int, versions: int, codec: Codec) -> dict:
    """Write the log: every key ``versions`` times, in one random order (so a batch holds old
    and new values mixed and is rewritten, not dropped or copied whole), random values."""
    rng = random.Random(1)
    log = Log(directory, config(), clock=lambda: NOW, needs_recovery=False)
    order = [k for k in range(keys) for _ in range(versions)]
    rng.shuffle(order)
    for start in range(0, len(order), BATCH):
        chunk = order[start : start + BATCH]
        base = log.log_end_offset
        ts = NOW + start
        buffer = rb.build_batch(
            rb.BatchSpec(base_offset=base, codec=codec, partition_leader_epoch=0),
            [(i, ts, b"key-%09d" % k, rng.randbytes(100), ()) for i, k in enumerate(chunk)],
        )
        last = base + len(chunk) - 1
        log.append(ValidatedRecords(buffer, base, last, ts, last, -1, len(chunk)))
    log.roll()
    size = log.size
    segments = len(log.segments) - 1
    log.close()
    return {"records": len(order), "dirty_bytes": size, "segments": segments}


def clean_in_this_process(directory: str, buffer_bytes: int) -> dict:
    """The --clean-only subprocess: open the log, clean it once, report."""
    quiet()
    log = Log(directory, config(), clock=lambda: NOW, needs_recovery=False)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    cleaner = Cleaner(buffer_bytes)
    cpu, wall = time.process_time(), time.perf_counter()
    result = cleaner.clean(log, NOW, force=True)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert result is not None and result.swapped
    stats = result.stats
    size_after = log.size
    log.close()
    return {
        "cpu_s": round(cpu, 2),
        "wall_s": round(wall, 2),
        "map_bytes_read": stats.map_bytes_read,
        "bytes_read": stats.bytes_read,
        "bytes_written": stats.bytes_written,
        "size_after": size_after,
        "messages_read": stats.messages_read,
        "messages_written": stats.messages_written,
        "keys_mapped": stats.keys_mapped,
        "map_done_s": round(stats.map_done - stats.started, 2),
        "rss_before_mb": round(rss_before / MIB, 1),
        "rss_peak_mb": round(rss_peak / MIB, 1),
        "end_offset": result.end_offset,
    }


def run(tmp: str, keys: int, versions: int, codec: Codec) -> dict:
    directory = os.path.join(tmp, f"bench-{codec.name.lower()}-0")
    built = build(directory, keys, versions, codec)
    buffer_bytes = int(keys * OFFSET_MAP_ENTRY_BYTES / LOAD_FACTOR) + MIB
    out = subprocess.run(
        [sys.executable, __file__, "--clean-only", directory, "--buffer", str(buffer_bytes)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    cleaned = json.loads(out.strip().splitlines()[-1])
    shutil.rmtree(directory)
    dirty_mb = built["dirty_bytes"] / MIB
    processed_mb = (cleaned["map_bytes_read"] + cleaned["bytes_read"]) / MIB
    return {
        "codec": codec.name.lower(),
        "keys": keys,
        "versions_per_key": versions,
        **built,
        "dedupe_buffer_bytes": buffer_bytes,
        **cleaned,
        "dirty_mb_per_cpu_s": round(dirty_mb / cleaned["cpu_s"], 2),
        "log_processed_mb_per_cpu_s": round(processed_mb / cleaned["cpu_s"], 2),
        "records_per_cpu_s": round(built["records"] / cleaned["cpu_s"]),
        "rss_growth_mb": round(cleaned["rss_peak_mb"] - cleaned["rss_before_mb"], 1),
        "offset_map_accounted_mb": round(cleaned["keys_mapped"] * OFFSET_MAP_ENTRY_BYTES / MIB, 1),
        "rss_bytes_per_key": round(
            (cleaned["rss_peak_mb"] - cleaned["rss_before_mb"]) * MIB / cleaned["keys_mapped"]
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--versions", type=int, default=2)
    parser.add_argument("--clean-only", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--buffer", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.clean_only:
        print(json.dumps(clean_in_this_process(args.clean_only, args.buffer)))
        return
    quiet()
    tmp = tempfile.mkdtemp(prefix="bench-cleaner-")
    try:
        runs = [run(tmp, args.keys, args.versions, codec) for codec in (Codec.NONE, Codec.GZIP)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = {
        "benchmark": "log cleaner: one cleaning of a fully dirty log",
        **machine(),
        "runs": runs,
        "kafka_design": {
            "offset_map_bytes_per_key": 24,
            "log_head_per_8gb_buffer_gb": 366,
            "source": "Kafka 3.9 docs/design.html, Log Compaction Details (1 KB messages)",
        },
    }
    write_result(RESULTS, result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
