"""Topic set-up and an independent oracle (kafka-python's consumer) for the Spark tests."""

from __future__ import annotations

import uuid

from kafka import KafkaConsumer, TopicPartition

from protocol import MessageSetBuilder
from tests.integration.kafka_wire import WireClient, create_topic, produce


def new_topic(broker, partitions: int = 1, prefix: str = "spark", **configs) -> str:
    """A fresh topic; configs use Kafka names with _ for . (segment_bytes=2048)."""
    topic = f"{prefix}-{uuid.uuid4().hex[:10]}"
    with WireClient(broker.host, broker.port) as client:
        code = create_topic(
            client, topic, partitions, {k.replace("_", "."): v for k, v in configs.items()}
        )
    assert code == 0, f"CreateTopics {topic}: error {code}"
    return topic


def produce_messages(broker, topic: str, partition: int, messages, *, per_request: int = 50):
    """messages: [(key, value, timestamp)], sent in requests of ``per_request`` messages."""
    with WireClient(broker.host, broker.port) as client:
        for i in range(0, len(messages), per_request):
            builder = MessageSetBuilder()
            for key, value, ts in messages[i : i + per_request]:
                builder.append(value, key=key, timestamp=ts)
            response = produce(client, topic, builder.build(), partition=partition, acks=-1)
            assert response.error_code == 0, response


def consume_all(broker, topic: str) -> list[tuple]:
    """Every message as (partition, offset, key, value, timestamp ms, timestamp type), read by
    kafka-python from the log start of each partition to its end."""
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        api_version=(0, 10, 1),
        consumer_timeout_ms=10_000,
    )
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)
        out = []
        while any(consumer.position(tp) < ends[tp] for tp in parts):
            polled = consumer.poll(timeout_ms=2000)
            assert polled or any(consumer.position(tp) < ends[tp] for tp in parts)
            for tp, records in polled.items():
                out += [
                    (r.partition, r.offset, r.key, r.value, r.timestamp, r.timestamp_type)
                    for r in records
                    if r.offset < ends[tp]
                ]
        return sorted(out)
    finally:
        consumer.close()


def spark_rows(df) -> list[tuple]:
    """A chronolog DataFrame's rows in consume_all's shape."""
    rows = df.selectExpr(
        "partition", "offset", "key", "value", "unix_millis(timestamp) AS ts", "timestampType"
    ).collect()
    return sorted(
        (
            r.partition,
            r.offset,
            None if r.key is None else bytes(r.key),
            None if r.value is None else bytes(r.value),
            r.ts,
            r.timestampType,
        )
        for r in rows
    )
