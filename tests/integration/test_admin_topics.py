"""CreateTopics v0-v7 and DeleteTopics v0-v6 against a real broker, with raw requests: the
per-topic errors and messages Kafka 3.9 gives, validate_only, the defaults of -1, the configs of
v5+ and the topic ids of v7+ (the same ids Metadata reports), and deletion by id (v6)."""

from __future__ import annotations

import uuid

import pytest

from protocol import ApiKey
from tests.integration.kafka_wire import WireClient, message_set, produce


@pytest.fixture(scope="module")
def broker(broker_with_defaults):
    """These tests check default config sources or sizes in the log dir: not the compose
    broker's, which runs with config/server.properties."""
    return broker_with_defaults


ZERO = uuid.UUID(int=0)


def name(prefix: str = "adm") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def client(broker):
    with WireClient(broker.host, broker.port) as c:
        yield c


def creatable(topic: str, partitions: int = 1, factor: int = 1, configs=None, assignments=()):
    return {
        "name": topic,
        "num_partitions": partitions,
        "replication_factor": factor,
        "assignments": [{"partition_index": p, "broker_ids": b} for p, b in assignments],
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
    }


def create(client, version: int, *topics, validate_only: bool = False):
    body = {"topics": list(topics), "timeout_ms": 10000, "validate_only": validate_only}
    return client.call(ApiKey.CREATE_TOPICS, version, body).topics


def metadata(client, *topics):
    body = {"topics": [{"name": t} for t in topics], "allow_auto_topic_creation": False}
    return {t.name: t for t in client.call(ApiKey.METADATA, 12, body).topics}


@pytest.mark.parametrize("version", range(8))
def test_create_topics_at_every_version(client, version):
    topic = name()
    (result,) = create(client, version, creatable(topic, 3, configs={"retention.ms": "5000"}))
    assert (result.name, result.error_code) == (topic, 0)
    meta = metadata(client, topic)[topic]
    assert meta.error_code == 0 and len(meta.partitions) == 3
    if version >= 5:
        assert (result.num_partitions, result.replication_factor) == (3, 1)
        configs = {c.name: c for c in result.configs}
        assert configs["retention.ms"].value == "5000"
        assert configs["retention.ms"].config_source == 1  # TOPIC_CONFIG
        assert configs["segment.bytes"].config_source == 5  # DEFAULT_CONFIG
        assert configs["cleanup.policy"].value == "delete"
        assert not any(c.read_only or c.is_sensitive for c in result.configs)
    if version >= 7:
        assert result.topic_id == meta.topic_id != ZERO
    (again,) = create(client, version, creatable(topic))
    assert again.error_code == 36
    if version >= 1:
        assert again.error_message == f"Topic '{topic}' already exists."
    if version >= 5:
        assert (again.num_partitions, again.replication_factor, list(again.configs)) == (-1, -1, [])


def test_validate_only_checks_everything_and_creates_nothing(client):
    topic = name()
    (result,) = create(
        client, 7, creatable(topic, 4, configs={"cleanup.policy": "compact"}), validate_only=True
    )
    assert (result.error_code, result.num_partitions, result.topic_id) == (0, 4, ZERO)
    assert {c.name: c.value for c in result.configs}["cleanup.policy"] == "compact"
    assert metadata(client, topic)[topic].error_code == 3
    (bad,) = create(
        client, 7, creatable(topic, 1, configs={"retention.ms": "x"}), validate_only=True
    )
    assert bad.error_code == 40 and "retention.ms" in bad.error_message
    (created,) = create(client, 7, creatable(topic, 2))
    assert created.error_code == 0 and created.topic_id != ZERO


def test_minus_one_takes_the_broker_defaults(client):
    topic = name()
    (result,) = create(client, 7, creatable(topic, -1, -1))
    assert (result.error_code, result.num_partitions, result.replication_factor) == (0, 1, 1)


def test_per_topic_errors_and_messages(client):
    taken = name()
    assert create(client, 4, creatable(taken))[0].error_code == 0
    dup = name()
    cases = [
        (creatable(taken), 36, f"Topic '{taken}' already exists."),
        (creatable(name(), 0), 37, "Number of partitions must be larger than 0."),
        (creatable(name(), 1, 0), 38, "Replication factor must be larger than 0."),
        (creatable(name(), 1, 3), 38, "Replication factor: 3 larger than available brokers: 1."),
        (creatable(name(), 2, assignments=[(0, [0])]), 42, "Both numPartitions"),
        (creatable(name(), -1, -1, assignments=[(0, [0]), (2, [0])]), 39, "consecutive"),
        (creatable(name(), -1, -1, assignments=[(0, [5])]), 39, "only broker is 0"),
        (creatable(name(), configs={"retention.ms": "soon"}), 40, "retention.ms"),
        (creatable(name(), configs={"no.such.config": "1"}), 40, "no.such.config"),
        (creatable(name(), configs={"segment.bytes": None}), 40, "segment.bytes"),
        (creatable("bad/name"), 17, "bad/name"),
        (creatable("__cluster_metadata"), 42, "__cluster_metadata"),
        (creatable(dup), 42, "Found multiple entries for this topic."),
        (creatable(dup), 42, "Found multiple entries for this topic."),
    ]
    results = create(client, 7, *(c for c, _, _ in cases))
    assert [r.name for r in results] == [c["name"] for c, _, _ in cases]
    for result, (_, code, message) in zip(results, cases):
        assert (result.error_code, result.topic_id) == (code, ZERO), result
        assert message in result.error_message
    meta = metadata(client, dup)
    assert meta[dup].error_code == 3  # neither duplicate was created


def test_topic_names_colliding_on_dot_and_underscore(client):
    base = name("a")
    assert create(client, 7, creatable(f"{base}.x"))[0].error_code == 0
    (result,) = create(client, 7, creatable(f"{base}_x"))
    assert result.error_code == 17
    assert result.error_message == f"Topic '{base}_x' collides with existing topics: {base}.x"


@pytest.mark.parametrize("version", range(6))
def test_delete_topics_by_name(client, version):
    topic, missing = name(), name()
    assert create(client, 4, creatable(topic))[0].error_code == 0
    assert produce(client, topic, message_set([b"x"])).error_code == 0
    body = {"topic_names": [topic, missing, "__consumer_offsets"], "timeout_ms": 1000}
    results = client.call(ApiKey.DELETE_TOPICS, version, body).responses
    assert [(r.name, r.error_code) for r in results] == [
        (topic, 0),
        (missing, 3),
        ("__consumer_offsets", 42),
    ]
    if version >= 5:
        assert results[0].error_message is None
        assert missing in results[1].error_message
    assert metadata(client, topic)[topic].error_code == 3


def test_delete_topics_v6_by_id(client):
    by_id, by_name = name(), name()
    (created,) = create(client, 7, creatable(by_id, 2))
    assert create(client, 7, creatable(by_name))[0].error_code == 0
    unknown = uuid.uuid4()
    body = {
        "topics": [
            {"name": None, "topic_id": created.topic_id},
            {"name": by_name, "topic_id": ZERO},
            {"name": None, "topic_id": unknown},
        ],
        "timeout_ms": 1000,
    }
    results = client.call(ApiKey.DELETE_TOPICS, 6, body).responses
    assert [(r.name, r.topic_id, r.error_code) for r in results] == [
        (by_id, created.topic_id, 0),
        (by_name, ZERO, 0),
        (None, unknown, 100),
    ]
    gone = metadata(client, by_id, by_name)
    assert gone[by_id].error_code == 3 and gone[by_name].error_code == 3
    # recreated under the same name: a new id, and the old id names nothing
    (again,) = create(client, 7, creatable(by_id))
    assert again.topic_id not in (ZERO, created.topic_id)


def test_delete_topics_v6_name_and_id_together_is_invalid(client):
    topic = name()
    (created,) = create(client, 7, creatable(topic))
    body = {"topics": [{"name": topic, "topic_id": created.topic_id}], "timeout_ms": 1000}
    (result,) = client.call(ApiKey.DELETE_TOPICS, 6, body).responses
    assert result.error_code == 42
    assert result.error_message == "Topic name and topic ID can not both be specified."
    assert metadata(client, topic)[topic].error_code == 0


def create_partitions(client, version, *topics, validate_only=False):
    body = {
        "topics": [{"name": t, "count": n, "assignments": a} for t, n, a in topics],
        "timeout_ms": 10000,
        "validate_only": validate_only,
    }
    return client.call(ApiKey.CREATE_PARTITIONS, version, body).results


@pytest.mark.parametrize("version", range(4))
def test_create_partitions_grows_a_topic_that_then_takes_data(client, version):
    topic = name()
    assert create(client, 7, creatable(topic, 2))[0].error_code == 0
    (result,) = create_partitions(client, version, (topic, 4, None))
    assert (result.name, result.error_code, result.error_message) == (topic, 0, None)
    assert len(metadata(client, topic)[topic].partitions) == 4
    answer = produce(client, topic, message_set([b"in the new partition"]), partition=3)
    assert (answer.error_code, answer.base_offset) == (0, 0)
    (again,) = create_partitions(client, version, (topic, 6, [{"broker_ids": [0]}] * 2))
    assert again.error_code == 0
    assert len(metadata(client, topic)[topic].partitions) == 6


def test_create_partitions_errors_and_validate_only(client):
    topic, dup = name(), name()
    assert create(client, 7, creatable(topic, 3), creatable(dup))[0].error_code == 0
    results = create_partitions(
        client,
        3,
        (topic, 2, None),
        (topic + "-missing", 5, None),
        (dup, 2, None),
        (dup, 3, None),
        ("__consumer_offsets", 100, None),
    )
    got = [(r.name, r.error_code, r.error_message) for r in results]
    assert got[0] == (
        topic,
        37,
        "Topic currently has 3 partitions, which is higher than the requested 2.",
    )
    assert got[1] == (topic + "-missing", 3, f"The topic '{topic}-missing' does not exist.")
    assert got[2] == (dup, 42, "Duplicate topic in request.")
    assert got[3][:2] == ("__consumer_offsets", 42)
    assert len(got) == 4
    same = create_partitions(client, 3, (topic, 3, None))[0]
    assert (same.error_code, same.error_message) == (37, "Topic already has 3 partitions.")
    wrong = create_partitions(client, 3, (topic, 5, [{"broker_ids": [0]}]))[0]
    assert (wrong.error_code, wrong.error_message) == (
        39,
        "Increasing the number of partitions by 2 but 1 assignments provided.",
    )
    other = create_partitions(client, 3, (topic, 4, [{"broker_ids": [3]}]))[0]
    assert (other.error_code, other.error_message) == (
        39,
        "Unknown broker(s) in replica assignment: 3.",
    )
    checked = create_partitions(client, 3, (topic, 8, None), validate_only=True)[0]
    assert checked.error_code == 0
    assert len(metadata(client, topic)[topic].partitions) == 3


def test_added_partitions_survive_a_kill(broker_factory):
    broker = broker_factory()
    topic = name()
    with WireClient(broker.host, broker.port) as client:
        assert create(client, 7, creatable(topic, 1))[0].error_code == 0
        assert create_partitions(client, 3, (topic, 3, None))[0].error_code == 0
        assert produce(client, topic, message_set([b"x"]), partition=2).error_code == 0
    broker.kill()
    broker.start()
    with WireClient(broker.host, broker.port) as client:
        assert len(metadata(client, topic)[topic].partitions) == 3
        assert produce(client, topic, message_set([b"y"]), partition=2).base_offset == 1
