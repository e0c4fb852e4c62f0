"""Real admin clients against a real broker: kafka-python 3.0.12's KafkaAdminClient and
confluent-kafka 2.16.1's AdminClient (librdkafka) create and delete topics, describe and alter
configs (incrementally too), add partitions, delete records and describe the cluster and its
log dirs; what they report is checked against what the broker then does (Metadata, ListOffsets,
consumers)."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource as CkConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic as CkNewTopic,
)
from kafka import TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
from kafka.errors import (
    InvalidPartitionsError,
    OffsetOutOfRangeError,
    TopicAlreadyExistsError,
)

from tests.integration.clients import kp_consume_all, kp_producer, topic_name
from tests.integration.test_negotiated_versions import used_versions


@pytest.fixture(scope="module")
def broker(broker_with_defaults):
    """These tests check default config sources or sizes in the log dir: not the compose
    broker's, which runs with config/server.properties."""
    return broker_with_defaults


TIMEOUT_S = 30


@pytest.fixture
def kp_admin(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    yield admin
    admin.close()


@pytest.fixture
def ck_admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def produce(bootstrap: str, topic: str, count: int, partition: int = 0) -> None:
    producer = kp_producer(bootstrap, acks="all")
    try:
        for i in range(count):
            producer.send(topic, value=b"v%d" % i, key=b"k%d" % i, partition=partition)
        producer.flush(TIMEOUT_S)
    finally:
        producer.close()


def partition_count(kp_admin, topic: str) -> int:
    (described,) = kp_admin.describe_topics([topic])
    return len(described["partitions"])


# -- kafka-python ---------------------------------------------------------------------------------


def test_kafka_python_topics_configs_partitions_and_records(kp_admin, broker):
    topic = topic_name("kpadm")
    kp_admin.create_topics([NewTopic(topic, 2, 1, topic_configs={"retention.ms": "3600000"})])
    with pytest.raises(TopicAlreadyExistsError):
        kp_admin.create_topics([NewTopic(topic, 2, 1)])

    described = kp_admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic)], include_synonyms=True
    )["topic"][topic]
    assert list(described) == ["retention.ms"]  # kafka-python's default: only modified ones
    entry = described["retention.ms"]
    assert (entry["value"], entry["config_source"]) == ("3600000", "DYNAMIC_TOPIC_CONFIG")

    every = kp_admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all"
    )["topic"][topic]
    assert every["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"
    assert every["cleanup.policy"]["config_type"] == "LIST"

    result = kp_admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic, configs={"max.message.bytes": "4096"})]
    )
    assert result == {"topic": {topic: "OK"}}
    # the legacy AlterConfigs too (kafka-python then re-sends the other modified configs)
    result = kp_admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic, configs={"segment.ms": "600000"})],
        incremental=False,
    )
    assert result == {"topic": {topic: "OK"}}
    modified = kp_admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    assert {k: v["value"] for k, v in modified["topic"][topic].items()} == {
        "retention.ms": "3600000",
        "max.message.bytes": "4096",
        "segment.ms": "600000",
    }
    bad = kp_admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "later"})],
        raise_on_unknown=False,
    )
    assert (
        "InvalidConfigurationError" in bad["topic"][topic] and "retention.ms" in bad["topic"][topic]
    )

    kp_admin.create_partitions({topic: 5})
    assert partition_count(kp_admin, topic) == 5
    with pytest.raises(InvalidPartitionsError):
        kp_admin.create_partitions({topic: 3})

    produce(broker.bootstrap, topic, 10, partition=4)
    deleted = kp_admin.delete_records({TopicPartition(topic, 4): 6})
    assert deleted[TopicPartition(topic, 4)]["low_watermark"] == 6
    assert [m.offset for m in kp_consume_all(broker.bootstrap, topic, 4)] == [6, 7, 8, 9]
    with pytest.raises(OffsetOutOfRangeError):
        kp_admin.delete_records({TopicPartition(topic, 4): 11})

    (dirs,) = kp_admin.describe_log_dirs({topic: [4]})
    (log_dir,) = dirs["log_dirs"]
    sizes = {p["partition_index"]: p["partition_size"] for p in log_dir["topics"][0]["partitions"]}
    assert list(sizes) == [4] and sizes[4] > 0

    cluster = kp_admin.describe_cluster()
    assert cluster["controller_id"] == 0 and [b["broker_id"] for b in cluster["brokers"]] == [0]

    kp_admin.delete_topics([topic])
    assert topic not in kp_admin.list_topics()


def test_kafka_python_broker_configs(kp_admin):
    broker0 = ConfigResource(ConfigResourceType.BROKER, "0")
    described = kp_admin.describe_configs([broker0], config_filter="all")["broker"]["0"]
    assert described["log.dirs"]["config_source"] == "STATIC_BROKER_CONFIG"
    assert described["broker.id"]["read_only"] is True
    dynamic = kp_admin.describe_configs([broker0], config_filter="dynamic")["broker"]["0"]
    assert "log.retention.ms" in dynamic and "log.retention.hours" not in dynamic
    bad = kp_admin.alter_configs(
        [ConfigResource(ConfigResourceType.BROKER, "0", configs={"log.retention.ms": "x"})]
    )["broker"]["0"]
    assert "InvalidConfigurationError" in bad and "log.retention.ms" in bad
    with pytest.raises(ValueError, match="broker.id"):  # kafka-python's own check: read-only
        kp_admin.alter_configs(
            [ConfigResource(ConfigResourceType.BROKER, "0", configs={"broker.id": "3"})]
        )


# -- confluent-kafka ------------------------------------------------------------------------------


def _wait(futures: dict) -> dict:
    return {key: future.result(timeout=TIMEOUT_S) for key, future in futures.items()}


def test_confluent_topics_configs_partitions_records_and_cluster(ck_admin, kp_admin, broker):
    topic = topic_name("ckadm")
    checked = ck_admin.create_topics(
        [CkNewTopic(topic, 3, 1, config={"retention.bytes": "1000000"})], validate_only=True
    )
    assert _wait(checked) == {topic: None}
    assert topic not in kp_admin.list_topics()
    _wait(ck_admin.create_topics([CkNewTopic(topic, 3, 1, config={"retention.bytes": "1000000"})]))

    resource = CkConfigResource("topic", topic)
    (configs,) = _wait(ck_admin.describe_configs([resource])).values()
    assert configs["retention.bytes"].value == "1000000"
    assert configs["retention.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    synonyms = configs["retention.bytes"].synonyms
    assert [s.name for s in synonyms.values()] == ["retention.bytes", "log.retention.bytes"]

    changes = CkConfigResource(
        "topic",
        topic,
        incremental_configs=[
            ConfigEntry(
                "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND
            ),
            ConfigEntry("retention.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry("segment.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    _wait(ck_admin.incremental_alter_configs([changes]))
    (configs,) = _wait(ck_admin.describe_configs([resource])).values()
    assert configs["cleanup.policy"].value == "delete,compact"
    assert configs["retention.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["segment.ms"].value == "3600000"
    wrong = CkConfigResource(
        "topic",
        topic,
        incremental_configs=[
            ConfigEntry("segment.ms", "x", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(Exception) as info:
        _wait(ck_admin.incremental_alter_configs([wrong]))
    assert "INVALID_CONFIG" in str(info.value) and "segment.ms" in str(info.value)
    # the legacy AlterConfigs (deprecated in confluent-kafka) replaces the whole set
    with pytest.warns(DeprecationWarning):
        legacy = ck_admin.alter_configs(
            [CkConfigResource("topic", topic, set_config={"flush.ms": "500"})]
        )
    _wait(legacy)
    (configs,) = _wait(ck_admin.describe_configs([resource])).values()
    overridden = {
        n for n, e in configs.items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    }
    assert overridden == {"flush.ms"}

    _wait(ck_admin.create_partitions([NewPartitions(topic, 4)]))
    assert partition_count(kp_admin, topic) == 4

    produce(broker.bootstrap, topic, 5, partition=3)
    (deleted,) = _wait(ck_admin.delete_records([CkTopicPartition(topic, 3, 2)])).values()
    assert deleted.low_watermark == 2
    listed = kp_consume_all(broker.bootstrap, topic, 3)
    assert [m.offset for m in listed] == [2, 3, 4]

    # (librdkafka asks Metadata for this, not DescribeCluster: test_admin_cluster.py has that)
    cluster = ck_admin.describe_cluster().result(TIMEOUT_S)
    assert cluster.controller.id == 0 and [n.id for n in cluster.nodes] == [0]
    assert cluster.cluster_id == kp_admin.describe_cluster()["cluster_id"]

    # librdkafka's "all topics" Metadata v12, which carries three bytes after its body
    listed = ck_admin.list_topics(timeout=TIMEOUT_S).topics
    assert len(listed[topic].partitions) == 4
    _wait(ck_admin.delete_topics([topic]))
    assert topic not in kp_admin.list_topics()
    assert topic not in ck_admin.list_topics(timeout=TIMEOUT_S).topics


def test_confluent_broker_dynamic_config(broker_factory):
    broker = broker_factory()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    own = CkConfigResource(  # (librdkafka cannot name the cluster-wide default: "")
        "broker",
        "0",
        incremental_configs=[
            ConfigEntry("log.retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    _wait(admin.incremental_alter_configs([own]))
    (configs,) = _wait(admin.describe_configs([CkConfigResource("broker", "0")])).values()
    entry = configs["log.retention.ms"]
    assert (entry.value, entry.source) == (
        "3600000",
        ConfigSource.DYNAMIC_BROKER_CONFIG.value,
    )
    assert not entry.is_read_only and configs["log.retention.hours"].is_read_only
    topic = topic_name("ckdyn")
    _wait(admin.create_topics([CkNewTopic(topic, 1, 1)]))
    (topic_configs,) = _wait(admin.describe_configs([CkConfigResource("topic", topic)])).values()
    assert topic_configs["retention.ms"].value == "3600000"
    assert topic_configs["retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value


def test_kafka_python_admin_runs_at_the_newest_versions(broker):
    """kafka-python's admin client speaks each admin api at its own maximum (as high as the
    broker's, except DescribeLogDirs, where the broker stops at Kafka 3.9's v4)."""
    if broker.external:
        pytest.skip("reads the broker's own log")
    client_id = topic_name("kp-admin-versions")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id=client_id)
    topic = topic_name("kpver")
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "9000"})]
        )
        admin.create_partitions({topic: 2})
        admin.delete_records({TopicPartition(topic, 0): 0})
        admin.describe_log_dirs()
        admin.delete_topics([topic])
    finally:
        admin.close()
    expected = {
        "CREATE_TOPICS": 7,
        "DESCRIBE_CONFIGS": 4,
        "INCREMENTAL_ALTER_CONFIGS": 1,
        "CREATE_PARTITIONS": 3,
        "DELETE_RECORDS": 2,
        "DESCRIBE_LOG_DIRS": 4,
        "DELETE_TOPICS": 6,
    }
    used = used_versions(broker, client_id, *expected)
    assert {api: used.get(api) for api in expected} == {api: {v} for api, v in expected.items()}
