"""Moving a partition between a broker's log dirs (AlterReplicaLogDirs, KIP-113) beside Apache
Kafka 4.1.1, both started with two log dirs: Kafka's own kafka-reassign-partitions.sh with
"log_dirs" in its reassignment JSON moves the partition (--execute, with
--replica-alter-log-dirs-throttle) and finds the move complete (--verify, from
describeReplicaLogDirs, which then clears the throttle); raw requests with a bad path, a relative path, an unknown
partition and the partition's own dir get the same error codes; the records are all there after.

The tool's texts name the broker (Kafka's node 1, chronolog's broker 0) and the dirs: the
comparison masks them.
"""

from __future__ import annotations

import json
import re

import pytest

from client import BrokerConnection
from protocol import ApiKey
from tests.oracle.kafka_oracle import GET_OFFSET_SHELL, KafkaServer, run_kafka_tool
from tests.waiting import wait_for

pytestmark = pytest.mark.kafka_oracle

REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
TOPIC = "moving"
RECORDS = 20000


def _call(server, api: ApiKey, version: int, body: dict):
    with BrokerConnection(server.host, server.port, client_id="logdirs", timeout_s=15) as c:
        return c.call(api, version, body)


def _placement(server) -> dict[tuple[int, bool], str]:
    answer = _call(server, ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})
    return {
        (p.partition_index, p.is_future_key): r.log_dir
        for r in answer.results
        for t in r.topics
        if t.name == TOPIC
        for p in t.partitions
    }


def _alter(server, path: str, topic: str, partition: int) -> int:
    body = {"dirs": [{"path": path, "topics": [{"name": topic, "partitions": [partition]}]}]}
    answer = _call(server, ApiKey.ALTER_REPLICA_LOG_DIRS, 2, body)
    return answer.results[0].partitions[0].error_code


def _reassign(server, action: str, plan: str, *extra: str) -> str:
    done = run_kafka_tool(
        REASSIGN,
        "--bootstrap-server",
        server.bootstrap,
        action,
        "--reassignment-json-file",
        plan,
        *extra,
    )
    return done.stdout


def _scenario(server, broker_id: int, dirs: list[str], workdir) -> list:
    bootstrap = server.bootstrap
    run_kafka_tool(
        TOPIC_COMMAND, "--bootstrap-server", bootstrap, "--create", "--topic", TOPIC,
        "--partitions", "1", "--replication-factor", "1",
    )  # fmt: skip
    run_kafka_tool(
        PRODUCER_PERF, "--topic", TOPIC, "--num-records", str(RECORDS), "--record-size", "200",
        "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all",
    )  # fmt: skip
    source = _placement(server)[(0, False)]
    target = next(d for d in dirs if d != source)
    seen: list = [
        ("bad path", _alter(server, "/no/such/dir", TOPIC, 0)),
        ("relative path", _alter(server, target.rsplit("/", 1)[1], TOPIC, 0)),
        ("unknown partition", _alter(server, target, TOPIC, 5)),
        ("unknown topic", _alter(server, target, "no-such-topic", 0)),
        ("already there", _alter(server, source, TOPIC, 0)),
        ("placement", _placement(server) == {(0, False): source}),
    ]
    plan = workdir / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": TOPIC, "partition": 0, "replicas": [broker_id], "log_dirs": [target]}
                ],
            }
        )
    )

    def masked(text: str) -> str:
        text = text.replace(target, "TARGET").replace(source, "SOURCE")
        text = text.replace(f'"replicas":[{broker_id}]', '"replicas":[B]')
        text = text.replace(f"replica {TOPIC}-0-{broker_id} ", f"replica {TOPIC}-0-B ")
        return re.sub(rf"\b(broker|Broker) {broker_id}\b", r"\1 B", text)

    # with the quota on moves between log dirs, which the tool sets on the broker and clears once
    # --verify finds the move done
    throttle = ("--replica-alter-log-dirs-throttle", "50000000")
    seen.append(("execute", masked(_reassign(server, "--execute", str(plan), *throttle))))
    wait_for(
        lambda: "completed successfully" in _reassign(server, "--verify", str(plan)),
        "kafka-reassign-partitions.sh --verify finds the move done",
        timeout=90,
    )
    seen.append(("verify", masked(_reassign(server, "--verify", str(plan)))))
    seen.append(("placement", _placement(server) == {(0, False): target}))
    offsets = run_kafka_tool(GET_OFFSET_SHELL, "--bootstrap-server", bootstrap, "--topic", TOPIC)
    seen.append(("end offset", offsets.stdout.strip()))
    return seen


def test_kafka_reassign_partitions_moves_a_log_dir_as_on_kafka(broker_factory, tmp_path):
    kafka_dirs = [str(tmp_path / "kafka-disk1"), str(tmp_path / "kafka-disk2")]
    kafka = KafkaServer(tmp_path / "kafka", {"log.dirs": ",".join(kafka_dirs)}).start()
    try:
        theirs = _scenario(kafka, 1, kafka_dirs, tmp_path / "kafka")
    finally:
        kafka.stop()
    ours_dirs = [str(tmp_path / "disk1"), str(tmp_path / "disk2")]
    chronolog = broker_factory({"log.dirs": ",".join(ours_dirs)})
    (tmp_path / "ours").mkdir()
    ours = _scenario(chronolog, 0, ours_dirs, tmp_path / "ours")
    for mine, kafkas in zip(ours, theirs):
        assert mine == kafkas
    assert len(ours) == len(theirs)
    assert ("end offset", f"{TOPIC}:0:{RECORDS}") in ours
