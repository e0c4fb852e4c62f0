"""The api versions Kafka 4.1.1 added that chronolog serves (issue 34): Fetch v18, ListOffsets
v10, Metadata v13, DescribeGroups v6, DescribeCluster v2, OffsetForLeaderEpoch v4 on a single
broker and Produce v13 (topics by id). One raw-wire scenario runs against a server and gathers
what a client reads of each answer; the chronolog tests assert its values, the differential
tests (marked kafka_oracle) that Kafka 4.1.1 gives the very same, and the Java clients 4.1.1 are
shown to run through the new versions (the broker logs the versions each connection used).
InitProducerId v6 (KIP-939, two-phase commit) is unstable in Kafka 4.1.1: neither advertises it,
and both close a connection that sends it.

Intended departures, checked here: chronolog still serves the versions Kafka 4.0 dropped
(KIP-896), so its lowest versions are below Kafka's; an out-of-range Fetch carries the partition's
offsets where Kafka sends -1 (as test_differential_errors names it); node ids, ports, cluster ids
and topic ids differ by nature and are left out of the comparison.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid

import pytest

from client import BrokerConnection
from protocol import ApiKey, iter_deep
from protocol import recordbatch as rb
from protocol.schemas import encode_request_body
from tests.integration.test_negotiated_versions import used_versions
from tests.oracle.kafka_oracle import JavaClients

NEW_VERSIONS = {
    ApiKey.PRODUCE: 13,
    ApiKey.FETCH: 18,
    ApiKey.LIST_OFFSETS: 10,
    ApiKey.METADATA: 13,
    ApiKey.DESCRIBE_GROUPS: 6,
    ApiKey.DESCRIBE_CLUSTER: 2,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: 4,
}
NOW_MS = 1_700_000_000_000  # record timestamps: fixed, below Kafka's retention horizon with -1


def _connect(server) -> BrokerConnection:
    return BrokerConnection(server.host, server.port, client_id="newer-versions", timeout_s=20)


def _advertised(conn: BrokerConnection) -> dict[int, tuple[int, int]]:
    body = {"client_software_name": "newer-versions", "client_software_version": "1"}
    answer = conn.call(ApiKey.API_VERSIONS, 3, body)
    return {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}


def _create(conn: BrokerConnection, topic: str) -> None:
    body = {
        "topics": [
            {
                "name": topic,
                "num_partitions": 1,
                "replication_factor": 1,
                "assignments": [],
                "configs": [{"name": "retention.ms", "value": "-1"}],
            }
        ],
        "timeout_ms": 15000,
    }
    (created,) = conn.call(ApiKey.CREATE_TOPICS, 5, body).topics
    assert created.error_code == 0, created


def _produce(conn: BrokerConnection, topic: str, first: int, count: int) -> int:
    """Records ``first``.. (value b"v<n>", timestamp NOW_MS + n) in one batch: its base offset."""
    records = [
        (i, NOW_MS + first + i, b"k%d" % (first + i), b"v%d" % (first + i), [])
        for i in range(count)
    ]
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 15000,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [
                    {"index": 0, "records": rb.build_batch(rb.BatchSpec(), records)}
                ],
            }
        ],
    }
    (part,) = conn.call(ApiKey.PRODUCE, 12, body).responses[0].partition_responses
    assert part.error_code == 0, part
    return part.base_offset


def _produce_by_id(conn: BrokerConnection, topic_id: uuid.UUID, first: int) -> list[tuple]:
    """Produce v13 (KIP-516) of record ``first`` to partition 0 and 3 (none) of ``topic_id`` and
    to an id no topic has: per topic (whether it is ``topic_id``, [(partition, error, base
    offset, log append time, log start offset)]), in id order (Kafka answers in its own)."""
    batch = rb.build_batch(
        rb.BatchSpec(), [(0, NOW_MS + first, b"k%d" % first, b"v%d" % first, [])]
    )
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 15000,
        "topic_data": [
            {
                "topic_id": topic_id,
                "partition_data": [{"index": 0, "records": batch}, {"index": 3, "records": batch}],
            },
            {"topic_id": uuid.uuid4(), "partition_data": [{"index": 0, "records": batch}]},
        ],
    }
    answer = conn.call(ApiKey.PRODUCE, 13, body)
    return sorted(
        (
            t.topic_id == topic_id,
            [
                (
                    p.index,
                    p.error_code,
                    p.base_offset,
                    p.log_append_time_ms,
                    p.log_start_offset,
                )
                for p in t.partition_responses
            ],
        )
        for t in answer.responses
    )


def _epochs(conn: BrokerConnection, topic: str, asks: list[tuple[int, int, int]]) -> list[tuple]:
    """OffsetForLeaderEpoch v4 for (partition, current leader epoch, epoch) of a consumer:
    (error, epoch, end offset) each."""
    body = {
        "replica_id": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": p, "current_leader_epoch": current, "leader_epoch": epoch}
                    for p, current, epoch in asks
                ],
            }
        ],
    }
    (answer,) = conn.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, body).topics
    return [(p.error_code, p.leader_epoch, p.end_offset) for p in answer.partitions]


def _fetch(conn: BrokerConnection, topic_id: uuid.UUID, offset: int) -> tuple:
    """Fetch v18 as a consumer, naming the high watermark it knows (KIP-1166's tagged field,
    which only followers use): (error, high watermark, last stable offset, log start, offsets,
    values)."""
    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic_id": topic_id,
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": 0,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                        "high_watermark": 1,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    answer = conn.call(ApiKey.FETCH, 18, body)
    assert answer.error_code == 0
    (part,) = answer.responses[0].partitions
    messages = list(iter_deep(bytes(part.records or b"")))
    return (
        part.error_code,
        part.high_watermark,
        part.last_stable_offset,
        part.log_start_offset,
        [m.offset for m in messages],
        [m.value for m in messages],
    )


def _list_offsets(conn: BrokerConnection, topic: str) -> list[tuple]:
    """ListOffsets v10 (KIP-1075's timeout) for earliest, latest and max timestamp:
    (error, timestamp, offset, leader epoch) each."""
    answers = []
    for spec in (-2, -1, -3):
        body = {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": spec}
                    ],
                }
            ],
            "timeout_ms": 5000,
        }
        (p,) = conn.call(ApiKey.LIST_OFFSETS, 10, body).topics[0].partitions
        answers.append((p.error_code, p.timestamp, p.offset, p.leader_epoch))
    return answers


def _describe_groups(conn: BrokerConnection, version: int, groups: list[str]) -> list[tuple]:
    body = {"groups": groups, "include_authorized_operations": False}
    return [
        (g.group_id, g.error_code, g.error_message, g.group_state, g.protocol_type, len(g.members))
        for g in conn.call(ApiKey.DESCRIBE_GROUPS, version, body).groups
    ]


def _commit_offset(conn: BrokerConnection, group: str, topic: str, deadline_s: float = 60) -> None:
    """Make ``group`` exist (Empty, no members) by committing an offset outside any generation,
    once the coordinator is ready."""
    deadline = time.monotonic() + deadline_s
    body = {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "retention_time_ms": -1,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}
                ],
            }
        ],
    }
    while True:
        # Kafka creates its offsets topic when a coordinator is first looked up
        find = {"key_type": 0, "coordinator_keys": [group]}
        (found,) = conn.call(ApiKey.FIND_COORDINATOR, 4, find).coordinators
        (p,) = (
            conn.call(ApiKey.OFFSET_COMMIT, 2, body).topics[0].partitions
            if found.error_code == 0
            else [found]
        )
        if p.error_code == 0:
            return
        # COORDINATOR_LOAD_IN_PROGRESS / _NOT_AVAILABLE / NOT_COORDINATOR: retriable
        assert p.error_code in (14, 15, 16) and time.monotonic() < deadline, p
        time.sleep(0.2)


def _describe_cluster(conn: BrokerConnection, include_fenced: bool, endpoint: int = 1) -> tuple:
    body = {
        "include_cluster_authorized_operations": False,
        "endpoint_type": endpoint,
        "include_fenced_brokers": include_fenced,
    }
    a = conn.call(ApiKey.DESCRIBE_CLUSTER, 2, body)
    return (
        a.error_code,
        a.error_message,
        a.endpoint_type,
        [(b.rack, b.is_fenced) for b in a.brokers],
        a.controller_id in [b.broker_id for b in a.brokers],
    )


def scenario(server) -> dict[str, object]:
    """What a client reads of each new version's answers on ``server`` (a fresh topic)."""
    topic = f"newer-{uuid.uuid4().hex[:8]}"
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    group = f"group-{uuid.uuid4().hex[:8]}"
    out: dict[str, object] = {}
    with _connect(server) as conn:
        _create(conn, topic)
        meta = conn.call(
            ApiKey.METADATA,
            13,
            {
                "topics": [{"name": topic, "topic_id": None}, {"name": missing, "topic_id": None}],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )
        topic_id = meta.topics[0].topic_id
        out["metadata"] = (
            meta.error_code,
            len(meta.brokers),
            meta.controller_id == meta.brokers[0].node_id,
            [
                (
                    t.name,
                    t.error_code,
                    t.is_internal,
                    [(p.error_code, p.partition_index, p.leader_epoch) for p in t.partitions],
                )
                for t in meta.topics
            ],
            topic_id != uuid.UUID(int=0),
        )
        # An empty partition: its leader's epoch 0 ends at the log end offset (0).
        out["epochs_empty"] = _epochs(conn, topic, [(0, -1, 0), (0, 0, 0)])
        assert _produce(conn, topic, 0, 3) == 0
        assert _produce(conn, topic, 3, 2) == 3
        out["epochs"] = _epochs(
            conn,
            topic,
            [
                (0, -1, 0),  # the current epoch ends at the log end offset
                (0, 0, 1),  # an epoch above the leader's: undefined
                (0, 0, -1),  # no epoch: undefined
                (0, 1, 0),  # the consumer knows a newer leader epoch: UNKNOWN_LEADER_EPOCH
                (7, -1, 0),  # no such partition
            ],
        )
        out["epochs_missing_topic"] = _epochs(conn, missing, [(0, -1, 0)])
        out["fetch"] = _fetch(conn, topic_id, 0)
        out["fetch_middle"] = _fetch(conn, topic_id, 3)
        out["fetch_past_end"] = _fetch(conn, topic_id, 9)
        out["list_offsets"] = _list_offsets(conn, topic)
        out["produce_v13"] = _produce_by_id(conn, topic_id, 5)
        out["fetch_after_produce_v13"] = _fetch(conn, topic_id, 5)
        _commit_offset(conn, group, topic)
        out["describe_groups_v6"] = _describe_groups(conn, 6, [group, missing])
        out["describe_groups_v5"] = _describe_groups(conn, 5, [group, missing])
        out["describe_cluster"] = [
            _describe_cluster(conn, True),
            _describe_cluster(conn, False),
            _describe_cluster(conn, False, endpoint=2),
        ]
    # group and topic names vary per run: compared by role
    return {
        k: _by_role(v, {topic: "<topic>", missing: "<missing>", group: "<group>"})
        for k, v in out.items()
    }


def _by_role(value, names: dict[str, str]):
    if isinstance(value, str):
        for name, role in names.items():
            value = value.replace(name, role)
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(_by_role(v, names) for v in value)
    return value


def test_new_versions_as_chronolog_answers(broker):
    with _connect(broker) as conn:
        advertised = _advertised(conn)
    for api, version in NEW_VERSIONS.items():
        assert advertised[api][1] == version, api.name
    got = scenario(broker)
    assert got["metadata"] == (
        0,
        1,
        True,
        [("<topic>", 0, False, [(0, 0, 0)]), ("<missing>", 3, False, [])],
        True,
    )
    assert got["epochs_empty"] == [(0, 0, 0), (0, 0, 0)]
    assert got["epochs"] == [(0, 0, 5), (0, -1, -1), (0, -1, -1), (75, -1, -1), (3, -1, -1)]
    assert got["epochs_missing_topic"] == [(3, -1, -1)]
    assert got["fetch"] == (0, 5, 5, 0, [0, 1, 2, 3, 4], [b"v0", b"v1", b"v2", b"v3", b"v4"])
    assert got["fetch_middle"] == (0, 5, 5, 0, [3, 4], [b"v3", b"v4"])
    assert got["fetch_past_end"][0] == 1  # OFFSET_OUT_OF_RANGE
    assert got["list_offsets"] == [(0, -1, 0, 0), (0, -1, 5, 0), (0, NOW_MS + 4, 4, 0)]
    assert got["produce_v13"] == [
        (False, [(0, 100, -1, -1, -1)]),  # UNKNOWN_TOPIC_ID
        (True, [(0, 0, 5, -1, 0), (3, 3, -1, -1, -1)]),  # stored; UNKNOWN_TOPIC_OR_PARTITION
    ]
    assert got["fetch_after_produce_v13"] == (0, 6, 6, 0, [5], [b"v5"])
    assert got["describe_groups_v6"] == [
        ("<group>", 0, None, "Empty", "", 0),
        ("<missing>", 69, "Group <missing> not found.", "Dead", "", 0),
    ]
    assert got["describe_groups_v5"] == [
        ("<group>", 0, None, "Empty", "", 0),
        ("<missing>", 0, None, "Dead", "", 0),
    ]
    assert got["describe_cluster"][:2] == [(0, None, 1, [(None, False)], True)] * 2
    assert got["describe_cluster"][2][0] == 114  # MISMATCHED_ENDPOINT_TYPE


@pytest.mark.kafka_oracle
def test_advertised_versions_reach_kafkas(broker, kafka_oracle):
    with _connect(broker) as conn:
        ours = _advertised(conn)
    with _connect(kafka_oracle) as conn:
        kafkas = _advertised(conn)
    for api in [*NEW_VERSIONS, ApiKey.INIT_PRODUCER_ID]:
        # departure: the versions Kafka 4.0 dropped are still served here
        assert ours[api][1] == kafkas[api][1] and ours[api][0] <= kafkas[api][0], api.name


@pytest.mark.kafka_oracle
def test_new_versions_answer_as_kafka_does(broker, kafka_oracle):
    ours, kafkas = scenario(broker), scenario(kafka_oracle)
    # Departure (as tests/integration/test_differential_errors.py names it): chronolog answers
    # OFFSET_OUT_OF_RANGE with the partition's high watermark, last stable offset and log start
    # offset where Kafka sends -1; clients ignore them on this error and ask ListOffsets.
    assert ours.pop("fetch_past_end") == (1, 5, 5, 0, [], [])
    assert kafkas.pop("fetch_past_end") == (1, -1, -1, -1, [], [])
    assert ours == kafkas


@pytest.mark.kafka_oracle
def test_java_clients_use_the_new_versions(broker, kafka_oracle):
    """Kafka's Java clients 4.1.1 (producer, consumer, admin) run through chronolog at the new
    versions (Produce v13 by topic id) and read what they read from Kafka. A group member that
    resumes from a committed offset (which carries the leader epoch of its record) first checks
    with OffsetForLeaderEpoch that the log was not truncated below it (KIP-320), now that a
    single broker serves it."""
    if broker.external:
        pytest.skip("reads the broker's own log")
    cid = f"java-newer-{uuid.uuid4().hex[:8]}"
    answers = []
    for server in (broker, kafka_oracle):
        topic = f"java-newer-{uuid.uuid4().hex[:8]}"
        with JavaClients(server.bootstrap, config={"client.id": cid}) as clients:
            clients.call("create_topic", topic=topic, partitions=1, configs={"retention.ms": "-1"})
            records = [
                {"key": f"k{i}", "value": f"v{i}", "timestamp": NOW_MS + i} for i in range(4)
            ]
            acks = clients.call("produce", topic=topic, records=records)["records"]
            read = clients.call("read_partition", topic=topic, partition=0)["records"]
            queries = [[0, "earliest"], [0, "latest"], [0, "max_timestamp"], [0, NOW_MS + 2]]
            offsets = clients.call("list_offsets", topic=topic, queries=queries)["offsets"]
            group = f"{topic}-group"
            first = clients.call("consume_group", topic=topic, group=group, count=4)
            more = [{"key": "k4", "value": "v4", "timestamp": NOW_MS + 4}]
            acks += clients.call("produce", topic=topic, records=more)["records"]
            resumed = clients.call("consume_group", topic=topic, group=group, count=1)
        answers.append(
            (
                acks,
                [(r["key"], r["value"]) for r in read],
                offsets,
                [[(r["offset"], r["value"]) for r in g["records"]] for g in (first, resumed)],
                [g["committed"] for g in (first, resumed)],
            )
        )
    assert answers[0] == answers[1]
    assert answers[0][3] == [[(i, f"v{i}") for i in range(4)], [(4, "v4")]]
    used = used_versions(
        broker, cid, "PRODUCE", "FETCH", "LIST_OFFSETS", "METADATA", "OFFSET_FOR_LEADER_EPOCH"
    )
    assert used["FETCH"] == {18}
    assert used["LIST_OFFSETS"] == {10}
    assert used["METADATA"] == {13}
    assert used["PRODUCE"] == {13}
    assert used["OFFSET_FOR_LEADER_EPOCH"] == {4}


def _init_producer_id_v6_closes(server) -> bool:
    """InitProducerId v6 asking for two-phase commit (KIP-939): True when the server closes the
    connection instead of answering."""
    body = encode_request_body(
        ApiKey.INIT_PRODUCER_ID,
        6,
        {"transactional_id": None, "transaction_timeout_ms": -1, "enable2_pc": True},
    )
    # request header v2 (flexible): api key, version, correlation id, client id, no tags
    head = struct.pack(">hhih", ApiKey.INIT_PRODUCER_ID, 6, 7, 3) + b"2pc" + b"\x00"
    with socket.create_connection((server.host, server.port), timeout=20) as sock:
        sock.sendall(struct.pack(">i", len(head) + len(body)) + head + body)
        return sock.recv(65536) == b""


def test_init_producer_id_v6_is_not_served(broker):
    """Kafka 4.1.1 keeps InitProducerId v6 unstable (not advertised); chronolog stops at v5."""
    with _connect(broker) as conn:
        assert _advertised(conn)[ApiKey.INIT_PRODUCER_ID] == (0, 5)
    assert _init_producer_id_v6_closes(broker)


@pytest.mark.kafka_oracle
def test_init_producer_id_v6_refused_as_kafka_refuses(broker, kafka_oracle):
    assert _init_producer_id_v6_closes(kafka_oracle) and _init_producer_id_v6_closes(broker)
