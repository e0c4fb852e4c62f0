"""Old consumers through the down-conversion path (issue #33): librdkafka produces record batches
in every codec an old format holds, some larger than 64 KiB (converted without the GIL by the C
extension, or by the Python path under `make test-pure`); kafka-python as a 0.10.1 client (magic
1) and as a 0.9 client (magic 0) reads every message back, in order, with its key, value and (at
magic 1) timestamp, across fetches that cut batches at the partition limit."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer, TopicPartition

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
