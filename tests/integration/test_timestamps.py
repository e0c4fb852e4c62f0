"""Message time end to end: LogAppendTime, the CreateTime difference limit, offsets_for_times
against a brute-force oracle, and retention by message time."""

from __future__ import annotations

import os
import random
import time

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTopicPartition
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import InvalidTimestampError

from tests.integration.clients import (
    KEEP_OLD_MESSAGES,
    create_topic,
    kp_consume_all,
    kp_producer,
    topic_name,
)
from tests.integration.kafka_wire import WireClient, message_set, produce

DAY_MS = 86_400_000


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.mark.parametrize("codec", [None, "gzip"])
def test_log_append_time_topic(broker, codec):
    topic = topic_name("lat")
    create_topic(broker.bootstrap, topic, configs={"message.timestamp.type": "LogAppendTime"})
    producer = kp_producer(broker.bootstrap, acks=1, compression_type=codec)
    before = now_ms()
    acked = [
        producer.send(topic, value=b"m%d" % i, timestamp_ms=1000 + i).get(timeout=15)
        for i in range(30)
    ]
    after = now_ms()
    producer.close()
    stamps = [md.timestamp for md in acked]
    assert all(before - 1000 <= ts <= after + 1000 for ts in stamps), stamps
    assert stamps == sorted(stamps)  # broker time never goes backwards within a partition
    records = kp_consume_all(broker.bootstrap, topic)
    assert [r.value for r in records] == [b"m%d" % i for i in range(30)]
    assert [r.timestamp for r in records] == stamps
    assert {r.timestamp_type for r in records} == {1}

    # The produce response of a raw v2 request carries the same broker time.
    with WireClient(broker.host, broker.port) as c:
        r = produce(c, topic, message_set([b"raw"], timestamps=[5]))
    assert r.error_code == 0 and r.log_append_time_ms >= stamps[-1]
    assert kp_consume_all(broker.bootstrap, topic, start=30)[0].timestamp == r.log_append_time_ms


def test_create_time_difference_limit_rejects_old_batch(broker):
    topic = topic_name("tsdiff")
    create_topic(
        broker.bootstrap,
        topic,
        configs={
            "message.timestamp.type": "CreateTime",
            "message.timestamp.difference.max.ms": 60_000,
        },
    )
    producer = kp_producer(broker.bootstrap, acks=1, retries=0)
    with pytest.raises(InvalidTimestampError):
        producer.send(topic, value=b"old", timestamp_ms=now_ms() - 3_600_000).get(timeout=15)
    ok = producer.send(topic, value=b"fresh", timestamp_ms=now_ms()).get(timeout=15)
    producer.close()
    assert ok.offset == 0  # the rejected batch took no offset and stored nothing
    assert [r.value for r in kp_consume_all(broker.bootstrap, topic)] == [b"fresh"]


def test_kip32_alias_for_the_difference_limit(broker):
    topic = topic_name("alias")
    create_topic(broker.bootstrap, topic, configs={"max.message.time.difference.ms": 1000})
    with WireClient(broker.host, broker.port) as c:
        r = produce(c, topic, message_set([b"a", b"b"], timestamps=[now_ms(), 1]))
        assert r.error_code == 32 and r.base_offset == -1
        assert produce(c, topic, message_set([b"c"], timestamps=[now_ms()])).base_offset == 0


def test_offsets_for_times_matches_brute_force_across_segments(broker):
    topic = topic_name("oft")
    create_topic(
        broker.bootstrap,
        topic,
        configs={"segment.bytes": 1024, "index.interval.bytes": 100, **KEEP_OLD_MESSAGES},
    )
    rng = random.Random(42)
    base = now_ms() - 10 * DAY_MS
    stamps = []
    with WireClient(broker.host, broker.port) as c:
        for batch in range(60):
            ts = [base + rng.randrange(0, 500_000) for _ in range(rng.randrange(1, 5))]
            r = produce(
                c, topic, message_set([b"x" * rng.randrange(10, 80) for _ in ts], timestamps=ts)
            )
            assert r.error_code == 0
            stamps += ts
    if broker.log_dirs:  # an external broker's files are out of reach
        files = os.listdir(os.path.join(broker.log_dirs[0], f"{topic}-0"))
        assert len([f for f in files if f.endswith(".log")]) > 10

    def oracle(t):
        for offset, ts in enumerate(stamps):
            if ts >= t:
                return offset, ts
        return None

    probes = sorted({t + d for t in stamps for d in (-1, 0, 1)} | {base - 5, max(stamps) + 1})
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
    tp = TopicPartition(topic, 0)
    try:
        for t in probes:
            got = consumer.offsets_for_times({tp: t})[tp]
            want = oracle(t)
            assert (None if got is None else (got.offset, got.timestamp)) == want, t
    finally:
        consumer.close()

    # confluent-kafka asks the same question (offsets_for_times -> ListOffsets v1).
    ck = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    try:
        # one partition per call: a repeated partition in one request is INVALID_REQUEST
        for t in probes[:: max(1, len(probes) // 20)]:
            (answer,) = ck.offsets_for_times([CTopicPartition(topic, 0, t)], timeout=15)
            want = oracle(t)
            assert answer.offset == (want[0] if want else -1), t
    finally:
        ck.close()


def test_retention_by_message_time_moves_beginning_offset(broker_factory):
    b = broker_factory({"log.retention.check.interval.ms": 300, "log.segment.delete.delay.ms": 0})
    topic = topic_name("ret")
    create_topic(b.bootstrap, topic, configs={"retention.ms": DAY_MS, "segment.bytes": 400})
    old = now_ms() - 3 * DAY_MS
    with WireClient(b.host, b.port) as c:
        for i in range(12):
            assert (
                produce(c, topic, message_set([b"o" * 100], timestamps=[old + i])).error_code == 0
            )
        first_new = produce(c, topic, message_set([b"n" * 100], timestamps=[now_ms()])).base_offset
        for i in range(3):
            produce(c, topic, message_set([b"n" * 100], timestamps=[now_ms()]))
    assert first_new == 12
    consumer = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=None)
    tp = TopicPartition(topic, 0)
    # Retention may take the expired segments over several passes (each 300 ms): read the
    # beginning offset once it has stopped moving for more than three passes.
    deadline = time.monotonic() + 20
    begin, since = consumer.beginning_offsets([tp])[tp], time.monotonic()
    while time.monotonic() < deadline and (begin == 0 or time.monotonic() - since < 1.0):
        time.sleep(0.2)
        now_begin = consumer.beginning_offsets([tp])[tp]
        if now_begin != begin:
            begin, since = now_begin, time.monotonic()
    consumer.close()
    assert 0 < begin <= first_new
    remaining = kp_consume_all(b.bootstrap, topic)
    assert remaining[0].offset == begin
    assert [r.offset for r in remaining if r.value.startswith(b"n")] == [12, 13, 14, 15]
    out = b.log_output()
    assert "rolled new segment" in out and "retention deleted segments" in out
