"""Kafka's Java clients 4.1.1 against a chronolog broker, as a user of them would notice: the
producer with its defaults (idempotent, acks=all) gets every record acknowledged in order and
the broker keeps its producer state; a group consumer reads the records with their headers and
commits; ``offsetsForTimes`` / ``beginningOffsets`` / ``endOffsets`` and Admin ``listOffsets``
(earliest, latest, max timestamp, by timestamp) over many segments equal brute force over the
records as produced (tests/oracle/scenarios.py).

One Java client JVM (JavaClients) serves the module; the broker is the session's ``broker``
fixture (tests/conftest.py).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from tests.integration.clients import topic_name
from tests.oracle.kafka_oracle import JavaClients
from tests.oracle.scenarios import first_at_or_after, max_timestamp, query_times, timed_records

pytestmark = pytest.mark.kafka_oracle


@pytest.fixture(scope="module")
def clients(broker):
    with JavaClients(broker.bootstrap) as java:
        yield java


def test_idempotent_producer_with_defaults(clients):
    topic = topic_name("jvm-idem")
    clients.call("create_topic", topic=topic, partitions=3, configs={"retention.ms": "-1"})
    records = timed_records(90)
    acks = clients.call("produce", topic=topic, records=records, flush_every=10)["records"]

    by_partition: dict[int, list[tuple[dict, dict]]] = defaultdict(list)
    for record, ack in zip(records, acks):
        assert ack["timestamp"] == record["timestamp"]
        by_partition[ack["partition"]].append((record, ack))
    assert len(by_partition) == 3, "the default partitioner spreads 90 keys over 3 partitions"
    producer_ids = set()
    for partition, sent in by_partition.items():
        assert [ack["offset"] for _, ack in sent] == list(range(len(sent)))
        stored = clients.call("read_partition", topic=topic, partition=partition)["records"]
        assert [(r["key"], r["value"], r["timestamp"], r["headers"]) for r in stored] == [
            (r["key"], r["value"], r["timestamp"], r["headers"]) for r, _ in sent
        ]
        (producer,) = clients.call("describe_producers", topic=topic, partition=partition)[
            "producers"
        ]
        assert producer["producer_id"] >= 0 and producer["producer_epoch"] >= 0
        assert producer["last_sequence"] == len(sent) - 1
        producer_ids.add(producer["producer_id"])
    assert len(producer_ids) == 1, "one producer, one producer id on every partition"


def test_group_consumer_reads_headers(clients):
    topic = topic_name("jvm-headers")
    clients.call("create_topic", topic=topic, partitions=2, configs={"retention.ms": "-1"})
    records = timed_records(40)
    for i, r in enumerate(records):
        r["partition"] = i % 2
        r["headers"] += [["trace", "a"], ["trace", "b"], ["empty", ""], ["nil", None]]
        if i % 10 == 9:
            r["value"] = None
    acks = clients.call("produce", topic=topic, records=records, flush_every=4)["records"]
    sent = {
        (a["partition"], a["offset"]): (r["key"], r["value"], r["timestamp"], r["headers"])
        for r, a in zip(records, acks)
    }

    answer = clients.call("consume_group", topic=topic, group=f"{topic}-g", count=len(records))
    read = {
        (r["partition"], r["offset"]): (r["key"], r["value"], r["timestamp"], r["headers"])
        for r in answer["records"]
    }
    assert len(answer["records"]) == len(records)
    assert read == sent
    assert {r["timestamp_type"] for r in answer["records"]} == {"CreateTime"}
    assert answer["committed"] == {"0": 20, "1": 20}


def test_offsets_by_time_over_segments_equal_brute_force(clients, broker):
    topic = topic_name("jvm-times")
    clients.call(
        "create_topic",
        topic=topic,
        partitions=2,
        configs={"retention.ms": "-1", "segment.bytes": "8192"},
    )
    records = timed_records(300, value_bytes=200)
    for i, r in enumerate(records):
        r["partition"] = i % 2
    acks = clients.call("produce", topic=topic, records=records, flush_every=7)["records"]
    stored: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for ack in acks:
        stored[ack["partition"]].append((ack["offset"], ack["timestamp"]))
    if not broker.external:
        segments = sorted((Path(broker.log_dir) / f"{topic}-0").glob("*.log"))
        assert len(segments) >= 4, "the scenario should span several segments"

    asked = query_times([r["timestamp"] for r in records])
    answer = clients.call("consumer_offsets", topic=topic, partitions=[0, 1], timestamps=asked)
    assert answer["beginning"] == {"0": 0, "1": 0}
    assert answer["end"] == {"0": 150, "1": 150}
    for partition in (0, 1):
        found = [
            None if a is None else (a["offset"], a["timestamp"])
            for a in answer["for_times"][str(partition)]
        ]
        assert found == [first_at_or_after(stored[partition], t) for t in asked]

    # Admin.listOffsets, one request per query: every tenth time only.
    some = asked[::10] + [asked[-1]]
    queries = [[0, "earliest"], [0, "latest"], [0, "max_timestamp"]] + [[0, t] for t in some]
    offsets = clients.call("list_offsets", topic=topic, queries=queries)["offsets"]
    got = [(o["offset"], o["timestamp"]) for o in offsets]
    expected = [(0, -1), (150, -1), max_timestamp(stored[0])] + [
        first_at_or_after(stored[0], t) or (-1, -1) for t in some
    ]
    assert got == expected
