"""Kafka 4.1.1's own operator tools against a 3-broker chronolog cluster and against a 3-node
Kafka 4.1.1 cluster side by side (issue #34): kafka-topics creates a topic with an explicit
replica assignment, kafka-reassign-partitions refuses a plan that changes replication factors
when told to disallow that (KIP-860), then moves two of its partitions (--execute, then
--verify until complete), a broker is stopped and started again so two partitions have leaders
that are not their preferred replica, and kafka-leader-election elects the preferred ones. At
each step the tool's exit status and output (sorted lines) and the topic's replicas and leaders
must be the same on both clusters, and no acknowledged record is lost. About 90 s (three
Kafka JVMs, a dozen tool runs)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.oracle.kafka_cluster import KafkaCluster
from tests.oracle.kafka_oracle import TOPIC_COMMAND, run_kafka_tool
from tests.waiting import wait_for

pytestmark = pytest.mark.kafka_oracle

REASSIGN_COMMAND = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
ELECTION_COMMAND = "org.apache.kafka.tools.LeaderElectionCommand"
TOPIC = "moves"
RECORDS = 300
TIMEOUT_S = 60


def _tool(main_class: str, bootstrap: str, *args: str) -> tuple[int, list[str]]:
    """A tool's exit status and its output lines, sorted (partition lists in any order), without
    the JVM's log lines."""
    done = run_kafka_tool(main_class, "--bootstrap-server", bootstrap, *args, check=False)
    lines = []
    for line in (done.stdout + done.stderr).splitlines():
        if not line.strip() or line[0] in "[\t" or re.search(r"\b(INFO|WARN)\b", line):
            continue  # the JVM's log lines, the admin client's config dump
        # "for partitions a-0, b-1": the order is the tool's map's
        line = re.sub(
            r"(partitions?) (.*)", lambda m: m[1] + " " + ", ".join(sorted(m[2].split(", "))), line
        )
        lines.append(line)
    return done.returncode, sorted(lines)


def _layout(bootstrap: str) -> dict[int, tuple[list[int], int, list[int]]]:
    """partition -> (replicas, leader, isr) of TOPIC, from Metadata."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = admin.list_topics(TOPIC, timeout=15).topics[TOPIC]
    assert topic.error is None, topic.error
    return {
        p: (list(m.replicas), m.leader, sorted(m.isrs)) for p, m in sorted(topic.partitions.items())
    }


def _in_sync(bootstrap: str) -> bool:
    return all(sorted(r) == isr for r, _, isr in _layout(bootstrap).values())


def _values(bootstrap: str) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "tools-check", "enable.auto.commit": False}
    )
    got: list[bytes] = []
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(3)])
    try:
        wait_for(
            lambda: got.extend(m.value() for m in consumer.consume(100, 0.5) if not m.error())
            or len(got) >= RECORDS,
            "every record read back",
            timeout=TIMEOUT_S,
        )
    finally:
        consumer.close()
    return sorted(got)


def _scenario(bootstrap: str, stop, start, workdir: Path) -> list[object]:
    """The steps on one cluster; ``stop(3)`` / ``start(3)`` stop and restart broker 3. Returns
    what each step showed, to compare across the clusters."""
    seen: list[object] = []
    workdir.mkdir(parents=True, exist_ok=True)
    seen.append(
        _tool(
            TOPIC_COMMAND,
            bootstrap,
            "--create",
            "--topic",
            TOPIC,
            "--replica-assignment",
            "1:2,2:3,3:1",
        )
    )
    wait_for(lambda: _in_sync(bootstrap), "the new topic in sync", timeout=TIMEOUT_S)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(RECORDS):
        producer.produce(TOPIC, b"%d" % i, partition=i % 3)
    assert producer.flush(30) == 0
    seen.append(_layout(bootstrap))

    # KIP-860 (AlterPartitionReassignments v1): a plan that changes replication factors is
    # refused whole when the tool is told to disallow that
    resize = workdir / "resize.json"
    resize.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": TOPIC, "partition": 0, "replicas": [1, 2, 3]},
                    {"topic": TOPIC, "partition": 2, "replicas": [3]},
                ],
            }
        )
    )
    seen.append(
        _tool(
            REASSIGN_COMMAND,
            bootstrap,
            "--reassignment-json-file",
            str(resize),
            "--execute",
            "--disallow-replication-factor-change",
        )  # fmt: skip
    )
    seen.append(_layout(bootstrap))

    plan = workdir / "reassign.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": TOPIC, "partition": 0, "replicas": [3, 2]},
                    {"topic": TOPIC, "partition": 1, "replicas": [1, 3]},
                ],
            }
        )
    )
    seen.append(
        _tool(REASSIGN_COMMAND, bootstrap, "--reassignment-json-file", str(plan), "--execute")
    )

    def verified() -> tuple[int, list[str]] | None:
        answer = _tool(
            REASSIGN_COMMAND, bootstrap, "--reassignment-json-file", str(plan), "--verify"
        )
        return None if any("in progress" in line for line in answer[1]) else answer

    seen.append(wait_for(verified, "the reassignment complete", timeout=TIMEOUT_S))
    wait_for(lambda: _in_sync(bootstrap), "the moved partitions in sync", timeout=TIMEOUT_S)
    seen.append(_layout(bootstrap))

    stop(3)  # partitions 0 and 2 lose their preferred leader
    wait_for(
        lambda: all(leader != 3 for _, leader, _ in _layout(bootstrap).values()),
        "new leaders without broker 3",
        timeout=TIMEOUT_S,
    )
    start(3)
    wait_for(lambda: _in_sync(bootstrap), "broker 3 back in sync", timeout=TIMEOUT_S)
    seen.append(_layout(bootstrap))
    seen.append(
        _tool(
            ELECTION_COMMAND,
            bootstrap,
            "--election-type",
            "PREFERRED",
            "--topic",
            TOPIC,
            "--partition",
            "0",
        )
    )
    elections = workdir / "elections.json"
    elections.write_text(
        json.dumps({"partitions": [{"topic": TOPIC, "partition": p} for p in range(3)]})
    )
    seen.append(
        _tool(
            ELECTION_COMMAND,
            bootstrap,
            "--election-type",
            "PREFERRED",
            "--path-to-json-file",
            str(elections),
        )
    )
    seen.append(_layout(bootstrap))
    seen.append(
        _tool(
            ELECTION_COMMAND,
            bootstrap,
            "--election-type",
            "PREFERRED",
            "--topic",
            "nosuch",
            "--partition",
            "0",
        )
    )
    assert _values(bootstrap) == sorted(b"%d" % i for i in range(RECORDS))
    return seen


def test_kafka_tools_reassign_and_elect_as_on_a_kafka_cluster(cluster_factory, tmp_path):
    chronolog = cluster_factory(3, offsets_topic_replication_factor=3, min_insync_replicas=2)

    def restart_chronolog(broker_id: int) -> None:
        chronolog.broker(broker_id).start()
        chronolog.wait_registered([1, 2, 3])

    ours = _scenario(
        chronolog.bootstrap,
        lambda b: chronolog.broker(b).stop(),
        restart_chronolog,
        tmp_path / "chronolog",
    )
    kafka = KafkaCluster(tmp_path / "kafka", overrides={"min.insync.replicas": "2"}).start()
    try:
        theirs = _scenario(
            kafka.bootstrap,
            lambda b: kafka.node(b).stop(),
            lambda b: kafka.node(b).start(),
            tmp_path / "kafka-plans",
        )
    finally:
        kafka.stop()
    for step, (mine, kafkas) in enumerate(zip(ours, theirs)):
        assert mine == kafkas, f"step {step}:\nchronolog {mine}\nkafka     {kafkas}"
    refused = ours[2]  # the resize plan, refused on both alike
    assert (
        refused[0] != 0 and "moves-0: The replication factor is changed from 2 to 3" in (refused[1])
    ), refused
