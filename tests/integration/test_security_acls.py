"""ACLs with real clients: CreateAcls/DescribeAcls/DeleteAcls through confluent-kafka's and
kafka-python's admin clients, super users, what a principal without permission gets (a denied
produce stores nothing, a denied fetch returns no data, a denied delete leaves the topic,
Metadata shows only describable topics and auto-creates nothing), group permissions with
commits, ACLs on transactional ids (InitProducerId authorized before transactions are
refused), principals from SASL and from TLS client certificates, ACLs kept across a restart
and listed by `chronolog acls`, and no password in the log or in an answer."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition as CkTopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

from clients import ck_poll_values, topic_name
from kafka_wire import WireClient, fetch_partition, message_set, produce
from protocol import ApiKey
from security_helpers import (
    local_brokers_only,
    SaslTranscript,
    SecureBroker,
    assert_no_secret,
    handshake,
    log_entries,
    make_pki,
    tls_properties,
    tls_wire,
    wait_for_log,
)

pytestmark = local_brokers_only

REPO = Path(__file__).resolve().parents[2]
USERS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
    + ";"
)
SASL = SaslTranscript()
"""Every SASL exchange on the wire goes through it, for the secrets check at the end."""


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory, pki):
    workdir = tmp_path_factory.mktemp("acl-broker")
    broker = SecureBroker(
        workdir,
        {"SASL_PLAINTEXT": "SASL_PLAINTEXT", "SSL": "SSL"},
        {
            "log.dirs": str(workdir / "logs"),
            "sasl.enabled.mechanisms": "PLAIN",
            "plain.sasl.jaas.config": JAAS,
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin",
            "connection.failed.authentication.delay.ms": "0",
            "ssl.principal.mapping.rules": "RULE:^CN=(.*?),.*$/$1/,DEFAULT",
            **tls_properties(pki, client_auth="required"),
        },
    )
    broker.start()
    yield broker
    broker.stop()
    assert_no_secret(broker, SASL, set(USERS.values()))


def conf(broker, user: str) -> dict:
    return {
        "bootstrap.servers": broker.bootstrap_for("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


def kp(broker, user: str) -> dict:
    return {
        "bootstrap_servers": broker.bootstrap_for("SASL_PLAINTEXT"),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": user,
        "sasl_plain_password": USERS[user],
    }


def wire(broker, user: str) -> WireClient:
    client = WireClient(broker.host, broker.ports["SASL_PLAINTEXT"])
    assert handshake(client, "PLAIN").error_code == 0
    assert SASL.authenticate(client, f"\0{user}\0{USERS[user]}".encode()).error_code == 0
    return client


def admin(broker) -> AdminClient:
    """The super user's admin client (kept: librdkafka fails its futures when it is freed)."""
    if getattr(broker, "admin_client", None) is None:
        broker.admin_client = AdminClient(conf(broker, "admin"))
    return broker.admin_client


def create_topic(broker, topic: str) -> None:
    for future in admin(broker).create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)


def grant(broker, *bindings: AclBinding) -> None:
    for future in admin(broker).create_acls(list(bindings)).values():
        assert future.result(30) is None


def topic_acl(topic, user, op, pattern=ResourcePatternType.LITERAL, perm=AclPermissionType.ALLOW):
    return AclBinding(ResourceType.TOPIC, topic, pattern, f"User:{user}", "*", op, perm)


def group_acl(group, user, op):
    return AclBinding(
        ResourceType.GROUP,
        group,
        ResourcePatternType.LITERAL,
        f"User:{user}",
        "*",
        op,
        AclPermissionType.ALLOW,
    )


def transactional_id_acl(name, user, op, pattern=ResourcePatternType.LITERAL):
    return AclBinding(
        ResourceType.TRANSACTIONAL_ID,
        name,
        pattern,
        f"User:{user}",
        "*",
        op,
        AclPermissionType.ALLOW,
    )


def end_offset(broker, topic: str) -> int:
    with wire(broker, "admin") as client:
        body = {
            "replica_id": -1,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        }
        return client.call(ApiKey.LIST_OFFSETS, 1, body).topics[0].partitions[0].offset


def topics_of(broker) -> set[str]:
    """Every topic, as the super user's Metadata lists them."""
    with wire(broker, "admin") as client:
        return {t.name for t in client.call(ApiKey.METADATA, 9, {"topics": None}).topics}


def test_denied_produce_stores_nothing(acl_broker):
    topic = topic_name("acl-produce")
    create_topic(acl_broker, topic)
    with wire(acl_broker, "alice") as client:
        answer = produce(client, topic, message_set([b"x", b"y"]), version=2)
        assert answer.error_code == 29  # TOPIC_AUTHORIZATION_FAILED
    with wire(acl_broker, "alice") as client:  # acks=0: no answer to carry the error, closed
        body = {
            "acks": 0,
            "timeout_ms": 1000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": message_set([b"z"])}]}
            ],
        }
        client.send(ApiKey.PRODUCE, 2, body)
        assert client.closed_by_peer()
    producer = Producer({**conf(acl_broker, "alice"), "message.timeout.ms": 5000})
    errors = []
    try:  # refused at once when the client's metadata already says so, else on delivery
        producer.produce(topic, b"z", on_delivery=lambda err, msg: errors.append(err))
        producer.flush(15)
    except KafkaException as exc:
        errors.append(exc.args[0])
    assert [e.code() for e in errors] == [29]
    assert end_offset(acl_broker, topic) == 0
    # and with WRITE granted, the same producer stores
    grant(acl_broker, topic_acl(topic, "alice", AclOperation.WRITE))
    delivered = []
    producer = Producer(conf(acl_broker, "alice"))  # a fresh one: no cached refusal
    producer.produce(topic, b"ok", on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(15)
    assert delivered == [None]
    assert end_offset(acl_broker, topic) == 1


def test_denied_fetch_returns_no_data(acl_broker):
    topic = topic_name("acl-fetch")
    create_topic(acl_broker, topic)
    with wire(acl_broker, "admin") as client:
        assert produce(client, topic, message_set([b"secret-1", b"secret-2"])).error_code == 0
    with wire(acl_broker, "bob") as client:
        part = fetch_partition(client, topic)
        assert part.error_code == 29
        assert not part.records
    consumer = KafkaConsumer(**kp(acl_broker, "bob"), consumer_timeout_ms=3000)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek(TopicPartition(topic, 0), 0)
        got = []
        try:  # kafka-python may raise TopicAuthorizationFailedError or just get nothing
            got.extend(consumer)
        except KafkaError:
            pass
        assert got == []
    finally:
        consumer.close()


def test_denied_delete_leaves_the_topic(acl_broker):
    topic = topic_name("acl-delete")
    create_topic(acl_broker, topic)
    with wire(acl_broker, "admin") as client:
        produce(client, topic, message_set([b"keep"]))
    grant(acl_broker, topic_acl(topic, "alice", AclOperation.DESCRIBE))
    alice = AdminClient(conf(acl_broker, "alice"))
    futures = alice.delete_topics([topic])
    with pytest.raises(KafkaException) as e:
        futures[topic].result(30)
    assert e.value.args[0].code() == 29
    with wire(acl_broker, "alice") as client:
        answer = client.call(ApiKey.DELETE_TOPICS, 0, {"topic_names": [topic], "timeout_ms": 1000})
        assert answer.responses[0].error_code == 29
    assert end_offset(acl_broker, topic) == 1
    assert topic in topics_of(acl_broker)


def test_metadata_lists_only_describable_topics_and_creates_nothing(acl_broker):
    visible, hidden = topic_name("vis"), topic_name("hid")
    for topic in (visible, hidden):
        create_topic(acl_broker, topic)
    grant(acl_broker, topic_acl(visible, "carol", AclOperation.DESCRIBE))
    with wire(acl_broker, "carol") as client:
        every = client.call(ApiKey.METADATA, 9, {"topics": None})
        assert [t.name for t in every.topics] == [visible]
        named = client.call(
            ApiKey.METADATA,
            9,
            {"topics": [{"name": hidden}, {"name": visible}], "allow_auto_topic_creation": True},
        )
        assert {t.name: t.error_code for t in named.topics} == {hidden: 29, visible: 0}
        new = topic_name("auto")
        created = client.call(
            ApiKey.METADATA, 9, {"topics": [{"name": new}], "allow_auto_topic_creation": True}
        )
        assert created.topics[0].error_code == 29
        ops = client.call(
            ApiKey.METADATA,
            9,
            {"topics": [{"name": visible}], "include_topic_authorized_operations": True},
        )
        assert ops.topics[0].topic_authorized_operations == 1 << 8  # DESCRIBE only
    assert new not in topics_of(acl_broker)


def test_group_permissions_and_commits(acl_broker):
    topic, group = topic_name("acl-group"), topic_name("g")
    create_topic(acl_broker, topic)
    producer = KafkaProducer(**kp(acl_broker, "admin"))
    for i in range(5):
        producer.send(topic, b"m%d" % i)
    producer.flush(30)
    producer.close()
    grant(acl_broker, topic_acl(topic, "bob", AclOperation.READ))
    settings = {**conf(acl_broker, "bob"), "group.id": group, "auto.offset.reset": "earliest"}
    consumer = Consumer({**settings, "enable.auto.commit": False})
    consumer.subscribe([topic])
    error = None
    deadline = time.monotonic() + 20
    while error is None and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is not None:
            error = message.error()
    consumer.close()
    assert error is not None and error.code() == 30  # GROUP_AUTHORIZATION_FAILED
    grant(acl_broker, group_acl(group, "bob", AclOperation.READ))
    consumer = Consumer({**settings, "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        got = ck_poll_values(consumer, 5)
        assert got == [b"m%d" % i for i in range(5)]
        consumer.commit(asynchronous=False)
        [committed] = consumer.committed([CkTopicPartition(topic, 0)], timeout=10)
        assert committed.offset == 5
    finally:
        consumer.close()


def test_acl_admin_apis_need_cluster_alter(acl_broker):
    binding = topic_acl("x-", "alice", AclOperation.READ, ResourcePatternType.PREFIXED)
    alice = AdminClient(conf(acl_broker, "alice"))
    futures = alice.create_acls([binding])
    with pytest.raises(KafkaException) as e:
        futures[binding].result(30)
    assert e.value.args[0].code() == 31  # CLUSTER_AUTHORIZATION_FAILED
    grant(acl_broker, binding)
    found = (
        admin(acl_broker)
        .describe_acls(
            AclBindingFilter(
                ResourceType.TOPIC,
                "x-something",
                ResourcePatternType.MATCH,
                None,
                None,
                AclOperation.ANY,
                AclPermissionType.ANY,
            )
        )
        .result(30)
    )
    assert binding in found
    deleted = admin(acl_broker).delete_acls(
        [
            AclBindingFilter(
                ResourceType.TOPIC,
                "x-",
                ResourcePatternType.PREFIXED,
                "User:alice",
                None,
                AclOperation.ANY,
                AclPermissionType.ANY,
            )
        ]
    )
    [result] = deleted.values()
    assert result.result(30) == [binding]


def test_moving_a_replica_between_log_dirs_needs_cluster_alter(acl_broker):
    topic = topic_name("logdir-acl")
    create_topic(acl_broker, topic)
    body = {"dirs": [{"path": acl_broker.log_dir, "topics": [{"name": topic, "partitions": [0]}]}]}
    for user, code in (("alice", 31), ("admin", 0)):  # 31: CLUSTER_AUTHORIZATION_FAILED
        with wire(acl_broker, user) as client:
            answer = client.call(ApiKey.ALTER_REPLICA_LOG_DIRS, 2, body)
        assert [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions])
                for t in answer.results] == [(topic, [(0, code)])]  # fmt: skip


def init_producer_id(broker, user: str, transactional_id: str):
    """InitProducerId v1 for ``transactional_id`` as ``user``: the answer."""
    with wire(broker, user) as client:
        body = {"transactional_id": transactional_id, "transaction_timeout_ms": 60000}
        return client.call(ApiKey.INIT_PRODUCER_ID, 1, body)


def test_transactional_id_acls(acl_broker):
    """ACLs on transactional ids (resource type 5) are created, described and deleted like the
    others, and InitProducerId is authorized first, as Kafka's handleInitProducerIdRequest
    checks WRITE on the transactional id before it hands the request to the transaction
    coordinator: without WRITE the answer is TRANSACTIONAL_ID_AUTHORIZATION_FAILED and a
    denial is logged; with it the coordinator answers with a producer id. FindCoordinator for
    the id needs DESCRIBE."""
    txn = topic_name("txn")
    TXN_DENIED = 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    def denied_lines() -> list[dict]:
        return [
            e
            for e in log_entries(acl_broker, "authorization denied")
            if e["resource"] == f"TRANSACTIONAL_ID:{txn}"
        ]

    refused = init_producer_id(acl_broker, "alice", txn)
    assert (refused.error_code, refused.producer_id, refused.producer_epoch) == (TXN_DENIED, -1, -1)
    assert [(e["principal"], e["operation"], e["api"]) for e in denied_lines()] == [
        ("User:alice", "WRITE", "INIT_PRODUCER_ID")
    ]
    write = transactional_id_acl(txn, "alice", AclOperation.WRITE)
    describe = transactional_id_acl(
        "txn-", "bob", AclOperation.DESCRIBE, ResourcePatternType.PREFIXED
    )
    grant(acl_broker, write, describe)
    every_transactional_id = AclBindingFilter(
        ResourceType.TRANSACTIONAL_ID,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    found = admin(acl_broker).describe_acls(every_transactional_id).result(30)
    assert sorted(found, key=str) == sorted([write, describe], key=str)
    # with WRITE: past the authorization, the coordinator hands out a producer id
    granted = init_producer_id(acl_broker, "alice", txn)
    assert granted.error_code == 0 and granted.producer_id >= 0 and granted.producer_epoch == 0
    assert len(denied_lines()) == 1
    # bob may DESCRIBE (prefixed): FindCoordinator finds this broker; but he may not WRITE
    with wire(acl_broker, "bob") as client:
        body = {"key": txn, "key_type": 1}
        found_coordinator = client.call(ApiKey.FIND_COORDINATOR, 1, body)
    assert found_coordinator.error_code == 0
    assert found_coordinator.port == acl_broker.ports["SASL_PLAINTEXT"]
    assert init_producer_id(acl_broker, "bob", txn).error_code == TXN_DENIED
    assert [e["principal"] for e in denied_lines()] == ["User:alice", "User:bob"]
    [deleted] = admin(acl_broker).delete_acls([every_transactional_id]).values()
    assert sorted(deleted.result(30), key=str) == sorted([write, describe], key=str)
    assert admin(acl_broker).describe_acls(every_transactional_id).result(30) == []
    assert init_producer_id(acl_broker, "alice", txn).error_code == TXN_DENIED
    assert len(denied_lines()) == 3


def test_tls_certificate_principal(acl_broker, pki):
    """Over SSL, alice's certificate (CN=alice, mapped by the rules) is User:alice."""
    topic = topic_name("acl-cert")
    create_topic(acl_broker, topic)
    grant(acl_broker, topic_acl(topic, "alice", AclOperation.WRITE))
    port = acl_broker.ports["SSL"]
    with tls_wire(acl_broker.host, port, pki, (pki.client_cert, pki.client_key)) as client:
        assert produce(client, topic, message_set([b"by-cert"])).error_code == 0
        other = topic_name("acl-cert-other")
        create_topic(acl_broker, other)
        assert produce(client, other, message_set([b"no"])).error_code == 29
    assert end_offset(acl_broker, topic) == 1
    denied = wait_for_log(acl_broker, "authorization denied")
    assert any(e["principal"] == "User:alice" and e["resource"] == f"TOPIC:{other}" for e in denied)


def test_acls_survive_a_restart_and_show_in_the_cli(acl_broker):
    binding = topic_acl("persist-", "carol", AclOperation.WRITE, ResourcePatternType.PREFIXED)
    grant(acl_broker, binding)
    acl_broker.restart()
    found = admin(acl_broker).describe_acls(
        AclBindingFilter(
            ResourceType.ANY,
            None,
            ResourcePatternType.ANY,
            "User:carol",
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
    )
    assert binding in found.result(30)
    listed = subprocess.run(
        [sys.executable, "-m", "broker", "acls", "--log-dir", acl_broker.log_dir, "list"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert "(principal=User:carol, host=*, operation=WRITE, permissionType=ALLOW) on " in (
        listed.stdout
    )
    assert "TOPIC:PREFIXED:persist-" in listed.stdout
