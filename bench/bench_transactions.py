"""Transactional produce side by side: chronolog, Apache Kafka 4.1.1 and Tansu (issue 32).

Each broker runs as a child process on this machine, started as ``make bench`` starts it
(bench/suite/brokers.py; Kafka single-node KRaft from the jars ``make kafka-jvm`` fetches, with
its start scripts' JVM flags: 1 GB heap, G1, as issue 34 measured it). One librdkafka
transactional producer (confluent-kafka, linger.ms 5) writes --messages 100-byte messages to a
one-partition topic, committing every 100 and, in a second scenario, every 10,000 messages:
messages per second from the first begin_transaction to the last commit's return, and the
median and p99 of commit_transaction's own time. A read_committed consumer then reads the topic
back and must find every message exactly once (otherwise the run is an error, not a figure).
The brokers take turns, --rounds times, first broker rotating by round; medians over the rounds
are reported with each round in "runs". Writes bench/results/transactions.json.

    .venv/bin/python bench/bench_transactions.py [--rounds 3] [--messages 20000]
        [--brokers chronolog,kafka,tansu]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from bench.bench_e2e import machine, write_result  # noqa: E402
from suite.brokers import KAFKA_JVM_FLAGS, broker as make_broker  # noqa: E402

RESULT = HERE / "results" / "transactions.json"
VALUE = b"x" * 100
SCENARIOS = (100, 10_000)  # messages per transaction


def start_broker(name: str, workdir: Path):
    started = make_broker(name, workdir)
    started.start()
    return started


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)


def produce(bootstrap: str, topic: str, count: int, per_txn: int) -> dict:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
            "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    producer.init_transactions(60)
    commits = []
    start = time.perf_counter()
    for first in range(0, count, per_txn):
        producer.begin_transaction()
        for _ in range(min(per_txn, count - first)):
            while True:
                try:
                    producer.produce(topic, VALUE, partition=0)
                    break
                except BufferError:
                    producer.poll(0.01)
            producer.poll(0)
        began = time.perf_counter()
        producer.commit_transaction(60)
        commits.append((time.perf_counter() - began) * 1000)
    elapsed = time.perf_counter() - start
    ordered = sorted(commits)
    return {
        "messages_per_s": round(count / elapsed),
        "commit_ms_median": round(statistics.median(ordered), 2),
        "commit_ms_p99": round(ordered[math.ceil(len(ordered) * 0.99) - 1], 2),
        "transactions": len(commits),
    }


def read_committed(bootstrap: str, topic: str, expected: int) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 5,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = 0
    deadline = time.monotonic() + 120
    while seen < expected and time.monotonic() < deadline:
        for m in consumer.consume(min(10_000, expected - seen), 1.0):
            if m.error() is None:
                seen += 1
    consumer.close()
    return seen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--brokers", default="chronolog,kafka,tansu")
    args = ap.parse_args()
    names = args.brokers.split(",")
    work = Path(tempfile.mkdtemp(prefix="chronolog-bench-txn-"))
    runs = []
    try:
        for round_ in range(1, args.rounds + 1):
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            for name in order:
                broker = start_broker(name, work / f"{name}-{round_}")
                try:
                    for per_txn in SCENARIOS:
                        count = max(args.messages, per_txn)
                        topic = f"txn-{per_txn}-{uuid.uuid4().hex[:6]}"
                        create_topic(broker.bootstrap, topic)
                        measured = produce(broker.bootstrap, topic, count, per_txn)
                        found = read_committed(broker.bootstrap, topic, count)
                        run = {"round": round_, "broker": name, "per_transaction": per_txn}
                        if found != count:
                            run["error"] = f"read_committed found {found} of {count} messages"
                        else:
                            run.update(measured)
                        runs.append(run)
                        print(json.dumps(run), flush=True)
                finally:
                    broker.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = {}
    for name in names:
        for per_txn in SCENARIOS:
            mine = [
                r
                for r in runs
                if (r["broker"], r["per_transaction"]) == (name, per_txn) and "error" not in r
            ]
            key = f"{name}/commit-every-{per_txn}"
            if not mine:
                summary[key] = {"error": "no successful round"}
                continue
            summary[key] = {
                field: statistics.median(r[field] for r in mine)
                for field in ("messages_per_s", "commit_ms_median", "commit_ms_p99")
            }
    result = {
        **machine(),
        "messages": args.messages,
        "message_bytes": len(VALUE),
        "rounds": args.rounds,
        "kafka_jvm_flags": " ".join(KAFKA_JVM_FLAGS),
        "summary": summary,
        "runs": runs,
    }
    write_result(RESULT, result)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
