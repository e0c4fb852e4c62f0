"""The cost of replication: produce throughput and latency with acks=1 and acks=all at
replication factor 1 and 3, on ZooKeeper and three brokers on this machine.

One cluster (tests/cluster's ZooKeeper and broker processes); each scenario has its own topic
with one partition led by broker 1 (RF 1: [1]; RF 3: [1, 2, 3]), so the leader's work is the
same and only the replication differs. Per scenario, with confluent-kafka and 100-byte messages:
(1) throughput: --messages messages (at most --max-seconds) with linger.ms=5; (2) latency from
produce() to the delivery report at a steady --rate for --seconds with linger.ms=5: p50 / p99 /
max. Each topic first gets a few acknowledged messages (warm-up, not measured); after each
throughput phase every replica catches up before the next phase starts, so a follower still
copying an acks=1 backlog does not slow the next measurement. The scenarios run in turn,
--rounds times over, so a busy moment of this shared machine hits them alike; the medians over
the rounds are reported (with each round in "runs"), and in "paired" each comparison made round
by round: the median ratio of two scenarios' throughputs and of their p50 difference. Writes
bench/results/replication.json and replication.png.

    .venv/bin/python bench/bench_replication.py [--rounds 7] [--messages 1000000]
        [--rate 500] [--seconds 10]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import confluent_kafka
from confluent_kafka import Producer

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bench_e2e import machine, write_result  # noqa: E402
from tests.cluster.helpers import ClusterProcesses, replica_offsets, wait_for  # noqa: E402
from tests.zookeeper import ZooKeeperServer  # noqa: E402
from tests.conftest import BrokerProcess  # noqa: E402

RESULT = REPO / "bench" / "results" / "replication.json"
FIGURE = REPO / "bench" / "results" / "replication.png"
MESSAGE_BYTES = 100
SCENARIOS = [(1, "1"), (1, "all"), (3, "1"), (3, "all")]


def warm_up(bootstrap: str, topic: str) -> None:
    """A few acknowledged messages first: the followers' first fetches after the topic's
    creation (a backoff when the leader is not ready yet) are not what is measured."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for _ in range(20):
        producer.produce(topic, b"warm-up", partition=0)
        producer.flush(30)


def throughput(bootstrap: str, topic: str, acks: str, count: int, max_s: float) -> dict:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    payload = b"x" * MESSAGE_BYTES
    delivered, failed = [0], [0]

    def report(err, msg):
        if err is None:
            delivered[0] += 1
        else:
            failed[0] += 1

    start = time.perf_counter()
    sent = 0
    while sent < count and time.perf_counter() - start < max_s:
        try:
            producer.produce(topic, payload, partition=0, on_delivery=report)
            sent += 1
        except BufferError:
            producer.poll(0.01)
        if sent % 1000 == 0:
            producer.poll(0)
    producer.flush(max_s)
    elapsed = time.perf_counter() - start
    return {
        "messages": delivered[0],
        "failed": failed[0],
        "seconds": round(elapsed, 3),
        "messages_per_s": round(delivered[0] / elapsed),
        "mb_per_s": round(delivered[0] * MESSAGE_BYTES / elapsed / 1e6, 2),
    }


def latency(bootstrap: str, topic: str, acks: str, rate: int, seconds: float) -> dict:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5})
    samples: list[float] = []

    def report(err, msg, sent=None):
        if err is None:
            samples.append((time.perf_counter() - sent) * 1000)

    total = int(rate * seconds)
    start = time.perf_counter()
    for i in range(total):
        due = start + i / rate
        while (now := time.perf_counter()) < due:
            time.sleep(min(due - now, 0.0005))
        sent = time.perf_counter()
        producer.produce(
            topic,
            b"x" * MESSAGE_BYTES,
            partition=0,
            on_delivery=lambda err, msg, sent=sent: report(err, msg, sent),
        )
        producer.poll(0)
    producer.flush(30)
    samples.sort()

    def pct(p: float) -> float:
        return round(samples[min(len(samples) - 1, int(p * len(samples)))], 2)

    return {
        "messages": len(samples),
        "rate_per_s": rate,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "max_ms": round(samples[-1], 2),
    }


def caught_up(cluster: ClusterProcesses, topic: str, replicas: list[int]) -> None:
    """Until every replica's log end offset is the leader's (broker 1's)."""

    def same_end() -> bool:
        ends = {replica_offsets(cluster.broker(b), topic)[1] for b in replicas}
        return len(ends) == 1

    wait_for(same_end, 120, f"the replicas of {topic} caught up")


def summary(factor: int, acks: str, runs: list[dict]) -> dict:
    """One scenario's medians over its rounds, with the range of the headline figures."""

    def median(phase: str, field: str) -> float:
        return round(statistics.median(r[phase][field] for r in runs), 2)

    def spread(phase: str, field: str) -> list:
        values = [r[phase][field] for r in runs]
        return [min(values), max(values)]

    return {
        "replication_factor": factor,
        "acks": acks,
        "rounds": len(runs),
        "throughput": {
            "messages_per_s": round(median("throughput", "messages_per_s")),
            "messages_per_s_range": spread("throughput", "messages_per_s"),
            "mb_per_s": median("throughput", "mb_per_s"),
            "failed": sum(r["throughput"]["failed"] for r in runs),
        },
        "latency": {
            "rate_per_s": runs[0]["latency"]["rate_per_s"],
            "p50_ms": median("latency", "p50_ms"),
            "p99_ms": median("latency", "p99_ms"),
            "p99_ms_range": spread("latency", "p99_ms"),
            "max_ms": median("latency", "max_ms"),
        },
    }


def paired(runs: list[dict], one: tuple[int, str], other: tuple[int, str]) -> dict:
    """Scenario ``one`` against ``other`` round by round (the same moment of this shared
    machine): the medians of their throughput ratio and of their p50 latency difference."""
    by_round: dict[int, dict] = {}
    for r in runs:
        by_round.setdefault(r["round"], {})[(r["replication_factor"], r["acks"])] = r
    pairs = [(rounds[one], rounds[other]) for rounds in by_round.values()]
    return {
        "throughput_ratio": round(
            statistics.median(
                a["throughput"]["messages_per_s"] / b["throughput"]["messages_per_s"]
                for a, b in pairs
            ),
            2,
        ),
        "p50_ms_difference": round(
            statistics.median(a["latency"]["p50_ms"] - b["latency"]["p50_ms"] for a, b in pairs), 2
        ),
    }


def figure(results: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"RF {r['replication_factor']}\nacks={r['acks']}" for r in results]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    rate = [r["throughput"]["messages_per_s"] for r in results]
    low, high = zip(*(r["throughput"]["messages_per_s_range"] for r in results))
    left.bar(
        labels,
        rate,
        yerr=[[m - lo for m, lo in zip(rate, low)], [hi - m for m, hi in zip(rate, high)]],
        capsize=4,
        color="#4477aa",
    )
    left.set_title("produce throughput (msgs/s, 100 B, linger 5 ms)")
    p50 = [r["latency"]["p50_ms"] for r in results]
    p99 = [r["latency"]["p99_ms"] for r in results]
    low, high = zip(*(r["latency"]["p99_ms_range"] for r in results))
    x = range(len(results))
    right.bar([i - 0.2 for i in x], p50, width=0.4, label="p50", color="#66ccee")
    right.bar(
        [i + 0.2 for i in x],
        p99,
        width=0.4,
        yerr=[[m - lo for m, lo in zip(p99, low)], [hi - m for m, hi in zip(p99, high)]],
        capsize=4,
        label="p99",
        color="#ee6677",
    )
    right.set_xticks(list(x), labels)
    right.set_title(
        f"produce latency (ms, log scale) at {results[0]['latency']['rate_per_s']} msgs/s"
    )
    right.legend()
    right.set_yscale("log")
    fig.suptitle(
        "chronolog: the cost of replication (3 brokers + ZooKeeper, one machine)\n"
        f"medians of {results[0]['rounds']} rounds; bars from the lowest round to the highest"
    )
    fig.tight_layout()
    fig.savefig(FIGURE, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--max-seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    load_at_start = round(os.getloadavg()[0], 2)
    work = Path(tempfile.mkdtemp(prefix="chronolog-bench-replication-"))
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
    runs = []
    try:
        cluster.start()
        bootstrap = cluster.bootstrap
        for factor, acks in SCENARIOS:
            replicas = [1] if factor == 1 else [1, 2, 3]
            topic = f"rf{factor}-acks{acks}"
            for name in (topic, topic + "-latency"):
                assert cluster.create_topic(name, assignment={0: replicas}) == 0
                warm_up(bootstrap, name)
        for round_ in range(1, args.rounds + 1):
            for factor, acks in SCENARIOS:
                replicas = [1] if factor == 1 else [1, 2, 3]
                topic = f"rf{factor}-acks{acks}"
                produced = throughput(bootstrap, topic, acks, args.messages, args.max_seconds)
                caught_up(cluster, topic, replicas)
                run = {
                    "round": round_,
                    "replication_factor": factor,
                    "acks": acks,
                    "throughput": produced,
                    "latency": latency(
                        bootstrap, topic + "-latency", acks, args.rate, args.seconds
                    ),
                }
                caught_up(cluster, topic + "-latency", replicas)
                runs.append(run)
                print(json.dumps(run), flush=True)
    finally:
        cluster.stop()
        zookeeper.stop()
        shutil.rmtree(work, ignore_errors=True)
    results = [
        summary(
            factor,
            acks,
            [r for r in runs if (r["replication_factor"], r["acks"]) == (factor, acks)],
        )
        for factor, acks in SCENARIOS
    ]
    result = {
        "benchmark": "replication",
        "client": "confluent-kafka " + confluent_kafka.__version__,
        "message_bytes": MESSAGE_BYTES,
        "brokers": 3,
        "rounds": args.rounds,
        "scenarios": results,
        "paired": {
            "RF 3 against RF 1, acks=1": paired(runs, (3, "1"), (1, "1")),
            "RF 3 against RF 1, acks=all": paired(runs, (3, "all"), (1, "all")),
            "acks=all against acks=1, RF 1": paired(runs, (1, "all"), (1, "1")),
            "acks=all against acks=1, RF 3": paired(runs, (3, "all"), (3, "1")),
        },
        "runs": runs,
        "load_average_1m_at_start": load_at_start,
        **machine(),
    }
    write_result(RESULT, result)
    figure(results)
    print(json.dumps({k: result[k] for k in ("scenarios", "paired")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
