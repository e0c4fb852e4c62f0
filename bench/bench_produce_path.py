"""The broker's CPU per record batch on its Produce path, in-process (issue #33: per-batch fixed
costs bind a wide load, bench/NOTES.md).

A broker context on a tmpfs log dir (no disk in the figure, but the kernel's page-cache copy
of each pwrite is in it) with one topic of ``--partitions`` partitions; Produce v9 requests of
``--per-request`` batches of ``--records`` 100-byte records (100), one a partition, decoded once and handed
to the Produce handler over and over, round-robin over the partitions: validation, the
partition lock, the append, the answer's rows; no socket, no request decoding, no encoding.
Prints and records the CPU time (process_time) a batch, min and median of ``--runs`` runs.
``--repo`` measures another checkout (a worktree of an older commit with its C extension
built) with this script, so two commits compare side by side; ``--label`` names the run in
bench/results/produce_path.json. ``--instructions`` counts instead, where valgrind is installed:
the instructions (user space, callgrind) a batch, from two runs of --instruction-requests and
three times as many requests, the difference over the batches between (exact and repeatable, so
a change of a few percent shows that CPU time on a shared machine hides; about five minutes).

Usage: python bench/bench_produce_path.py [--repo DIR] [--label NAME]
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "bench" / "results" / "produce_path.json"


def measure(args: argparse.Namespace) -> list[float]:
    """CPU µs a batch, one figure a run (imports from ``args.repo``)."""
    sys.path.insert(0, args.repo)
    import structlog
    import trio

    from bench.suite.workloads import make_values
    from broker.config import BrokerConfig
    from broker.handlers.produce import handle_produce
    from broker.server import open_context
    from protocol import recordbatch as rb
    from protocol.api import ApiKey
    from protocol.connection import ClientConnection, ServerConnection

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    now = int(time.time() * 1000)
    values = make_values(args.records, 100)
    batch = rb.build_batch(rb.BatchSpec(), [(i, now, None, v, ()) for i, v in enumerate(values)])
    per = args.per_request

    def request(first: int) -> bytes:
        data = [{"index": first + i, "records": batch} for i in range(per)]
        body = {
            "transactional_id": None,
            "acks": 1,
            "timeout_ms": 30_000,
            "topic_data": [{"name": "bench", "partition_data": data}],
        }
        return ClientConnection("bench").request(ApiKey.PRODUCE, 9, body)[1]

    async def run() -> list[float]:
        directory = tempfile.mkdtemp(dir="/dev/shm" if Path("/dev/shm").is_dir() else None)
        try:
            ctx = await open_context(BrokerConfig.from_properties([("log.dirs", directory)]))
            await ctx.create_topic("bench", args.partitions)
            conn = ServerConnection()
            requests = [
                r
                for first in range(0, args.partitions, per)
                for r in conn.receive_data(request(first))
            ]
            for r in requests[:50]:  # warm up
                await handle_produce(ctx, r)
            figures = []
            for _ in range(args.runs):
                started = time.process_time()
                for i in range(args.requests):
                    await handle_produce(ctx, requests[i % len(requests)])
                figures.append((time.process_time() - started) / (args.requests * per) * 1e6)
            return figures
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    return trio.run(run)


def instructions_per_batch(args: argparse.Namespace) -> float:
    """Run this script under callgrind twice, at N and 3N requests, both at once; the
    instructions a batch of the difference."""
    counts = []
    base = args.instruction_requests
    children = []
    for requests in (base, 3 * base):
        cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
        cmd += [sys.executable, __file__, "--child", "--runs", "1", "--requests", str(requests)]
        for name in ("repo", "partitions", "per_request", "records"):
            cmd += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
        children.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    for child in children:
        _, err = child.communicate()
        found = re.search(rb"Collected : (\d+)", err)
        if child.returncode != 0 or found is None:
            raise RuntimeError(f"callgrind run failed: {err.decode(errors='replace')[-400:]}")
        counts.append(int(found.group(1)))
    return (counts[1] - counts[0]) / (2 * base * args.per_request)


def broker_instructions_per_request(args: argparse.Namespace) -> float:
    """Instructions (callgrind) of a broker process of ``args.repo`` serving one Produce
    request over a socket, all of its path: the receive, the decode, the handler, the answer's
    encoding and send. The broker runs under callgrind without instrumentation (at full speed); after a warm-up,
    it is instrumented and its counts zeroed, --instruction-requests requests are sent one at a time (each answered
    before the next), and the counts are dumped (callgrind_control)."""
    sys.path.insert(0, str(REPO))  # the client side is this checkout's
    from bench.bench_isolation import Wire, start_broker
    from bench.suite.workloads import admin_create_topic, make_values
    from protocol import ApiKey
    from protocol import recordbatch as rb

    per, now = args.per_request, int(time.time() * 1000)
    values = make_values(args.records, 100)
    batch = rb.build_batch(rb.BatchSpec(), [(i, now, None, v, ()) for i, v in enumerate(values)])
    work = Path(tempfile.mkdtemp(prefix="chronolog-bench-instructions-"))
    launcher = ("valgrind", "--tool=callgrind", f"--callgrind-out-file={work}/cg.out")
    launcher += ("--instr-atstart=no",)
    broker = start_broker(Path(args.repo), work, None, launcher=launcher, timeout_s=600)
    try:
        admin_create_topic(f"127.0.0.1:{broker.port}", "bench", args.partitions)
        wire = Wire(broker.port, "bench-instructions")

        def send(count: int) -> None:
            for i in range(count):
                first = i * per % (args.partitions - per + 1)
                data = [{"index": first + j, "records": batch} for j in range(per)]
                body = {"transactional_id": None, "acks": 1, "timeout_ms": 30_000}
                body["topic_data"] = [{"name": "bench", "partition_data": data}]
                wire.call(ApiKey.PRODUCE, 9, body)

        send(args.partitions // per)  # warm-up: every partition written once
        pid = str(broker.proc.pid)
        subprocess.run(["callgrind_control", "-i", "on", pid], check=True, capture_output=True)
        subprocess.run(["callgrind_control", "--zero", pid], check=True, capture_output=True)
        send(args.instruction_requests)
        subprocess.run(["callgrind_control", "-i", "off", pid], check=True, capture_output=True)
        subprocess.run(["callgrind_control", "--dump", pid], check=True, capture_output=True)
        dumps = sorted(work.glob("cg.out*"), key=lambda f: f.stat().st_mtime)
        total = next(
            int(line.split()[1])
            for line in dumps[-1].read_text().splitlines()
            if line.startswith("totals:")  # its summary line is wrong after a --zero
        )
        return total / args.instruction_requests
    finally:
        broker.proc.terminate()
        broker.proc.wait(120)
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", default=str(REPO))
    parser.add_argument("--label", default="latest")
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--per-request", type=int, default=10)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--records", type=int, default=100, help="records a batch")
    parser.add_argument("--instructions", action="store_true", help="count them (valgrind)")
    parser.add_argument("--instruction-requests", type=int, default=100)
    parser.add_argument(
        "--broker",
        action="store_true",
        help="with --instructions: a broker process's a request, over a socket",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        measure(args)
        return 0
    if args.instructions and args.broker:
        figures: dict[str, Any] = {
            "broker_instructions_per_request": round(broker_instructions_per_request(args)),
            "instruction_requests": args.instruction_requests,
        }
    elif args.instructions:
        figures = {
            "instructions_per_batch": round(instructions_per_batch(args)),
            "instruction_requests": [args.instruction_requests, 3 * args.instruction_requests],
        }
    else:
        runs = measure(args)
        figures = {
            "batches_per_run": args.requests * args.per_request,
            "cpu_us_per_batch_min": round(min(runs), 1),
            "cpu_us_per_batch_median": round(statistics.median(runs), 1),
            "runs": [round(f, 1) for f in runs],
        }
    commit = subprocess.run(
        ["git", "-C", args.repo, "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    row = {
        "commit": commit,
        "partitions": args.partitions,
        "batches_per_request": args.per_request,
        "records_per_batch": args.records,
        **figures,
        "measured_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "python": platform.python_version(),
    }
    print(json.dumps(row))
    results = json.loads(RESULT.read_text()) if RESULT.exists() else {}
    results[args.label] = row
    RESULT.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
