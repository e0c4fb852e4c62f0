"""Incremental fetch sessions (KIP-227) on a real broker: raw requests, and kafka-python's
consumer, which opens a session and then sends only what changed."""

from __future__ import annotations

import json
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from protocol import ApiKey, iter_deep
from tests.integration.clients import create_topic, topic_name
from tests.integration.kafka_wire import WireClient, message_set, produce

VERSION = 12


def fetch(client, topic, partitions, *, session_id, epoch, forgotten=()):
    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": session_id,
        "session_epoch": epoch,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": p, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                    for p, offset in partitions
                ],
            }
        ]
        if partitions
        else [],
        "forgotten_topics_data": [{"topic": topic, "partitions": list(forgotten)}]
        if forgotten
        else [],
        "rack_id": "",
    }
    return client.call(ApiKey.FETCH, VERSION, body)


def answered(response):
    return {
        p.partition_index: [m.value for m in iter_deep(bytes(p.records or b""))]
        for t in response.responses
        for p in t.partitions
    }


def test_a_session_answers_only_partitions_with_news(broker):
    topic = topic_name("sess")
    create_topic(broker.bootstrap, topic, partitions=3)
    with WireClient(broker.host, broker.port) as client:
        full = fetch(client, topic, [(0, 0), (1, 0), (2, 0)], session_id=0, epoch=0)
        assert full.error_code == 0 and full.session_id > 0
        assert answered(full) == {0: [], 1: [], 2: []}
        session = full.session_id
        # nothing changed: an incremental fetch naming nothing answers nothing
        assert answered(fetch(client, topic, [], session_id=session, epoch=1)) == {}
        produce(client, topic, message_set([b"a", b"b"]), partition=1, version=2)
        got = fetch(client, topic, [], session_id=session, epoch=2)
        assert answered(got) == {1: [b"a", b"b"]}  # records and a new high watermark
        assert got.responses[0].partitions[0].high_watermark == 2
        # the client moves partition 1 on and forgets partition 2
        got = fetch(client, topic, [(1, 2)], session_id=session, epoch=3, forgotten=[2])
        assert answered(got) == {}
        produce(client, topic, message_set([b"c"]), partition=2, version=2)
        assert answered(fetch(client, topic, [], session_id=session, epoch=4)) == {}
        # errors: a wrong epoch, an unknown session
        assert fetch(client, topic, [], session_id=session, epoch=9).error_code == 71
        assert fetch(client, topic, [], session_id=session + 1, epoch=1).error_code == 70
        # a sessionless request is answered in full with session id 0
        plain = fetch(client, topic, [(0, 0), (2, 0)], session_id=0, epoch=-1)
        assert (plain.session_id, answered(plain)) == (0, {0: [], 2: [b"c"]})


def test_kafka_python_consumes_many_partitions_through_one_session(broker):
    if broker.external:
        pytest.skip("reads the broker's own log")
    topic, partitions = topic_name("sess-kp"), 24
    create_topic(broker.bootstrap, topic, partitions=partitions)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=None,
        client_id="sess-kp",
        fetch_max_wait_ms=100,
    )
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    sent, got = set(), []
    deadline = time.monotonic() + 30
    # rounds of data on a few partitions at a time: the open session answers only those
    for round_ in range(6):
        for p in range(round_ * 4, round_ * 4 + 4):
            for i in range(10):
                value = b"%d-%d-%d" % (round_, p, i)
                producer.send(topic, value, partition=p % partitions)
                sent.add((p % partitions, value))
        producer.flush(15)
        while len(got) < len(sent) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += [(r.partition, r.value) for r in records]
    consumer.close()
    producer.close()
    assert sorted(got) == sorted(sent)  # each exactly once, every round
    created = [
        json.loads(line)
        for line in broker.log_output().splitlines()
        if '"fetch session created"' in line
    ]
    assert any(entry["partitions"] == partitions for entry in created)
