"""Client quotas on a real broker: set with ``chronolog quotas`` and with Kafka 4.1.1's own
kafka-configs tool, read back by both, kept across a restart, and enforced: a confluent-kafka
producer over its producer_byte_rate and a consumer over its consumer_byte_rate are held to
them (librdkafka's statistics report the throttle, the broker's metrics show it per client id),
Kafka's Java producer reports the throttle, a client over its request_percentage is muted,
user quotas follow the SASL principal, and the answers equal Kafka 4.1.1's.

Costs: the producer test produces for 20 s (about 25 s with the broker's start), the consumer
test reads for 10 s (15 s), the Java producer test about 12 s, the kafka-configs test starts
five JVMs (about 15 s), the others a few seconds: about 80 s in all."""

from __future__ import annotations

import json
import re
import time
import urllib.request
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from client import BrokerConnection
from clients import chronolog_quotas, create_topic, topic_name
from protocol import ApiKey
from security_helpers import PLAIN_JAAS, SecureBroker, local_brokers_only
from tests.integration.kafka_wire import WireClient, message_set
from tests.integration.kafka_wire import create_topic as wire_create_topic
from tests.oracle.kafka_oracle import CONFIG_COMMAND, kafka_oracle, run_kafka_tool

pytestmark = local_brokers_only
__all__ = ["kafka_oracle"]  # the fixture, for test_quota_answers_equal_kafkas

RATE = 400_000  # producer_byte_rate of the throttle test, bytes per second
WINDOW_S = 20.0  # the throttle test's measurement


def test_quotas_set_and_described_survive_a_restart(broker_factory):
    broker = broker_factory()
    assert (
        chronolog_quotas(
            broker.bootstrap,
            "alter",
            "--user",
            "alice@example.com",
            "--add-config",
            "producer_byte_rate=1048576,request_percentage=12.5",
        )
        == "Completed updating quotas for user 'alice@example.com'."
    )
    chronolog_quotas(
        broker.bootstrap, "alter", "--client-default", "--add-config", "consumer_byte_rate=2048"
    )
    broker.restart()
    assert chronolog_quotas(broker.bootstrap, "describe").splitlines() == [
        "Quota configs for client-id <default> are consumer_byte_rate=2048",
        "Quota configs for user 'alice@example.com' are producer_byte_rate=1048576, "
        "request_percentage=12.5",
    ]
    with open(f"{broker.log_dir}/chronolog-client-quotas.json") as f:
        assert json.load(f)["entities"]["users/alice%40example.com"] == {
            "producer_byte_rate": "1048576",
            "request_percentage": "12.5",
        }
    with BrokerConnection(broker.host, broker.port, client_id="quota-test", timeout_s=15) as c:
        refused = c.call(
            ApiKey.ALTER_CLIENT_QUOTAS,
            0,
            {
                "entries": [
                    {
                        "entity": [{"entity_type": "client-id", "entity_name": "app"}],
                        "ops": [{"key": "producer_byte_rate", "value": 10.5, "remove": False}],
                    }
                ],
                "validate_only": False,
            },
        )
        assert [(e.error_code, e.error_message) for e in refused.entries] == [
            (42, "Configuration producer_byte_rate must be a LONG value")
        ]


@pytest.mark.kafka_oracle
def test_kafka_configs_sets_and_reads_quotas(broker_factory):
    """Kafka 4.1.1's kafka-configs.sh (ConfigCommand) against chronolog, as an operator runs it."""
    broker = broker_factory()

    def kafka_configs(*args: str) -> str:
        return run_kafka_tool(
            CONFIG_COMMAND, "--bootstrap-server", broker.bootstrap, *args
        ).stdout.strip()

    assert (
        kafka_configs(
            "--alter",
            "--add-config",
            "producer_byte_rate=1024,consumer_byte_rate=2048",
            "--entity-type",
            "users",
            "--entity-name",
            "alice",
        )
        == "Completed updating config for user alice."
    )
    kafka_configs(
        "--alter",
        "--add-config",
        "request_percentage=50",
        "--entity-type",
        "users",
        "--entity-default",
        "--entity-type",
        "clients",
        "--entity-name",
        "app",
    )
    assert kafka_configs("--describe", "--entity-type", "users", "--entity-name", "alice") == (
        "Quota configs for user-principal 'alice' are consumer_byte_rate=2048.0, "
        "producer_byte_rate=1024.0"
    )
    assert kafka_configs(
        "--describe",
        "--entity-type",
        "users",
        "--entity-default",
        "--entity-type",
        "clients",
        "--entity-name",
        "app",
    ) == (
        "Quota configs for the default user-principal, client-id 'app' are request_percentage=50.0"
    )
    kafka_configs(
        "--alter",
        "--delete-config",
        "consumer_byte_rate",
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
    )
    # chronolog's own tool reads what kafka-configs wrote
    assert chronolog_quotas(broker.bootstrap, "describe", "--user", "alice") == (
        "Quota configs for user 'alice' are producer_byte_rate=1024"
    )


def test_a_producer_over_its_byte_rate_is_held_to_it(broker_factory):
    """A confluent-kafka producer that could send far more is held to its client id's
    producer_byte_rate: the bytes acknowledged over 20 s are within 10 % of the quota. The
    windows are 2 x 1 s (quota.window.num=2) so the burst Kafka's rate lets through at first
    (up to num - 1 windows of quota) is a small part of 20 s; the minute-long check with
    Kafka's 11 windows is in bench/."""
    broker = broker_factory({"quota.window.num": 2, "metrics.listener": "http://127.0.0.1:0"})
    topic = topic_name("quota")
    create_topic(broker.bootstrap, topic)
    chronolog_quotas(
        broker.bootstrap,
        "alter",
        "--client-id",
        "quota-producer",
        "--add-config",
        f"producer_byte_rate={RATE}",
    )
    throttle_reports: list[int] = []

    def stats(text: str) -> None:
        for b in json.loads(text)["brokers"].values():
            throttle_reports.append(b["throttle"]["max"])

    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "client.id": "quota-producer",
            "linger.ms": 5,
            "queue.buffering.max.kbytes": 1024,  # keep only a little waiting in the client
            "statistics.interval.ms": 1000,
            "stats_cb": stats,
        }
    )
    acked: list[tuple[float, int]] = []

    failed = []

    def delivered(err, msg) -> None:
        if err is None:
            acked.append((time.monotonic(), len(msg.value())))
        elif err.code() not in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT):
            failed.append(err)

    payload = b"q" * 10_000
    deadline = None
    while deadline is None or time.monotonic() < deadline:
        try:
            producer.produce(topic, payload, on_delivery=delivered)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
        if deadline is None and acked:
            deadline = acked[0][0] + WINDOW_S
    producer.purge()  # what waits in the client is not part of the measurement
    producer.flush(30)
    assert not failed
    start = acked[0][0]
    sent = sum(size for at, size in acked if at < start + WINDOW_S)
    rate = sent / WINDOW_S
    print(f"acknowledged {rate:.0f} B/s over {WINDOW_S} s against a quota of {RATE}")
    assert 0.9 * RATE <= rate <= 1.1 * RATE, f"{rate:.0f} B/s against a quota of {RATE}"
    assert max(throttle_reports) > 0  # librdkafka saw throttle_time_ms

    with urllib.request.urlopen(broker.metrics_url(), timeout=30) as response:
        metrics = response.read().decode()
    labels = '{client_id="quota-producer",user=""}'
    assert f"kafka_server_produce_quota{labels} {float(RATE)}" in metrics
    throttled = next(
        line
        for line in metrics.splitlines()
        if line.startswith(f"kafka_server_produce_throttle_time_ms_total{labels}")
    )
    assert float(throttled.split()[-1]) > 0


def test_a_consumer_over_its_byte_rate_is_held_to_it(broker_factory):
    """A confluent-kafka consumer with a consumer_byte_rate reads the topic at about that rate
    (each Fetch answer carries what was read, then the connection is muted for the throttle
    time: broker/quotas/throttle.py's departure from Kafka's empty answer). 10 s of reading."""
    broker = broker_factory({"quota.window.num": 2})
    topic = topic_name("quota-fetch")
    create_topic(broker.bootstrap, topic)
    # one message a batch: a Fetch answer holds at least one whole batch (KIP-74), and answers
    # far larger than a second's quota make the rate jump by whole answers
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": 1}
    )
    for _ in range(600):  # 6 MB, more than 10 s at the quota
        producer.produce(topic, b"f" * 10_000)
        producer.poll(0)
    assert producer.flush(60) == 0
    rate = 200_000
    chronolog_quotas(
        broker.bootstrap,
        "alter",
        "--client-id",
        "quota-consumer",
        "--add-config",
        f"consumer_byte_rate={rate}",
    )
    throttle_reports: list[int] = []

    def stats(text: str) -> None:
        for b in json.loads(text)["brokers"].values():
            throttle_reports.append(b["throttle"]["max"])

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "client.id": "quota-consumer",
            "group.id": topic_name("quota-group"),
            "auto.offset.reset": "earliest",
            "max.partition.fetch.bytes": 100_000,  # answers small beside the quota
            "statistics.interval.ms": 1000,
            "stats_cb": stats,
        }
    )
    consumer.subscribe([topic])
    received, first = 0, None
    try:
        while first is None or time.monotonic() < first + 10:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            first = first or time.monotonic()
            received += len(msg.value())
    finally:
        consumer.close()
    measured = received / 10
    print(f"consumed {measured:.0f} B/s over 10 s against a quota of {rate}")
    # 20 % above: the rate moves by whole answers (up to 100 kB, half a second of the quota)
    assert 0.9 * rate <= measured <= 1.2 * rate, f"{measured:.0f} B/s against {rate}"
    assert max(throttle_reports) > 0


def test_request_percentage_throttles_and_mutes(broker_factory):
    """A client over a tiny request_percentage gets throttle_time_ms in its answers (Metadata
    here: any api's) and its next request waits that long: the connection was not read."""
    broker = broker_factory()
    chronolog_quotas(
        broker.bootstrap,
        "alter",
        "--client-id",
        "busy",
        "--add-config",
        "request_percentage=0.001",
    )
    with BrokerConnection(broker.host, broker.port, client_id="busy", timeout_s=30) as c:
        throttle = 0
        for _ in range(1000):
            body = c.call(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
            throttle = body.throttle_time_ms
            if throttle:
                break
        assert 0 < throttle <= 1000  # at most one window, as Kafka's request quota
        asked = time.monotonic()
        c.call(
            ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
        )
        assert time.monotonic() - asked >= throttle / 1000 / 2  # muted (less what the client took)


@pytest.mark.kafka_oracle
def test_kafkas_java_producer_reports_the_throttle(broker_factory):
    """Kafka's Java producer (kafka-clients 4.1.1, through ProducerPerformance) over its
    producer_byte_rate sees throttle_time_ms: its produce-throttle-time metrics are above 0.
    About 10 s (a JVM and 3 MB at 500 kB/s beyond the first second's worth)."""
    broker = broker_factory({"quota.window.num": 2})
    topic = topic_name("quota-java")
    create_topic(broker.bootstrap, topic)
    chronolog_quotas(
        broker.bootstrap,
        "alter",
        "--client-id",
        "java-producer",
        "--add-config",
        "producer_byte_rate=500000",
    )
    done = run_kafka_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic",
        topic,
        "--num-records",
        "300",
        "--record-size",
        "10000",
        "--throughput",
        "-1",
        "--print-metrics",
        "--producer-props",
        f"bootstrap.servers={broker.bootstrap}",
        "client.id=java-producer",
    )
    reported = {}
    for name in ("produce-throttle-time-avg", "produce-throttle-time-max"):
        found = re.search(
            rf"producer-metrics:{name}:\{{client-id=java-producer\}}\s*:\s*([\d.]+)", done.stdout
        )
        assert found, done.stdout[-3000:]
        reported[name] = float(found.group(1))
    assert reported["produce-throttle-time-max"] > 0, reported
    assert reported["produce-throttle-time-avg"] > 0, reported


def _quota_answers(bootstrap_host: str, port: int, user: str, client: str) -> dict:
    """One scenario's AlterClientQuotas codes and DescribeClientQuotas entries, comparable."""
    entries = [
        ([("user", user)], [("producer_byte_rate", 1024.0), ("consumer_byte_rate", 2048.0)]),
        ([("user", user), ("client-id", client)], [("request_percentage", 12.5)]),
        ([("user", user), ("client-id", None)], [("producer_byte_rate", 4096.0)]),
        ([("client-id", client)], [("consumer_byte_rate", 100.0)]),
        ([("user", user + "-x")], [("producer_byte_rate", 1.5)]),
        ([("user", user + "-y")], [("no_such_quota", 1.0)]),
    ]
    body = {
        "entries": [
            {
                "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                "ops": [{"key": k, "value": v, "remove": False} for k, v in ops],
            }
            for entity, ops in entries
        ],
        "validate_only": False,
    }
    filters = {
        "user strict": ([("user", 0, user)], True),
        "user": ([("user", 0, user)], False),
        "client strict": ([("client-id", 0, client)], True),
        "user and any client": ([("user", 0, user), ("client-id", 2, None)], False),
        "user and default client": ([("user", 0, user), ("client-id", 1, None)], True),
    }
    answers: dict = {}
    with BrokerConnection(bootstrap_host, port, client_id="quota-diff", timeout_s=30) as c:
        altered = c.call(ApiKey.ALTER_CLIENT_QUOTAS, 1, body)
        # Kafka answers from a map: entries and entity parts in any order
        answers["alter"] = {
            tuple(sorted((e.entity_type, e.entity_name or "<default>") for e in entry.entity)): (
                entry.error_code
            )
            for entry in altered.entries
        }
        deadline = time.monotonic() + 30
        for name, (components, strict) in filters.items():
            request = {
                "components": [
                    {"entity_type": t, "match_type": m, "match": n} for t, m, n in components
                ],
                "strict": strict,
            }
            while True:  # KRaft applies the alteration through its metadata log
                described = c.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, request)
                found = sorted(
                    (
                        tuple(
                            sorted(
                                (e.entity_type, e.entity_name or "<default>") for e in entry.entity
                            )
                        ),
                        tuple(sorted((v.key, v.value) for v in entry["values"])),
                    )
                    for entry in described.entries or ()
                )
                if found or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            answers[name] = (described.error_code, found)
    return answers


@pytest.mark.kafka_oracle
def test_quota_answers_equal_kafkas(broker_factory, kafka_oracle):
    """The same alterations and filters against chronolog and Kafka 4.1.1 (KRaft) give the
    same error codes and the same entities with the same values."""
    broker = broker_factory()
    user, client = f"u-{uuid.uuid4().hex[:8]}", f"c-{uuid.uuid4().hex[:8]}"
    ours = _quota_answers(broker.host, broker.port, user, client)
    kafkas = _quota_answers(kafka_oracle.host, kafka_oracle.port, user, client)
    assert ours == kafkas
    assert sorted(ours["alter"].values()) == [0, 0, 0, 0, 42, 42]


def test_a_muted_connection_does_not_hold_up_the_shutdown(broker_factory):
    """A client throttled for many minutes (a 1 B/s quota) gets its answer at once with that
    throttle time; SIGTERM still shuts the broker down cleanly, without waiting out the mute."""
    broker = broker_factory()
    chronolog_quotas(
        broker.bootstrap,
        "alter",
        "--client-id",
        "wire-test",
        "--add-config",
        "producer_byte_rate=1",
    )
    with WireClient(broker.host, broker.port) as c:
        assert wire_create_topic(c, "muted") == 0
        answer = c.call(
            ApiKey.PRODUCE,
            9,
            {
                "acks": 1,
                "timeout_ms": 10000,
                "topic_data": [
                    {
                        "name": "muted",
                        "partition_data": [
                            {"index": 0, "records": message_set([b"x" * 1000], magic=2)}
                        ],
                    }
                ],
            },
        )
        assert answer.responses[0].partition_responses[0].error_code == 0
        assert answer.throttle_time_ms > 600_000  # (about 110 B/s - 1 B/s) / 1 B/s x 10 s
        assert broker.stop(timeout=30) == 0
    assert [e["event"] for e in broker.log_events("shutdown complete", since_start=True)]
    assert not broker.log_events("in-flight requests did not finish in time; cancelling them")


def test_user_quotas_follow_the_authenticated_principal(tmp_path):
    """Over SASL/PLAIN, alice's own quota applies to her and the default user's to admin: the
    broker's metrics show each user's bound and only alice throttled (metric tags as Kafka's:
    the user, no client id, once only user quotas exist)."""
    broker = SecureBroker(
        tmp_path / "sasl",
        {"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT"},
        {
            "sasl.enabled.mechanisms": "PLAIN",
            "plain.sasl.jaas.config": PLAIN_JAAS,
            "metrics.listener": "http://127.0.0.1:0",
        },
    ).start()
    try:
        plain = broker.bootstrap_for("PLAINTEXT")
        create_topic(plain, "by-user")
        chronolog_quotas(plain, "alter", "--user", "alice", "--add-config", "producer_byte_rate=10")
        chronolog_quotas(
            plain, "alter", "--user-default", "--add-config", "producer_byte_rate=1000000000"
        )
        for user, password in (("alice", "alice-plain-pw"), ("admin", "admin-plain-pw")):
            producer = Producer(
                {
                    "bootstrap.servers": broker.bootstrap_for("SASL_PLAINTEXT"),
                    "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "PLAIN",
                    "sasl.username": user,
                    "sasl.password": password,
                }
            )
            producer.produce("by-user", b"u" * 10_000)
            assert producer.flush(30) == 0
        with urllib.request.urlopen(broker.metrics_url(), timeout=30) as response:
            metrics = response.read().decode()
    finally:
        broker.stop()
    lines = dict(
        line.rsplit(" ", 1)
        for line in metrics.splitlines()
        if line.startswith("kafka_server_produce")
    )
    assert float(lines['kafka_server_produce_quota{client_id="",user="alice"}']) == 10
    assert float(lines['kafka_server_produce_quota{client_id="",user="admin"}']) == 1e9
    assert (
        float(lines['kafka_server_produce_throttle_time_ms_total{client_id="",user="alice"}']) > 0
    )
    assert (
        float(lines['kafka_server_produce_throttle_time_ms_total{client_id="",user="admin"}']) == 0
    )
