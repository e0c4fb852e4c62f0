"""DescribeProducers v0 against a real broker: the idempotent producer librdkafka registered
(its id from InitProducerId, its epoch, its last sequence) is what the partition reports, also
after a restart (the producer state is rebuilt from the log and its snapshots)."""

from __future__ import annotations

import uuid

from confluent_kafka import Producer

from client import BrokerConnection
from protocol import ApiKey
from tests.integration.clients import create_topic

COUNT = 25


def describe(broker, topic: str, partitions: list[int]) -> list:
    with BrokerConnection(broker.host, broker.port, client_id="producers", timeout_s=10) as c:
        body = {"topics": [{"name": topic, "partition_indexes": partitions}]}
        (answer,) = c.call(ApiKey.DESCRIBE_PRODUCERS, 0, body).topics
    assert answer.name == topic
    return list(answer.partitions)


def test_the_idempotent_producer_is_described(broker_factory):
    broker = broker_factory()
    topic = f"producers-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, partitions=2)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0}
    )
    delivered = []
    for i in range(COUNT):
        producer.produce(
            topic, b"v%d" % i, partition=0, on_delivery=lambda e, m: delivered.append(e)
        )
        producer.flush(30)  # one batch per message: sequences 0..COUNT-1
    assert delivered == [None] * COUNT
    for _ in range(2):  # before and after a restart
        p0, p1 = describe(broker, topic, [0, 1])
        assert (p0.partition_index, p0.error_code, p1.error_code) == (0, 0, 0)
        (active,) = p0.active_producers
        assert active.producer_id >= 0 and active.producer_epoch == 0
        assert active.last_sequence == COUNT - 1 and active.last_timestamp > 0
        assert (active.coordinator_epoch, active.current_txn_start_offset) == (-1, -1)
        assert p1.active_producers == []
        broker.restart()
    (missing,) = describe(broker, "no-such-topic-" + uuid.uuid4().hex[:6], [0])
    assert missing.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
