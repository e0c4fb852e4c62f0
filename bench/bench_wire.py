"""Cost of the wire layer's hot paths on one core.

Cases: decoding Produce v2/v9 and Fetch v3/v12 request frames through ServerConnection (the
codecs generated from Kafka's definitions; v9 and v12 are the first flexible versions), the
longest single step of a 30 MiB Produce frame fed in the server's 256 KiB reads (what the event
loop cannot interleave: ``longest_step_ms``, the median of the repeats),
encoding Metadata v2/v12 responses, and encoding Fetch v3/v12 responses with bytes records and
with FileRegions. Each case runs ~``--seconds`` per round, best of ``--repeats``; rates
are per second of this process's CPU time (the machine is shared; wall-clock rates are recorded
too).

Usage: python bench/bench_wire.py [--seconds 1.0] [--repeats 3]
Writes bench/results/wire.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from protocol import ApiKey, ClientConnection, FileRegion, ServerConnection
from protocol.schemas import encode_response_body, encode_response_chunks

RESULTS = Path(__file__).resolve().parent / "results" / "wire.json"
RECEIVE_BYTES = 262144  # broker/server.py's read size


def produce_body(partitions: int, set_bytes: int) -> dict:
    return {
        "acks": -1,
        "timeout_ms": 30000,
        "topic_data": [
            {
                "name": "bench",
                "partition_data": [
                    {"index": p, "records": b"\x01" * set_bytes} for p in range(partitions)
                ],
            }
        ],
    }


def fetch_body(partitions: int, record_set) -> dict:
    return {
        "throttle_time_ms": 0,
        "responses": [
            {
                "topic": "bench",
                "partitions": [
                    {
                        "partition_index": p,
                        "error_code": 0,
                        "high_watermark": 10**6,
                        "records": record_set,
                    }
                    for p in range(partitions)
                ],
            }
        ],
    }


def fetch_request(partitions: int) -> dict:
    return {
        "replica_id": -1,
        "max_wait_ms": 500,
        "min_bytes": 1,
        "max_bytes": 52428800,
        "topics": [
            {
                "topic": "bench",
                "partitions": [
                    {"partition": p, "fetch_offset": 10**6, "partition_max_bytes": 1048576}
                    for p in range(partitions)
                ],
            }
        ],
    }


def metadata_body(topics: int) -> dict:
    return {
        "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": 9092, "rack": None}],
        "cluster_id": "bench",
        "controller_id": 0,
        "topics": [
            {
                "error_code": 0,
                "name": f"topic-{t}",
                "is_internal": False,
                "partitions": [
                    {
                        "error_code": 0,
                        "partition_index": p,
                        "leader_id": 0,
                        "replica_nodes": [0],
                        "isr_nodes": [0],
                    }
                    for p in range(8)
                ],
            }
            for t in range(topics)
        ],
    }


def measure(fn, seconds: float, repeats: int) -> tuple[float, float]:
    fn()
    cpu_rates, wall_rates = [], []
    for _ in range(repeats):
        n = 0
        cpu0, wall0 = time.process_time(), time.perf_counter()
        deadline = wall0 + seconds
        while True:
            fn()
            n += 1
            if time.perf_counter() >= deadline:
                break
        cpu_rates.append(n / max(time.process_time() - cpu0, 1e-9))
        wall_rates.append(n / (time.perf_counter() - wall0))
    return max(cpu_rates), max(wall_rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    cases = []

    def add(name, fn, partitions, set_bytes, frame_bytes=None):
        cpu, wall = measure(fn, args.seconds, args.repeats)
        case = {
            "case": name,
            "partitions": partitions,
            "set_bytes": set_bytes,
            "ops_per_cpu_s": round(cpu),
            "ops_per_wall_s": round(wall),
        }
        if frame_bytes:
            case["mib_per_cpu_s"] = round(cpu * frame_bytes / 2**20, 1)
        cases.append(case)

    # Produce v2/v9 and Fetch v3/v12: the last classic and the first flexible versions.
    requests = [
        (ApiKey.PRODUCE, v, produce_body(p, n), p, n)
        for v in (2, 9)
        for p, n in ((1, 16384), (10, 16384), (1, 1 << 20))
    ]
    requests += [(ApiKey.FETCH, v, fetch_request(p), p, 0) for v in (3, 12) for p in (1, 10, 100)]
    for api, version, body, partitions, set_bytes in requests:
        _, frame = ClientConnection("bench").request(api, version, body)

        def decode(frame=frame):
            for _ in ServerConnection().receive_data(frame):
                pass

        add(f"{api.name.lower()}_v{version}_decode", decode, partitions, set_bytes, len(frame))

    # A 30 MiB Produce arriving in the server's reads: the longest step is the one the event loop
    # runs without a break (the frame's records were copied there until they became views).
    _, frame = ClientConnection("bench").request(ApiKey.PRODUCE, 9, produce_body(1, 30 << 20))
    reads = [frame[i : i + RECEIVE_BYTES] for i in range(0, len(frame), RECEIVE_BYTES)]
    longest = []
    for _ in range(max(args.repeats, 5)):
        server, worst = ServerConnection(max_request_bytes=64 << 20), 0.0
        for data in reads:
            started = time.perf_counter()
            for _ in server.receive_data(data):
                pass
            worst = max(worst, time.perf_counter() - started)
        longest.append(worst * 1000)
    cases.append(
        {
            "case": "produce_v9_feed_30mib",
            "partitions": 1,
            "set_bytes": 30 << 20,
            "longest_step_ms": round(sorted(longest)[len(longest) // 2], 2),
        }
    )

    for version in (2, 12):
        for topics in (1, 50):
            body = metadata_body(topics)
            add(
                f"metadata_v{version}_encode",
                lambda b=body, v=version: encode_response_body(ApiKey.METADATA, v, b),
                topics * 8,
                0,
            )

    for version in (3, 12):
        for partitions, set_bytes in ((1, 16384), (10, 16384), (100, 1024), (1, 1 << 20)):
            data = fetch_body(partitions, b"\x02" * set_bytes)
            regions = fetch_body(partitions, FileRegion(3, 0, set_bytes))
            for name, body in (("bytes", data), ("regions", regions)):
                add(
                    f"fetch_v{version}_encode_{name}",
                    lambda b=body, v=version: encode_response_chunks(ApiKey.FETCH, v, b),
                    partitions,
                    set_bytes,
                )

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "benchmark": "wire",
                "python": platform.python_version(),
                "machine": platform.machine(),
                "seconds": args.seconds,
                "repeats": args.repeats,
                "cases": cases,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"{'case':32} {'parts':>5} {'set':>8} {'ops/cpu-s':>11}")
    for c in cases:
        rate = c.get("ops_per_cpu_s", f"{c.get('longest_step_ms')} ms")
        print(f"{c['case']:32} {c['partitions']:>5} {c['set_bytes']:>8} {rate:>11}")


if __name__ == "__main__":
    main()
