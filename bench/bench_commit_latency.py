"""How long a synchronous offset commit takes in a 3-broker cluster, beside an acks=all produce
(issue 32, item 6: the coordinator's appends must complete its followers' parked fetches as a
produce does, or each commit waits replica.fetch.wait.max.ms).

ZooKeeper and three brokers at their defaults (replica.fetch.wait.max.ms 500) on this machine;
``__consumer_offsets`` at replication factor 3 and a topic of one partition with three replicas.
In turn, --rounds times: --count acks=all produces of one 100-byte message, each waited for
(confluent-kafka, linger.ms 0), and --count synchronous commits of one partition's offset
(confluent-kafka ``commit(asynchronous=False)``), each timed from the call to its return.
Medians, p99 and max per kind; the median ratio commit/produce is the figure the issue asks
for (within 2x). Writes bench/results/commit_latency.json.

    .venv/bin/python bench/bench_commit_latency.py [--rounds 3] [--count 200]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bench_e2e import machine, write_result  # noqa: E402
from tests.cluster.helpers import ClusterProcesses, wait_for  # noqa: E402
from tests.conftest import BrokerProcess  # noqa: E402
from tests.zookeeper import ZooKeeperServer  # noqa: E402

RESULT = REPO / "bench" / "results" / "commit_latency.json"
TOPIC = "commit-latency"


def produce_latencies(bootstrap: str, count: int) -> list[float]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    out = []
    for i in range(count):
        start = time.perf_counter()
        producer.produce(TOPIC, b"x" * 100, partition=0)
        assert producer.flush(30) == 0
        out.append((time.perf_counter() - start) * 1000)
    return out


def commit_latencies(consumer: Consumer, count: int, base: int) -> list[float]:
    out = []
    for i in range(count):
        start = time.perf_counter()
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, base + i)], asynchronous=False)
        out.append((time.perf_counter() - start) * 1000)
    return out


def summary(values: list[float]) -> dict:
    ordered = sorted(values)
    return {
        "median_ms": round(statistics.median(ordered), 3),
        "p99_ms": round(ordered[int(len(ordered) * 0.99) - 1], 3),
        "max_ms": round(ordered[-1], 3),
        "count": len(ordered),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=200)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="chronolog-bench-commit-"))
    zookeeper = ZooKeeperServer(work / "zookeeper").start()
    chroot = f"/bench-{uuid.uuid4().hex[:8]}"
    brokers = [
        BrokerProcess(
            work / f"broker{i}",
            {
                "broker.id": i,
                "zookeeper.connect": zookeeper.connect + chroot,
                "zookeeper.session.timeout.ms": 6000,
            },
        )
        for i in (1, 2, 3)
    ]
    cluster = ClusterProcesses(brokers, zookeeper, chroot)
    rounds = []
    try:
        cluster.start()
        bootstrap = cluster.bootstrap
        assert cluster.create_topic(TOPIC, assignment={0: [1, 2, 3]}) == 0
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False}
        )

        def first_commit() -> bool:  # creates __consumer_offsets and elects its leader
            try:
                consumer.commit(offsets=[TopicPartition(TOPIC, 0, 0)], asynchronous=False)
                return True
            except Exception:
                return False

        wait_for(first_commit, 120, "the first commit")
        produce_latencies(bootstrap, 20)  # warm-up
        for round_ in range(1, args.rounds + 1):
            produced = produce_latencies(bootstrap, args.count)
            committed = commit_latencies(consumer, args.count, round_ * args.count)
            rounds.append({"round": round_, "produce": produced, "commit": committed})
            print(
                json.dumps(
                    {
                        "round": round_,
                        "produce": summary(produced),
                        "commit": summary(committed),
                    }
                ),
                flush=True,
            )
        consumer.close()
    finally:
        cluster.stop()
        zookeeper.stop()
        shutil.rmtree(work, ignore_errors=True)
    produce = summary([v for r in rounds for v in r["produce"]])
    commit = summary([v for r in rounds for v in r["commit"]])
    result = {
        "machine": machine(),
        "brokers": 3,
        "offsets_replication_factor": 3,
        "produce_acks_all": produce,
        "sync_commit": commit,
        "commit_to_produce_median_ratio": round(commit["median_ms"] / produce["median_ms"], 2),
    }
    write_result(RESULT, result)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
