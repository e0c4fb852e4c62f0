"""Against the compose file's broker-secure service (docker/docker-compose.yml): SASL_SSL with
SCRAM-SHA-512 as the user "runner", whose random password and the CA the broker's entrypoint
made at start are in CHRONOLOG_TLS_DIR. kafka-python, confluent-kafka and kcat produce,
consume and commit; a wrong password and an untrusted connection are refused. Skipped unless
CHRONOLOG_SECURE_BOOTSTRAP names that broker."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
from itertools import islice
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

from clients import ck_poll_values, topic_name

BOOTSTRAP = os.environ.get("CHRONOLOG_SECURE_BOOTSTRAP")
pytestmark = pytest.mark.skipif(
    not BOOTSTRAP, reason="needs the compose file's broker-secure (CHRONOLOG_SECURE_BOOTSTRAP)"
)
TLS_DIR = Path(os.environ.get("CHRONOLOG_TLS_DIR", "/tls"))


@pytest.fixture(scope="module")
def credentials() -> dict:
    return {
        "ca": str(TLS_DIR / "ca.pem"),
        "password": (TLS_DIR / "runner.password").read_text().strip(),
    }


def test_kafka_python_over_sasl_ssl(credentials):
    settings = dict(
        bootstrap_servers=BOOTSTRAP,
        security_protocol="SASL_SSL",
        ssl_cafile=credentials["ca"],
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="runner",
        sasl_plain_password=credentials["password"],
    )
    topic, group = topic_name("compose-sec"), topic_name("compose-group")
    producer = KafkaProducer(**settings)
    for i in range(10):
        producer.send(topic, b"m%d" % i)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=15000,
        **settings,
    )
    got = [message.value for message in islice(consumer, 10)]
    consumer.commit()
    assert consumer.committed(TopicPartition(topic, 0)) == 10
    consumer.close()
    assert got == [b"m%d" % i for i in range(10)]


def test_confluent_kafka_and_kcat_over_sasl_ssl(credentials):
    conf = {
        "bootstrap.servers": BOOTSTRAP,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": credentials["ca"],
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "runner",
        "sasl.password": credentials["password"],
    }
    topic = topic_name("compose-ck")
    producer = Producer(conf)
    for i in range(5):
        producer.produce(topic, b"c%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": topic_name("g"), "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = ck_poll_values(consumer, 5)
    consumer.close()
    assert got == [b"c%d" % i for i in range(5)]
    options = [arg for key, value in conf.items() for arg in ("-X", f"{key}={value}")]
    consumed = subprocess.run(
        ["kcat", *options, "-C", "-t", topic, "-e", "-o", "beginning"],
        capture_output=True,
        check=True,
        timeout=60,
    )
    assert consumed.stdout.split() == got


def test_wrong_password_and_untrusted_connections_are_refused(credentials):
    with pytest.raises(KafkaError):
        KafkaProducer(
            bootstrap_servers=BOOTSTRAP,
            security_protocol="SASL_SSL",
            ssl_cafile=credentials["ca"],
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username="runner",
            sasl_plain_password="not-" + credentials["password"],
            request_timeout_ms=5000,
            max_block_ms=5000,
        )
    host, port = BOOTSTRAP.rsplit(":", 1)
    context = ssl.create_default_context()  # the system CAs: the compose CA is not among them
    with pytest.raises(ssl.SSLError):
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            context.wrap_socket(raw, server_hostname=host)
