"""ACLs shared across a cluster (issue #34): the bindings live in ZooKeeper as Kafka's ZooKeeper
authorizer kept them, so CreateAcls on one broker is enforced by every broker for a real client
without a restart, DeleteAcls on another lifts it everywhere, DescribeAcls answers the same on
each, a broker started later loads them before it serves, and Kafka 4.1.1's kafka-acls.sh and
``chronolog acls --config`` manage them. The znodes are read with kazoo and compared with
Kafka's format. About 45 s (three brokers four times, three JVM tool runs)."""

from __future__ import annotations

import json
import subprocess
import threading
import sys

import pytest
from confluent_kafka import KafkaError, Producer

from protocol import ApiKey
from tests.cluster.helpers import call
from tests.oracle.kafka_oracle import run_kafka_tool
from tests.waiting import wait_for

ACL_COMMAND = "org.apache.kafka.tools.AclCommand"
TOPIC, GROUP, CLUSTER = 2, 3, 4  # ResourceType ids
LITERAL, PREFIXED = 3, 4  # PatternType ids
ANY = 1
READ, WRITE = 3, 4  # AclOperation ids
DENY, ALLOW = 2, 3  # AclPermissionType ids


def _binding(resource_type: int, name: str, pattern: int, operation: int, permission: int):
    return {
        "resource_type": resource_type,
        "resource_name": name,
        "resource_pattern_type": pattern,
        "principal": "User:*",
        "host": "*",
        "operation": operation,
        "permission_type": permission,
    }


def _described(broker) -> list[tuple]:
    """Every binding DescribeAcls v3 of ``broker`` lists."""
    answer = call(
        broker,
        ApiKey.DESCRIBE_ACLS,
        3,
        {
            "resource_type_filter": ANY,
            "resource_name_filter": None,
            "pattern_type_filter": ANY,
            "principal_filter": None,
            "host_filter": None,
            "operation": ANY,
            "permission_type": ANY,
        },
    )
    assert answer.error_code == 0, answer.error_message
    return sorted(
        (
            r.resource_type,
            r.resource_name,
            r.pattern_type,
            a.principal,
            a.operation,
            a.permission_type,
        )
        for r in answer.resources
        for a in r.acls
    )


def _produce_errors(bootstrap: str, topic: str, partitions: int) -> list[int | None]:
    """One record to each partition from a new confluent-kafka producer: per partition, the
    delivery's error code (None: delivered)."""
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000})
    errors: dict[int, int | None] = {}

    def delivered(err: KafkaError | None, msg) -> None:
        errors[msg.partition()] = None if err is None else err.code()

    for p in range(partitions):
        producer.produce(topic, b"value", partition=p, on_delivery=delivered)
    producer.flush(20)
    return [errors.get(p, -1) for p in range(partitions)]


@pytest.fixture
def acl_cluster(cluster_factory):
    """3 brokers with an authorizer (no ACL: everyone may) and a topic whose three partitions
    are led by brokers 1, 2 and 3."""
    cluster = cluster_factory(
        3,
        authorizer_class_name="org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        allow_everyone_if_no_acl_found="true",
    )
    topic = "guarded"
    assignment = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
    assert cluster.create_topic(topic, assignment=assignment) == 0
    wait_for(
        lambda: [cluster.leader(topic, p) for p in range(3)] == [1, 2, 3],
        "partitions 0, 1, 2 led by brokers 1, 2, 3",
    )
    return cluster, topic


def _change_nodes(cluster, path: str) -> list[bytes]:
    return [cluster.zk.get(f"{path}/{n}")[0] for n in sorted(cluster.zk.get_children(path))]


def test_acls_created_on_one_broker_are_enforced_by_every_broker(acl_cluster):
    cluster, topic = acl_cluster
    assert _produce_errors(cluster.bootstrap, topic, 3) == [None, None, None]

    deny = _binding(TOPIC, topic, LITERAL, WRITE, DENY)
    answer = call(cluster.broker(1), ApiKey.CREATE_ACLS, 3, {"creations": [deny]})
    assert [r.error_code for r in answer.results] == [0]
    # Kafka's AclAuthorizer layout and JSON, and its literal change notification
    assert cluster.zk_json(f"/kafka-acl/Topic/{topic}") == {
        "version": 1,
        "acls": [
            {"principal": "User:*", "permissionType": "Deny", "operation": "Write", "host": "*"}
        ],
    }
    assert f"TOPIC:{topic}".encode() in _change_nodes(cluster, "/kafka-acl-changes")
    # every leader refuses the writes, without a restart
    refused = int(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    wait_for(
        lambda: _produce_errors(cluster.bootstrap, topic, 3) == [refused] * 3,
        "brokers 1, 2 and 3 refusing writes to their partitions",
    )

    prefixed = _binding(GROUP, "team-", PREFIXED, READ, ALLOW)
    answer = call(cluster.broker(2), ApiKey.CREATE_ACLS, 3, {"creations": [prefixed]})
    assert [r.error_code for r in answer.results] == [0]
    assert cluster.zk_json("/kafka-acl-extended/prefixed/Group/team-") == {
        "version": 1,
        "acls": [
            {"principal": "User:*", "permissionType": "Allow", "operation": "Read", "host": "*"}
        ],
    }
    assert [json.loads(d) for d in _change_nodes(cluster, "/kafka-acl-extended-changes")] == [
        {"version": 1, "resourceType": "GROUP", "name": "team-", "patternType": "PREFIXED"}
    ]
    expected = sorted(
        [
            (TOPIC, topic, LITERAL, "User:*", WRITE, DENY),
            (GROUP, "team-", PREFIXED, "User:*", READ, ALLOW),
        ]
    )
    for broker in cluster.brokers:
        wait_for(lambda: _described(broker) == expected, "every broker describing both ACLs")

    # a name ZooKeeper cannot hold is refused as Kafka's ZooKeeper authorizer refused it
    slash = _binding(TOPIC, "a/b", LITERAL, READ, ALLOW)
    answer = call(cluster.broker(3), ApiKey.CREATE_ACLS, 3, {"creations": [slash]})
    assert answer.results[0].error_code == 42  # INVALID_REQUEST
    assert "contains '/'" in answer.results[0].error_message

    delete = {
        "resource_type_filter": TOPIC,
        "resource_name_filter": topic,
        "pattern_type_filter": LITERAL,
        "principal_filter": None,
        "host_filter": None,
        "operation": ANY,
        "permission_type": ANY,
    }
    answer = call(cluster.broker(3), ApiKey.DELETE_ACLS, 3, {"filters": [delete]})
    [result] = answer.filter_results
    assert result.error_code == 0
    assert [(m.resource_name, m.operation) for m in result.matching_acls] == [(topic, WRITE)]
    assert cluster.zk_json(f"/kafka-acl/Topic/{topic}") is None
    wait_for(
        lambda: _produce_errors(cluster.bootstrap, topic, 3) == [None, None, None],
        "every broker taking writes again",
    )
    for broker in cluster.brokers:
        wait_for(
            lambda: _described(broker) == [(GROUP, "team-", PREFIXED, "User:*", READ, ALLOW)],
            "every broker describing the prefixed ACL only",
        )


def test_kafka_acls_tool_and_chronolog_acls_in_a_cluster(acl_cluster, tmp_path):
    cluster, topic = acl_cluster
    cluster.broker(3).stop()
    added = run_kafka_tool(
        ACL_COMMAND,
        "--bootstrap-server",
        cluster.broker(1).bootstrap,
        "--add",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--topic",
        topic,
    )
    assert "User:alice" in added.stdout
    assert cluster.zk_json(f"/kafka-acl/Topic/{topic}") == {
        "version": 1,
        "acls": [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}
        ],
    }
    # broker 3 was down when the ACL was made: it loads it before it answers
    cluster.broker(3).start()
    alice = (TOPIC, topic, LITERAL, "User:alice", READ, ALLOW)
    assert _described(cluster.broker(3)) == [alice]

    # chronolog acls with a server.properties naming the cluster writes ZooKeeper
    properties = tmp_path / "server.properties"
    properties.write_text(
        f"zookeeper.connect={cluster.zookeeper.connect}{cluster.chroot}\n"
        f"log.dirs={tmp_path / 'unused-logs'}\n"
    )
    cli = [sys.executable, "-m", "broker", "acls", "--config", str(properties)]
    done = subprocess.run(
        [*cli, "add", "--deny-principal", "User:mallory", "--operation", "Write", "--topic", topic],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    mallory = (TOPIC, topic, LITERAL, "User:mallory", WRITE, DENY)
    for broker in cluster.brokers:
        wait_for(lambda: _described(broker) == sorted([alice, mallory]), "both ACLs everywhere")

    listed = run_kafka_tool(
        ACL_COMMAND, "--bootstrap-server", cluster.broker(2).bootstrap, "--list", "--topic", topic
    )
    assert "principal=User:alice" in listed.stdout and "principal=User:mallory" in listed.stdout
    done = subprocess.run([*cli, "list"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "principal=User:alice" in done.stdout and "principal=User:mallory" in done.stdout

    run_kafka_tool(
        ACL_COMMAND,
        "--bootstrap-server",
        cluster.broker(3).bootstrap,
        "--remove",
        "--force",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--topic",
        topic,
    )
    done = subprocess.run(
        [*cli, "remove", "--topic", topic, "--principal", "User:mallory"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "removed" in done.stdout
    assert cluster.zk_json(f"/kafka-acl/Topic/{topic}") is None
    for broker in cluster.brokers:
        wait_for(lambda: _described(broker) == [], "no ACL left on any broker")


def _authorizing_cluster(cluster_factory):
    return cluster_factory(
        3,
        authorizer_class_name="org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        allow_everyone_if_no_acl_found="true",
    )


def test_acls_added_at_once_through_two_brokers_all_land(cluster_factory):
    """Two brokers changing one resource's node at the same moment: the one whose conditional
    write loses reads the node again and adds its binding to the winner's."""
    cluster = _authorizing_cluster(cluster_factory)
    expected = []
    for round_ in range(10):
        barrier = threading.Barrier(2)
        codes: list[int] = []

        def create(broker_id: int, principal: str) -> None:
            binding = {**_binding(TOPIC, "contended", LITERAL, READ, ALLOW), "principal": principal}
            barrier.wait()
            answer = call(
                cluster.broker(broker_id), ApiKey.CREATE_ACLS, 3, {"creations": [binding]}
            )
            codes.extend(r.error_code for r in answer.results)

        threads = [
            threading.Thread(target=create, args=(1, f"User:a{round_}")),
            threading.Thread(target=create, args=(2, f"User:b{round_}")),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert codes == [0, 0]
        expected += [
            (TOPIC, "contended", LITERAL, f"User:{who}{round_}", READ, ALLOW) for who in "ab"
        ]
    expected.sort()
    node = cluster.zk_json("/kafka-acl/Topic/contended")
    assert sorted(a["principal"] for a in node["acls"]) == sorted(e[3] for e in expected)
    for broker in cluster.brokers:
        wait_for(lambda: _described(broker) == expected, "all 20 ACLs on every broker")


def test_acl_change_notifications_older_than_15_minutes_are_deleted(cluster_factory):
    cluster = _authorizing_cluster(cluster_factory)
    answer = call(
        cluster.broker(1),
        ApiKey.CREATE_ACLS,
        3,
        {"creations": [_binding(TOPIC, "kept", LITERAL, READ, ALLOW)]},
    )
    assert [r.error_code for r in answer.results] == [0]
    assert cluster.zk.get_children("/kafka-acl-changes") != []
    # broker 3 comes back with its wall clock 20 minutes ahead: to it the notification is old
    cluster.broker(3).stop()
    cluster.skew_clock(3, 20 * 60)
    cluster.broker(3).start()
    wait_for(
        lambda: cluster.zk.get_children("/kafka-acl-changes") == [],
        "broker 3 deleting the notification older than 15 minutes by its clock",
    )
    kept = [(TOPIC, "kept", LITERAL, "User:*", READ, ALLOW)]
    assert cluster.zk_json("/kafka-acl/Topic/kept") is not None  # the ACL itself stays
    for broker in cluster.brokers:
        assert _described(broker) == kept
