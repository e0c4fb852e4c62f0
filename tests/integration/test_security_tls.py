"""TLS listeners with real clients: SSL beside PLAINTEXT, PEM stores (an encrypted key too),
ssl.client.auth none/required with trusted, untrusted and missing client certificates,
principals from certificates, TLS 1.2+ only, Fetch over TLS (no sendfile), and Metadata
advertising the listener a client came in on."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import tempfile
from itertools import islice
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition as CkTopicPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from clients import topic_name
from kafka_wire import WireClient
from protocol import ApiKey
from security_helpers import (
    local_brokers_only,
    SecureBroker,
    kafka_python_settings,
    librdkafka_settings,
    make_pki,
    tls_properties,
    tls_wire,
    wait_for_log,
)

pytestmark = local_brokers_only

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def secure_broker(tmp_path):
    started: list[SecureBroker] = []

    def make(listeners: dict[str, str], **overrides) -> SecureBroker:
        props = {"log.dirs": str(tmp_path / f"logs{len(started)}")}
        props.update(overrides)
        broker = SecureBroker(Path(tempfile.mkdtemp(dir=tmp_path)), listeners, props)
        started.append(broker)
        return broker.start()

    yield make
    for broker in started:
        broker.stop()


def produce_consume_kafka_python(bootstrap: str, settings: dict, topic: str, count: int = 20):
    producer = KafkaProducer(bootstrap_servers=bootstrap, **settings)
    try:
        for i in range(count):
            producer.send(topic, value=b"v%d" % i, key=b"k%d" % i)
        producer.flush(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=10000, **settings
    )
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        return [message.value for message in islice(consumer, count)]
    finally:
        consumer.close()


def test_ssl_listener_beside_plaintext_with_kafka_python_and_confluent(secure_broker, pki):
    broker = secure_broker({"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}, **tls_properties(pki))
    ssl_bootstrap = broker.bootstrap_for("SSL")
    topic = topic_name("tls")
    settings = kafka_python_settings("SSL", pki)
    assert produce_consume_kafka_python(ssl_bootstrap, settings, topic) == [
        b"v%d" % i for i in range(20)
    ]

    # Metadata through the SSL listener advertises the SSL port, through PLAINTEXT its own
    with tls_wire(broker.host, broker.ports["SSL"], pki) as client:
        brokers = client.call(ApiKey.METADATA, 9, {"topics": None}).brokers
        assert [(b.host, b.port) for b in brokers] == [("127.0.0.1", broker.ports["SSL"])]
    with WireClient(broker.host, broker.ports["PLAINTEXT"]) as client:
        brokers = client.call(ApiKey.METADATA, 9, {"topics": None}).brokers
        assert [(b.host, b.port) for b in brokers] == [("127.0.0.1", broker.ports["PLAINTEXT"])]

    conf = {"bootstrap.servers": ssl_bootstrap, **librdkafka_settings("SSL", pki)}
    producer = Producer(conf)
    for i in range(10):
        producer.produce(topic, value=b"ck%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": "tls-group", "enable.auto.commit": False})
    try:
        consumer.assign([CkTopicPartition(topic, 0, 20)])
        got = []
        while len(got) < 10:
            message = consumer.poll(10)
            assert message is not None and message.error() is None, message and message.error()
            got.append(message.value())
        assert got == [b"ck%d" % i for i in range(10)]
    finally:
        consumer.close()


def test_large_fetch_over_tls_is_sent_as_bytes(secure_broker, pki):
    """Fetch answers holding more than the inline region size go through the TLS stream, not
    sendfile (which would write cleartext into the TLS connection)."""
    broker = secure_broker({"SSL": "SSL"}, **tls_properties(pki))
    bootstrap = broker.bootstrap_for("SSL")
    settings = kafka_python_settings("SSL", pki)
    topic = topic_name("tls-big")
    values = [bytes([i % 251]) * 100_000 for i in range(30)]  # 3 MB, several segments' worth
    producer = KafkaProducer(bootstrap_servers=bootstrap, max_request_size=2_000_000, **settings)
    for value in values:
        producer.send(topic, value)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        consumer_timeout_ms=10000,
        max_partition_fetch_bytes=4 << 20,
        fetch_max_bytes=8 << 20,
        **settings,
    )
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning(TopicPartition(topic, 0))
    got = [message.value for message in islice(consumer, len(values))]
    consumer.close()
    assert got == values


def test_encrypted_key_with_ssl_key_password(secure_broker, pki):
    broker = secure_broker({"SSL": "SSL"}, **tls_properties(pki, encrypted=True))
    settings = kafka_python_settings("SSL", pki)
    topic = topic_name("tls-enc")
    assert produce_consume_kafka_python(broker.bootstrap_for("SSL"), settings, topic, 3) == [
        b"v0",
        b"v1",
        b"v2",
    ]
    assert "keystore-key-pw" not in broker.log_output()
    # DescribeConfigs reports the password as Kafka does: sensitive, without its value
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_for("SSL"), **settings)
    try:
        broker0 = ConfigResource(ConfigResourceType.BROKER, "0")
        described = admin.describe_configs([broker0], config_filter="all")["broker"]["0"]
    finally:
        admin.close()
    password = described["ssl.key.password"]
    assert password["is_sensitive"] and password["value"] is None
    assert password["config_source"] == "STATIC_BROKER_CONFIG"
    assert "keystore-key-pw" not in repr(described)


def test_client_auth_required(secure_broker, pki):
    broker = secure_broker(
        {"SSL": "SSL"},
        **tls_properties(pki, client_auth="required"),
        **{"ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/U,DEFAULT"},
    )
    port = broker.ports["SSL"]
    # a trusted client certificate: served, and its principal mapped by the rules
    with tls_wire(broker.host, port, pki, (pki.client_cert, pki.client_key)) as client:
        assert client.call(ApiKey.API_VERSIONS, 0, {}).error_code == 0
    topic = topic_name("mtls")
    settings = kafka_python_settings("SSL", pki, cert=True)
    assert produce_consume_kafka_python(broker.bootstrap_for("SSL"), settings, topic, 2) == [
        b"v0",
        b"v1",
    ]
    closed = wait_for_log(broker, "connection closed", 3)
    assert {entry["principal"] for entry in closed} - {None} == {"User:ALICE@ENG"}

    # no certificate, or one from another CA: no connection
    for cert in (None, (pki.untrusted_cert, pki.untrusted_key)):
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            with tls_wire(broker.host, port, pki, cert) as client:
                client.call(ApiKey.API_VERSIONS, 0, {})
    refused = wait_for_log(broker, "TLS connection refused", 2)
    assert all(entry["listener"] == "SSL" for entry in refused)
    # confluent-kafka with the untrusted certificate gets nothing either
    conf = {
        "bootstrap.servers": broker.bootstrap_for("SSL"),
        **librdkafka_settings("SSL", pki),
        "ssl.certificate.location": pki.untrusted_cert,
        "ssl.key.location": pki.untrusted_key,
    }
    producer = Producer(conf)
    producer.produce(topic, b"nope")
    assert producer.flush(3) == 1  # still queued: never delivered


def test_client_certificate_principal_by_default_is_the_distinguished_name(secure_broker, pki):
    broker = secure_broker({"SSL": "SSL"}, **tls_properties(pki, client_auth="requested"))
    port = broker.ports["SSL"]
    with tls_wire(broker.host, port, pki, (pki.client_cert, pki.client_key)) as client:
        assert client.call(ApiKey.API_VERSIONS, 0, {}).error_code == 0
    with tls_wire(broker.host, port, pki) as client:  # requested: none given is ANONYMOUS
        assert client.call(ApiKey.API_VERSIONS, 0, {}).error_code == 0
    closed = [entry["principal"] for entry in wait_for_log(broker, "connection closed", 3)]
    assert sorted(filter(None, closed)) == ["User:ANONYMOUS", "User:CN=alice,OU=eng,O=Acme"]


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated")
def test_tls_1_1_and_plaintext_clients_are_refused(secure_broker, pki):
    broker = secure_broker({"SSL": "SSL"}, **tls_properties(pki))
    port = broker.ports["SSL"]
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(pki.ca)
    context.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises((ssl.SSLError, OSError)):
        with socket.create_connection((broker.host, port), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.recv(1)
    # a client speaking plaintext Kafka to the TLS port gets no answer, and is closed
    with WireClient(broker.host, port, timeout=5) as client:
        client.send(ApiKey.API_VERSIONS, 0, {})
        assert client.closed_by_peer()


@pytest.mark.parametrize(
    "props,status,words",
    [
        ({"ssl.keystore.type": "JKS"}, 2, "PEM"),
        ({"ssl.keystore.location": "/nonexistent/keystore.pem"}, 1, "cannot load the key"),
        ({"ssl.key.password": "wrong"}, 1, "cannot load the key"),
        ({"ssl.enabled.protocols": "TLSv1.1"}, 2, "TLSv1.2 and TLSv1.3 only"),
    ],
)
def test_bad_tls_settings_stop_the_start(pki, tmp_path, props, status, words):
    settings = {**tls_properties(pki, encrypted="ssl.key.password" in props), **props}
    cmd = [
        sys.executable,
        "-m",
        "broker",
        "serve",
        "--override",
        "listeners=SSL://127.0.0.1:0",
        "--override",
        f"log.dirs={tmp_path}",
    ]
    for key, value in settings.items():
        cmd += ["--override", f"{key}={value}"]
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == status, result.stderr
    output = result.stdout + result.stderr
    assert words in output
    assert "keystore-key-pw" not in output


def test_encrypted_key_without_its_password_stops_the_start(pki, tmp_path):
    """OpenSSL would otherwise ask for the pass phrase on the terminal and wait."""
    settings = {**tls_properties(pki), "ssl.keystore.location": pki.keystore_encrypted}
    cmd = [sys.executable, "-m", "broker", "serve", "--override", "listeners=SSL://127.0.0.1:0",
           "--override", f"log.dirs={tmp_path}"]  # fmt: skip
    for key, value in settings.items():
        cmd += ["--override", f"{key}={value}"]
    result = subprocess.run(
        cmd, cwd=REPO, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    assert result.returncode == 1
    assert "is encrypted; set ssl.key.password" in result.stdout + result.stderr
