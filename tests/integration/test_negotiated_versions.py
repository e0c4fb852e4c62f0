"""Every client runs at the newest api versions both it and the broker support.

The broker's connection-closed log line lists the client id and every (api, version) the
connection used; each test drives one client under a unique client id, then reads those lines.
The expected versions are each client's own maximum given what ApiVersions offers (Kafka 3.9's
ranges): where a client stops below the broker's maximum, that is the client's limit.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from protocol import SUPPORTED_VERSIONS, ApiKey
from tests.integration.clients import create_topic, topic_name


def used_versions(
    broker, client_id: str, *apis: str, timeout_s: float = 15.0
) -> dict[str, set[int]]:
    """{api name: versions} over every closed connection of ``client_id``, once the lines for
    all of ``apis`` are in the log (clients close connections in the background)."""
    deadline = time.monotonic() + timeout_s
    while True:
        out = _closed_connections(broker, client_id)
        if all(api in out for api in apis) or time.monotonic() > deadline:
            return out
        time.sleep(0.05)


def _closed_connections(broker, client_id: str) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for line in broker.log_output().splitlines():
        if '"connection closed"' not in line:
            continue
        entry = json.loads(line)
        if client_id not in entry.get("client_id", "").split(", "):
            continue
        for part in filter(None, entry["api_versions"].split(", ")):
            api, versions = part.rsplit(" v", 1)
            out.setdefault(api, set()).update(int(v) for v in versions.split("/"))
    return out


def newest(api: ApiKey, client_max: int) -> int:
    return min(SUPPORTED_VERSIONS[api][1], client_max)


@pytest.fixture
def topic(broker):
    if broker.external:
        pytest.skip("reads the broker's own log")
    name = topic_name("versions")
    create_topic(broker.bootstrap, name)
    return name


def client_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_kafka_python(broker, topic):
    cid = client_id("kp")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, client_id=cid)
    producer.send(topic, b"v", headers=[("h", b"1")]).get(timeout=15)
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, client_id=cid, group_id=None, consumer_timeout_ms=1000
    )
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    assert [(r.value, r.headers) for r in consumer] == [(b"v", [("h", b"1")])]
    assert consumer.offsets_for_times({tp: 0})[tp].offset == 0
    consumer.close()
    used = used_versions(broker, cid, "PRODUCE", "FETCH", "LIST_OFFSETS")
    # kafka-python 3.0.12 caps Produce at v9 and Fetch at v12 itself; idempotent by default.
    assert used["API_VERSIONS"] == {4} and used["METADATA"] == {newest(ApiKey.METADATA, 13)}
    assert used["PRODUCE"] == {newest(ApiKey.PRODUCE, 9)}
    assert used["INIT_PRODUCER_ID"] == {4}
    assert used["FETCH"] == {newest(ApiKey.FETCH, 12)}
    assert used["LIST_OFFSETS"] == {newest(ApiKey.LIST_OFFSETS, 10)}


def test_confluent_kafka(broker, topic):
    cid = client_id("ck")
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "client.id": cid,
            "enable.idempotence": True,
            "compression.type": "zstd",
        }
    )
    producer.produce(topic, b"v", headers=[("h", b"1")])
    assert producer.flush(15) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "client.id": cid,
            "group.id": cid,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([CTopicPartition(topic, 0, 0)])
    msg = consumer.poll(10)
    assert (msg.value(), msg.headers()) == (b"v", [("h", b"1")])
    (found,) = consumer.offsets_for_times([CTopicPartition(topic, 0, 0)], timeout=10)
    assert found.offset == 0
    consumer.close()
    del producer
    used = used_versions(broker, cid, "PRODUCE", "FETCH", "LIST_OFFSETS")
    # librdkafka 2.16: MsgVer2 (Produce v3+, Fetch v4+), zstd (Produce v7+, Fetch v10+).
    assert used["API_VERSIONS"] == {3} and used["METADATA"] == {newest(ApiKey.METADATA, 13)}
    assert used["PRODUCE"] == {newest(ApiKey.PRODUCE, 10)}
    assert used["INIT_PRODUCER_ID"] == {newest(ApiKey.INIT_PRODUCER_ID, 4)}
    assert used["FETCH"] == {newest(ApiKey.FETCH, 16)}
    assert used["LIST_OFFSETS"] == {newest(ApiKey.LIST_OFFSETS, 7)}


def test_aiokafka(broker, topic):
    aiokafka = pytest.importorskip("aiokafka")
    cid = client_id("aio")

    async def run():
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap, client_id=cid, enable_idempotence=True
        )
        await producer.start()
        await producer.send_and_wait(topic, b"v")
        await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap, client_id=cid, group_id=None
        )
        await consumer.start()
        tp = aiokafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got = await consumer.getmany(tp, timeout_ms=5000)
        found = await consumer.offsets_for_times({tp: 0})
        await consumer.stop()
        return [m.value for m in got[tp]], found[tp].offset

    assert asyncio.run(run()) == ([b"v"], 0)
    used = used_versions(broker, cid, "PRODUCE", "FETCH", "LIST_OFFSETS")
    # aiokafka 0.14 knows ApiVersions v0, Metadata v5, Produce v7, Fetch v11, ListOffsets v3.
    assert used["API_VERSIONS"] == {0} and used["METADATA"] == {5}
    assert used["PRODUCE"] == {7} and used["INIT_PRODUCER_ID"] == {0}
    assert used["FETCH"] == {11} and used["LIST_OFFSETS"] == {3}


def test_kcat(broker, topic):
    cid = client_id("kcat")
    common = ["-b", broker.bootstrap, "-X", f"client.id={cid}"]
    subprocess.run(["kcat", *common, "-P", "-t", topic], input=b"v\n", check=True, timeout=60)
    out = subprocess.run(
        ["kcat", *common, "-C", "-t", topic, "-o", "beginning", "-e", "-q"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    assert out == b"v\n"
    subprocess.run(
        ["kcat", *common, "-Q", "-t", f"{topic}:0:0"], capture_output=True, check=True, timeout=60
    )
    used = used_versions(broker, cid, "PRODUCE", "FETCH", "LIST_OFFSETS")
    # Debian's kcat links an older librdkafka: MsgVer2 still, Metadata v4, ListOffsets v2.
    assert 3 in used["API_VERSIONS"] and used["METADATA"] == {4}
    assert min(used["PRODUCE"]) >= 3 and min(used["FETCH"]) >= 4
    assert used["LIST_OFFSETS"] == {2}
