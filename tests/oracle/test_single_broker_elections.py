"""ElectLeaders, ListPartitionReassignments and AlterPartitionReassignments on a single broker,
asked of chronolog and of a single-node Kafka 4.1.1 alike (kafka-leader-election.sh and
kafka-reassign-partitions.sh send these): the same codes and messages for an election that is
not needed, an unknown topic or partition, nothing being reassigned, a reassignment to the
broker itself, a cancellation with nothing in progress, and targets naming another broker or no
broker at all."""

from __future__ import annotations

import uuid

import pytest

from client import BrokerConnection
from protocol import ApiKey


def _connect(server) -> BrokerConnection:
    return BrokerConnection(server.host, server.port, client_id="elections", timeout_s=20)


def _view(answer) -> object:
    """The answer as plain data, topic names without the run's suffix."""
    if isinstance(answer, dict):
        return {k: _view(v) for k, v in answer.items() if k != "throttle_time_ms"}
    if isinstance(answer, list):
        return [_view(v) for v in answer]
    return answer


def scenario(server) -> dict[str, object]:
    topic = f"elect-{uuid.uuid4().hex[:8]}"
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    with _connect(server) as conn:
        meta = conn.call(ApiKey.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False})
        me = meta.brokers[0].node_id
        body = {
            "topics": [
                {
                    "name": topic,
                    "num_partitions": 2,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout_ms": 30000,
        }
        (created,) = conn.call(ApiKey.CREATE_TOPICS, 5, body).topics
        assert created.error_code == 0, created

        def elect(election_type: int, wanted: list) -> object:
            body = {"election_type": election_type, "timeout_ms": 10000, "topic_partitions": wanted}
            return conn.call(ApiKey.ELECT_LEADERS, 2, body)

        def alter(targets: list, allow_rf_change: bool | None = None) -> object:
            body = {"timeout_ms": 10000, "topics": [{"name": topic, "partitions": targets}]}
            if allow_rf_change is None:
                return conn.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, body)
            body["allow_replication_factor_change"] = allow_rf_change  # v1, KIP-860
            return conn.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 1, body)

        answers = {
            "preferred": elect(
                0,
                [{"topic": topic, "partitions": [0, 5]}, {"topic": missing, "partitions": [0]}],
            ),
            "unclean": elect(1, [{"topic": topic, "partitions": [1]}]),
            "list every": conn.call(
                ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 10000, "topics": None}
            ),
            "list named": conn.call(
                ApiKey.LIST_PARTITION_REASSIGNMENTS,
                0,
                {"timeout_ms": 10000, "topics": [{"name": topic, "partition_indexes": [0, 7]}]},
            ),
            "alter": alter(
                [
                    {"partition_index": 0, "replicas": [me]},
                    {"partition_index": 1, "replicas": None},
                    {"partition_index": 5, "replicas": [me]},
                ]
            ),
            "alter elsewhere": alter(
                [
                    {"partition_index": 0, "replicas": [me, 999]},
                    {"partition_index": 1, "replicas": []},
                ]
            ),
            "alter v1, factor fixed": alter(
                [
                    {"partition_index": 0, "replicas": [me]},
                    {"partition_index": 1, "replicas": [me, 999]},
                    {"partition_index": 2, "replicas": None},
                ],
                allow_rf_change=False,
            ),
        }
    text = repr(_view(answers)).replace(topic, "TOPIC").replace(missing, "MISSING")
    return {"answers": text}


def test_chronolog_answers_elections_and_reassignments(broker):
    answers = scenario(broker)["answers"]
    assert "'error_code': 84" in answers  # ELECTION_NOT_NEEDED
    assert "'error_code': 85" in answers  # NO_REASSIGNMENT_IN_PROGRESS
    assert "no such broker is registered" in answers


@pytest.mark.kafka_oracle
def test_kafka_answers_the_same(broker, kafka_oracle):
    assert scenario(broker) == scenario(kafka_oracle)
