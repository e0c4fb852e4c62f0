"""The ACL znodes in Kafka's AclAuthorizer formats (broker/cluster/acls.py): what a Kafka 2.x-3.9
broker writes parses, what chronolog writes is Kafka's, and both notification kinds name their
resource."""

from __future__ import annotations

import json

import pytest

from broker.cluster.acls import (
    acls_json,
    change_json,
    parse_acls,
    parse_change,
    resource_path,
)
from broker.cluster.zk import ZkDataError
from broker.security.acls import AclBinding, Operation, PatternType, Permission, ResourceType

TXN = (ResourceType.TRANSACTIONAL_ID, PatternType.PREFIXED, "billing-")


def test_kafka_acl_node_parses_and_reads_back():
    # as Kafka's AclEntry.toJsonCompatibleMap writes it (a HashMap: any key order)
    kafka = (
        b'{"version":1,"acls":[{"host":"*","permissionType":"Allow","operation":"IdempotentWrite",'
        b'"principal":"User:alice"},{"operation":"DESCRIBE_CONFIGS","principal":"User:*",'
        b'"permissionType":"DENY","host":"10.0.0.1"}]}'
    )
    cluster = (ResourceType.CLUSTER, PatternType.LITERAL, "kafka-cluster")
    found = parse_acls(cluster, kafka)
    on_cluster = (ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL)
    assert found == {
        AclBinding(*on_cluster, "User:alice", "*", Operation.IDEMPOTENT_WRITE, Permission.ALLOW),
        AclBinding(*on_cluster, "User:*", "10.0.0.1", Operation.DESCRIBE_CONFIGS, Permission.DENY),
    }
    written = json.loads(acls_json(found))
    assert written["version"] == 1
    assert {"principal": "User:alice", "permissionType": "Allow", "operation": "IdempotentWrite",
            "host": "*"} in written["acls"]  # fmt: skip
    assert parse_acls(cluster, acls_json(found)) == found
    assert resource_path(cluster) == "/kafka-acl/Cluster/kafka-cluster"
    assert resource_path(TXN) == "/kafka-acl-extended/prefixed/TransactionalId/billing-"


def test_change_notifications_name_their_resource():
    topic = (ResourceType.TOPIC, PatternType.LITERAL, "orders:eu")
    assert change_json(topic) == b"TOPIC:orders:eu"  # split at the first ':' only
    assert parse_change(PatternType.LITERAL, "/n", b"TOPIC:orders:eu") == topic
    assert parse_change(PatternType.LITERAL, "/n", b"Topic:orders:eu") == topic  # Kafka 1.x
    assert json.loads(change_json(TXN)) == {
        "version": 1,
        "resourceType": "TRANSACTIONAL_ID",
        "name": "billing-",
        "patternType": "PREFIXED",
    }
    assert parse_change(PatternType.PREFIXED, "/n", change_json(TXN)) == TXN


@pytest.mark.parametrize(
    "data",
    [b"not json", b'{"version":2,"acls":[]}', b'{"version":1,"acls":[{"principal":"User:a"}]}'],
)
def test_unreadable_acl_nodes_are_named(data):
    with pytest.raises(ZkDataError, match="/kafka-acl/Group/g"):
        parse_acls((ResourceType.GROUP, PatternType.LITERAL, "g"), data)
