"""Error answers a client can read, on chronolog and on Apache Kafka 4.1.1 run beside it with an
authorizer (tests/oracle/kafka_oracle.py's KafkaServer, SASL/PLAIN everywhere, ``admin`` the
super user, ``alice`` allowed only what a test grants).

- A consumer denied READ on a topic (an ACL denying ``User:*`` READ, as librdkafka's
  0119_consumer_auth sets it) sees TOPIC_AUTHORIZATION_FAILED for each partition: as a
  KafkaError from confluent-kafka's poll, as a TopicAuthorizationException from Kafka's Java
  consumer. Before the fix chronolog sent a null record set that librdkafka could not parse.
- AlterConfigs and IncrementalAlterConfigs of ``sasl.kerberos.min.time.before.relogin`` on the
  broker succeed (librdkafka's 0081_admin do_test_AlterConfigs) and DescribeConfigs reports it;
  Kafka's other refusals of dynamic broker configs are answered with Kafka's codes.
- The differential suite: the same raw requests (Fetch at every version Kafka 4.1 serves, by
  name and by topic id, ListOffsets, Metadata, CreateTopics, DescribeConfigs, AlterConfigs) sent
  to both brokers, for authorization errors, unknown topics and partitions, offsets out of range
  and fenced or unknown leader epochs; the decoded answers must be equal field by field, except
  topic ids and error texts, of which only whether they are null counts. The intended
  departures are the xfail(strict) cases, each with its reason.

Each test runs against chronolog; the Kafka runs carry the ``kafka_oracle`` marker.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from broker.config import BROKER_UPDATE_MODES, KAFKA_ONLY_BROKER_KEYS, KAFKA_ONLY_TOPIC_KEYS
from clients import topic_name
from kafka_wire import WireClient
from protocol import ApiKey
from protocol.recordbatch import BatchSpec, build_batch
from security_helpers import SaslTranscript, SecureBroker, handshake, local_brokers_only
from tests.oracle.kafka_oracle import JavaClientError, JavaClients, KafkaServer

pytestmark = local_brokers_only

USERS = {"admin": "admin-pw", "alice": "alice-pw"}
ACCOUNTS = " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule required"
PARTITIONS = 3
RELOGIN = "sasl.kerberos.min.time.before.relogin"
SASL = SaslTranscript()


@dataclass
class Target:
    """One broker under test, reached over SASL_PLAINTEXT."""

    name: str
    host: str
    port: int
    broker_id: int
    _admin: AdminClient | None = field(default=None, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def conf(self, user: str) -> dict[str, Any]:
        """confluent-kafka's settings for ``user``."""
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": USERS[user],
        }

    def java_config(self, user: str) -> dict[str, str]:
        """Kafka's Java clients' settings for ``user``."""
        return {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": f'{PLAIN} username="{user}" password="{USERS[user]}";',
        }

    def admin(self) -> AdminClient:
        """The super user's admin client (kept: librdkafka fails its futures when freed)."""
        if self._admin is None:
            self._admin = AdminClient(self.conf("admin"))
        return self._admin

    def wire(self, user: str) -> WireClient:
        client = WireClient(self.host, self.port)
        assert handshake(client, "PLAIN").error_code == 0
        token = f"\0{user}\0{USERS[user]}".encode()
        assert SASL.authenticate(client, token).error_code == 0
        return client


@pytest.fixture(scope="module")
def chronolog(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("chronolog-auth")
    broker = SecureBroker(
        workdir,
        {"SASL_PLAINTEXT": "SASL_PLAINTEXT"},
        {
            "log.dirs": str(workdir / "logs"),
            "sasl.enabled.mechanisms": "PLAIN",
            "plain.sasl.jaas.config": f"{PLAIN} {ACCOUNTS};",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
            "connection.failed.authentication.delay.ms": "0",
            "auto.create.topics.enable": "false",
        },
    ).start()
    yield Target("chronolog", broker.host, broker.ports["SASL_PLAINTEXT"], 0)
    broker.stop()


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    """Kafka 4.1.1 in KRaft mode whose every listener (clients, brokers, controller) is
    SASL_PLAINTEXT, the broker logging in as ``admin``, with the StandardAuthorizer."""
    server = KafkaServer(tmp_path_factory.mktemp("kafka-auth"))
    jaas = f'{PLAIN} username="admin" password="{USERS["admin"]}" {ACCOUNTS};'
    host, port, controller = server.host, server.port, server.controller_port
    server.overrides.update(
        {
            "listeners": f"SASL_PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller}",
            "advertised.listeners": f"SASL_PLAINTEXT://{host}:{port}",
            "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,"
            "CONTROLLER:SASL_PLAINTEXT",
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
            "listener.name.controller.plain.sasl.jaas.config": jaas,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
        }
    )
    server.start()
    yield Target("kafka", host, port, 1)
    server.stop()


@pytest.fixture(
    scope="module", params=["chronolog", pytest.param("kafka", marks=pytest.mark.kafka_oracle)]
)
def target(request) -> Target:
    return request.getfixturevalue(request.param)


def _wait(futures: dict, timeout: float = 30) -> None:
    for future in futures.values():
        future.result(timeout)


def topic_acl(topic: str, principal: str, op: AclOperation, permission: AclPermissionType):
    return AclBinding(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*", op, permission
    )


def denied_topic(target: Target, prefix: str) -> str:
    """A topic of PARTITIONS partitions holding one record each, which alice may DESCRIBE and
    no one may READ (0119_consumer_auth's ACL; the super user is exempt)."""
    topic = topic_name(prefix)
    admin = target.admin()
    _wait(admin.create_topics([NewTopic(topic, PARTITIONS, 1)]))
    producer = Producer(target.conf("admin"))
    for p in range(PARTITIONS):
        producer.produce(topic, f"secret-{p}".encode(), partition=p)
    assert producer.flush(30) == 0
    _wait(
        admin.create_acls(
            [
                topic_acl(topic, "User:alice", AclOperation.DESCRIBE, AclPermissionType.ALLOW),
                topic_acl(topic, "User:*", AclOperation.READ, AclPermissionType.DENY),
            ]
        )
    )
    return topic


def test_denied_consumer_sees_topic_authorization_failed(target):
    """librdkafka 0119_consumer_auth: every partition reports TOPIC_AUTHORIZATION_FAILED."""
    topic = denied_topic(target, "denied-ck")
    consumer = Consumer(
        {**target.conf("alice"), "group.id": f"g-{topic}", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        errored: dict[int, int] = {}
        values = []
        deadline = time.monotonic() + 30
        while len(errored) < PARTITIONS and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error() is None:
                values.append(msg.value())
            else:
                errored[msg.partition()] = msg.error().code()
        assert errored == {p: KafkaError.TOPIC_AUTHORIZATION_FAILED for p in range(PARTITIONS)}
        assert values == []
    finally:
        consumer.close()


@pytest.mark.kafka_oracle  # Kafka's Java client, on both brokers
def test_denied_java_consumer_sees_topic_authorization_failed(target):
    topic = denied_topic(target, "denied-java")
    with JavaClients(target.bootstrap) as java:
        with pytest.raises(JavaClientError) as refused:
            java.call(
                "read_partition", topic=topic, partition=0, config=target.java_config("alice")
            )
    assert refused.value.error == "org.apache.kafka.common.errors.TopicAuthorizationException"
    assert topic in refused.value.message


def transactional_id_acl(name: str, principal: str, op: AclOperation) -> AclBinding:
    return AclBinding(
        ResourceType.TRANSACTIONAL_ID,
        name,
        ResourcePatternType.LITERAL,
        principal,
        "*",
        op,
        AclPermissionType.ALLOW,
    )


def _transaction_errors(target: Target, transactional_id: str, topic: str) -> tuple:
    """alice's transaction of one record to ``topic``: () when committed, else the codes of the
    error that ended it and of the abort that followed (None: aborted cleanly)."""
    producer = Producer(
        {**target.conf("alice"), "transactional.id": transactional_id, "message.timeout.ms": 10000}
    )
    # confluent-kafka's exceptions keep their tracebacks out of the garbage collector's sight:
    # a traceback kept anywhere keeps these frames, and the clients they hold, alive and
    # reconnecting to the stopped broker for the rest of the run. So each is dropped at once.
    try:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, b"in-a-transaction")
        try:
            producer.commit_transaction(30)
            return ()
        except KafkaException as exc:
            exc.__traceback__ = None
            failed = exc.args[0].code()
        try:
            producer.abort_transaction(30)
            return failed, None
        except KafkaException as abort:
            abort.__traceback__ = abort.__context__ = None
            return failed, abort.args[0].code()
    finally:
        del producer


def test_transactions_under_acls(target):
    """KafkaApis' transaction rules: with WRITE on its transactional id and on the topic alice's
    transaction commits; without WRITE on the topic it ends TOPIC_AUTHORIZATION_FAILED (from
    AddPartitionsToTxn, the same on both brokers) and nothing is stored; without WRITE on the transactional id
    InitProducerId answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""
    topic, closed = topic_name("txn-open"), topic_name("txn-closed")
    admin = target.admin()
    _wait(admin.create_topics([NewTopic(topic, 1, 1), NewTopic(closed, 1, 1)]))
    tid = f"txn-{topic}"
    _wait(
        admin.create_acls(
            [
                transactional_id_acl(tid, "User:alice", AclOperation.WRITE),
                transactional_id_acl(tid, "User:alice", AclOperation.DESCRIBE),
                topic_acl(topic, "User:alice", AclOperation.WRITE, AclPermissionType.ALLOW),
                topic_acl(closed, "User:alice", AclOperation.DESCRIBE, AclPermissionType.ALLOW),
            ]
        )
    )
    assert _transaction_errors(target, tid, topic) == ()
    # librdkafka 2.16 then aborts a transaction the coordinator never began: Kafka 4.1 answers
    # that EndTxn INVALID_TXN_STATE, and so does chronolog
    assert _transaction_errors(target, tid, closed) == (
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.INVALID_TXN_STATE,
    )
    refused_producer = Producer({**target.conf("alice"), "transactional.id": f"other-{tid}"})
    with pytest.raises(KafkaException) as refused:
        refused_producer.init_transactions(30)
    code = refused.value.args[0].code()
    del refused_producer, refused  # see _transaction_errors
    assert code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    with target.wire("admin") as client:
        body = {
            "replica_id": -1,
            "isolation_level": 1,
            "topics": [
                {"name": n, "partitions": [{"partition_index": 0, "timestamp": -1}]}
                for n in (topic, closed)
            ],
        }
        answer = client.call(ApiKey.LIST_OFFSETS, 7, body)
    # the committed record and its marker; nothing in the closed topic
    assert {t.name: t.partitions[0].offset for t in answer.topics} == {topic: 2, closed: 0}


def _described(target: Target, name: str, until: str, timeout: float = 15.0) -> ConfigEntry:
    """The broker's DescribeConfigs entry for ``name`` once its value is ``until`` (Kafka
    applies a change when its metadata log reaches the broker), or the last one seen."""
    resource = ConfigResource(ResourceType.BROKER, str(target.broker_id))
    deadline = time.monotonic() + timeout
    while True:
        (described,) = target.admin().describe_configs([resource]).values()
        entry: ConfigEntry = described.result(30)[name]
        if entry.value == until or time.monotonic() > deadline:
            return entry
        time.sleep(0.1)


def _alter_error(futures: dict) -> int | None:
    """The KafkaError code of a single-resource AlterConfigs answer (None: accepted)."""
    (future,) = futures.values()
    try:
        future.result(30)
    except KafkaException as exc:
        code: int = exc.args[0].code()
        return code
    return None


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_alter_configs_of_a_kafka_broker_property(target):
    """librdkafka 0081_admin do_test_AlterConfigs: the per-broker property is accepted, both
    ways, and described from the dynamic layer; Kafka's refusals keep Kafka's codes."""
    admin = target.admin()
    broker = str(target.broker_id)
    legacy = ConfigResource(ResourceType.BROKER, broker, set_config={RELOGIN: "58000"})
    assert _alter_error(admin.alter_configs([legacy])) is None
    incremental = ConfigResource(
        ResourceType.BROKER,
        broker,
        incremental_configs=[
            ConfigEntry(RELOGIN, "59000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    assert _alter_error(admin.incremental_alter_configs([incremental])) is None
    entry = _described(target, RELOGIN, until="59000")
    assert (entry.value, entry.source, entry.is_read_only) == (
        "59000",
        ConfigSource.DYNAMIC_BROKER_CONFIG.value,
        False,
    )

    def refused(name: str, value: str | None, resource: str = broker, operation: int = 0) -> int:
        """IncrementalAlterConfigs v1 on the wire (librdkafka refuses the cluster-wide "")."""
        change = {"name": name, "config_operation": operation, "value": value}
        body = {
            "resources": [{"resource_type": 4, "resource_name": resource, "configs": [change]}],
            "validate_only": False,
        }
        with target.wire("admin") as client:
            code: int = (
                client.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body).responses[0].error_code
            )
        return code

    # per-broker at the cluster-wide level, a read-only property, a store without a listener
    assert refused(RELOGIN, "58000", resource="") == KafkaError.INVALID_REQUEST
    assert refused("broker.heartbeat.interval.ms", "3000") == KafkaError.INVALID_REQUEST
    assert refused("ssl.truststore.certificates", "x") == KafkaError.INVALID_REQUEST
    # a cluster-wide property Kafka defines and chronolog does not act on: set, then deleted
    assert refused("background.threads", "9", resource="") == 0
    assert refused("background.threads", None, resource="", operation=1) == 0


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_librdkafka_0081_alter_configs(target):
    """librdkafka 0081_admin do_test_AlterConfigs, its three resources in one request: a valid
    topic change, the broker's sasl.kerberos.min.time.before.relogin, and a topic that does not
    exist, with the codes that test expects from chronolog."""
    topic = topic_name("0081")
    _wait(target.admin().create_topics([NewTopic(topic, 1, 1)]))
    resources = [
        ConfigResource(
            ResourceType.TOPIC,
            topic,
            set_config={"compression.type": "gzip", "flush.ms": "12345678"},
        ),
        ConfigResource(ResourceType.BROKER, str(target.broker_id), set_config={RELOGIN: "58000"}),
        ConfigResource(
            ResourceType.TOPIC,
            topic_name("0081-missing"),
            set_config={"compression.type": "lz4", "offset.metadata.max.bytes": "12345"},
        ),
    ]
    futures = target.admin().alter_configs(resources)
    errors = [_alter_error({r: futures[r]}) for r in resources]
    # 0081 expects UNKNOWN_TOPIC_OR_PART for the missing topic (brokers >= 2.7), as chronolog
    # and Kafka 3.9 answer; Kafka 4.1's controller checks the config names first and answers
    # INVALID_CONFIG (offset.metadata.max.bytes is no topic config), failing that check
    missing = (
        KafkaError.INVALID_CONFIG if target.name == "kafka" else KafkaError.UNKNOWN_TOPIC_OR_PART
    )
    assert errors == [None, None, missing]


# -- the differential suite ----------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """One raw request: ``body(ctx)`` built from what differs between the brokers (topic
    names and ids), sent by ``user``."""

    name: str
    api: ApiKey
    version: int
    user: str
    body: Callable[[dict], dict]


def _fetch(
    topic_key: str,
    partitions=range(PARTITIONS),
    offset: int = 0,
    epoch: int = -1,
    isolation: int = 0,
):
    def body(ctx: dict) -> dict:
        topic = ctx[topic_key]
        return {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": isolation,
            "topics": [
                {
                    "topic": topic,
                    "topic_id": ctx["ids"].get(topic, uuid.UUID(int=7)),
                    "partitions": [
                        {
                            "partition": p,
                            "current_leader_epoch": epoch,
                            "fetch_offset": offset,
                            "log_start_offset": -1,
                            "partition_max_bytes": 1 << 20,
                        }
                        for p in partitions
                    ],
                }
            ],
        }

    return body


FETCH_VERSIONS = (4, 7, 11, 12, 13, 15, 16, 17)
SCENARIOS = [
    *(
        Scenario(f"fetch-denied-v{v}", ApiKey.FETCH, v, "alice", _fetch("denied"))
        for v in FETCH_VERSIONS
    ),
    *(
        Scenario(f"fetch-unknown-topic-v{v}", ApiKey.FETCH, v, "admin", _fetch("missing"))
        for v in (4, 12, 13, 17)
    ),
    Scenario("fetch-unknown-partition-v12", ApiKey.FETCH, 12, "admin", _fetch("open", [7])),
    Scenario("fetch-unknown-partition-v17", ApiKey.FETCH, 17, "admin", _fetch("open", [7])),
    Scenario("fetch-out-of-range-v12", ApiKey.FETCH, 12, "admin", _fetch("open", [0], offset=1000)),
    Scenario("fetch-out-of-range-v17", ApiKey.FETCH, 17, "admin", _fetch("open", [0], offset=1000)),
    Scenario(
        "fetch-out-of-range-read-committed-v12",
        ApiKey.FETCH,
        12,
        "admin",
        _fetch("open", [0], offset=1000, isolation=1),
    ),
    Scenario(
        "fetch-unknown-partition-read-committed-v12",
        ApiKey.FETCH,
        12,
        "admin",
        _fetch("open", [7], isolation=1),
    ),
    Scenario("fetch-unknown-epoch-v12", ApiKey.FETCH, 12, "admin", _fetch("open", [0], epoch=5)),
    Scenario(
        "list-offsets-denied-v7",
        ApiKey.LIST_OFFSETS,
        7,
        "alice",
        lambda ctx: {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {"name": ctx["open"], "partitions": [{"partition_index": 0, "timestamp": -1}]}
            ],
        },
    ),
    Scenario(
        "metadata-denied-v12",
        ApiKey.METADATA,
        12,
        "alice",
        lambda ctx: {
            "topics": [{"name": ctx["open"], "topic_id": uuid.UUID(int=0)}],
            "allow_auto_topic_creation": False,
        },
    ),  # fmt: skip
    Scenario(
        "create-topics-denied-v7",
        ApiKey.CREATE_TOPICS,
        7,
        "alice",
        lambda ctx: {
            "topics": [
                {
                    "name": ctx["fresh"],
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout_ms": 10000,
            "validate_only": False,
        },
    ),  # fmt: skip
    Scenario(
        "describe-configs-denied-v4",
        ApiKey.DESCRIBE_CONFIGS,
        4,
        "alice",
        lambda ctx: {
            "resources": [
                {"resource_type": 2, "resource_name": ctx["open"], "configuration_keys": None},
                {
                    "resource_type": 4,
                    "resource_name": str(ctx["broker_id"]),
                    "configuration_keys": None,
                },
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
    ),  # fmt: skip
    Scenario(
        "alter-configs-relogin-v2",
        ApiKey.ALTER_CONFIGS,
        2,
        "admin",
        lambda ctx: {
            "resources": [
                {
                    "resource_type": 4,
                    "resource_name": str(ctx["broker_id"]),
                    "configs": [{"name": RELOGIN, "value": "58000"}],
                }
            ],
            "validate_only": True,
        },
    ),  # fmt: skip
    Scenario(
        "alter-configs-denied-v2",
        ApiKey.ALTER_CONFIGS,
        2,
        "alice",
        lambda ctx: {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": ctx["open"],
                    "configs": [{"name": "retention.ms", "value": "1000"}],
                },
                {
                    "resource_type": 4,
                    "resource_name": str(ctx["broker_id"]),
                    "configs": [{"name": RELOGIN, "value": "58000"}],
                },
            ],
            "validate_only": True,
        },
    ),  # fmt: skip
    Scenario(
        "incremental-alter-configs-denied-v1",
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        "alice",
        lambda ctx: {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": ctx["open"],
                    "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1000"}],
                }
            ],
            "validate_only": True,
        },
    ),  # fmt: skip
]

GROUP = "diff-group"  # alice may not touch it (no ACL); the same name on both brokers
BATCH = build_batch(BatchSpec(), [(0, int(time.time() * 1000), None, b"refused", [])])


def _topic_partitions(key: str, index: str = "partition_indexes") -> Callable[[dict], list]:
    return lambda ctx: [{"name": ctx[key], index: [0]}]


def _scenario(name: str, api: ApiKey, version: int, body: Callable[[dict], dict]) -> Scenario:
    """A request alice sends."""
    return Scenario(name, api, version, "alice", body)


# Every other response with nullable fields, refused (KafkaApis' error answers).
REFUSALS = [
    *(
        _scenario(
            f"produce-denied-v{v}",
            ApiKey.PRODUCE,
            v,
            lambda ctx: {
                "transactional_id": None,
                "acks": -1,
                "timeout_ms": 10000,
                "topic_data": [
                    {"name": ctx["open"], "partition_data": [{"index": 0, "records": BATCH}]}
                ],
            },
        )
        for v in (3, 8, 9, 11)
    ),
    _scenario(
        "offset-fetch-denied-v7",
        ApiKey.OFFSET_FETCH,
        7,
        lambda ctx: {"group_id": GROUP, "topics": _topic_partitions("open")(ctx)},
    ),
    _scenario(
        "offset-fetch-denied-v8",
        ApiKey.OFFSET_FETCH,
        8,
        lambda ctx: {"groups": [{"group_id": GROUP, "topics": _topic_partitions("open")(ctx)}]},
    ),
    _scenario(
        "find-coordinator-denied-v3",
        ApiKey.FIND_COORDINATOR,
        3,
        lambda ctx: {"key": GROUP, "key_type": 0},
    ),  # fmt: skip
    _scenario(
        "find-coordinator-denied-v4",
        ApiKey.FIND_COORDINATOR,
        4,
        lambda ctx: {"key_type": 0, "coordinator_keys": [GROUP]},
    ),  # fmt: skip
    *(
        _scenario(
            f"join-group-denied-v{v}",
            ApiKey.JOIN_GROUP,
            v,
            lambda ctx: {
                "group_id": GROUP,
                "session_timeout_ms": 10000,
                "rebalance_timeout_ms": 10000,
                "member_id": "",
                "group_instance_id": None,
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}],
            },
        )
        for v in (5, 7, 9)
    ),
    _scenario(
        "sync-group-denied-v5",
        ApiKey.SYNC_GROUP,
        5,
        lambda ctx: {
            "group_id": GROUP,
            "generation_id": 1,
            "member_id": "m",
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [],
        },
    ),  # fmt: skip
    _scenario(
        "describe-groups-denied-v5",
        ApiKey.DESCRIBE_GROUPS,
        5,
        lambda ctx: {"groups": [GROUP], "include_authorized_operations": True},
    ),  # fmt: skip
    _scenario(
        "offset-commit-denied-v8",
        ApiKey.OFFSET_COMMIT,
        8,
        lambda ctx: {
            "group_id": GROUP,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "topics": [
                {
                    "name": ctx["open"],
                    "partitions": [
                        {"partition_index": 0, "committed_offset": 1, "committed_metadata": None}
                    ],
                }
            ],
        },
    ),  # fmt: skip
    _scenario(
        "delete-topics-denied-v5",
        ApiKey.DELETE_TOPICS,
        5,
        lambda ctx: {"topic_names": [ctx["open"]], "timeout_ms": 10000},
    ),  # fmt: skip
    _scenario(
        "delete-topics-denied-v6",
        ApiKey.DELETE_TOPICS,
        6,
        lambda ctx: {
            "topics": [{"name": ctx["open"], "topic_id": uuid.UUID(int=0)}],
            "timeout_ms": 10000,
        },
    ),  # fmt: skip
    _scenario(
        "create-partitions-denied-v3",
        ApiKey.CREATE_PARTITIONS,
        3,
        lambda ctx: {
            "topics": [{"name": ctx["open"], "count": 5, "assignments": None}],
            "timeout_ms": 10000,
            "validate_only": True,
        },
    ),  # fmt: skip
    _scenario(
        "delete-records-denied-v2",
        ApiKey.DELETE_RECORDS,
        2,
        lambda ctx: {
            "topics": [{"name": ctx["open"], "partitions": [{"partition_index": 0, "offset": 1}]}],
            "timeout_ms": 10000,
        },
    ),  # fmt: skip
    _scenario(
        "describe-acls-denied-v3",
        ApiKey.DESCRIBE_ACLS,
        3,
        lambda ctx: {
            "resource_type_filter": 1,
            "resource_name_filter": None,
            "pattern_type_filter": 1,
            "principal_filter": None,
            "host_filter": None,
            "operation": 1,
            "permission_type": 1,
        },
    ),  # fmt: skip
    _scenario(
        "describe-producers-denied-v0",
        ApiKey.DESCRIBE_PRODUCERS,
        0,
        lambda ctx: {"topics": _topic_partitions("denied")(ctx)},
    ),
    _scenario(
        "create-acls-denied-v3",
        ApiKey.CREATE_ACLS,
        3,
        lambda ctx: {
            "creations": [
                {
                    "resource_type": 2,
                    "resource_name": ctx["open"],
                    "resource_pattern_type": 3,
                    "principal": "User:alice",
                    "host": "*",
                    "operation": 3,
                    "permission_type": 3,
                }
            ]
        },
    ),
    _scenario(
        "delete-acls-denied-v3",
        ApiKey.DELETE_ACLS,
        3,
        lambda ctx: {
            "filters": [
                {
                    "resource_type_filter": 2,
                    "resource_name_filter": ctx["open"],
                    "pattern_type_filter": 3,
                    "principal_filter": None,
                    "host_filter": None,
                    "operation": 1,
                    "permission_type": 1,
                }
            ]
        },
    ),
    _scenario(
        "elect-leaders-denied-v2",
        ApiKey.ELECT_LEADERS,
        2,
        lambda ctx: {
            "election_type": 0,
            "timeout_ms": 10000,
            "topic_partitions": [{"topic": ctx["open"], "partitions": [0]}],
        },
    ),
    _scenario(
        "describe-user-scram-denied-v0",
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
        0,
        lambda ctx: {"users": [{"name": "alice"}]},
    ),
    _scenario(
        "alter-user-scram-denied-v0",
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
        0,
        lambda ctx: {"deletions": [{"name": "bob", "mechanism": 1}], "upsertions": []},
    ),
    _scenario(
        "list-reassignments-denied-v0",
        ApiKey.LIST_PARTITION_REASSIGNMENTS,
        0,
        lambda ctx: {"timeout_ms": 10000, "topics": None},
    ),
    _scenario(
        "alter-reassignments-denied-v0",
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        0,
        lambda ctx: {
            "timeout_ms": 10000,
            "topics": [
                {"name": ctx["open"], "partitions": [{"partition_index": 0, "replicas": None}]}
            ],
        },
    ),
    _scenario(
        "delete-groups-denied-v2", ApiKey.DELETE_GROUPS, 2, lambda ctx: {"groups_names": [GROUP]}
    ),
    _scenario(
        "offset-delete-denied-v0",
        ApiKey.OFFSET_DELETE,
        0,
        lambda ctx: {
            "group_id": GROUP,
            "topics": [{"name": ctx["open"], "partitions": [{"partition_index": 0}]}],
        },
    ),
    _scenario(
        "describe-log-dirs-denied-v4", ApiKey.DESCRIBE_LOG_DIRS, 4, lambda ctx: {"topics": None}
    ),
    _scenario(
        "leave-group-denied-v5",
        ApiKey.LEAVE_GROUP,
        5,
        lambda ctx: {
            "group_id": GROUP,
            "members": [{"member_id": "m", "group_instance_id": None, "reason": None}],
        },
    ),
    _scenario(
        "describe-cluster-v1",
        ApiKey.DESCRIBE_CLUSTER,
        1,
        lambda ctx: {"include_cluster_authorized_operations": True, "endpoint_type": 1},
    ),
    _scenario(
        "init-producer-id-denied-v4",
        ApiKey.INIT_PRODUCER_ID,
        4,
        lambda ctx: {
            "transactional_id": "diff-txn",
            "transaction_timeout_ms": 60000,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    ),  # fmt: skip
]
SCENARIOS += REFUSALS

_OUT_OF_RANGE = (
    "chronolog answers OFFSET_OUT_OF_RANGE with the partition's high watermark, last stable "
    "offset and log start offset, where Kafka 4.1 sends -1 (clients ignore them on this error "
    "and ask ListOffsets)"
)
DEPARTURES: dict[str, str] = {
    "fetch-out-of-range-v12": _OUT_OF_RANGE,
    "fetch-out-of-range-v17": _OUT_OF_RANGE,
    "fetch-out-of-range-read-committed-v12": _OUT_OF_RANGE,
    "fetch-unknown-epoch-v12": (
        "a single chronolog broker does not check current_leader_epoch (its partitions never "
        "change leader; brokers in a cluster do check it), where Kafka answers "
        "UNKNOWN_LEADER_EPOCH to an epoch newer than the leader's"
    ),
}
"""Scenario name -> why chronolog answers otherwise on purpose (xfail strict)."""


# Where each broker is and which cluster it is in differ; only whether they are null counts.
_NULLNESS_ONLY = ("error_message", "topic_id", "cluster_id", "rack")
# Which broker is which differs too.
_BROKER_IDS = ("node_id", "broker_id", "controller_id", "host", "port")


def _shape(value: Any) -> Any:
    """An answer reduced to what both brokers must agree on: topic ids, error texts, cluster ids
    and racks only by whether they are null, record sets by their length (None when null), no
    throttle times, broker ids, hosts or ports."""
    if isinstance(value, dict):
        return {
            k: (
                (v is None)
                if k in _NULLNESS_ONLY
                else None
                if k == "records" and v is None
                else len(v)
                if k == "records"
                else _shape(v)
            )
            for k, v in value.items()
            if k not in ("throttle_time_ms", "node_endpoints", *_BROKER_IDS)
        }
    if isinstance(value, (list, tuple)):
        return [_shape(v) for v in value]
    if isinstance(value, uuid.UUID):
        return "<uuid>"
    return value


def _context(target: Target) -> dict:
    """Per broker: a denied topic, an open one (one record a partition), a missing name and a
    fresh one, and the topic ids."""
    denied = denied_topic(target, "diff-denied")
    admin = target.admin()
    open_topic = topic_name("diff-open")
    _wait(admin.create_topics([NewTopic(open_topic, PARTITIONS, 1)]))
    producer = Producer(target.conf("admin"))
    for p in range(PARTITIONS):
        producer.produce(open_topic, b"x", partition=p)
    assert producer.flush(30) == 0
    with target.wire("admin") as client:
        listed = client.call(ApiKey.METADATA, 12, {"topics": None}).topics
    ids = {t.name: t.topic_id for t in listed}
    return {
        "denied": denied,
        "open": open_topic,
        "missing": topic_name("diff-missing"),
        "fresh": topic_name("diff-fresh"),
        "ids": ids,
        "broker_id": target.broker_id,
    }


@pytest.fixture(scope="module")
def contexts(chronolog, kafka) -> dict[str, dict]:
    return {"chronolog": _context(chronolog), "kafka": _context(kafka)}


def _answer(target: Target, ctx: dict, scenario: Scenario) -> Any:
    with target.wire(scenario.user) as client:
        body = client.call(scenario.api, scenario.version, scenario.body(ctx))
    shaped = _shape(body)
    # names differ between the brokers (topic_name is unique per call)
    text = repr(shaped)
    for key in ("denied", "open", "missing", "fresh"):
        text = text.replace(repr(ctx[key]), repr(f"<{key}>"))
    broker = f"'resource_name': {str(ctx['broker_id'])!r}"
    return text.replace(broker, "'resource_name': '<broker id>'")


@pytest.mark.kafka_oracle
@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(s, id=s.name, marks=pytest.mark.xfail(strict=True, reason=DEPARTURES[s.name]))
        if s.name in DEPARTURES
        else pytest.param(s, id=s.name)
        for s in SCENARIOS
    ],
)
def test_error_answers_match_kafka(chronolog, kafka, contexts, scenario):
    ours = _answer(chronolog, contexts["chronolog"], scenario)
    theirs = _answer(kafka, contexts["kafka"], scenario)
    assert ours == theirs


# -- config names: DescribeConfigs beside Kafka ----------------------------------------------


def _described_configs(target: Target, resource_type: int, name: str) -> dict[str, Any]:
    """DescribeConfigs v4 of one resource: {name: (value, read_only, source, type)}."""
    body = {
        "resources": [
            {"resource_type": resource_type, "resource_name": name, "configuration_keys": None}
        ],
        "include_synonyms": False,
        "include_documentation": False,
    }
    with target.wire("admin") as client:
        (result,) = client.call(ApiKey.DESCRIBE_CONFIGS, 4, body).results
    assert result.error_code == 0, result.error_message
    return {c.name: (c.value, c.read_only, c.config_source, c.config_type) for c in result.configs}


@pytest.mark.kafka_oracle
def test_failed_authentication_answers_as_kafka(chronolog, kafka):
    """SaslAuthenticate v2 with a wrong password: the same code, a text (Kafka's nullable
    error_message is set), no token and no session lifetime."""
    answers = []
    for target in (chronolog, kafka):
        with WireClient(target.host, target.port) as client:
            assert handshake(client, "PLAIN").error_code == 0
            answer = SASL.authenticate(client, b"\0alice\0wrong-password")
        answers.append(
            (
                answer.error_code,
                answer.error_message is None,
                answer.auth_bytes,
                answer.session_lifetime_ms,
            )
        )
    assert answers[0] == answers[1] == (58, False, b"", 0)  # SASL_AUTHENTICATION_FAILED


@pytest.mark.kafka_oracle
def test_topic_configs_are_described_as_kafka(chronolog, kafka):
    """Every topic config Kafka 4.1 reports is reported, and those chronolog does not act on
    with Kafka's value, flags and type (a fresh topic: every value a default)."""
    described = {}
    for target in (chronolog, kafka):
        topic = topic_name("described")
        _wait(target.admin().create_topics([NewTopic(topic, 1, 1)]))
        described[target.name] = _described_configs(target, 2, topic)
    ours, theirs = described["chronolog"], described["kafka"]
    assert set(theirs) <= set(ours)
    for name in KAFKA_ONLY_TOPIC_KEYS:
        assert ours[name] == theirs[name], name


@pytest.mark.kafka_oracle
def test_broker_configs_are_described_as_kafka(chronolog, kafka):
    """Every broker property Kafka 4.1 reports is reported; those chronolog does not act on and
    neither broker sets have Kafka's default, read-only flag and type."""
    ours = _described_configs(chronolog, 4, str(chronolog.broker_id))
    theirs = _described_configs(kafka, 4, str(kafka.broker_id))
    # each reports the listener-prefixed properties it was given (here, Kafka's JAAS configs)
    assert {n for n in theirs if not n.startswith("listener.name.")} <= set(ours)
    default = ConfigSource.DEFAULT_CONFIG.value
    compared = [n for n in KAFKA_ONLY_BROKER_KEYS if n in theirs and theirs[n][2] == default]
    assert len(compared) > 150
    # Departure (README): the key and trust stores Kafka changes under a listener prefix are
    # read-only here, as chronolog alters no listener-prefixed name.
    stores = {n for n in compared if BROKER_UPDATE_MODES[n] == "per-listener"}
    assert {n: ours[n][1] for n in stores} == {n: True for n in stores}
    assert {n: theirs[n][1] for n in stores} == {n: False for n in stores}
    same = [n for n in compared if n not in stores]
    assert {n: ours[n] for n in same} == {n: theirs[n] for n in same}
