"""Do several broker processes on one machine use more than one core? (issue #33)

One chronolog process serves every request on one event loop, so small produce batches keep it
near one core whatever the machine has. The ZooKeeper cluster (broker/cluster/) already lets
several brokers share the partitions; this bench measures what --brokers of them on this
machine give for `make bench`'s "100 partitions x 10 producers" scenario, against one broker of
the same kind. Each configuration is a cluster of its own (one ZooKeeper, a chroot each), all
started before the first round. Per round and configuration: a new topic of 100 partitions at
replication factor 1, partition p led by broker 1 + p mod N; 10 confluent-kafka producer
processes (bench/suite/scenarios.py's, linger.ms=5) each send --messages/10 100-byte values
round-robin over the partitions; msgs/s from "go" to the last producer's flush, the brokers'
CPU over that time (every broker process, user and system) and the producers', and then every message read back
and compared by digest (nothing lost, nothing doubled). Configurations alternate round by round
so a busy moment of this shared machine hits them alike; medians over --rounds. The producers
and the brokers share the machine's cores, as in `make bench`. Writes
bench/results/processes.json.

    .venv/bin/python bench/bench_processes.py [--rounds 5] [--messages 1000000] [--brokers 2]
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
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bench_e2e import machine, write_result  # noqa: E402
from bench.suite.scenarios import partition_producers  # noqa: E402
from bench.suite.workloads import admin_delete_topic, consume_confluent, verify  # noqa: E402
from tests.cluster.helpers import ClusterProcesses  # noqa: E402
from tests.conftest import BrokerProcess  # noqa: E402
from tests.zookeeper import ZooKeeperServer  # noqa: E402

RESULT = REPO / "bench" / "results" / "processes.json"
PARTITIONS = 100
PRODUCERS = 10
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def start_cluster(zookeeper: ZooKeeperServer, work: Path, size: int) -> ClusterProcesses:
    chroot = f"/bench-{uuid.uuid4().hex[:8]}"
    brokers = [
        BrokerProcess(
            work / f"n{size}-broker{i}",
            {
                "broker.id": i,
                "zookeeper.connect": zookeeper.connect + chroot,
                "zookeeper.session.timeout.ms": 6000,
                "auto.create.topics.enable": "false",
            },
        )
        for i in range(1, size + 1)
    ]
    return ClusterProcesses(brokers, zookeeper, chroot).start()


def one_round(cluster: ClusterProcesses, size: int, round_: int, messages: int) -> dict:
    topic = f"partitions-n{size}-r{round_}"
    assignment = {p: [1 + p % size] for p in range(PARTITIONS)}
    error = cluster.create_topic(topic, assignment=assignment)
    if error:
        raise RuntimeError(f"CreateTopics {topic}: error {error}")
    bootstrap = cluster.bootstrap
    brokers = [b.proc.pid for b in cluster.brokers]
    at: dict[str, Any] = {}

    def at_go(producers: list[int]) -> None:
        at.update(start=time.monotonic(), cpu=sum(map(cpu_s, brokers)))
        at.update(client_cpu=sum(map(cpu_s, producers)))

    def at_done(producers: list[int]) -> None:
        at.update(elapsed=time.monotonic() - at["start"], cpu=sum(map(cpu_s, brokers)) - at["cpu"])
        at.update(client_cpu=sum(map(cpu_s, producers)) - at["client_cpu"])

    deadline = time.monotonic() + 240
    want = partition_producers(
        bootstrap, topic, PARTITIONS, PRODUCERS, messages // PRODUCERS, deadline, at_go, at_done
    )
    elapsed, cpu, client_cpu = at["elapsed"], at["cpu"], at["client_cpu"]
    got = consume_confluent(bootstrap, topic, PARTITIONS, want.count, time.monotonic() + 120)
    verify(got, want, f"{topic} read back")
    admin_delete_topic(bootstrap, topic)
    return {
        "round": round_,
        "brokers": size,
        "messages": want.count,
        "seconds": round(elapsed, 3),
        "msgs_per_s": round(want.count / elapsed),
        "broker_cpu_cores": round(cpu / elapsed, 2),
        "broker_cpu_us_per_message": round(cpu / want.count * 1e6, 2),
        "producers_cpu_cores": round(client_cpu / elapsed, 2),
    }


def summary(runs: list[dict]) -> dict:
    keys = ("msgs_per_s", "broker_cpu_cores", "broker_cpu_us_per_message", "producers_cpu_cores")
    return {k: statistics.median(r[k] for r in runs) for k in keys} | {
        "msgs_per_s_low_high": [
            min(r["msgs_per_s"] for r in runs),
            max(r["msgs_per_s"] for r in runs),
        ]
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--brokers", type=int, default=2, help="the larger configuration")
    args = parser.parse_args()
    sizes = (1, args.brokers)
    load_at_start = round(os.getloadavg()[0], 2)
    work = Path(tempfile.mkdtemp(prefix="chronolog-bench-processes-"))
    zookeeper = ZooKeeperServer(work / "zookeeper").start()
    clusters: dict[int, ClusterProcesses] = {}
    runs: list[dict] = []
    try:
        for size in sizes:
            clusters[size] = start_cluster(zookeeper, work, size)
        for round_ in range(1, args.rounds + 1):
            order = sizes if round_ % 2 else tuple(reversed(sizes))
            for size in order:
                run = one_round(clusters[size], size, round_, args.messages)
                runs.append(run)
                print(json.dumps(run), flush=True)
    finally:
        for cluster in clusters.values():
            cluster.stop()
        zookeeper.stop()
        shutil.rmtree(work, ignore_errors=True)
    by_size = {size: summary([r for r in runs if r["brokers"] == size]) for size in sizes}
    paired = [
        a["msgs_per_s"] / b["msgs_per_s"]
        for a, b in zip(
            (r for r in runs if r["brokers"] == args.brokers),
            (r for r in runs if r["brokers"] == 1),
        )
    ]
    result = {
        "benchmark": "processes",
        "scenario": f"{PARTITIONS} partitions x {PRODUCERS} confluent-kafka producers, 100-byte "
        "values, linger.ms=5, acks=all (librdkafka's default), replication factor 1",
        "messages_per_round": args.messages,
        "rounds": args.rounds,
        "medians": {f"{size}_brokers": s for size, s in by_size.items()},
        f"{args.brokers}_over_1_paired_median": round(statistics.median(paired), 3),
        "runs": runs,
        "load_average_1m_at_start": load_at_start,
        **machine(),
    }
    write_result(RESULT, result)
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
