"""Old consumers through the down-conversion path (issue #33): librdkafka produces record batches
in every codec an old format holds, some larger than 64 KiB (converted without the GIL by the C
extension, or by the Python path under `make test-pure`); kafka-python as a 0.10.1 client (magic
1) and as a 0.9 client (magic 0) reads every message back, in order, with its key, value and (at
magic 1) timestamp, across fetches that cut batches at the partition limit."""

from __future__ import annotations

import struct
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from kafka import KafkaConsumer, TopicPartition

from kafka_wire import WireClient, fetch_body
from protocol import ApiKey
from tests.integration.clients import KEEP_OLD_MESSAGES, create_topic, topic_name

BASE_TS = 1_700_000_000_000
PER_CODEC = 1500


def produced(broker, topic: str) -> list[tuple]:
    """Produce PER_CODEC messages in each codec; (offset, key, value, timestamp) of each."""
    expected = []
    for c, codec in enumerate(("none", "gzip", "snappy", "lz4")):
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "compression.type": codec,
                "linger.ms": 50,
                "batch.size": 200_000,
            }
        )
        for i in range(PER_CODEC):
            n = c * PER_CODEC + i
            key = None if i % 7 == 0 else b"key-%d" % n
            value = b"" if i % 11 == 0 else (b"%d|" % n) * (1 + i % 60)
            producer.produce(topic, key=key, value=value, timestamp=BASE_TS + n)
            expected.append((n, key, value, BASE_TS + n))
        assert producer.flush(30) == 0
    return expected


@pytest.mark.parametrize("api_version", [(0, 10, 1), (0, 9)], ids=["magic1", "magic0"])
def test_an_old_consumer_reads_every_message_of_every_codec(broker, api_version):
    topic = topic_name("old-conv")
    create_topic(broker.bootstrap, topic, configs=KEEP_OLD_MESSAGES)
    expected = produced(broker, topic)
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=None,
        api_version=api_version,
        max_partition_fetch_bytes=300_000,  # fetches end inside batches: partial last entries
        consumer_timeout_ms=5000,
    )
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = []
    for r in consumer:
        got.append((r.offset, r.key, r.value, r.timestamp))
        if len(got) == len(expected):
            break
    consumer.close()
    if api_version == (0, 9):  # magic 0: no timestamps
        expected = [(o, k, v, -1) for o, k, v, _ in expected]
        got = [(o, k, v, -1 if ts is None else ts) for o, k, v, ts in got]
    assert got == expected


@pytest.mark.parametrize("client", ["kafka-python", "librdkafka"])
def test_answers_converted_smaller_than_stored_are_read_to_the_end(broker, client):
    """Record headers are dropped by the conversion, so each answer's converted messages are far
    fewer bytes than the batches stored: the lazy conversion (KIP-283) fills the rest of the
    announced size with Kafka's overflow message, which a real old reader takes for a partial
    message and fetches on from. Both read every message, in order."""
    topic = topic_name("old-conv-headers")
    create_topic(broker.bootstrap, topic, configs=KEEP_OLD_MESSAGES)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "batch.size": 400_000}
    )
    expected = []
    for n in range(3000):
        producer.produce(
            topic, key=b"k%d" % n, value=b"v%d" % n, timestamp=BASE_TS + n,
            headers=[("trace", b"t" * 1000)],
        )  # fmt: skip
        expected.append((n, b"k%d" % n, b"v%d" % n))
    assert producer.flush(30) == 0
    assert _ends_with_overflow(broker, topic)
    got = []
    if client == "kafka-python":
        consumer = KafkaConsumer(
            bootstrap_servers=broker.bootstrap,
            group_id=None,
            api_version=(0, 10, 1),  # Fetch v3: magic 1
            max_partition_fetch_bytes=1_000_000,
            consumer_timeout_ms=5000,
        )
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        for r in consumer:
            got.append((r.offset, r.key, r.value))
            if len(got) == len(expected):
                break
        consumer.close()
    else:
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": topic,
                "api.version.request": False,
                "broker.version.fallback": "0.10.0",  # Fetch v2: magic 1
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "max.partition.fetch.bytes": 1_000_000,
            }
        )
        consumer.assign([ConfluentPartition(topic, 0, 0)])
        deadline = time.monotonic() + 60
        while len(got) < len(expected) and time.monotonic() < deadline:
            m = consumer.poll(1.0)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append((m.offset(), m.key(), m.value()))
        consumer.close()
    assert got == expected


def _ends_with_overflow(broker, topic: str) -> bool:
    """A raw Fetch v2 answer of the topic's first megabyte: whole converted messages, then
    Kafka's overflow message (offset -1, a size past the answer's end) filling the rest."""
    body = fetch_body(topic, 0, 0, 1_000_000)  # v2 ignores its max_bytes (v3+)
    host, port = broker.bootstrap.split(":")
    with WireClient(host, int(port)) as conn:
        answer = conn.call(ApiKey.FETCH, 2, body)
    raw = answer.responses[0].partitions[0].records
    position = 0
    while position + 12 <= len(raw):
        offset, size = struct.unpack_from(">qi", raw, position)
        if offset == -1:
            return position > 0 and size > len(raw) - position - 12
        position += 12 + size
    return False
