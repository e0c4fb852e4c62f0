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


# Fetch long polls parked in the broker (its delayed-fetch purgatory), as scrape() keys them.
FETCH_PURGATORY = (
    "kafka_server_delayedoperationpurgatory_purgatorysize",
    (("delayedOperation", "Fetch"),),
)


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
    # the event loop's delay histogram: wake-ups counted since the start, all in +Inf at least
    woke = got[("chronolog_event_loop_delay_seconds_count", ())]
    assert (
        woke > 0 and got[("chronolog_event_loop_delay_seconds_bucket", (("le", "+Inf"),))] == woke
    )
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


def _transactional(bootstrap: str, timeout_ms: int = 60_000) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"metrics-txn-{uuid.uuid4().hex[:8]}",
            "transaction.timeout.ms": timeout_ms,
            "linger.ms": 0,
        }
    )
    producer.init_transactions(WAIT_S)
    return producer


def _send(producer: Producer, topic: str, count: int) -> None:
    producer.begin_transaction()
    for i in range(count):
        producer.produce(topic, b"txn-%d" % i, partition=0)
    assert producer.flush(WAIT_S) == 0


def test_metrics_show_transactions(broker_factory):
    """librdkafka producers commit, abort, hold a transaction open and let one time out: the
    LSO lag is what ListOffsets answers read_uncommitted minus read_committed, the open
    transaction is counted per partition and by state, and the completions by result."""
    broker = broker_factory(
        {
            "metrics.listener": "http://127.0.0.1:0",
            "transaction.state.log.num.partitions": "1",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
        }
    )
    url = broker.metrics_url()
    topic = f"metrics-txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(WAIT_S)
    by_partition = (("partition", "0"), ("topic", topic))
    lag_key = ("kafka_cluster_partition_laststableoffsetlag", by_partition)
    open_key = ("chronolog_log_open_transactions", by_partition)

    def state(got, label: str) -> float:
        return got[("chronolog_transactions", (("state", label),))]

    def completed(got, result: str) -> float:
        return got[("chronolog_transactions_completed_total", (("result", result),))]

    steady = _transactional(broker.bootstrap)
    _send(steady, topic, 3)
    steady.commit_transaction(WAIT_S)
    _send(steady, topic, 2)
    steady.abort_transaction(WAIT_S)
    held = _transactional(broker.bootstrap)
    _send(held, topic, 4)

    ends = {}
    for isolation in ("read_uncommitted", "read_committed"):
        consumer = Consumer(
            {"bootstrap.servers": broker.bootstrap, "group.id": topic, "isolation.level": isolation}
        )
        try:
            ends[isolation] = consumer.get_watermark_offsets(TopicPartition(topic, 0), WAIT_S)[1]
        finally:
            consumer.close()
    # 3 committed + marker, 2 aborted + marker, 4 open
    assert (ends["read_uncommitted"], ends["read_committed"]) == (11, 7)
    got = scrape(url)
    assert got[lag_key] == ends["read_uncommitted"] - ends["read_committed"]
    assert got[open_key] == 1
    assert state(got, "Ongoing") == 1 and state(got, "CompleteAbort") == 1
    assert completed(got, "commit") == 1 and completed(got, "abort") == 1
    assert got[("chronolog_transactions_aborted_by_timeout_total", ())] == 0

    held.commit_transaction(WAIT_S)
    hung = _transactional(broker.bootstrap, timeout_ms=1500)
    _send(hung, topic, 1)  # and never ended: the coordinator aborts it after 1.5 s
    deadline = time.monotonic() + WAIT_S
    while True:
        got = scrape(url)
        # counted when its abort is stored, then completed once its marker is written
        if completed(got, "abort") >= 2:
            break
        assert time.monotonic() < deadline, "the hung transaction was not aborted"
        time.sleep(0.2)
    assert got[("chronolog_transactions_aborted_by_timeout_total", ())] == 1
    assert completed(got, "commit") == 2 and completed(got, "abort") == 2
    assert state(got, "Ongoing") == 0 and state(got, "CompleteCommit") == 1
    assert state(got, "CompleteAbort") == 2
    assert got[lag_key] == 0 and got[open_key] == 0


def test_metrics_port_in_use_stops_the_start(broker_factory):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match="exited with status 1") as failed:
            broker_factory({"metrics.listener": f"http://127.0.0.1:{port}"})
    assert "cannot start" in str(failed.value)
