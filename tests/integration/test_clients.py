"""Round trips with real clients: kafka-python, confluent-kafka, kcat, aiokafka."""

from __future__ import annotations

import asyncio
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition

from protocol import iter_shallow
from tests.integration.clients import (
    KEEP_OLD_MESSAGES,
    create_topic,
    kp_consume_all,
    kp_producer,
    topic_name,
)
from tests.integration.kafka_wire import WireClient, stored_records

BASE_TS = 1_700_000_000_000


def test_kafka_python_round_trip(broker):
    topic = topic_name("kp")
    create_topic(broker.bootstrap, topic, 2, KEEP_OLD_MESSAGES)
    producer = kp_producer(broker.bootstrap, acks=-1)
    sent = []
    for i in range(50):
        key = None if i % 7 == 3 else f"k{i}".encode()
        value = None if i % 11 == 5 and key else f"value-{i}".encode() * (i % 5 + 1)
        md = producer.send(
            topic, value=value, key=key, partition=i % 2, timestamp_ms=BASE_TS + i * 1000
        ).get(timeout=15)
        sent.append((md.partition, md.offset, key, value, BASE_TS + i * 1000))
    producer.close()
    got = []
    for p in (0, 1):
        got += [
            (r.partition, r.offset, r.key, r.value, r.timestamp)
            for r in kp_consume_all(broker.bootstrap, topic, p)
        ]
    assert sorted(got, key=lambda x: (x[0], x[1])) == sorted(sent, key=lambda x: (x[0], x[1]))
    assert all(r[1] == i // 2 for i, r in enumerate(sorted(sent, key=lambda x: (x[1], x[0]))))


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_confluent_kafka_round_trip(broker, codec):
    topic = topic_name(f"ck-{codec}")
    create_topic(broker.bootstrap, topic, configs=KEEP_OLD_MESSAGES)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "compression.type": codec,
            "linger.ms": 20,
            "acks": "all",
        }
    )
    errors = []
    sent = [
        (f"k{i}".encode() if i % 3 else None, f"v{i}".encode() * 20, BASE_TS + i)
        for i in range(200)
    ]
    for key, value, ts in sent:
        producer.produce(
            topic,
            value=value,
            key=key,
            timestamp=ts,
            on_delivery=lambda err, msg: err and errors.append(err),
        )
    assert producer.flush(30) == 0 and errors == []

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([CTopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < len(sent) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got.append((msg.key(), msg.value(), msg.timestamp()[1], msg.offset()))
    consumer.close()
    assert [g[:3] for g in got] == sent
    assert [g[3] for g in got] == list(range(len(sent)))

    # The codec the producer chose is what the log holds (lz4 needs FindCoordinator advertised).
    with WireClient(broker.host, broker.port) as c:
        data = stored_records(c, topic)
    expected = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3}[codec]
    assert {e.codec for e in iter_shallow(data)} == {expected}


def test_kcat(broker, tmp_path):
    topic = topic_name("kcat")
    lines = "".join(f"key{i}:value {i}\n" for i in range(20))
    subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-P", "-t", topic, "-K:"],
        input=lines,
        text=True,
        check=True,
        timeout=60,
    )
    out = subprocess.run(
        [
            "kcat",
            "-b",
            broker.bootstrap,
            "-C",
            "-t",
            topic,
            "-o",
            "beginning",
            "-e",
            "-f",
            "%o|%k|%s|%T\\n",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.splitlines()
    rows = [line.split("|") for line in out]
    assert [(int(o), k, v) for o, k, v, _ in rows] == [
        (i, f"key{i}", f"value {i}") for i in range(20)
    ]
    stamps = [int(t) for *_, t in rows]
    meta = subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-L", "-t", topic],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert f'topic "{topic}" with 1 partitions' in meta and "leader 0" in meta
    q = subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-Q", "-t", f"{topic}:0:{stamps[5]}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    first_at = min(i for i, t in enumerate(stamps) if t >= stamps[5])
    assert f"offset {first_at}" in q


def test_aiokafka_producers_plain_and_idempotent_and_consumer(broker):
    """aiokafka 0.14 only writes record batches (magic 2): both its producers work, with
    headers, and its consumer reads them back."""
    aiokafka = pytest.importorskip("aiokafka")
    topic = topic_name("aio")
    create_topic(broker.bootstrap, topic, configs=KEEP_OLD_MESSAGES)

    async def run():
        sent = []
        for idempotent in (False, True):
            producer = aiokafka.AIOKafkaProducer(
                bootstrap_servers=broker.bootstrap,
                enable_idempotence=idempotent,
                request_timeout_ms=10000,
            )
            await producer.start()
            try:
                for i in range(10):
                    md = await producer.send_and_wait(
                        topic,
                        b"v%d" % i,
                        key=b"k",
                        timestamp_ms=BASE_TS + i,
                        headers=[("idempotent", b"%d" % idempotent)],
                    )
                    sent.append(
                        (
                            md.offset,
                            b"k",
                            b"v%d" % i,
                            BASE_TS + i,
                            (("idempotent", b"%d" % idempotent),),
                        )
                    )
            finally:
                await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap, enable_auto_commit=False, group_id=None
        )
        await consumer.start()
        try:
            tp = aiokafka.TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got = []
            while len(got) < 20:
                batch = await asyncio.wait_for(consumer.getmany(tp, timeout_ms=1000), 20)
                got += [
                    (m.offset, m.key, m.value, m.timestamp, tuple(m.headers))
                    for m in batch.get(tp, [])
                ]
        finally:
            await consumer.stop()
        return sent, got

    sent, got = asyncio.run(run())
    assert [s[0] for s in sent] == list(range(20))
    assert got == sent


def test_kafka_python_admin_errors(broker):
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import (
        InvalidConfigurationError,
        InvalidReplicationFactorError,
        TopicAlreadyExistsError,
    )

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    try:
        topic = topic_name("adm")
        admin.create_topics([NewTopic(topic, 2, 1, topic_configs={"segment.bytes": "100000"})])
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(topic, 2, 1)])
        with pytest.raises(InvalidConfigurationError):
            admin.create_topics(
                [
                    NewTopic(
                        topic_name("adm"),
                        1,
                        1,
                        topic_configs={"message.timestamp.type": "Sometimes"},
                    )
                ]
            )
        with pytest.raises(InvalidReplicationFactorError):
            admin.create_topics([NewTopic(topic_name("adm"), 1, 3)])
        admin.delete_topics([topic])
        assert topic not in admin.list_topics()
    finally:
        admin.close()
