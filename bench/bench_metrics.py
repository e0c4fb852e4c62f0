"""Overhead of the Prometheus metrics: confluent-kafka produce throughput against a fresh broker
with ``metrics.listener`` off and on, alternating, a few rounds; with it on, a scraper reads
/metrics every --scrape-interval seconds during the run (harsher than Prometheus' usual 15 s).

Two loads: "batched" (100-byte messages, linger.ms=5: few large requests, bench_e2e's produce)
and "one_per_request" (batch.num.messages=1, linger.ms=0: the per-request cost shows). Each run
also records the broker process's CPU time (user + system, psutil) per message delivered: on a
machine shared with other work, throughput moves by tens of percent from run to run, CPU per
message much less. Also the in-process cost of what the request path does per request
(``request_done`` and ``produced``).

Bounded: --rounds x 2 loads x 2 brokers, each produce run at most its message count and
--max-seconds (about 30 s in all with the defaults). Writes bench/results/metrics_overhead.json.

    .venv/bin/python bench/bench_metrics.py [--rounds 3] [--messages 500000] [--max-seconds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import confluent_kafka
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_e2e import (  # noqa: E402
    MESSAGE_BYTES,
    create_topic,
    machine,
    produce_phase,
    start_broker,
    write_result,
)

RESULT = Path(__file__).resolve().parent / "results" / "metrics_overhead.json"


def metrics_url(broker_log: str, deadline_s: float = 10.0) -> str:
    """The endpoint from the broker's "metrics listening" log line."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        with open(broker_log, encoding="utf-8", errors="replace") as f:
            for line in f:
                if '"metrics listening"' in line:
                    return json.loads(line)["url"]
        time.sleep(0.05)
    raise RuntimeError(f"no 'metrics listening' line in {broker_log} within {deadline_s} s")


class Scraper(threading.Thread):
    """GET /metrics every ``interval`` s until stopped; records each scrape's duration."""

    def __init__(self, url: str, interval: float) -> None:
        super().__init__(daemon=True)
        self.url, self.interval = url, interval
        self.stop = threading.Event()
        self.times_ms: list[float] = []
        self.sizes: list[int] = []
        self.errors: list[str] = []

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            start = time.perf_counter()
            try:
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    self.sizes.append(len(response.read()))
                self.times_ms.append((time.perf_counter() - start) * 1000)
            except OSError as exc:
                self.errors.append(repr(exc))


def produce_one_per_request(bootstrap: str, topic: str, count: int, max_s: float) -> dict:
    """Every message its own Produce request (acks=1)."""
    config = {"linger.ms": 0, "batch.num.messages": 1, "acks": 1}
    return produce_phase(bootstrap, topic, count, max_s, config)


def request_path_cost_us(calls: int = 200_000) -> dict:
    """Microseconds per call of what a metrics-enabled broker adds per Produce request."""
    import trio

    from broker.config import BrokerConfig
    from broker.metrics import BrokerMetrics
    from broker.server import open_context
    from protocol import ApiKey

    async def measure(log_dir: str) -> dict:
        config = BrokerConfig.from_properties([("log.dirs", log_dir)])
        ctx = await open_context(config)
        metrics = BrokerMetrics(ctx, lambda: 0)
        answered = {
            "index": 0,
            "error_code": 0,
            "base_offset": 12345,
            "log_append_time_ms": -1,
            "log_start_offset": 0,
            "record_errors": [],
            "error_message": None,
        }  # a Produce v9 partition answer as broker/handlers/produce.py writes it
        body = {
            "responses": [{"name": "bench", "partition_responses": [answered]}],
            "throttle_time_ms": 0,
        }
        start = time.perf_counter()
        for _ in range(calls):
            metrics.request_done(ApiKey.PRODUCE, 9, body, 0.0, 0.0001, 0.0003, 0.0004)
        done = time.perf_counter()
        for _ in range(calls):
            metrics.produced("bench", 10, 1000)
        end = time.perf_counter()
        await trio.to_thread.run_sync(ctx.log_manager.shutdown)
        return {
            "request_done": round((done - start) / calls * 1e6, 2),
            "produced": round((end - done) / calls * 1e6, 2),
        }

    work = tempfile.mkdtemp(prefix="chronolog-bench-metrics-")
    try:
        return trio.run(measure, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


LOADS = {"batched": produce_phase, "one_per_request": produce_one_per_request}


def one_run(metrics: bool, load: str, args: argparse.Namespace) -> dict:
    work = tempfile.mkdtemp(prefix="chronolog-bench-metrics-")
    log_dir = os.path.join(work, "data")
    os.makedirs(log_dir)
    overrides = {"metrics.listener": "http://127.0.0.1:0"} if metrics else {}
    proc, bootstrap = start_broker(log_dir, overrides)
    broker = psutil.Process(proc.pid)
    scraper = None
    try:
        create_topic(bootstrap, "bench")
        if metrics:
            scraper = Scraper(metrics_url(os.path.join(work, "broker.log")), args.scrape_interval)
            scraper.start()
        count = args.messages if load == "batched" else args.messages // 10
        cpu = broker.cpu_times()
        result = LOADS[load](bootstrap, "bench", count, args.max_seconds)
        used = broker.cpu_times()
        cpu_s = used.user + used.system - cpu.user - cpu.system
    finally:
        if scraper is not None:
            scraper.stop.set()
            scraper.join(10)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(work, ignore_errors=True)
    result["broker_cpu_s"] = round(cpu_s, 3)
    result["broker_cpu_us_per_message"] = round(cpu_s / max(result["messages"], 1) * 1e6, 3)
    result["metrics"] = metrics
    result["load"] = load
    if scraper is not None:
        result["scrapes"] = len(scraper.times_ms)
        result["scrape_ms_max"] = round(max(scraper.times_ms, default=0), 2)
        result["scrape_ms_median"] = round(statistics.median(scraper.times_ms or [0]), 2)
        result["scrape_bytes"] = max(scraper.sizes, default=0)
        result["scrape_errors"] = scraper.errors
    print(json.dumps(result), flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--max-seconds", type=float, default=3.0)
    parser.add_argument("--scrape-interval", type=float, default=1.0)
    args = parser.parse_args()
    cost = request_path_cost_us()
    print(json.dumps({"request_path_us": cost}), flush=True)
    runs = []
    for _ in range(args.rounds):
        for load in LOADS:
            for metrics in (False, True):
                runs.append(one_run(metrics, load, args))
    medians = {}
    for load in LOADS:

        def median(field: str, on: bool) -> float:
            return statistics.median(
                r[field] for r in runs if r["load"] == load and r["metrics"] is on
            )

        off_rate, on_rate = median("messages_per_s", False), median("messages_per_s", True)
        off_cpu = median("broker_cpu_us_per_message", False)
        on_cpu = median("broker_cpu_us_per_message", True)
        medians[load] = {
            "messages_per_s_metrics_off": off_rate,
            "messages_per_s_metrics_on": on_rate,
            "overhead_percent": round((off_rate - on_rate) / off_rate * 100, 1),
            "broker_cpu_us_per_message_metrics_off": off_cpu,
            "broker_cpu_us_per_message_metrics_on": on_cpu,
            "cpu_overhead_percent": round((on_cpu - off_cpu) / off_cpu * 100, 1),
        }
    result = {
        "benchmark": "metrics_overhead",
        "client": "confluent-kafka " + confluent_kafka.__version__,
        "message_bytes": MESSAGE_BYTES,
        "producer": {"linger.ms": 5, "acks": 1},
        "scrape_interval_s": args.scrape_interval,
        "medians": medians,
        "request_path_us_per_call": cost,
        "runs": runs,
        **machine(),
    }
    write_result(RESULT, result)
    print(json.dumps({k: result[k] for k in ("medians", "request_path_us_per_call")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
