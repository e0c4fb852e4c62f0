"""The cluster of docker/docker-compose.cluster.yml (CHRONOLOG_CLUSTER_BOOTSTRAP names its three
brokers; skipped without it): every broker is in the metadata, a topic of replication factor 3
takes acks=all writes and every broker's replica holds them."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.waiting import wait_for
from tests.conftest import REPO

BOOTSTRAP = os.environ.get("CHRONOLOG_CLUSTER_BOOTSTRAP")
pytestmark = pytest.mark.skipif(
    not BOOTSTRAP, reason="needs the compose cluster (CHRONOLOG_CLUSTER_BOOTSTRAP)"
)


def test_compose_cluster_replicates_acks_all_writes():
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})

    def three_brokers():
        try:  # librdkafka's all-topics Metadata (v12)
            return sorted(admin.list_topics(timeout=10).brokers) == [1, 2, 3]
        except KafkaException:  # the brokers are still starting
            return False

    wait_for(three_brokers, "three brokers", timeout=120)
    topic = f"compose-{uuid.uuid4().hex[:8]}"
    for future in admin.create_topics([NewTopic(topic, 2, 3)]).values():
        future.result(60)
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "acks": "all"})
    acked = []
    for i in range(200):
        producer.produce(
            topic, b"m%d" % i, partition=i % 2, on_delivery=lambda e, m: e or acked.append(m)
        )
    producer.flush(60)
    assert len(acked) == 200
    consumer = Consumer(
        {"bootstrap.servers": BOOTSTRAP, "group.id": topic, "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    seen = set()
    while len(seen) < 200:
        msg = consumer.poll(10)
        assert msg is not None, f"only {len(seen)} of 200 consumed"
        if msg.error() is None:
            seen.add(msg.value())
    consumer.close()
    first = BOOTSTRAP.split(",")[0]
    out = subprocess.run(
        [sys.executable, "-m", "broker", "cluster", "--bootstrap-server", first, "describe", topic],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if line.strip().startswith("partition ")]
    assert len(rows) == 2
    for row in rows:
        assert sorted(row.split("isr ")[1].split()[0].split(",")) == ["1", "2", "3"], row
