"""Protocol-level behaviour of the broker process, checked with raw requests."""

from __future__ import annotations

import base64
import os
import socket
import struct
import time
import uuid

import pytest

from protocol import ApiKey, SUPPORTED_VERSIONS, iter_deep, iter_shallow
from tests.integration.clients import KEEP_OLD_MESSAGES
from tests.integration.test_metrics import FETCH_PURGATORY, scrape
from tests.waiting import wait_for
from tests.integration.kafka_wire import (
    WireClient,
    create_topic,
    fetch_body,
    frame,
    message_set,
    produce,
    read_all,
)


def name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def client(broker):
    with WireClient(broker.host, broker.port) as c:
        yield c


def test_api_versions_advertises_what_is_served(client):
    body = client.call(ApiKey.API_VERSIONS, 0, {})
    assert body.error_code == 0
    got = {v.api_key: (v.min_version, v.max_version) for v in body.api_keys}
    assert got == {int(k): v for k, v in SUPPORTED_VERSIONS.items()}


def test_newer_api_versions_gets_error_35_with_the_list_then_v0_works(broker):
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        # An ApiVersions v5 probe (newer than Kafka 3.9): header v2 (tagged fields) and a
        # flexible body.
        s.sendall(frame(18, 5, 7, b"\x00" + b"\x06kafka\x041.0\x00"))
        size, corr, error, count = struct.unpack(">iihi", s.recv(14, socket.MSG_WAITALL))
        assert (corr, error) == (7, 35) and count == len(SUPPORTED_VERSIONS)
        s.recv(size - 10, socket.MSG_WAITALL)
        s.sendall(frame(18, 0, 8, b""))
        size, corr, error = struct.unpack(">iih", s.recv(10, socket.MSG_WAITALL))
        assert (corr, error) == (8, 0)


def test_metadata_auto_creates_once_with_leader_not_available(client, broker):
    topic = name()
    first = client.call(ApiKey.METADATA, 1, {"topics": [{"name": topic}]})
    assert first.topics[0].error_code == 5
    second = client.call(ApiKey.METADATA, 2, {"topics": [{"name": topic}]})
    t = second.topics[0]
    assert t.error_code == 0 and len(t.partitions) == 1
    p = t.partitions[0]
    assert (p.leader_id, list(p.replica_nodes), list(p.isr_nodes)) == (0, [0], [0])
    assert second.controller_id == 0 and second.cluster_id
    assert [(b.node_id, b.host, b.port) for b in second.brokers] == [(0, broker.host, broker.port)]
    bad = client.call(ApiKey.METADATA, 1, {"topics": [{"name": "bad/name"}]})
    assert bad.topics[0].error_code == 17
    none = client.call(ApiKey.METADATA, 1, {"topics": []})
    assert list(none.topics) == []
    every = client.call(ApiKey.METADATA, 1, {"topics": None})
    assert topic in {t.name for t in every.topics}
    # v10+: topic ids (KIP-516), and topics asked for by id
    by_name = client.call(ApiKey.METADATA, 12, {"topics": [{"name": topic}]}).topics[0]
    assert by_name.topic_id.int != 0
    if not broker.external:  # the id is also in the partition directory, as Kafka keeps it
        metadata = os.path.join(broker.log_dir, f"{topic}-0", "partition.metadata")
        stored = open(metadata).read().split("topic_id: ")[1].strip()
        assert base64.urlsafe_b64decode(stored + "==") == by_name.topic_id.bytes
    by_id = client.call(
        ApiKey.METADATA, 12, {"topics": [{"name": None, "topic_id": by_name.topic_id}]}
    )
    assert (by_id.topics[0].name, by_id.topics[0].error_code) == (topic, 0)
    unknown = client.call(
        ApiKey.METADATA, 12, {"topics": [{"name": None, "topic_id": uuid.uuid4()}]}
    )
    assert unknown.topics[0].error_code == 100  # UNKNOWN_TOPIC_ID


def test_create_topics_errors(client):
    topic = name()
    assert create_topic(client, topic, 3, {"message.timestamp.type": "LogAppendTime"}) == 0
    assert create_topic(client, topic) == 36
    assert create_topic(client, name(), 0) == 37
    assert create_topic(client, name(), 1, replication_factor=3) == 38
    assert create_topic(client, name(), 1, {"retention.ms": "forever"}) == 40
    assert create_topic(client, name(), 1, {"no.such.config": "1"}) == 40
    assert create_topic(client, "a" * 250) == 17
    assert create_topic(client, "..") == 17
    dup = name()
    body = {
        "topics": [
            {
                "name": dup,
                "num_partitions": 1,
                "replication_factor": 1,
                "assignments": [],
                "configs": [],
            }
        ]
        * 2,
        "timeout_ms": 1000,
    }
    codes = client.call(ApiKey.CREATE_TOPICS, 0, body).topics
    assert [(c.name, c.error_code) for c in codes] == [(dup, 42), (dup, 42)]  # as Kafka
    meta = client.call(ApiKey.METADATA, 1, {"topics": [{"name": topic}]})
    assert len(meta.topics[0].partitions) == 3


def test_delete_topics(client):
    topic = name()
    assert create_topic(client, topic) == 0
    assert produce(client, topic, message_set([b"x"])).error_code == 0
    body = client.call(
        ApiKey.DELETE_TOPICS,
        0,
        {"topic_names": [topic, name(), "__consumer_offsets"], "timeout_ms": 1000},
    )
    assert [c.error_code for c in body.responses] == [0, 3, 42]
    assert produce(client, topic, message_set([b"x"])).error_code == 3


def test_produce_then_fetch_at_every_format(client):
    topic = name()
    assert create_topic(client, topic, configs=KEEP_OLD_MESSAGES) == 0
    ts = [1_600_000_000_000 + i for i in range(3)]
    r = produce(
        client, topic, message_set([b"a", b"b", None], timestamps=ts, keys=[b"k1", None, b"k3"])
    )
    assert (r.error_code, r.base_offset, r.log_append_time_ms) == (0, 0, -1)
    assert produce(client, topic, message_set([b"d"], timestamps=[ts[0]])).base_offset == 3

    def fetch(version, offset=0, **extra):
        body = {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                    ],
                }
            ],
            **extra,
        }
        return client.call(ApiKey.FETCH, version, body).responses[0].partitions[0]

    expected = [
        (0, b"k1", b"a", ts[0]),
        (1, None, b"b", ts[1]),
        (2, b"k3", None, ts[2]),
        (3, None, b"d", ts[0]),
    ]
    # the topic stores record batches (Kafka 3.9's default format); each Fetch version gets
    # the newest format it can read
    for version, magic in ((12, 2), (4, 2), (3, 1), (2, 1), (1, 0), (0, 0)):
        p = fetch(version, max_bytes=1 << 20)
        assert (p.error_code, p.high_watermark) == (0, 4)
        assert {e.magic for e in iter_shallow(p.records)} == {magic}
        got = [(m.offset, m.key, m.value, m.timestamp) for m in iter_deep(p.records)]
        assert got == [(o, k, v, t if magic else -1) for o, k, v, t in expected], version
    p = fetch(12)
    assert (p.last_stable_offset, p.log_start_offset, p.preferred_read_replica) == (4, 0, -1)
    out_of_range = fetch(2, offset=99)
    assert (out_of_range.error_code, out_of_range.high_watermark) == (1, 4)


def test_fetch_v3_returns_first_message_over_the_limits(client):
    topic = name()
    assert create_topic(client, topic, 2) == 0
    big = b"x" * 5000
    assert produce(client, topic, message_set([big]), partition=0).error_code == 0
    assert produce(client, topic, message_set([b"small"]), partition=1).error_code == 0
    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 100,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 100},
                    {"partition": 1, "fetch_offset": 0, "partition_max_bytes": 100},
                ],
            }
        ],
    }
    for version in (3, 12):
        parts = client.call(ApiKey.FETCH, version, body).responses[0].partitions
        assert [m.value for m in iter_deep(parts[0].records)] == [big]
        assert parts[1].records == b""  # the request-level budget is used up


def test_fetch_long_poll_is_woken_by_append(broker_factory):
    woken = broker_factory(metrics_listener="http://127.0.0.1:0")
    topic = name()
    with WireClient(woken.host, woken.port) as client:
        assert create_topic(client, topic) == 0
        body = {
            "replica_id": -1,
            "max_wait_ms": 300,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                    ],
                }
            ],
        }
        start = time.monotonic()
        empty = client.call(ApiKey.FETCH, 11, body).responses[0].partitions[0]
        assert empty.records == b"" and time.monotonic() - start >= 0.28  # held for max_wait

        body["max_wait_ms"] = 60000
        start = time.monotonic()
        client.send(ApiKey.FETCH, 11, body)
        wait_for(
            lambda: scrape(woken.metrics_url())[FETCH_PURGATORY] == 1,
            "the fetch parked in the long poll",
        )
        with WireClient(woken.host, woken.port) as other:
            produce(other, topic, message_set([b"wake"]))
        got = client.receive().body.responses[0].partitions[0]
    assert [m.value for m in iter_deep(got.records)] == [b"wake"]
    assert time.monotonic() - start < 30  # answered on the append, not at max_wait


def test_list_offsets(client):
    topic = name()
    assert create_topic(client, topic, 1, {"segment.bytes": "200", **KEEP_OLD_MESSAGES}) == 0
    for i in range(5):
        produce(client, topic, message_set([b"v" * 50], timestamps=[1000 * (i + 1)]))

    def lookup(*partitions, version=1):
        body = {
            "replica_id": -1,
            "topics": [
                {
                    "name": topic,
                    "partitions": [{"partition_index": p, "timestamp": t} for p, t in partitions],
                }
            ],
        }
        return client.call(ApiKey.LIST_OFFSETS, version, body).topics[0].partitions

    for version in (1, 4, 9):

        def v1(*partitions):
            return [
                (r.error_code, r.timestamp, r.offset) for r in lookup(*partitions, version=version)
            ]

        assert v1((0, -1)) == [(0, -1, 5)]
        assert v1((0, -2)) == [(0, -1, 0)]
        assert v1((0, 2500)) == [(0, 3000, 2)]
        assert v1((0, 9999)) == [(0, -1, -1)]
    dup = lookup((0, 1000), (0, 2000))
    assert [(r.partition_index, r.error_code) for r in dup] == [(0, 42)]
    assert [r.error_code for r in lookup((7, -1))] == [3]
    # v7+: -3, the message with the largest timestamp (KIP-734); v4+ carry the leader epoch
    (r,) = lookup((0, -3), version=7)
    assert (r.error_code, r.timestamp, r.offset, r.leader_epoch) == (0, 5000, 4, 0)
    (r,) = lookup((0, -4), version=8)  # earliest local: every segment is local
    assert (r.error_code, r.offset) == (0, 0)
    body = {
        "replica_id": -1,
        "topics": [
            {
                "name": topic,
                "partitions": [{"partition_index": 0, "timestamp": -1, "max_num_offsets": 10}] * 2,
            }
        ],
    }
    legacy = client.call(ApiKey.LIST_OFFSETS, 0, body).topics[0].partitions
    assert len(legacy) == 1 and legacy[0].error_code == 0
    offsets = list(legacy[0].old_style_offsets)
    assert offsets[0] == 5 and offsets == sorted(offsets, reverse=True) and offsets[-1] == 0

    old = name()
    assert create_topic(client, old, 1, {"message.format.version": "0.9.0"}) == 0
    body = {
        "replica_id": -1,
        "topics": [{"name": old, "partitions": [{"partition_index": 0, "timestamp": 1000}]}],
    }
    r = client.call(ApiKey.LIST_OFFSETS, 1, body).topics[0].partitions[0]
    assert r.error_code == 43


def test_produce_errors(client):
    topic = name()
    assert create_topic(client, topic) == 0
    body = {
        "acks": 2,
        "timeout_ms": 1000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": message_set([b"x"])}]}
        ],
    }
    r = client.call(ApiKey.PRODUCE, 2, body).responses[0].partition_responses[0]
    assert (r.error_code, r.base_offset) == (21, -1)
    assert produce(client, name("missing"), message_set([b"x"])).error_code == 3
    corrupt = bytearray(message_set([b"x"]))
    corrupt[-1] ^= 0xFF
    assert produce(client, topic, bytes(corrupt)).error_code == 2
    # the partition is unharmed and the next produce still starts at offset 0
    assert produce(client, topic, message_set([b"ok"])).base_offset == 0


def test_pipelined_requests_are_answered_in_order(client):
    ids = [
        client.send(ApiKey.METADATA, 1, {"topics": []}),
        client.send(ApiKey.API_VERSIONS, 0, {}),
        client.send(ApiKey.METADATA, 0, {"topics": []}),
    ]
    got = [client.receive() for _ in ids]
    assert [r.correlation_id for r in got] == ids
    assert [r.api_key for r in got] == [ApiKey.METADATA, ApiKey.API_VERSIONS, ApiKey.METADATA]


def _produce_v9(topic: str, partition: int, values: list[bytes]) -> dict:
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 10000,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [{"index": partition, "records": message_set(values, magic=2)}],
            }
        ],
    }


def test_pipelined_produces_sent_in_one_write_are_all_answered_in_order(client):
    # librdkafka pipelines one-partition Produce requests; the broker answers a run of them
    # that arrived together with one send (server._dispatch): none may be lost or reordered.
    topic = name()
    assert create_topic(client, topic, partitions=3) == 0
    frames, ids = [], []
    for i in range(30):
        cid, raw = client.conn.request(ApiKey.PRODUCE, 9, _produce_v9(topic, i % 3, [b"m%d" % i]))
        ids.append(cid)
        frames.append(raw)
    client.sock.sendall(b"".join(frames))
    got = [client.receive() for _ in ids]
    assert [r.correlation_id for r in got] == ids
    answers = [r.body.responses[0].partition_responses[0] for r in got]
    assert [(a.index, a.error_code) for a in answers] == [(i % 3, 0) for i in range(30)]
    assert [a.base_offset for a in answers] == [i // 3 for i in range(30)]
    for p in range(3):
        stored = [m.value for m in read_all(client, topic, p)]
        assert stored == [b"m%d" % i for i in range(p, 30, 3)]


def test_produce_answers_are_not_held_behind_a_waiting_fetch(broker, client):
    topic = name()
    assert create_topic(client, topic, partitions=2) == 0
    fetch = fetch_body(topic, 1, max_wait_ms=60000, min_bytes=1)
    first, a = client.conn.request(ApiKey.PRODUCE, 9, _produce_v9(topic, 0, [b"a"]))
    second, b = client.conn.request(ApiKey.PRODUCE, 9, _produce_v9(topic, 0, [b"b"]))
    waiting, f = client.conn.request(ApiKey.FETCH, 11, fetch)
    client.sock.sendall(a + b + f)
    # Both answers come while the fetch still waits for data (it would hold them 60 s).
    deadline = time.monotonic() + 20
    got = [client.receive(deadline=deadline) for _ in (first, second)]
    assert [
        (r.correlation_id, r.body.responses[0].partition_responses[0].base_offset) for r in got
    ] == [
        (first, 0),
        (second, 1),
    ]
    with WireClient(broker.host, broker.port) as other:
        assert produce(other, topic, message_set([b"wake"]), partition=1).error_code == 0
    answer = client.receive(deadline=time.monotonic() + 20)
    assert answer.correlation_id == waiting
    assert [m.value for m in iter_deep(answer.body.responses[0].partitions[0].records)] == [b"wake"]


def test_produces_before_a_malformed_request_are_answered_before_the_close(broker, client):
    topic = name()
    assert create_topic(client, topic) == 0
    ids, frames = [], []
    for value in (b"one", b"two"):
        cid, raw = client.conn.request(ApiKey.PRODUCE, 9, _produce_v9(topic, 0, [value]))
        ids.append(cid)
        frames.append(raw)
    # A Produce frame whose body is cut short: the connection ends after the two good ones.
    frames.append(frame(ApiKey.PRODUCE, 9, 99, b"\x00\x01"))
    client.sock.sendall(b"".join(frames))
    got = [client.receive() for _ in ids]
    assert [r.correlation_id for r in got] == ids
    assert [r.body.responses[0].partition_responses[0].error_code for r in got] == [0, 0]
    assert client.closed_by_peer()
    with WireClient(broker.host, broker.port) as other:
        assert [m.value for m in read_all(other, topic)] == [b"one", b"two"]


def test_acks_zero_gets_no_response_and_failure_closes(client, broker):
    topic = name()
    assert create_topic(client, topic) == 0
    body = {
        "acks": 0,
        "timeout_ms": 1000,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [{"index": 0, "records": message_set([b"fire", b"forget"])}],
            }
        ],
    }
    client.send(ApiKey.PRODUCE, 2, body)
    # the next answer on the connection is for the next request: acks=0 got none
    assert client.call(ApiKey.API_VERSIONS, 0, {}).error_code == 0
    fetch = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "topics": [
            {
                "topic": topic,
                "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}],
            }
        ],
    }
    got = client.call(ApiKey.FETCH, 3, fetch).responses[0].partitions[0]
    assert [m.value for m in iter_deep(got.records)] == [b"fire", b"forget"]
    # a failed acks=0 produce closes the connection, Kafka's only way to signal it
    body["topic_data"][0]["name"] = name("missing")
    client.send(ApiKey.PRODUCE, 2, body)
    assert client.closed_by_peer()


def test_auto_create_disabled(broker_factory):
    b = broker_factory(auto_create_topics_enable="false")
    with WireClient(b.host, b.port) as c:
        topic = name()
        for _ in range(2):
            meta = c.call(ApiKey.METADATA, 1, {"topics": [{"name": topic}]})
            assert meta.topics[0].error_code == 3
