"""Administration in a cluster with real admin clients: CreatePartitions grows a topic on every
broker (the controller starts the new partitions, their replicas copy what is produced), topic
configs and dynamic broker configs changed through one broker reach every broker through
ZooKeeper (in Kafka's layout) and change what their logs do."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource as CkConfigResource,
)
from kafka import KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
from kafka.errors import InvalidPartitionsError, InvalidReplicationAssignmentError

from protocol import ApiKey
from protocol.records import iter_deep
from tests.cluster.helpers import call, replica_bytes, replica_offsets
from tests.waiting import wait_for
from tests.cluster.test_replication import _offline_after_losing_the_isr
from tests.conftest import REPO
from tests.integration.clients import kp_consume_all

TOPIC, BROKER = 2, 4
TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, DEFAULT_CONFIG = 1, 2, 3, 5
TIMEOUT_S = 30


def described(broker, kind: int, name: str, key: str) -> tuple[str, int]:
    """(value, source) of one config in ``broker``'s own DescribeConfigs v4 answer."""
    body = {
        "resources": [{"resource_type": kind, "resource_name": name, "configuration_keys": [key]}],
        "include_synonyms": False,
    }
    (result,) = call(broker, ApiKey.DESCRIBE_CONFIGS, 4, body).results
    assert result.error_code == 0, result.error_message
    (entry,) = result.configs
    return entry.value, entry.config_source


def partitions(cluster, topic: str) -> dict[int, list[int]]:
    """The topic's replica assignment in ZooKeeper."""
    doc = cluster.zk_json(f"/brokers/topics/{topic}")
    return {int(p): r for p, r in doc["partitions"].items()}


def wait_grown(cluster, topic: str, count: int) -> None:
    """Until every broker's Metadata lists ``count`` partitions, each with the leader
    ZooKeeper names."""
    wait_for(
        lambda: all(
            len(cluster.metadata(b, [topic]).topics[0].partitions) == count for b in (1, 2, 3)
        ),
        f"{count} partitions of {topic} on every broker",
        timeout=TIMEOUT_S,
    )
    cluster.wait_led(topic)


def produce_one_by_one(bootstrap: str, topic: str, values: list[bytes], partition: int = 0):
    """Each value in a batch of its own (flushed one by one), acks=all."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    try:
        for value in values:
            producer.send(topic, value, partition=partition).get(timeout=TIMEOUT_S)
    finally:
        producer.close()


def set_config(bootstrap: str, kind: str, name: str, key: str, value: str) -> None:
    """One IncrementalAlterConfigs SET through librdkafka's admin client."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    change = CkConfigResource(
        kind,
        name,
        incremental_configs=[ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)],
    )
    for future in admin.incremental_alter_configs([change]).values():
        future.result(timeout=TIMEOUT_S)


def segment_sizes(broker, topic: str, partition: int = 0) -> list[int]:
    directory = os.path.join(broker.log_dirs[0], f"{topic}-{partition}")
    return [os.path.getsize(f) for f in sorted(glob.glob(os.path.join(directory, "*.log")))]


def assert_rolled_by(cluster, topic: str, end: int, segment_bytes: int) -> None:
    """Every replica (once it has all ``end`` messages) closed its segments at
    ``segment_bytes``."""
    for b in (1, 2, 3):
        broker = cluster.broker(b)
        wait_for(
            lambda: replica_offsets(broker, topic, 0, -1)[1] == end,
            f"broker {b}'s replica of {topic} complete",
            timeout=TIMEOUT_S,
        )
        sizes = segment_sizes(broker, topic)
        assert len(sizes) >= 5, (b, sizes)
        assert all(size <= segment_bytes for size in sizes[:-1]), (b, sizes)


def _creatable(name: str, partitions: int = 1, factor: int = -1, configs=None) -> dict:
    return {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": factor,
        "assignments": [],
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
    }


def test_create_topics_in_a_cluster_checks_what_a_single_broker_checks(cluster_factory):
    """One CreateTopics pipeline (broker/handlers/admin.py): a cluster refuses a name that
    collides with an existing one once '.' and '_' are confused, a null config value and a
    topic listed twice, as Kafka does, and its v7 answer carries the created topic's id (the
    one Metadata shows), partition count, replication factor and configs."""
    cluster = cluster_factory(3)
    broker = cluster.broker(1)
    body = {
        "topics": [_creatable("orders.eu", 2, 3, {"retention.ms": "86400000"})],
        "timeout_ms": 30000,
        "validate_only": False,
    }
    (created,) = call(broker, ApiKey.CREATE_TOPICS, 7, body).topics
    assert (created.error_code, created.num_partitions, created.replication_factor) == (0, 2, 3)
    configs = {c.name: (c.value, c.config_source) for c in created.configs}
    assert configs["retention.ms"] == ("86400000", TOPIC_CONFIG)
    listed = wait_for(
        lambda: [t for t in cluster.metadata(2, ["orders.eu"]).topics if len(t.partitions) == 2],
        "broker 2's metadata to list orders.eu",
        timeout=TIMEOUT_S,
    )
    assert created.topic_id == listed[0].topic_id
    # DescribeTopicPartitions (KIP-966) pages the same view from any broker's cache
    body_75 = {"topics": [{"name": "orders.eu"}], "response_partition_limit": 1, "cursor": None}
    page = call(cluster.broker(2), ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, body_75)
    (topic,) = page.topics
    assert [p.partition_index for p in topic.partitions] == [0]
    assert sorted(topic.partitions[0].replica_nodes) == [1, 2, 3]
    assert (page.next_cursor.topic_name, page.next_cursor.partition_index) == ("orders.eu", 1)
    body["topics"] = [
        _creatable("orders_eu"),
        _creatable("nulls", configs={"retention.ms": None}),
        _creatable("twice"),
        _creatable("twice"),
    ]
    answers = {t.name: t for t in call(broker, ApiKey.CREATE_TOPICS, 7, body).topics}
    collision = answers["orders_eu"]
    assert collision.error_code == 17  # INVALID_TOPIC_EXCEPTION
    assert "collides with existing topics: orders.eu" in collision.error_message
    assert answers["nulls"].error_code == 40  # INVALID_CONFIG
    assert "Null value not supported" in answers["nulls"].error_message
    assert answers["twice"].error_code == 42  # INVALID_REQUEST
    assert (collision.num_partitions, collision.replication_factor) == (-1, -1)
    assert cluster.zk.exists("/brokers/topics/orders_eu") is None
    assert cluster.zk.exists("/brokers/topics/nulls") is None


def test_create_partitions_grows_a_topic_on_every_broker(cluster_factory):
    cluster = cluster_factory(3)
    assert cluster.create_topic("grow", 2, 2) == 0
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    try:
        admin.create_partitions({"grow": 5})
        wait_grown(cluster, "grow", 5)
        assignment = partitions(cluster, "grow")
        new = [2, 3, 4]
        assert sorted(assignment) == [0, 1, *new]
        for p in new:
            assert len(set(assignment[p])) == 2 and set(assignment[p]) <= {1, 2, 3}
            for b in (1, 2, 3):
                assert cluster.partition_view(b, "grow", p)[2] == assignment[p]
        # consecutive start indexes (Kafka's rule for added partitions): leaders spread
        assert len({assignment[p][0] for p in new}) == 3

        sent = {p: [b"p%d-%d" % (p, i) for i in range(20)] for p in new}
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=5)
        futures = [producer.send("grow", v, partition=p) for p in new for v in sent[p]]
        for future in futures:
            future.get(timeout=TIMEOUT_S)
        producer.close()
        for p in new:
            assert [m.value for m in kp_consume_all(cluster.bootstrap, "grow", p)] == sent[p]
            for b in assignment[p]:
                data = wait_for(
                    lambda: (got := replica_bytes(cluster.broker(b), "grow", p))[1] == 20
                    and got[0],
                    f"broker {b}'s replica of grow-{p}",
                    timeout=TIMEOUT_S,
                )
                assert [m.value for m in iter_deep(data)] == sent[p]

        with pytest.raises(InvalidPartitionsError):
            admin.create_partitions({"grow": 3})
        with pytest.raises(InvalidPartitionsError):
            admin.create_partitions({"grow": 5})
        with pytest.raises(InvalidReplicationAssignmentError):
            admin.create_partitions({"grow": {"count": 6, "assignments": [[3, 9]]}})
        admin.create_partitions({"grow": {"count": 6, "assignments": [[3, 1]]}}, validate_only=True)
        assert len(partitions(cluster, "grow")) == 5
        admin.create_partitions({"grow": {"count": 6, "assignments": [[3, 1]]}})
        wait_grown(cluster, "grow", 6)
        assert partitions(cluster, "grow")[5] == [3, 1]
    finally:
        admin.close()

    # `chronolog topics alter` through a broker that is not the controller
    other = next(b for b in (1, 2, 3) if b != cluster.controller())
    cli = [sys.executable, "-m", "broker", "topics"]
    grown = subprocess.run(
        [*cli, "--bootstrap-server", cluster.broker(other).bootstrap, "alter", "grow"]
        + ["--partitions", "8"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert grown.returncode == 0, grown.stdout + grown.stderr
    assert "now has 8 partitions" in grown.stdout
    wait_grown(cluster, "grow", 8)


def test_topic_config_change_reaches_every_broker(cluster_factory):
    cluster = cluster_factory(3)
    assert cluster.create_topic("cfg", 1, 3) == 0
    produce_one_by_one(cluster.bootstrap, "cfg", [b"before"] * 3)
    set_config(cluster.broker(1).bootstrap, "topic", "cfg", "segment.bytes", "1024")
    # Kafka's layout: the topic's config, then a change notification naming it
    assert cluster.zk_json("/config/topics/cfg") == {
        "version": 1,
        "config": {"segment.bytes": "1024"},
    }
    notifications = [
        cluster.zk_json(f"/config/changes/{node}")
        for node in cluster.zk.get_children("/config/changes")
    ]
    assert {"version": 2, "entity_path": "topics/cfg"} in notifications
    for b in (1, 2, 3):
        wait_for(
            lambda: described(cluster.broker(b), TOPIC, "cfg", "segment.bytes")
            == ("1024", TOPIC_CONFIG),
            f"broker {b} describes the new segment.bytes",
            timeout=TIMEOUT_S,
        )
    # at least two brokers learnt it from the notification, one of them a follower: every
    # replica rolls by the new size
    produce_one_by_one(cluster.bootstrap, "cfg", [b"x" * 100] * 40)
    assert_rolled_by(cluster, "cfg", 43, 1024)

    # a broker down during a change (the legacy AlterConfigs, which replaces the whole set:
    # kafka-python sends the other overrides along) reads it when it starts again
    down = next(b for b in (1, 2, 3) if b != cluster.controller())
    assert cluster.broker(down).stop() == 0
    cluster.wait_registered([b for b in (1, 2, 3) if b != down])
    kp_admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    try:
        result = kp_admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "cfg", configs={"retention.ms": "3600000"})],
            incremental=False,
        )
        assert result == {"topic": {"cfg": "OK"}}
    finally:
        kp_admin.close()
    assert cluster.zk_json("/config/topics/cfg")["config"] == {
        "segment.bytes": "1024",
        "retention.ms": "3600000",
    }
    cluster.broker(down).start()
    cluster.wait_registered([1, 2, 3])
    for b in (1, 2, 3):
        wait_for(
            lambda: described(cluster.broker(b), TOPIC, "cfg", "retention.ms")
            == ("3600000", TOPIC_CONFIG),
            f"broker {b} describes the new retention.ms",
            timeout=TIMEOUT_S,
        )
        assert described(cluster.broker(b), TOPIC, "cfg", "segment.bytes") == (
            "1024",
            TOPIC_CONFIG,
        )


def test_turning_on_unclean_election_elects_a_leader(cluster_factory):
    """The controller hears of a topic's config change (Kafka's
    enableTopicUncleanLeaderElection): an offline partition gets its out-of-sync replica."""
    cluster = cluster_factory(3, zookeeper_session_timeout_ms=3000, replica_lag_time_max_ms=2000)
    assert cluster.create_topic("t", 1, 3) == 0
    _, survivor, _ = _offline_after_losing_the_isr(cluster, "t")
    wait_for(lambda: cluster.state("t")["leader"] == -1, "partition offline", timeout=TIMEOUT_S)
    admin = KafkaAdminClient(
        bootstrap_servers=cluster.broker(survivor).bootstrap, request_timeout_ms=30000
    )
    try:
        change = {"unclean.leader.election.enable": "true"}
        result = admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "t", configs=change)]
        )
        assert result == {"topic": {"t": "OK"}}
    finally:
        admin.close()
    wait_for(
        lambda: cluster.leader("t") == survivor, "the out-of-sync replica leads", timeout=TIMEOUT_S
    )
    assert cluster.state("t")["isr"] == [survivor]


def test_dynamic_broker_configs_reach_every_broker(cluster_factory):
    cluster = cluster_factory(3)
    assert cluster.create_topic("plain", 1, 3) == 0
    # the cluster-wide default, through one broker
    configs = [sys.executable, "-m", "broker", "configs", "--bootstrap-server"]
    changed = subprocess.run(
        [*configs, cluster.broker(2).bootstrap, "alter", "--entity-type", "brokers"]
        + ["--entity-default", "--add-config", "log.segment.bytes=1024"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert changed.returncode == 0, changed.stdout + changed.stderr
    assert cluster.zk_json("/config/brokers/<default>") == {
        "version": 1,
        "config": {"log.segment.bytes": "1024"},
    }
    for b in (1, 2, 3):
        broker = cluster.broker(b)
        wait_for(
            lambda: described(broker, BROKER, str(b), "log.segment.bytes")
            == ("1024", DYNAMIC_DEFAULT_BROKER_CONFIG),
            f"broker {b} describes the cluster-wide log.segment.bytes",
            timeout=TIMEOUT_S,
        )
        assert described(broker, TOPIC, "plain", "segment.bytes") == (
            "1024",
            DYNAMIC_DEFAULT_BROKER_CONFIG,
        )
    # a topic without an override rolls by it on every replica
    produce_one_by_one(cluster.bootstrap, "plain", [b"x" * 100] * 40)
    assert_rolled_by(cluster, "plain", 40, 1024)

    # one broker's own value (librdkafka sends it to that broker) stays that broker's
    set_config(cluster.bootstrap, "broker", "3", "log.retention.ms", "3600000")
    assert cluster.zk_json("/config/brokers/3") == {
        "version": 1,
        "config": {"log.retention.ms": "3600000"},
    }
    assert described(cluster.broker(3), BROKER, "3", "log.retention.ms") == (
        "3600000",
        DYNAMIC_BROKER_CONFIG,
    )
    for b in (1, 2):
        assert described(cluster.broker(b), BROKER, str(b), "log.retention.ms")[1] == (
            DEFAULT_CONFIG
        )

    # a broker started again reads the default from ZooKeeper
    assert cluster.broker(2).stop() == 0
    cluster.broker(2).start()
    cluster.wait_registered([1, 2, 3])
    assert described(cluster.broker(2), BROKER, "2", "log.segment.bytes") == (
        "1024",
        DYNAMIC_DEFAULT_BROKER_CONFIG,
    )


def test_a_config_changed_twice_at_once_ends_at_the_second_everywhere(cluster_factory):
    """librdkafka's 0081 sets the cluster-wide log.cleanup.policy and at once sets it back: the
    broker asked answers with the second value in effect and every broker ends at it. (The
    race 0081 met, the notification follower re-applying the first value read from ZooKeeper
    before the second was written, needs that read to fall inside the second change: these
    rounds rarely hit it; the follower now reads under the admin lock the changes hold.)"""
    cluster = cluster_factory(3)
    asked = cluster.broker(1)

    def set_policy(value: str) -> None:
        body = {
            "resources": [
                {
                    "resource_type": BROKER,
                    "resource_name": "",
                    "configs": [
                        {"name": "log.cleanup.policy", "config_operation": 0, "value": value}
                    ],
                }
            ],
            "validate_only": False,
        }
        (result,) = call(asked, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body).responses
        assert result.error_code == 0, result.error_message

    for _ in range(10):
        set_policy("delete,compact")
        set_policy("delete")
        assert described(asked, BROKER, "1", "log.cleanup.policy")[0] == "delete"
    for b in (1, 2, 3):
        wait_for(
            lambda b=b: described(cluster.broker(b), BROKER, str(b), "log.cleanup.policy")[0]
            == "delete",
            f"broker {b} at the second value",
            timeout=TIMEOUT_S,
        )
    # the follower's reads of the earlier notifications are done: nothing older comes back
    wait_for(
        lambda: all(
            '"dynamic broker configs changed in the cluster"' not in line
            or '"log.cleanup.policy": "delete,compact"' not in line
            for line in asked.log_output().splitlines()[-5:]
        ),
        "the asked broker's last adoptions",
        timeout=TIMEOUT_S,
    )
    for b in (1, 2, 3):
        assert described(cluster.broker(b), BROKER, str(b), "log.cleanup.policy")[0] == "delete"
