"""Kafka 4.1.1's console tools against chronolog (issue #34 item 3): kafka-console-producer and
kafka-console-consumer, kafka-producer-perf-test and kafka-consumer-perf-test, each the main class
Kafka's script runs, from build/jvm's jars. What chronolog stored, read back by kafka-python, is
the oracle for what the tools say they wrote and read. Each JVM start costs 2-4 s on a loaded
2-core machine: the file costs about 30 s."""

from __future__ import annotations

import re
import time

import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer, TopicPartition

from tests.integration.clients import create_topic, kp_consume_all, topic_name
from tests.oracle.kafka_oracle import run_kafka_tool

pytestmark = pytest.mark.kafka_oracle

CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"

PARTITIONS = 3
LINES = 30
# ProducerPerformance's bounded run: 20,000 records of 100 bytes at 10,000 a second (2 s).
PERF_RECORDS = 20_000
PERF_THROUGHPUT = 10_000
# ProducerPerformance's summary line (its printTotal).
PERF_TOTAL = re.compile(r"^(\d+) records sent, [\d.]+ records/sec .* ms 99\.9th\.$", re.M)


def stored(bootstrap: str, topic: str) -> dict[tuple[int, int], object]:
    """Every record chronolog holds for the topic, by (partition, offset)."""
    return {
        (p, r.offset): r for p in range(PARTITIONS) for r in kp_consume_all(bootstrap, topic, p)
    }


def test_console_producer_keys_and_headers_read_back_by_the_console_consumer(broker_factory):
    broker = broker_factory()
    topic = topic_name("console")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    # key, headers and value as LineMessageReader parses them (parse.key, parse.headers):
    # headers<TAB>key<TAB>value, headers "k:v" separated by commas.
    sent = {
        (f"key-{i % 7}", f"value-{i}"): [("trace", f"t{i}"), ("n", str(i))] for i in range(LINES)
    }
    lines = "".join(
        f"{','.join(f'{k}:{v}' for k, v in headers)}\t{key}\t{value}\n"
        for (key, value), headers in sent.items()
    )
    before_ms = int(time.time() * 1000)
    run_kafka_tool(
        CONSOLE_PRODUCER,
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--producer-property",
        "acks=all",
        "--property",
        "parse.key=true",
        "--property",
        "parse.headers=true",
        input=lines,
    )
    after_ms = int(time.time() * 1000)

    records = stored(broker.bootstrap, topic)
    got = {
        (r.key.decode(), r.value.decode()): [(k, v.decode()) for k, v in r.headers]
        for r in records.values()
    }
    assert got == sent
    for (partition, _), r in records.items():
        assert r.timestamp_type == 0 and before_ms <= r.timestamp <= after_ms, r  # CreateTime
    # The Java producer's partitioner: one key, one partition.
    by_key: dict[bytes, set[int]] = {}
    for (partition, _), r in records.items():
        by_key.setdefault(r.key, set()).add(partition)
    assert all(len(parts) == 1 for parts in by_key.values()), by_key

    done = run_kafka_tool(
        CONSOLE_CONSUMER,
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        str(LINES),
        "--timeout-ms",
        "60000",
        *(
            arg
            for prop in ("timestamp", "partition", "offset", "headers", "key")
            for arg in ("--property", f"print.{prop}=true")
        ),
    )
    printed = done.stdout.splitlines()
    # DefaultMessageFormatter's fields, tab-separated, headers "k:v" comma-separated.
    expected = {
        "\t".join(
            (
                f"CreateTime:{r.timestamp}",
                f"Partition:{partition}",
                f"Offset:{offset}",
                ",".join(f"{k}:{v.decode()}" for k, v in r.headers),
                r.key.decode(),
                r.value.decode(),
            )
        )
        for (partition, offset), r in records.items()
    }
    assert sorted(printed) == sorted(expected), done.stderr[-2000:]
    assert f"Processed a total of {LINES} messages" in done.stderr


def test_console_consumer_read_committed_skips_an_aborted_transaction(broker_factory):
    """kafka-console-consumer --isolation-level read_committed over a committed, an aborted and a
    committed transaction (confluent-kafka's transactional producer, one partition) prints the
    committed values only, in order; read_uncommitted prints all three."""
    broker = broker_factory()
    topic = topic_name("console-txn")
    create_topic(broker.bootstrap, topic)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": f"console-{topic}"}
    )
    producer.init_transactions(30)
    for name, commit in (("a", True), ("b", False), ("c", True)):
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, value=f"{name}{i}".encode())
        producer.flush(30)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    committed = [f"{name}{i}" for name in "ac" for i in range(5)]
    everything = [f"{name}{i}" for name in "abc" for i in range(5)]

    for isolation, expected in (("read_committed", committed), ("read_uncommitted", everything)):
        done = run_kafka_tool(
            CONSOLE_CONSUMER,
            "--bootstrap-server",
            broker.bootstrap,
            "--topic",
            topic,
            "--from-beginning",
            "--isolation-level",
            isolation,
            "--max-messages",
            str(len(expected)),
            "--timeout-ms",
            "60000",
        )
        # --max-messages stops it after as many as expected: an aborted one would be among them.
        assert done.stdout.splitlines() == expected, (isolation, done.stderr[-2000:])


def count_records(bootstrap: str, topic: str, isolation: str) -> tuple[int, int]:
    """The records kafka-python reads from the beginning to the end of every partition (the
    last stable offset, for read_committed), and the sum of those ends (markers included)."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level=isolation,
    )
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        count = 0
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"read {count} records, not yet at {ends}"
            count += sum(len(batch) for batch in consumer.poll(timeout_ms=500).values())
        return count, sum(ends.values())
    finally:
        consumer.close()


def perf_test_totals(output: str) -> int:
    """The records ProducerPerformance reports sent in its summary line."""
    totals = PERF_TOTAL.findall(output)
    assert len(totals) == 1, output[-3000:]
    return int(totals[0])


def consumer_perf_messages(done) -> int:
    """data.consumed.in.nMsg from ConsumerPerformance's stats (a header line, then values)."""
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    header = [h.strip() for h in lines[-2].split(",")]
    values = [v.strip() for v in lines[-1].split(",")]
    assert header[4] == "data.consumed.in.nMsg", done.stdout[-2000:]
    return int(values[4])


@pytest.mark.parametrize("transactional", [False, True], ids=["plain", "transactional"])
def test_producer_and_consumer_perf_tests(broker_factory, tmp_path, transactional):
    """kafka-producer-perf-test sends a bounded run (acks=all; with --transactional-id, a commit
    every 500 ms), chronolog holds exactly that many records, and kafka-consumer-perf-test
    (read_committed for the transactional run) reads them all."""
    broker = broker_factory()
    topic = topic_name("perf")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    extra = ["--transactional-id", f"perf-{topic}", "--transaction-duration-ms", "500"]
    done = run_kafka_tool(
        PRODUCER_PERF,
        "--topic",
        topic,
        "--num-records",
        str(PERF_RECORDS),
        "--record-size",
        "100",
        "--throughput",
        str(PERF_THROUGHPUT),
        "--producer-props",
        f"bootstrap.servers={broker.bootstrap}",
        "acks=all",
        *(extra if transactional else ()),
    )
    assert perf_test_totals(done.stdout) == PERF_RECORDS
    # Its send callback prints any failed send's exception.
    assert "Exception" not in done.stderr, done.stderr[-3000:]

    isolation = "read_committed" if transactional else "read_uncommitted"
    records, end_offsets = count_records(broker.bootstrap, topic, isolation)
    assert records == PERF_RECORDS
    # A transaction's COMMIT marker takes an offset in each partition it wrote to.
    assert end_offsets > records if transactional else end_offsets == records

    config = tmp_path / "consumer.properties"
    config.write_text(f"isolation.level={isolation}\n")
    done = run_kafka_tool(
        CONSUMER_PERF,
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--messages",
        str(PERF_RECORDS),
        "--timeout",
        "60000",
        "--consumer.config",
        str(config),
    )
    assert "WARNING: Exiting before consuming" not in done.stdout, done.stdout[-2000:]
    assert consumer_perf_messages(done) == PERF_RECORDS
