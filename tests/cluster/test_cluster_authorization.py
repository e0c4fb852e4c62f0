"""Authorization in a cluster: a consumer denied READ on a topic (librdkafka 0119_consumer_auth's
ACL, denying ``User:*`` READ) sees TOPIC_AUTHORIZATION_FAILED for every partition, whichever
broker leads it, from confluent-kafka's poll and from Kafka's Java consumer; the replicas keep
copying the topic, since a follower's fetch needs CLUSTER_ACTION only, as in Kafka.

The bindings are made through broker 1 only: the cluster keeps them in ZooKeeper, and every
broker follows them (tests/cluster/test_cluster_acls.py). Brokers and clients are all ``User:ANONYMOUS`` on PLAINTEXT; the cluster resource has
no ACL, so ``allow.everyone.if.no.acl.found`` lets the brokers replicate and the client manage
ACLs."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from protocol import ApiKey
from tests.cluster.helpers import call, produce, replica_offsets
from tests.waiting import wait_for
from tests.oracle.kafka_oracle import JavaClientError, JavaClients

PARTITIONS = 3
READ, WRITE, DESCRIBE = 3, 4, 8  # AclOperation ids
DENY, ALLOW = 2, 3  # AclPermissionType ids


def _acl(topic: str, operation: int, permission: int) -> dict:
    return {
        "resource_type": 2,  # TOPIC
        "resource_name": topic,
        "resource_pattern_type": 3,  # LITERAL
        "principal": "User:*",
        "host": "*",
        "operation": operation,
        "permission_type": permission,
    }


def _acl_count(broker) -> int:
    """How many bindings DescribeAcls of ``broker`` lists."""
    match_all = {
        "resource_type_filter": 1,
        "resource_name_filter": None,
        "pattern_type_filter": 1,
        "principal_filter": None,
        "host_filter": None,
        "operation": 1,
        "permission_type": 1,
    }
    answer = call(broker, ApiKey.DESCRIBE_ACLS, 3, match_all)
    return sum(len(r.acls) for r in answer.resources)


@pytest.fixture
def denied_topic(cluster_factory):
    """A 3-broker cluster with an authorizer and a topic of 3 partitions, replicated on every
    broker, one record in each, that everyone may DESCRIBE and WRITE and no one may READ."""
    cluster = cluster_factory(
        3,
        authorizer_class_name="org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        allow_everyone_if_no_acl_found="true",
    )
    topic = "no-reading"
    creations = [_acl(topic, DESCRIBE, ALLOW), _acl(topic, WRITE, ALLOW), _acl(topic, READ, DENY)]
    answer = call(cluster.broker(1), ApiKey.CREATE_ACLS, 3, {"creations": creations})
    assert [r.error_code for r in answer.results] == [0, 0, 0]
    for broker in cluster.brokers:
        wait_for(lambda: _acl_count(broker) == 3, "every broker holding the three ACLs")
    assert cluster.create_topic(topic, PARTITIONS, replication_factor=3) == 0
    for p in range(PARTITIONS):
        leader = cluster.broker(cluster.leader(topic, p))
        # acks=all: every follower fetched it, though no one may READ the topic
        assert produce(leader, topic, [f"secret-{p}".encode()], partition=p).error_code == 0
        for broker in cluster.brokers:  # the record reached every replica
            wait_for(
                lambda: replica_offsets(broker, topic, p)[1] == 1,
                what=f"{topic}-{p} copied to broker {broker.overrides['broker.id']}",
            )
    leaders = {cluster.leader(topic, p) for p in range(PARTITIONS)}
    return cluster, topic, leaders


def test_denied_consumer_sees_topic_authorization_failed_in_a_cluster(denied_topic):
    cluster, topic, leaders = denied_topic
    assert len(leaders) > 1  # the refusals come from more than one broker
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "g-denied",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        errored: dict[int, int] = {}
        values = []

        def every_partition_refused() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None:
                if msg.error() is None:
                    values.append(msg.value())
                else:
                    errored[msg.partition()] = msg.error().code()
            return len(errored) == PARTITIONS

        wait_for(every_partition_refused, timeout=30, what="an error for every partition")
        assert errored == {p: KafkaError.TOPIC_AUTHORIZATION_FAILED for p in range(PARTITIONS)}
        assert values == []
    finally:
        consumer.close()


@pytest.mark.kafka_oracle
def test_denied_java_consumer_sees_topic_authorization_failed_in_a_cluster(denied_topic):
    cluster, topic, _ = denied_topic
    with JavaClients(cluster.bootstrap) as java:
        for p in range(PARTITIONS):
            started = time.monotonic()
            with pytest.raises(JavaClientError) as refused:
                java.call("read_partition", topic=topic, partition=p)
            assert (
                refused.value.error == "org.apache.kafka.common.errors.TopicAuthorizationException"
            )
            assert time.monotonic() - started < 60
