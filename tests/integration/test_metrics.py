"""The Prometheus endpoint of a real broker process, driven by confluent-kafka: what was produced,
stored, consumed and committed shows in /metrics, scraped over HTTP and parsed with
prometheus_client's own parser. Each figure is checked against what the test did or against the
partition's files on disk.

Every wait is bounded: client calls carry timeouts and the scrape loop a deadline.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

WAIT_S = 30
DASHBOARD = Path(__file__).resolve().parents[2] / "docker" / "grafana-dashboard.json"
ROUNDS = 5  # produce rounds, one batch each (flushed), so the partition rolls
PER_ROUND = 20
VALUE_BYTES = 50
COMMITTED = 70  # the group's committed offset: lag = ROUNDS * PER_ROUND - COMMITTED
SEGMENT_BYTES = 2000  # about one round's batch per segment


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """Every sample, keyed by (name, sorted labels)."""
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=")
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_show_what_clients_did(broker_factory):
    broker = broker_factory({"metrics.listener": "http://127.0.0.1:0"})
    url = broker.metrics_url()
    topic = f"metrics-{uuid.uuid4().hex[:8]}"
    group = f"metrics-group-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics(
        [NewTopic(topic, 1, 1, config={"segment.bytes": str(SEGMENT_BYTES)})]
    ).values():
        future.result(WAIT_S)

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "acks": "all"})
    delivered: list[int] = []
    failed: list[str] = []

    def on_delivery(err, msg):
        (failed.append(str(err)) if err else delivered.append(msg.offset()))

    for r in range(ROUNDS):
        for i in range(PER_ROUND):
            value = b"%04d" % (r * PER_ROUND + i) + b"v" * (VALUE_BYTES - 4)
            producer.produce(topic, value, b"k", on_delivery=on_delivery)
        assert producer.flush(WAIT_S) == 0
    assert failed == []
    total = ROUNDS * PER_ROUND
    assert sorted(delivered) == list(range(total))

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values = []
        deadline = time.monotonic() + WAIT_S
        while len(values) < total and time.monotonic() < deadline:
            for msg in consumer.consume(total, 1.0):
                assert msg.error() is None, msg.error()
                values.append(msg.value())
        assert len(values) == total
        committed = consumer.commit(
            offsets=[TopicPartition(topic, 0, COMMITTED)], asynchronous=False
        )
        assert [(tp.offset, tp.error) for tp in committed] == [(COMMITTED, None)]
    except KafkaException as exc:
        raise AssertionError(f"consumer failed: {exc}") from exc
    finally:
        consumer.close()

    partition_dir = os.path.join(broker.log_dir, f"{topic}-0")
    segment_files = [f for f in os.listdir(partition_dir) if f.endswith(".log")]
    stored = sum(os.path.getsize(os.path.join(partition_dir, f)) for f in segment_files)
    assert len(segment_files) >= 2, "the partition should have rolled"

    by_topic = (("topic", topic),)
    by_partition = (("partition", "0"), ("topic", topic))
    lag_key = ("kafka_consumergroup_lag", (("group", group), ("partition", "0"), ("topic", topic)))
    deadline = time.monotonic() + WAIT_S
    while True:  # the commit was answered, so this holds at once; poll in case it ever does not
        got = scrape(url)
        if lag_key in got or time.monotonic() > deadline:
            break
        time.sleep(0.05)

    assert got[("kafka_server_brokertopicmetrics_messagesin_total", by_topic)] == total
    # v2 batches are stored as the producer sent them: bytes in are the partition's bytes
    assert got[("kafka_server_brokertopicmetrics_bytesin_total", by_topic)] == stored
    assert got[("kafka_server_brokertopicmetrics_bytesout_total", by_topic)] >= stored
    assert got[("kafka_log_log_logendoffset", by_partition)] == total
    assert got[("kafka_log_log_logstartoffset", by_partition)] == 0
    assert got[("kafka_log_log_numlogsegments", by_partition)] == len(segment_files)
    assert got[("kafka_log_log_size", by_partition)] == stored
    assert got[lag_key] == total - COMMITTED
    current = ("kafka_consumergroup_current_offset", lag_key[1])
    assert got[current] == COMMITTED
    produce = (("request", "Produce"),)
    assert got[("kafka_network_requestmetrics_errors_total", (("error", "NONE"),) + produce)] >= 1
    assert got[("kafka_network_requestmetrics_totaltimems_count", produce)] >= ROUNDS
    assert (
        sum(
            v
            for (name, labels), v in got.items()
            if name == "kafka_network_requestmetrics_requests_total" and labels[0] == produce[0]
        )
        == got[("kafka_network_requestmetrics_totaltimems_count", produce)]
    )
    first = got[("chronolog_log_first_timestamp_ms", by_partition)]
    last = got[("chronolog_log_last_timestamp_ms", by_partition)]
    assert time.time() * 1000 - 600_000 < first <= last <= time.time() * 1000 + 1000

    # anything but /metrics is a 404, and the broker is still answering afterwards
    try:
        urllib.request.urlopen(url.replace("/metrics", "/nope"), timeout=10)
        raise AssertionError("expected 404")
    except urllib.error.HTTPError as exc:
        assert exc.code == 404
    assert scrape(url)[lag_key] == total - COMMITTED

    # docker/grafana-dashboard.json asks only for series this endpoint has
    exported = {name for name, _ in got}
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    queried = {n for e in exprs for n in re.findall(r"\b(?:kafka|chronolog)_[a-z_]+", e)}
    assert len(queried) >= 10 and queried <= exported, queried - exported


def test_metrics_port_in_use_stops_the_start(broker_factory):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match="exited with status 1") as failed:
            broker_factory({"metrics.listener": f"http://127.0.0.1:{port}"})
    assert "cannot start" in str(failed.value)
