"""How long does a request that needs a worker thread wait while the event loop is saturated?
(issue #33: no client stalls another)

One broker process of --repo (this checkout, or a worktree of another commit) and three
topics of one partition: ``load``, ``plain`` and ``synced``, the last with flush.messages=1, so
every append to it fsyncs and so runs in a worker thread, as any append that rolls a segment
does. The probe produces a 100-byte message to ``plain`` and then one to ``synced`` every
--interval seconds (Produce v9, acks=1, one connection) and times each answer:
- ``quiet``: the probe alone, for --seconds;
- ``saturated``: the probe while bench/bench_scale.py's load generator (its own process) keeps
  the loop busy: --connections connections, each with --in-flight Produce requests of one
  100-record batch outstanding, into ``load``, for --seconds.
Per phase and probe topic the answers' p50/p99/max (``plain`` is what any request waits for
its turn on the loop; ``synced`` adds the worker thread's wait); for ``saturated`` also the load's msgs/s and the
broker's CPU (all threads, and the loop's thread apart). Writes bench/results/worker_wait.json,
the run under --label.

    .venv/bin/python bench/bench_worker_wait.py [--repo DIR] [--label NAME]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_e2e import commit_of, machine  # noqa: E402
from bench.bench_isolation import Wire, batch, start_broker  # noqa: E402
from bench.bench_scale import load  # noqa: E402
from bench.bench_storage import percentile  # noqa: E402
from bench.suite.workloads import admin_create_topic  # noqa: E402
from protocol.records import Codec  # noqa: E402

RESULT = REPO / "bench" / "results" / "worker_wait.json"
LOAD, PLAIN, SYNCED = "load", "plain", "synced"


def probe(port: int, interval: float, stop: threading.Event, took: dict[str, list[float]]) -> None:
    """Milliseconds each produce to ``plain`` and to ``synced`` took, until ``stop``."""
    wire = Wire(port, "bench-worker-wait-probe")
    records = batch(Codec.NONE, [bytes(100)])
    while not stop.is_set():
        for topic in (PLAIN, SYNCED):
            started = time.perf_counter()
            wire.produce(topic, records)
            took[topic].append((time.perf_counter() - started) * 1000)
        stop.wait(interval)


def summary(took: list[float]) -> dict:
    took = sorted(took)
    return {
        "probe_answers": len(took),
        "p50_ms": round(statistics.median(took), 2),
        "p99_ms": round(percentile(took, 0.99), 2),
        "max_ms": round(took[-1], 2),
    }


def measure(args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix="chronolog-bench-worker-wait-"))
    broker = start_broker(Path(args.repo), work, None)
    proc, port = broker.proc, broker.port
    try:
        bootstrap = f"127.0.0.1:{port}"
        admin_create_topic(bootstrap, LOAD, 1)
        admin_create_topic(bootstrap, PLAIN, 1)
        admin_create_topic(bootstrap, SYNCED, 1, {"flush.messages": "1"})
        phases: dict[str, dict] = {}
        for name in ("quiet", "saturated"):
            stop = threading.Event()
            took: dict[str, list[float]] = {PLAIN: [], SYNCED: []}
            prober = threading.Thread(target=probe, args=(port, args.interval, stop, took))
            prober.start()
            try:
                if name == "quiet":
                    time.sleep(args.seconds)
                    row: dict = {}
                else:
                    load_args = argparse.Namespace(
                        connections=args.connections,
                        partitions_per_connection=1,
                        partitions=1,
                        records_per_batch=100,
                        record_bytes=100,
                        in_flight=args.in_flight,
                        seconds=args.seconds,
                        messages=10**9,
                    )
                    out = load(port, proc.pid, load_args, None, topic=LOAD)
                    row = {
                        "load_msgs_per_s": out["msgs_per_s"],
                        "broker_cpu_cores": out["broker_cpu_cores"],
                        "loop_thread_cores": out["loop_thread_cores"],
                        "other_threads_cores": out["other_threads_cores"],
                    }
            finally:
                stop.set()
                prober.join()
            phases[name] = {PLAIN: summary(took[PLAIN]), SYNCED: summary(took[SYNCED]), **row}
            print(name, phases[name], flush=True)
        return phases
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", default=str(REPO))
    parser.add_argument("--label", default="latest")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--interval", type=float, default=0.02)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--in-flight", type=int, default=2)
    parser.add_argument("--out", default=str(RESULT))
    args = parser.parse_args()
    commit = commit_of(args.repo)
    row = {"commit": commit, "phases": measure(args), **machine()}
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.exists() else {}
    results.setdefault("method", __doc__.split("\n\n")[1])
    results.setdefault("runs", {})[args.label] = row
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out} ({args.label})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
