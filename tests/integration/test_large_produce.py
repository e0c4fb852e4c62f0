"""Produce requests of several megabytes, which the broker decodes without copying their records
(protocol/connection.py hands a large frame's receive buffer over to its request), pipelined
with small ones on the same connection: every record comes back byte for byte, in order."""

from __future__ import annotations

import os

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.clients import create_topic, topic_name

BIG = 8 << 20


def test_multi_megabyte_records_between_small_ones_come_back_intact(broker_factory):
    broker = broker_factory(message_max_bytes=3 * BIG, socket_request_max_bytes=4 * BIG)
    values = [
        os.urandom(100),
        os.urandom(BIG),  # one record, one frame of 8 MiB
        os.urandom(200),
        os.urandom(3 << 20) + b"\x00" * (2 << 20),  # compresses, a frame of ~3 MiB
        os.urandom(300),
    ]
    for codec in ("none", "lz4"):
        topic = topic_name(f"large-{codec}")
        create_topic(broker.bootstrap, topic, configs={"max.message.bytes": str(3 * BIG)})
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "message.max.bytes": 3 * BIG,
                "compression.codec": codec,
                "linger.ms": 0,
                "max.in.flight": 5,  # the small ones pipelined behind the big ones
            }
        )
        for v in values:
            producer.produce(topic, v)
        assert producer.flush(60) == 0
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": topic,
                "fetch.max.bytes": 4 * BIG,
                "max.partition.fetch.bytes": 4 * BIG,
                "receive.message.max.bytes": 5 * BIG,
                "enable.auto.commit": False,
            }
        )
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        try:
            for _ in range(60):
                message = consumer.poll(1.0)
                if message is not None:
                    assert message.error() is None, message.error()
                    got.append(message.value())
                if len(got) == len(values):
                    break
        finally:
            consumer.close()
        assert [len(v) for v in got] == [len(v) for v in values]
        assert got == values
