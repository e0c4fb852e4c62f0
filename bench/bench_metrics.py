"""Overhead of the Prometheus metrics: produce against fresh brokers with ``metrics.listener``
off and on; with it on, a scraper reads /metrics every --scrape-interval seconds (harsher than
Prometheus' usual 15 s).

Throughput, off and on alternating, --rounds rounds of two confluent-kafka loads: "batched"
(100-byte messages, linger.ms=5: few large requests, bench_e2e's produce) and "one_per_request"
(batch.num.messages=1, linger.ms=0: the per-request cost shows). Each run also records the
broker's CPU time per message: the process's (user + system, psutil: 10 ms ticks) and its trio
thread's (the scheduler's nanoseconds; every handler and the endpoint run there).

On a machine shared with other work, throughput moves by tens of percent from run to run, more
than the effect measured. So also "side by side": a broker with the listener off and one with it
on run together, and Produce requests go to each in turn, each sent when the last was answered;
the trio threads' CPU per message is compared round by round, measured over the same seconds,
for requests of one message and for batched requests of SIDE_BY_SIDE_BATCH messages (about what
linger.ms=5 gives the batched load), in several fresh pairs of brokers (a process keeps its own
speed for its life), the overhead being the median over pairs. A broker's CPU per message bounds
what the listener can take from its throughput, so the batched side-by-side figure is the one
judged against the 3% target. And the in-process cost of what the request path does per request (``request_done`` and
``produced``).

Bounded: --rounds x 2 loads x 2 brokers, each produce run at most its message count and
--max-seconds, plus 2 loads x --side-by-side-pairs x --side-by-side-rounds x
--side-by-side-requests x 2 requests (about 30 s a round, and about 10 s a pair side by side with
the defaults). Writes bench/results/metrics_overhead.json.

    .venv/bin/python bench/bench_metrics.py [--rounds 3] [--messages 500000] [--max-seconds 3]
"""

from __future__ import annotations

import argparse
import contextlib
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
from typing import Iterator

import confluent_kafka
import psutil

from client import BrokerConnection
from protocol import ApiKey, MessageSetBuilder

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


SIDE_BY_SIDE_BATCH = 1000


def produce_body(topic: str, messages: int) -> dict:
    """A Produce v9 body (acks=1) of one batch of ``messages`` 100-byte messages."""
    builder = MessageSetBuilder(magic=2)
    now = int(time.time() * 1000)
    for _ in range(messages):
        builder.append(b"x" * MESSAGE_BYTES, timestamp=now)
    partition = {"index": 0, "records": builder.build()}
    return {
        "acks": 1,
        "timeout_ms": 10_000,
        "topic_data": [{"name": topic, "partition_data": [partition]}],
    }


def trio_thread_cpu_s(pid: int) -> float:
    """CPU time of the broker's main thread, where trio runs every request handler and the
    metrics endpoint, in the scheduler's nanoseconds (/proc/PID/task/PID/schedstat)."""
    with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


def request_path_cost_us(calls: int = 40_000, repeats: int = 5) -> dict:
    """Microseconds per call of what a metrics-enabled broker adds per Produce request, the
    best of ``repeats`` loops (the machine's other load only ever adds)."""
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
        request_done, produced = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(calls):
                metrics.request_done(ApiKey.PRODUCE, 9, body, 0.0, 0.0001, 0.0003, 0.0004)
            done = time.perf_counter()
            for _ in range(calls):
                metrics.produced("bench", 10, 1000)
            request_done.append(done - start)
            produced.append(time.perf_counter() - done)
        await trio.to_thread.run_sync(ctx.log_manager.shutdown)
        return {
            "request_done": round(min(request_done) / calls * 1e6, 2),
            "produced": round(min(produced) / calls * 1e6, 2),
        }

    work = tempfile.mkdtemp(prefix="chronolog-bench-metrics-")
    try:
        return trio.run(measure, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


LOADS = {"batched": (produce_phase, 1), "one_per_request": (produce_one_per_request, 10)}
"""Each load, and by how much it divides --messages."""


@contextlib.contextmanager
def running_broker(
    metrics: bool, args: argparse.Namespace
) -> Iterator[tuple[int, str, Scraper | None]]:
    """A fresh broker with the listener off or on (then scraped): (pid, bootstrap, scraper)."""
    work = tempfile.mkdtemp(prefix="chronolog-bench-metrics-")
    log_dir = os.path.join(work, "data")
    os.makedirs(log_dir)
    overrides = {"metrics.listener": "http://127.0.0.1:0"} if metrics else {}
    proc, bootstrap = start_broker(log_dir, overrides)
    scraper = None
    try:
        create_topic(bootstrap, "bench")
        if metrics:
            scraper = Scraper(metrics_url(os.path.join(work, "broker.log")), args.scrape_interval)
            scraper.start()
        yield proc.pid, bootstrap, scraper
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


def scrapes(scraper: Scraper) -> dict:
    return {
        "scrapes": len(scraper.times_ms),
        "scrape_ms_max": round(max(scraper.times_ms, default=0), 2),
        "scrape_ms_median": round(statistics.median(scraper.times_ms or [0]), 2),
        "scrape_bytes": max(scraper.sizes, default=0),
        "scrape_errors": scraper.errors,
    }


def one_run(metrics: bool, load: str, args: argparse.Namespace) -> dict:
    with running_broker(metrics, args) as (pid, bootstrap, scraper):
        broker = psutil.Process(pid)
        run, divisor = LOADS[load]
        cpu, trio_cpu = broker.cpu_times(), trio_thread_cpu_s(pid)
        result = run(bootstrap, "bench", args.messages // divisor, args.max_seconds)
        used, trio_cpu = broker.cpu_times(), trio_thread_cpu_s(pid) - trio_cpu
        cpu_s = used.user + used.system - cpu.user - cpu.system
    messages = max(result["messages"], 1)
    result["broker_cpu_s"] = round(cpu_s, 3)
    result["broker_cpu_us_per_message"] = round(cpu_s / messages * 1e6, 3)
    result["trio_cpu_us_per_message"] = round(trio_cpu / messages * 1e6, 3)
    result["metrics"] = metrics
    result["load"] = load
    if scraper is not None:
        result |= scrapes(scraper)
    print(json.dumps(result), flush=True)
    return result


def side_by_side(args: argparse.Namespace, messages: int) -> dict:
    """Brokers with the listener off and on (scraped) running together, in --side-by-side-pairs
    fresh pairs: one connection to each, Produce requests of ``messages`` messages to each in
    turn, each sent when the last was answered (the broker serves one request at a time: the
    request path alone). Per round, --side-by-side-requests to each: the trio threads' CPU per
    message, measured over the same seconds (scrapes included), so the machine's other load
    weighs on both alike.

    A broker process keeps its own speed for its whole life (its memory layout and hash seed):
    two brokers both off differed by -8.2 % to +0.3 % over one pair's rounds (bench/NOTES.md).
    So each pair gives one figure, the median of its rounds, and the overhead is the median
    over pairs, which start in turn with the listener off and on first."""
    pairs = [
        _side_by_side_pair(args, messages, on_first=i % 2 == 1)
        for i in range(args.side_by_side_pairs)
    ]
    rounds = [r for pair in pairs for r in pair["rounds"]]
    scraped = {
        "scrapes": sum(p["scrapes"] for p in pairs),
        "scrape_ms_max": max(p["scrape_ms_max"] for p in pairs),
        "scrape_ms_median": statistics.median(p["scrape_ms_median"] for p in pairs),
        "scrape_bytes": max(p["scrape_bytes"] for p in pairs),
        "scrape_errors": [e for p in pairs for e in p["scrape_errors"]],
    }
    return {
        "messages_per_request": messages,
        "requests_per_round": args.side_by_side_requests,
        "medians": {
            "trio_cpu_us_per_message_metrics_off": statistics.median(
                r["trio_cpu_us_per_message_metrics_off"] for r in rounds
            ),
            "trio_cpu_us_per_message_metrics_on": statistics.median(
                r["trio_cpu_us_per_message_metrics_on"] for r in rounds
            ),
            "overhead_percent": round(statistics.median(p["overhead_percent"] for p in pairs), 1),
        },
        "pair_overheads_percent": [p["overhead_percent"] for p in pairs],
        "rounds": rounds,
        **scraped,
    }


def _side_by_side_pair(args: argparse.Namespace, messages: int, on_first: bool) -> dict:
    """One fresh pair of brokers for :func:`side_by_side`: its rounds, the median of their
    overheads, and its scrapes."""
    requests = args.side_by_side_requests
    roles = (True, False) if on_first else (False, True)
    rounds = []
    with contextlib.ExitStack() as stack:
        started = {metrics: stack.enter_context(running_broker(metrics, args)) for metrics in roles}
        (off_pid, _, _), (on_pid, _, scraper) = started[False], started[True]
        connections = []  # requests go to the brokers in the order they started
        for metrics in roles:
            host, port = started[metrics][1].rsplit(":", 1)
            connections.append(
                stack.enter_context(
                    BrokerConnection(host, int(port), client_id="bench-metrics", timeout_s=10)
                )
            )
        body = produce_body("bench", messages)

        def alternate(requests: int) -> None:
            for _ in range(requests):
                for conn in connections:
                    answer = conn.call(ApiKey.PRODUCE, 9, body)
                    assert answer.responses[0].partition_responses[0].error_code == 0, answer

        alternate(max(10, 500 // messages))  # warm-up: imports, first segment, caches
        for _ in range(args.side_by_side_rounds):
            off_cpu, on_cpu = trio_thread_cpu_s(off_pid), trio_thread_cpu_s(on_pid)
            alternate(requests)
            off_cpu, on_cpu = (
                trio_thread_cpu_s(off_pid) - off_cpu,
                trio_thread_cpu_s(on_pid) - on_cpu,
            )
            rounds.append(
                {
                    "trio_cpu_us_per_message_metrics_off": round(
                        off_cpu / (requests * messages) * 1e6, 3
                    ),
                    "trio_cpu_us_per_message_metrics_on": round(
                        on_cpu / (requests * messages) * 1e6, 3
                    ),
                    "on_first": on_first,
                }
            )
            print(json.dumps(rounds[-1]), flush=True)
        assert scraper is not None
        scraped = scrapes(scraper)
    overhead = statistics.median(
        (r["trio_cpu_us_per_message_metrics_on"] - r["trio_cpu_us_per_message_metrics_off"])
        / r["trio_cpu_us_per_message_metrics_off"]
        * 100
        for r in rounds
    )
    return {"rounds": rounds, "overhead_percent": round(overhead, 2), **scraped}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--max-seconds", type=float, default=3.0)
    parser.add_argument("--scrape-interval", type=float, default=1.0)
    parser.add_argument("--side-by-side-pairs", type=int, default=8)
    parser.add_argument("--side-by-side-rounds", type=int, default=3)
    parser.add_argument("--side-by-side-requests", type=int, default=1500)
    args = parser.parse_args()
    cost = request_path_cost_us()
    print(json.dumps({"request_path_us": cost}), flush=True)
    paired = {
        "one_per_request": side_by_side(args, 1),
        "batched": side_by_side(args, SIDE_BY_SIDE_BATCH),
    }
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
        medians[load] = {
            "messages_per_s_metrics_off": off_rate,
            "messages_per_s_metrics_on": on_rate,
            "overhead_percent": round((off_rate - on_rate) / off_rate * 100, 1),
        }
        for field in ("broker_cpu_us_per_message", "trio_cpu_us_per_message"):
            off, on = median(field, False), median(field, True)
            medians[load] |= {
                f"{field}_metrics_off": off,
                f"{field}_metrics_on": on,
                f"{field}_overhead_percent": round((on - off) / off * 100, 1),
            }
    result = {
        "benchmark": "metrics_overhead",
        "client": "confluent-kafka " + confluent_kafka.__version__,
        "message_bytes": MESSAGE_BYTES,
        "producer": {"linger.ms": 5, "acks": 1},
        "scrape_interval_s": args.scrape_interval,
        "medians": medians,
        "side_by_side": paired,
        "request_path_us_per_call": cost,
        "runs": runs,
        **machine(),
    }
    write_result(RESULT, result)
    shown = {
        "medians": medians,
        "side_by_side": {load: p["medians"] for load, p in paired.items()},
        "request_path": cost,
    }
    print(json.dumps(shown, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
