"""End-to-end benchmark: a fresh `chronolog serve` process driven by confluent-kafka.

Measures (1) produce throughput: 100-byte messages, linger.ms=5, acks=1; (2) consume throughput
of the same messages from offset 0; (3) produce-to-consume latency p50/p99 at a steady rate with
a consumer polling concurrently (the broker's long poll is woken by appends). Bounded: at most
--messages messages and --max-seconds per phase. Writes JSON to bench/results/e2e.json.

    .venv/bin/python bench/bench_e2e.py [--messages 200000] [--max-seconds 30]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import confluent_kafka
from confluent_kafka import Consumer, Producer, TopicPartition

REPO = Path(__file__).resolve().parent.parent
RESULT = REPO / "bench" / "results" / "e2e.json"
MESSAGE_BYTES = 100


def start_broker(
    log_dir: str, overrides: dict[str, str] | None = None
) -> tuple[subprocess.Popen, str]:
    """A broker on a free port with the repository's config, its log dir and ``overrides``;
    (process, bootstrap) once it accepts connections. Its log goes to <log_dir>/../broker.log."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    broker_log = os.path.join(log_dir, "..", "broker.log")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "broker",
            "serve",
            "--config",
            str(REPO / "config/server.properties"),
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override",
            f"log.dirs={log_dir}",
            *(arg for k, v in (overrides or {}).items() for arg in ("--override", f"{k}={v}")),
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=open(broker_log, "wb"),
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(
        f"broker did not accept connections on port {port} within 30 s; "
        f"see {os.path.normpath(broker_log)}"
    )


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(15)


BATCHED = {"linger.ms": 5, "acks": 1, "queue.buffering.max.messages": 1_000_000}


def machine() -> dict:
    """Where and when a figure was measured, for a result file."""
    return {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        },
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def commit_of(repo: str | Path) -> str | None:
    """The short commit checked out in ``repo`` (a benchmark may measure another checkout)."""
    git = ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"]
    return subprocess.run(git, capture_output=True, text=True).stdout.strip() or None


def write_result(path: Path, result: dict) -> None:
    """Write a result file whole (temporary file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, path)


def produce_phase(
    bootstrap: str, topic: str, count: int, max_s: float, config: dict = BATCHED
) -> dict:
    """confluent-kafka produce throughput with the producer settings ``config``."""
    producer = Producer({"bootstrap.servers": bootstrap, **config})
    payload = b"x" * MESSAGE_BYTES
    delivered = [0]

    def on_delivery(err, msg):
        if err is None:
            delivered[0] += 1

    start = time.perf_counter()
    sent = 0
    while sent < count and time.perf_counter() - start < max_s:
        try:
            producer.produce(topic, payload, on_delivery=on_delivery)
            sent += 1
        except BufferError:
            producer.poll(0.01)
        if sent % 1000 == 0:
            producer.poll(0)
    producer.flush(max_s)
    elapsed = time.perf_counter() - start
    return {
        "messages": delivered[0],
        "seconds": round(elapsed, 3),
        "messages_per_s": round(delivered[0] / elapsed),
        "mb_per_s": round(delivered[0] * MESSAGE_BYTES / elapsed / 1e6, 2),
    }


def consume_phase(bootstrap: str, topic: str, count: int, max_s: float) -> dict:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    start = time.perf_counter()
    while got < count and time.perf_counter() - start < max_s:
        for msg in consumer.consume(10000, 1.0):
            if msg.error() is None:
                got += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return {
        "messages": got,
        "seconds": round(elapsed, 3),
        "messages_per_s": round(got / elapsed),
        "mb_per_s": round(got * MESSAGE_BYTES / elapsed / 1e6, 2),
    }


def latency_phase(bootstrap: str, topic: str, rate: int, seconds: float) -> dict:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-latency",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 500,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    latencies: list[float] = []
    done = threading.Event()
    total = int(rate * seconds)

    def consume():
        # poll(), not consume(n, timeout): consume waits for n messages or the whole timeout
        while not done.is_set() and len(latencies) < total:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                latencies.append((time.time_ns() - int(msg.value()[:19])) / 1e6)

    thread = threading.Thread(target=consume)
    thread.start()
    time.sleep(1.0)  # consumer connected and waiting at the log end
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1})
    start = time.perf_counter()
    for i in range(total):
        due = start + i / rate
        while (now := time.perf_counter()) < due:
            time.sleep(min(due - now, 0.001))
        producer.produce(topic, b"%019d" % time.time_ns() + b"x" * (MESSAGE_BYTES - 19))
        producer.poll(0)
    producer.flush(10)
    thread.join(seconds + 10)
    done.set()
    thread.join()
    consumer.close()
    latencies.sort()

    def pct(p):
        return round(latencies[min(len(latencies) - 1, int(p * len(latencies)))], 2)

    return {
        "messages": len(latencies),
        "rate_per_s": rate,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "max_ms": round(latencies[-1], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--max-seconds", type=float, default=30.0)
    parser.add_argument("--latency-rate", type=int, default=1000)
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="chronolog-bench-")
    log_dir = os.path.join(work, "data")
    os.makedirs(log_dir)
    proc, bootstrap = start_broker(log_dir)
    try:
        create_topic(bootstrap, "bench")
        create_topic(bootstrap, "latency")
        produce = produce_phase(bootstrap, "bench", args.messages, args.max_seconds)
        consume = consume_phase(bootstrap, "bench", produce["messages"], args.max_seconds)
        latency = latency_phase(bootstrap, "latency", args.latency_rate, args.latency_seconds)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "benchmark": "e2e",
        "client": "confluent-kafka " + confluent_kafka.__version__,
        "message_bytes": MESSAGE_BYTES,
        "producer": {"linger.ms": 5, "acks": 1},
        "produce": produce,
        "consume": consume,
        "produce_to_consume_latency": latency,
        **machine(),
    }
    write_result(RESULT, result)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
