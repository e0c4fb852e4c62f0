"""Spark's own Kafka source and sink (spark-sql-kafka-0-10 4.2.0 with kafka-clients 3.9.2, from
build/spark-kafka/) against a real chronolog broker: time-bounded batch reads equal brute force
over kafka-python's full read, df.write.format("kafka") round-trips keys, values and headers, a
Structured Streaming query runs across a broker restart and a new one resumes from its checkpoint,
every record in the sink exactly once, and read_committed hides aborted transactions."""

import json
import random
import time
import uuid

from confluent_kafka import Producer
from kafka import KafkaConsumer, TopicPartition

from tests.spark.spark_helpers import consume_all, new_topic, produce_messages
from tests.waiting import wait_for

PARTITIONS = 3


def kafka_read(spark, bootstrap: str, topic: str, **options):
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
    )
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def rows(df) -> list[tuple]:
    """Spark's Kafka rows in consume_all's shape (partition, offset, key, value, ts, type)."""
    picked = df.selectExpr(
        "partition", "offset", "key", "value", "unix_millis(timestamp) AS ts", "timestampType"
    ).collect()
    return sorted(
        (
            r.partition,
            r.offset,
            None if r.key is None else bytes(r.key),
            bytes(r.value),
            r.ts,
            r.timestampType,
        )
        for r in picked
    )


def first_offset_at(messages: list[tuple], partition: int, ts: int) -> int:
    """Brute force of ListOffsets by timestamp: the first offset of ``partition`` whose timestamp
    is >= ``ts``, or the partition's end when there is none."""
    mine = [m for m in messages if m[0] == partition]
    hits = [m[1] for m in mine if m[4] >= ts]
    return min(hits) if hits else max(m[1] for m in mine) + 1


def fill_out_of_order(broker, topic: str, count: int) -> None:
    """``count`` messages per partition over many 2 KiB segments, CreateTime stepping forward from
    an hour ago but jittered by up to 40 ms each way, so offset order and time order differ and
    a time bound is an offset bound, not a filter."""
    rng = random.Random(34)
    base = int(time.time() * 1000) - 3_600_000
    for p in range(PARTITIONS):
        msgs = []
        for i in range(count):
            key = None if i % 7 == 0 else f"k{i % 11}".encode()
            ts = base + p * 3 + i * 20 + rng.randint(-40, 40)
            msgs.append((key, f"p{p}-{i}-".encode() + b"x" * rng.randrange(40), ts))
        produce_messages(broker, topic, p, msgs, per_request=rng.choice([1, 9, 25]))


def test_timestamp_bounds_equal_brute_force(spark, broker):
    topic = new_topic(broker, PARTITIONS, segment_bytes=2048)
    fill_out_of_order(broker, topic, 300)
    everything = consume_all(broker, topic)
    assert len(everything) == PARTITIONS * 300
    stamps = sorted(m[4] for m in everything)
    start, end = stamps[150], stamps[700]

    def window(starts: dict[int, int], ends: dict[int, int]) -> list[tuple]:
        return [
            m
            for m in everything
            if first_offset_at(everything, m[0], starts[m[0]])
            <= m[1]
            < first_offset_at(everything, m[0], ends[m[0]])
        ]

    every = dict.fromkeys(range(PARTITIONS), start)
    until = dict.fromkeys(range(PARTITIONS), end)
    want = window(every, until)
    # the jitter makes the window differ from a timestamp filter: bounds are offsets
    assert want != [m for m in everything if start <= m[4] < end]
    assert len(want) > 400
    got = rows(
        kafka_read(spark, broker.bootstrap, topic, startingTimestamp=start, endingTimestamp=end)
    )
    assert got == want

    # only a start: to the end of every partition
    got = rows(kafka_read(spark, broker.bootstrap, topic, startingTimestamp=start))
    assert got == window(every, dict.fromkeys(range(PARTITIONS), stamps[-1] + 1))

    # a start per partition (one before every message, one mid-log, one past every message with
    # the "latest" strategy), against endingOffsetsByTimestamp per partition
    per_start = {0: stamps[0] - 1_000, 1: stamps[400], 2: stamps[-1] + 1_000}
    per_end = {0: stamps[200], 1: stamps[-1] + 1, 2: stamps[-1] + 2_000}
    got = rows(
        kafka_read(
            spark,
            broker.bootstrap,
            topic,
            startingOffsetsByTimestamp=_by_partition(topic, per_start),
            endingOffsetsByTimestamp=_by_partition(topic, per_end),
            startingOffsetsByTimestampStrategy="latest",
        )
    )
    want = window(per_start, per_end)
    assert {m[0] for m in want} == {0, 1} and got == want


def _by_partition(topic: str, stamps: dict[int, int]) -> str:
    """Spark's {topic: {partition: timestamp}} JSON option."""
    return json.dumps({topic: {str(p): ts for p, ts in stamps.items()}})


def test_write_format_kafka_round_trips_keys_values_headers(spark, broker):
    topic = new_topic(broker, PARTITIONS)
    sent = [
        (
            i % PARTITIONS,
            None if i % 5 == 0 else f"key-{i}".encode(),
            f"value-{i}".encode() * (i % 4),  # some empty values
            [("h", f"{i}".encode()), ("dup", b"a"), ("dup", None)] if i % 3 else [],
        )
        for i in range(60)
    ]
    # Spark's sink takes no timestamp column: its producer stamps CreateTime at send
    df = spark.createDataFrame(
        sent,
        "partition int, key binary, value binary, headers array<struct<key: string, value: binary>>",
    )
    (
        df.write.format("kafka")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", topic)
        .option("includeHeaders", "true")
        .save()
    )

    # kafka-python, independent of Spark, finds every record in the partition it was sent to
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False
    )
    try:
        parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        seen: list = []
        deadline = time.monotonic() + 60
        while len(seen) < len(sent) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                seen += records
    finally:
        consumer.close()
    oracle = sorted(
        (r.partition, r.offset, r.key, r.value, [(k, v) for k, v in r.headers], r.timestamp)
        for r in seen
    )

    def unordered(messages) -> list:
        return sorted(messages, key=repr)

    # two Spark tasks write each partition concurrently: compare each partition as a multiset
    assert unordered((p, k, v, h) for p, _, k, v, h, _ in oracle) == unordered(sent)

    # and Spark's source reads back what kafka-python read, headers included
    back = kafka_read(spark, broker.bootstrap, topic, includeHeaders="true").selectExpr(
        "partition", "offset", "key", "value", "headers", "unix_millis(timestamp) AS ts"
    )
    got = sorted(
        (
            r.partition,
            r.offset,
            None if r.key is None else bytes(r.key),
            bytes(r.value),
            [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers or []],
            r.ts,
        )
        for r in back.collect()
    )
    assert got == oracle


def test_stream_runs_across_a_broker_restart_and_resumes_from_its_checkpoint(
    spark, broker_factory, tmp_path
):
    chronolog = broker_factory()
    topic = new_topic(chronolog, PARTITIONS, segment_bytes=4096)
    base = int(time.time() * 1000) - 600_000
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def send(first: int, count: int) -> None:
        for p in range(PARTITIONS):
            msgs = [
                (f"k{i}".encode(), f"{p}-{i}".encode() * 5, base + i)
                for i in range(first, first + count)
            ]
            produce_messages(chronolog, topic, p, msgs, per_request=17)

    def start_query(trigger: dict):
        stream = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", chronolog.bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "200")  # several micro-batches per phase
            .load()
            .selectExpr("partition", "offset", "key", "value")
        )
        return (
            stream.writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", checkpoint)
            .trigger(**trigger)
            .start()
        )

    def sink() -> list[tuple]:
        if not (tmp_path / "out" / "_spark_metadata").exists():
            return []  # no micro-batch committed yet
        return sorted(
            (r.partition, r.offset, bytes(r.key), bytes(r.value))
            for r in spark.read.schema("partition int, offset long, key binary, value binary")
            .parquet(out)
            .collect()
        )

    def sink_holds(query, count: int) -> bool:
        if not query.isActive:  # a dead query fails the test at once, with Spark's reason
            raise RuntimeError(f"the streaming query stopped: {query.exception()}")
        return len(sink()) >= count

    # a running query: the broker stops and starts under it, with new records after the restart
    send(0, 150)
    query = start_query({"processingTime": "500 milliseconds"})
    try:
        wait_for(
            lambda: sink_holds(query, PARTITIONS * 150),
            "the first records in the sink",
            timeout=180,
            interval=1.0,
            transient=(AssertionError,),
        )
        chronolog.stop()
        chronolog.start()  # same log dir and port
        send(150, 100)
        wait_for(
            lambda: sink_holds(query, PARTITIONS * 250),
            "the records sent after the restart",
            timeout=180,
            interval=1.0,
            transient=(AssertionError,),
        )
    finally:
        query.stop()
    assert query.exception() is None

    # a new query on the same checkpoint reads only what came after it
    send(250, 50)
    query = start_query({"availableNow": True})
    assert query.awaitTermination(180), "the availableNow query did not finish in 180 s"
    assert query.exception() is None

    want = sorted((m[0], m[1], m[2], m[3]) for m in consume_all(chronolog, topic))
    assert len(want) == PARTITIONS * 300
    assert sink() == want  # every record once: nothing re-read, nothing skipped


def test_read_committed_hides_aborted_transactions(spark, broker):
    topic = new_topic(broker, 1)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": f"spark-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    plain = Producer({"bootstrap.servers": broker.bootstrap})

    def send(p: Producer, names: list[str]) -> None:
        for name in names:
            p.produce(topic, value=name.encode(), partition=0)
        assert p.flush(30) == 0

    send(plain, ["plain-1"])
    producer.begin_transaction()
    send(producer, ["committed-1", "committed-2"])
    producer.commit_transaction(30)
    producer.begin_transaction()
    send(producer, ["aborted-1", "aborted-2"])
    producer.abort_transaction(30)
    send(plain, ["plain-2"])

    def values(**options) -> list[str]:
        df = kafka_read(spark, broker.bootstrap, topic, **options)
        return [bytes(r.value).decode() for r in df.orderBy("offset").collect()]

    everything = ["plain-1", "committed-1", "committed-2", "aborted-1", "aborted-2", "plain-2"]
    assert values() == everything  # Spark leaves Kafka's consumer default, read_uncommitted
    assert values(**{"kafka.isolation.level": "read_committed"}) == [
        v for v in everything if not v.startswith("aborted")
    ]
