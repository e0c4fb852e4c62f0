"""readStream (micro-batches, checkpoints, maxOffsetsPerTrigger, availableNow) and write /
writeStream against a real broker."""

import datetime as dt
import threading
import time

from pyspark.sql import functions as F

from pyspark_chronolog.writer import partition_for_key
from tests.spark.spark_helpers import consume_all, new_topic, produce_messages, spark_rows
from tests.waiting import wait_for


class Collector:
    """foreachBatch sink: remembers every micro-batch's (partition, offset, value) rows."""

    def __init__(self):
        self.batches: list[list[tuple]] = []
        self.last_batch_id = -1
        self.lock = threading.Lock()

    def __call__(self, df, batch_id):
        rows = [
            (r.partition, r.offset, bytes(r.value))
            for r in df.select("partition", "offset", "value").collect()
        ]
        with self.lock:
            self.batches.append(rows)
            self.last_batch_id = batch_id

    @property
    def rows(self):
        with self.lock:
            return sorted(r for b in self.batches for r in b)


def stream(spark, broker, topic, **options):
    reader = (
        spark.readStream.format("chronolog")
        .option("bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
    )
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def values(broker, topic, partition, start, count):
    now = int(time.time() * 1000)
    produce_messages(
        broker,
        topic,
        partition,
        [(b"k", b"m%d" % i, now) for i in range(start, start + count)],
        per_request=10,
    )


def test_stream_picks_up_new_messages_limits_batches_and_resumes(spark, broker, tmp_path):
    topic = new_topic(broker, 2, segment_bytes=2048)
    values(broker, topic, 0, 0, 40)
    values(broker, topic, 1, 0, 30)
    checkpoint = str(tmp_path / "checkpoint")

    first = Collector()
    query = (
        stream(spark, broker, topic, startingOffsets="earliest", maxOffsetsPerTrigger=25)
        .writeStream.foreachBatch(first)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:
        wait_for(lambda: len(first.rows) == 70, "70 rows", timeout=90)
        values(broker, topic, 1, 30, 15)  # produced between micro-batches
        wait_for(lambda: len(first.rows) == 85, "85 rows", timeout=90)
        # Spark commits a batch's offsets after its sink ran: stopping earlier would (rightly)
        # replay that batch on restart, so wait for the progress report that follows the commit.
        wait_for(
            lambda: (query.lastProgress or {}).get("batchId", -1) >= first.last_batch_id,
            "the progress report after the last batch",
            timeout=90,
        )
    finally:
        query.stop()
    assert all(len(b) <= 25 for b in first.batches)
    assert first.rows == sorted(
        [(0, i, b"m%d" % i) for i in range(40)] + [(1, i, b"m%d" % i) for i in range(45)]
    )

    # restart from the checkpoint: only what arrived since, in batches of at most 7
    values(broker, topic, 0, 40, 12)
    values(broker, topic, 1, 45, 4)
    second = Collector()
    query = (
        stream(spark, broker, topic, startingOffsets="earliest", maxOffsetsPerTrigger=7)
        .writeStream.foreachBatch(second)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180)
    assert second.rows == sorted(
        [(0, i, b"m%d" % i) for i in range(40, 52)] + [(1, i, b"m%d" % i) for i in range(45, 49)]
    )
    sizes = [len(b) for b in second.batches if b]
    assert max(sizes) <= 7 and len(sizes) >= 3, sizes


def test_batch_write_then_read_returns_the_same_rows(spark, broker):
    # segments smaller than a task's sets: the writer must split on RECORD_LIST_TOO_LARGE
    # CreateTimes from January 2026: kept from the shared broker's retention pass (7 days)
    topic = new_topic(broker, 3, segment_bytes=2048, retention_ms=-1)
    base = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    rows = [
        (
            f"key-{i % 9}".encode() if i % 4 else None,
            b"value-%d" % i,
            (i % 3) if i % 5 == 0 else None,
            base + dt.timedelta(milliseconds=17 * i),
        )
        for i in range(300)
    ]
    df = spark.createDataFrame(
        rows, "key binary, value binary, partition int, timestamp timestamp"
    ).repartition(2)
    (
        df.write.format("chronolog")
        .mode("append")
        .option("bootstrap.servers", broker.bootstrap)
        .option("topic", topic)
        .save()
    )
    stored = consume_all(broker, topic)
    assert len(stored) == 300
    by_value = {m[3]: m for m in stored}
    base_ms = int(base.timestamp() * 1000)
    for i, (key, value, partition, _) in enumerate(rows):
        m = by_value[value]
        assert (m[2], m[4], m[5]) == (key, base_ms + 17 * i, 0)
        if partition is not None:
            assert m[0] == partition
        elif key is not None:
            assert m[0] == partition_for_key(key, 3)
    # and the connector reads back exactly what kafka-python sees
    back = (
        spark.read.format("chronolog")
        .option("bootstrap.servers", broker.bootstrap)
        .option("topic", topic)
        .load()
    )
    assert spark_rows(back) == stored


def test_stream_write_and_bad_write_input(spark, broker, tmp_path):
    source = new_topic(broker, 1)
    sink = new_topic(broker, 2)
    values(broker, source, 0, 0, 20)
    query = (
        stream(spark, broker, source, startingOffsets="earliest")
        .select(F.col("key"), F.upper(F.col("value").cast("string")).alias("value"))
        .writeStream.format("chronolog")
        .option("bootstrap.servers", broker.bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180)
    assert sorted(m[3] for m in consume_all(broker, sink)) == sorted(b"M%d" % i for i in range(20))
    no_value = spark.createDataFrame([(b"k",)], "key binary")
    try:
        no_value.write.format("chronolog").mode("append").option(
            "bootstrap.servers", broker.bootstrap
        ).option("topic", sink).save()
    except Exception as exc:
        assert "needs a 'value' column" in str(exc)
    else:
        raise AssertionError("a DataFrame without value was written")


def test_rejected_produce_fails_the_write_with_the_reason(spark, broker):
    topic = new_topic(broker, 1, message_timestamp_difference_max_ms=60_000)
    old = dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)
    df = spark.createDataFrame([(b"v", old)], "value binary, timestamp timestamp")
    try:
        df.write.format("chronolog").mode("append").option(
            "bootstrap.servers", broker.bootstrap
        ).option("topic", topic).save()
    except Exception as exc:
        assert f"producing 1 messages to {topic}[0] failed: INVALID_TIMESTAMP" in str(exc)
    else:
        raise AssertionError("a write the broker rejected succeeded")
    assert consume_all(broker, topic) == []
