"""Old and new clients across message formats: a Kafka 0.10.1 client (magic-1 messages, Fetch
v2) reads and writes a record-batch topic, and record-batch clients read a topic held to the
0.10 format; what is stored is in the topic's format either way."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from protocol import iter_shallow
from tests.integration.clients import KEEP_OLD_MESSAGES, create_topic, topic_name
from tests.integration.kafka_wire import WireClient, stored_records

BASE_TS = 1_700_000_000_000
OLD = (0, 10, 1)


def stored_magics(broker, topic: str) -> set[int]:
    with WireClient(broker.host, broker.port) as c:
        data = stored_records(c, topic)
    return {e.magic for e in iter_shallow(data)}


def old_consume(broker, topic: str, count: int) -> list[tuple]:
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=None, api_version=OLD, consumer_timeout_ms=2000
    )
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = [(r.offset, r.key, r.value, r.timestamp) for r in consumer][:count]
    consumer.close()
    return got


def test_old_client_on_a_record_batch_topic(broker):
    topic = topic_name("fmt-new")
    create_topic(broker.bootstrap, topic, configs=KEEP_OLD_MESSAGES)
    old = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=OLD)
    for i in range(5):
        old.send(topic, key=b"old", value=b"o%d" % i, timestamp_ms=BASE_TS + i).get(timeout=15)
    old.close()
    new = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "lz4"})
    for i in range(5):
        new.produce(
            topic,
            key=b"new",
            value=b"n%d" % i,
            timestamp=BASE_TS + 5 + i,
            headers=[("h", b"%d" % i)],
        )
    assert new.flush(15) == 0
    assert stored_magics(broker, topic) == {2}  # the old producer's sets were up-converted
    expected = [(i, b"old", b"o%d" % i, BASE_TS + i) for i in range(5)] + [
        (5 + i, b"new", b"n%d" % i, BASE_TS + 5 + i) for i in range(5)
    ]
    assert old_consume(broker, topic, 10) == expected  # down-converted for Fetch v2


def test_record_batch_clients_on_a_0_10_topic(broker):
    topic = topic_name("fmt-old")
    create_topic(
        broker.bootstrap, topic, configs={"message.format.version": "0.10.2", **KEEP_OLD_MESSAGES}
    )
    new = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "gzip"})
    for i in range(5):
        new.produce(topic, key=b"k", value=b"v%d" % i, timestamp=BASE_TS + i)
    assert new.flush(15) == 0
    with_headers = Producer({"bootstrap.servers": broker.bootstrap})
    failures = []
    with_headers.produce(
        topic, value=b"x", headers=[("h", b"1")], on_delivery=lambda err, msg: failures.append(err)
    )
    with_headers.flush(15)
    assert [f.code() for f in failures if f] == [43]  # UNSUPPORTED_FOR_MESSAGE_FORMAT
    assert stored_magics(broker, topic) == {1}
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "fmt", "enable.auto.commit": False}
    )
    consumer.assign([CTopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 5 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append((msg.offset(), msg.key(), msg.value(), msg.timestamp()[1]))
    consumer.close()
    assert got == [(i, b"k", b"v%d" % i, BASE_TS + i) for i in range(5)]
    assert old_consume(broker, topic, 5) == got
