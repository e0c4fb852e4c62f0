"""DescribeTopicPartitions (api 75, KIP-966), asked of chronolog and of Kafka 4.1.1 alike: the
same pages (partition limit and cursor across topics), the same errors for an unknown topic and a
cursor outside the named topics, the same listing of every topic from a cursor. Kafka's Admin
client and `kafka-topics.sh --describe` use this api when the broker offers it."""

from __future__ import annotations

import uuid

import pytest

from client import BrokerConnection
from protocol import ApiKey
from tests.oracle.kafka_oracle import run_kafka_tool

SIZES = {"a": 3, "b": 2, "c": 1}


def _connect(server) -> BrokerConnection:
    return BrokerConnection(server.host, server.port, client_id="describe-partitions", timeout_s=20)


def _create(conn: BrokerConnection, names: dict[str, int]) -> None:
    body = {
        "topics": [
            {
                "name": name,
                "num_partitions": count,
                "replication_factor": 1,
                "assignments": [],
                "configs": [],
            }
            for name, count in names.items()
        ],
        "timeout_ms": 30000,
    }
    for created in conn.call(ApiKey.CREATE_TOPICS, 5, body).topics:
        assert created.error_code == 0, created


def _describe(conn, names, limit=2000, cursor=None) -> dict:
    body = {
        "topics": [{"name": n} for n in names],
        "response_partition_limit": limit,
        "cursor": None
        if cursor is None
        else {"topic_name": cursor[0], "partition_index": cursor[1]},
    }
    return conn.call(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, body)


def _view(answer, prefix: str) -> tuple:
    """What a client sees, topic names without the run's prefix, the one broker as 'self'."""

    def short(name):
        return name[len(prefix) :] if name and name.startswith(prefix) else name

    topics = [
        (
            t.error_code,
            short(t.name),
            t.topic_id is not None and t.topic_id != uuid.UUID(int=0),
            [
                (
                    p.error_code,
                    p.partition_index,
                    len(p.replica_nodes) == 1 and p.leader_id == p.replica_nodes[0],
                    p.isr_nodes == p.replica_nodes,
                    p.offline_replicas,
                    p.eligible_leader_replicas,
                )
                for p in t.partitions
            ],
        )
        for t in answer.topics
        if t.name is None or t.name.startswith(prefix)
    ]
    cursor = answer.next_cursor
    return topics, None if cursor is None else (short(cursor.topic_name), cursor.partition_index)


def scenario(server) -> dict[str, tuple]:
    prefix = f"dtp-{uuid.uuid4().hex[:8]}-"
    names = {prefix + k: v for k, v in SIZES.items()}
    a, b, c = names
    with _connect(server) as conn:
        _create(conn, names)
        return {
            "first page": _view(_describe(conn, [c, a, b], limit=2), prefix),
            "second page": _view(_describe(conn, [a, b, c], limit=2, cursor=(a, 2)), prefix),
            "third page": _view(_describe(conn, [a, b, c], limit=2, cursor=(b, 1)), prefix),
            "unknown": _view(_describe(conn, [a, prefix + "missing"]), prefix),
            "invalid name": _view(_describe(conn, [prefix + "no/slash"]), prefix),
            "cursor outside": _view(_describe(conn, [a], cursor=(c, 0)), prefix),
            "every topic": _view(_describe(conn, [], cursor=(a, 1)), prefix),
        }


def test_chronolog_pages_topic_partitions(broker):
    got = scenario(broker)
    whole = (0, 0, True, True, [], [])
    assert got["first page"] == ([(0, "a", True, [whole, (0, 1, True, True, [], [])])], ("a", 2))
    assert got["second page"][1] == ("b", 1)
    assert got["third page"][1] is None
    assert [t[1] for t in got["every topic"][0]] == ["a", "b", "c"]
    assert got["unknown"][0][1][:2] == (3, "missing")  # UNKNOWN_TOPIC_OR_PARTITION
    assert got["cursor outside"][0] == [(42, "a", False, [])]  # INVALID_REQUEST


@pytest.mark.kafka_oracle
def test_kafka_pages_them_the_same(broker, kafka_oracle):
    assert scenario(kafka_oracle) == scenario(broker)


@pytest.mark.kafka_oracle
def test_kafka_topics_describe_reads_chronolog(broker):
    """Kafka 4.1.1's kafka-topics --describe (TopicCommand, whose Admin client asks
    DescribeTopicPartitions when the broker offers it) lists every partition of a topic on
    chronolog with its leader, replicas and ISR."""
    topic = f"dtp-tool-{uuid.uuid4().hex[:8]}"
    with _connect(broker) as conn:
        _create(conn, {topic: 3})
    done = run_kafka_tool(
        "org.apache.kafka.tools.TopicCommand",
        "--bootstrap-server",
        broker.bootstrap,
        "--describe",
        "--topic",
        topic,
    )
    lines = [line.split() for line in done.stdout.splitlines() if "Partition:" in line]
    rows = {int(row[row.index("Partition:") + 1]) for row in lines}
    assert rows == {0, 1, 2}, done.stdout
    assert all(row[row.index("Leader:") + 1] == row[row.index("Replicas:") + 1] for row in lines)
