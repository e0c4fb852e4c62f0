"""Idempotent producers across a broker crash: librdkafka with enable.idempotence and acks=all
keeps producing through a kill -9 and a restart, and the log holds every message exactly once,
in order, with no gap (its retries of batches already stored are recognised from the log)."""

from __future__ import annotations

import time

from confluent_kafka import Producer

from tests.integration.clients import create_topic, kp_consume_all, topic_name

COUNT = 3000


def test_idempotent_producer_survives_kill9(broker_factory):
    b = broker_factory({"log.flush.interval.messages": 1, "log.segment.bytes": 60000})
    topic = topic_name("idem")
    create_topic(b.bootstrap, topic)
    producer = Producer(
        {
            "bootstrap.servers": b.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "batch.num.messages": 50,
            "max.in.flight.requests.per.connection": 5,
            "message.timeout.ms": 120000,
            "retry.backoff.ms": 50,
        }
    )
    acked: list[bytes] = []
    errors: list = []

    def delivered(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked.append(msg.value())

    for i in range(COUNT):
        producer.produce(topic, b"m-%05d" % i, partition=0, on_delivery=delivered)
        if i == COUNT // 3:
            deadline = time.monotonic() + 60
            while len(acked) < COUNT // 4 and time.monotonic() < deadline:
                producer.poll(0.05)
            b.kill()  # batches are in flight; some are stored but not yet acknowledged
            acked_at_kill = len(acked)
        producer.poll(0)
    b.start()
    assert producer.flush(120) == 0
    assert errors == []
    assert len(acked) == COUNT
    stored = [r.value for r in kp_consume_all(b.bootstrap, topic, 0)]
    assert stored == [b"m-%05d" % i for i in range(COUNT)]  # exactly once, in order, no gap
    assert 0 < acked_at_kill < COUNT  # the crash really came mid-stream
