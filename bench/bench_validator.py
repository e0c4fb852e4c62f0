"""Throughput of validate_produce (validate + assign offsets) on one core.

Sets of 100-byte values (null keys, magic 1, highly compressible) as a producer sends them,
16 KiB and 1 MiB: uncompressed under CreateTime and LogAppendTime, and lz4 / gzip wrappers with
the producer's codec kept (in place: decompress to check, rewrite the wrapper only); for
reference also the slow paths (gzip recompressed to a topic's lz4, magic-0 sets up-converted).
Then one record batch (magic 2) of the same values into a magic-2 topic, uncompressed and lz4
(the frame layout of Java's and librdkafka's producers), kept as sent and checked by the C scan
when it is built. Each case runs for about ``--seconds`` and reports the best of ``--repeats``
rounds. Rates are per second of this process's CPU time (single-threaded, so one core): the
machine is shared and wall-clock rates, also recorded, mostly measure the neighbours' load.
MiB/s counts the set as sent (compressed).

Usage: python bench/bench_validator.py [--seconds 1.0] [--repeats 3]
Writes bench/results/validator.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from protocol import recordbatch as rb
from protocol.records import Codec, MessageSetBuilder, TimestampType
from protocol.validator import TopicSettings, ValidatedRecords, validate_produce

NOW = 1_700_000_000_000
VALUE = bytes(range(100))
RESULTS = Path(__file__).resolve().parent / "results" / "validator.json"


def make_set(set_bytes: int, codec: Codec, magic: int = 1) -> tuple[bytes, int]:
    """A set of 100-byte values whose uncompressed size is at most ``set_bytes``."""
    per_entry = 12 + (22 if magic == 1 else 14) + len(VALUE)
    count = set_bytes // per_entry
    b = MessageSetBuilder(magic=magic, codec=codec)
    for i in range(count):
        b.append(VALUE, timestamp=NOW - count + i)
    return b.build(), count


def make_batch(set_bytes: int, codec: Codec) -> tuple[bytes, int]:
    """One record batch of 100-byte values whose records take at most ``set_bytes``."""
    count = set_bytes // (10 + len(VALUE))  # a record of a 100-byte value and no key: 110 bytes
    records: list[rb.RecordInput] = [(i, NOW - count + i, None, VALUE, ()) for i in range(count)]
    return rb.build_batch(rb.BatchSpec(codec=codec), records), count


def run_case(buf: bytes, count: int, settings: TopicSettings, seconds: float, repeats: int) -> dict:
    result = validate_produce(buf, settings, next_offset=0, now_ms=NOW)
    assert isinstance(result, ValidatedRecords) and result.message_count == count, result
    rates, wall_rates = [], []
    for _ in range(repeats):
        iterations = 0
        offset = 0
        cpu_start = time.process_time()
        start = time.perf_counter()
        deadline = start + seconds
        while True:
            validate_produce(buf, settings, next_offset=offset, now_ms=NOW)
            offset += count
            iterations += 1
            if time.perf_counter() >= deadline:
                break
        wall_rates.append(iterations * count / (time.perf_counter() - start))
        rates.append(iterations * count / (time.process_time() - cpu_start))
    best = max(rates)
    return {
        "messages_per_set": count,
        "set_bytes": len(buf),
        "msgs_per_cpu_s": round(best),
        "mib_per_cpu_s": round(best * len(buf) / count / 2**20, 1),
        "rounds_msgs_per_cpu_s": [round(r) for r in rates],
        "rounds_msgs_per_wall_s": [round(r) for r in wall_rates],
    }


def _print(row: dict, set_bytes: int, count: int) -> None:
    print(
        f"{row['codec']:9} {row['timestamp_type']:16} {set_bytes // 1024:5} KiB "
        f"{count:6} msgs/set {row['msgs_per_cpu_s']:>10,} msgs/cpu-s "
        f"{row['mib_per_cpu_s']:8.1f} MiB/cpu-s",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cases = []
    for codec in (Codec.NONE, Codec.LZ4, Codec.GZIP):
        tts = (
            [TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME]
            if codec == Codec.NONE
            else [TimestampType.CREATE_TIME]
        )
        for set_bytes in (16 * 1024, 1024 * 1024):
            buf, count = make_set(set_bytes, codec)
            for tt in tts:
                settings = TopicSettings(timestamp_type=tt)
                row = {
                    "codec": codec.name.lower(),
                    "timestamp_type": tt.name.lower(),
                    "uncompressed_set_bytes": set_bytes,
                }
                row.update(run_case(buf, count, settings, args.seconds, args.repeats))
                cases.append(row)
                _print(row, set_bytes, count)
    # Slow paths, for reference: recompression to the topic's compression.type, and
    # up-conversion of a magic-0 producer's set.
    for label, codec, magic, target in (
        ("gzip->lz4", Codec.GZIP, 1, Codec.LZ4),
        ("magic0->1", Codec.NONE, 0, None),
    ):
        for set_bytes in (16 * 1024, 1024 * 1024):
            buf, count = make_set(set_bytes, codec, magic)
            settings = TopicSettings(target_codec=target)
            row = {
                "codec": label,
                "timestamp_type": "create_time",
                "uncompressed_set_bytes": set_bytes,
            }
            row.update(run_case(buf, count, settings, args.seconds, args.repeats))
            cases.append(row)
            _print(row, set_bytes, count)
    for codec in (Codec.NONE, Codec.LZ4):
        for set_bytes in (16 * 1024, 1024 * 1024):
            buf, count = make_batch(set_bytes, codec)
            row = {
                "codec": f"v2 {codec.name.lower()}",
                "timestamp_type": "create_time",
                "uncompressed_set_bytes": set_bytes,
            }
            settings = TopicSettings(magic=2, max_message_bytes=2 * set_bytes)
            row.update(run_case(buf, count, settings, args.seconds, args.repeats))
            cases.append(row)
            _print(row, set_bytes, count)
    report = {
        "benchmark": "validate_produce throughput, 100-byte values, magic 1 and 2, one core",
        "rate_basis": "messages per second of process CPU time (best round)",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "seconds_per_round": args.seconds,
        "rounds": args.repeats,
        "cases": cases,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
