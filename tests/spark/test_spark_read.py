"""spark.read against a real broker: time windows via ListOffsets, compared with kafka-python
reading everything (the brute-force oracle)."""

import os
import random
import time

import pytest

from protocol import iter_shallow
from pyspark_chronolog.client import BrokerClient
from pyspark_chronolog.options import EARLIEST, parse_connect
from tests.spark.spark_helpers import consume_all, new_topic, produce_messages, spark_rows


def read(spark, broker, topic, **options):
    reader = spark.read.format("chronolog").option("bootstrap.servers", broker.bootstrap)
    reader = reader.option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def fill(broker, topic, partitions, count, *, step=(0, 1, 7, 50), jitter=0, seed=1):
    """``count`` messages per partition, CreateTime stepping forward from an hour ago (with
    ties), optionally out of order by up to ``jitter`` ms; some null keys and empty values."""
    rng = random.Random(seed)
    base = int(time.time() * 1000) - 3_600_000
    for p in range(partitions):
        ts, msgs = base, []
        for i in range(count):
            ts += rng.choice(step)
            key = None if i % 5 == 0 else f"k{i % 13}".encode()
            msgs.append((key, os.urandom(rng.randrange(0, 40)), ts + rng.randint(-jitter, jitter)))
        produce_messages(broker, topic, p, msgs, per_request=rng.choice([1, 7, 20]))


def test_create_time_windows_across_segments_and_partitions(spark, broker):
    topic = new_topic(broker, 3, segment_bytes=2048)
    fill(broker, topic, 3, 400)
    everything = consume_all(broker, topic)
    assert len(everything) == 1200
    stamps = sorted(m[4] for m in everything)
    start, end = stamps[300], stamps[900]  # boundaries on existing (tied) timestamps
    got = spark_rows(
        read(
            spark,
            broker,
            topic,
            startingTimestamp=start,
            endingTimestamp=end,
            maxRecordsPerPartition=90,
        )
    )
    assert got == [m for m in everything if start <= m[4] < end]
    assert len(got) >= 550
    # a window that starts before the first message and ends after the last one: everything
    got = spark_rows(
        read(
            spark,
            broker,
            topic,
            startingTimestamp=stamps[0] - 1000,
            endingTimestamp=stamps[-1] + 1000,
        )
    )
    assert got == everything


def test_start_after_every_message(spark, broker):
    topic = new_topic(broker, 2, segment_bytes=2048)
    fill(broker, topic, 2, 30)
    late = int(time.time() * 1000)
    with pytest.raises(
        Exception,
        match=rf"{topic}\[0\] has no message with timestamp >= {late}"
        r".*startingOffsetsByTimestampStrategy=latest",
    ):
        read(spark, broker, topic, startingTimestamp=late).collect()
    assert (
        read(
            spark,
            broker,
            topic,
            startingTimestamp=late,
            startingOffsetsByTimestampStrategy="latest",
        ).count()
        == 0
    )


def test_out_of_order_create_time_keeps_only_window_rows(spark, broker):
    """With out-of-order CreateTime the range is [first offset with ts >= start, first offset
    with ts >= end): rows in it outside the window are dropped; nothing past its end is read."""
    topic = new_topic(broker, 1, segment_bytes=2048)
    fill(broker, topic, 1, 500, step=(20,), jitter=45, seed=5)
    everything = consume_all(broker, topic)
    stamps = sorted(m[4] for m in everything)
    start = stamps[100] + 3
    # end at a message followed by an older one, so a late message exists past the end offset
    end = next(everything[i][4] for i in range(400, 499) if everything[i + 1][4] < everything[i][4])
    end_offset = min(m[1] for m in everything if m[4] >= end)
    got = spark_rows(read(spark, broker, topic, startingTimestamp=start, endingTimestamp=end))
    assert got == [m for m in everything if start <= m[4] < end and m[1] < end_offset]
    late = [m for m in everything if start <= m[4] < end and m[1] >= end_offset]
    assert len(got) > 250 and late, "the data should contain late messages past the end offset"


def test_log_append_time_window(spark, broker):
    topic = new_topic(broker, 2, segment_bytes=1024, message_timestamp_type="LogAppendTime")
    for round_ in range(8):
        for p in range(2):
            produce_messages(
                broker, topic, p, [(b"k", b"v%d" % i, 0) for i in range(25)], per_request=5
            )
        time.sleep(0.03)
    everything = consume_all(broker, topic)
    assert {m[5] for m in everything} == {1}
    stamps = sorted({m[4] for m in everything})
    start, end = stamps[len(stamps) // 4], stamps[3 * len(stamps) // 4]
    got = spark_rows(read(spark, broker, topic, startingTimestamp=start, endingTimestamp=end))
    want = [m for m in everything if start <= m[4] < end]
    assert got == want and len(want) > 50


def test_offsets_json_and_unknown_topic(spark, broker):
    topic = new_topic(broker, 2)
    fill(broker, topic, 2, 40)
    everything = consume_all(broker, topic)
    df = read(
        spark,
        broker,
        topic,
        startingOffsets='{"%s": {"0": 5, "1": -2}}' % topic,
        endingOffsets='{"%s": {"0": -1, "1": 17}}' % topic,
        maxRecordsPerPartition=10,
    )
    assert df.rdd.getNumPartitions() == 4 + 2  # 35 and 17 offsets, split by 10
    got = spark_rows(df)
    assert got == [m for m in everything if (m[0] == 0 and m[1] >= 5) or (m[0] == 1 and m[1] < 17)]
    with pytest.raises(Exception, match="unknown topic 'no-such-topic'"):
        read(spark, broker, "no-such-topic").collect()
    with pytest.raises(Exception, match=r"must give every partition.*missing %s\[1\]" % topic):
        read(spark, broker, topic, startingOffsets='{"%s": {"0": 1}}' % topic).collect()


def test_offsets_deleted_by_retention(spark, broker_factory):
    broker = broker_factory(log_retention_check_interval_ms=100)
    topic = new_topic(broker, 1, segment_bytes=1024, retention_ms=600_000)
    old = int(time.time() * 1000) - 7_200_000
    produce_messages(
        broker, topic, 0, [(None, b"old-%d" % i, old + i) for i in range(200)], per_request=10
    )
    produce_messages(broker, topic, 0, [(None, b"new", int(time.time() * 1000))])
    with BrokerClient(parse_connect({"bootstrap.servers": broker.bootstrap})) as client:
        deadline = time.monotonic() + 20
        while client.list_offsets({(topic, 0): EARLIEST})[(topic, 0)][1] == 0:
            assert time.monotonic() < deadline, "retention did not delete old segments"
            time.sleep(0.1)
    options = {"startingOffsets": '{"%s": {"0": 0}}' % topic}
    with pytest.raises(
        Exception,
        match=rf"{topic}\[0\]: offsets 0\.\.\d+ were deleted by "
        r"retention.*failOnDataLoss=false",
    ):
        read(spark, broker, topic, **options).collect()
    got = spark_rows(read(spark, broker, topic, failOnDataLoss="false", **options))
    assert got == consume_all(broker, topic) and got[-1][3] == b"new"


def test_compressed_sets_from_a_real_producer(spark, broker):
    """kafka-python's producer with gzip (CreateTime) and snappy (LogAppendTime topic): one
    subscribe read of both equals what kafka-python's consumer reads."""
    from kafka import KafkaProducer

    gzip_topic = new_topic(broker, 2, segment_bytes=4096)
    snappy_topic = new_topic(broker, 1, segment_bytes=4096, message_timestamp_type="LogAppendTime")
    for topic, codec in ((gzip_topic, "gzip"), (snappy_topic, "snappy")):
        producer = KafkaProducer(
            bootstrap_servers=broker.bootstrap,
            api_version=(0, 10, 1),
            compression_type=codec,
            linger_ms=5,
            batch_size=2048,
        )
        for i in range(300):
            producer.send(topic, key=b"k%d" % (i % 7) if i % 3 else None, value=b"x" * (i % 50))
        producer.flush()
        producer.close()
    with BrokerClient(parse_connect({"bootstrap.servers": broker.bootstrap})) as client:
        for topic, codec in ((gzip_topic, 1), (snappy_topic, 2)):
            stored = client.fetch((topic, 0), 0, 1 << 20).record_set
            assert {e.codec for e in iter_shallow(stored)} == {codec}
    expected = sorted(
        [(gzip_topic, *m) for m in consume_all(broker, gzip_topic)]
        + [(snappy_topic, *m) for m in consume_all(broker, snappy_topic)]
    )
    df = (
        spark.read.format("chronolog")
        .option("bootstrap.servers", broker.bootstrap)
        .option("subscribe", f"{gzip_topic},{snappy_topic}")
        .load()
    )
    rows = df.selectExpr(
        "topic",
        "partition",
        "offset",
        "key",
        "value",
        "unix_millis(timestamp) AS ts",
        "timestampType",
    ).collect()
    got = sorted(
        (
            r.topic,
            r.partition,
            r.offset,
            None if r.key is None else bytes(r.key),
            bytes(r.value),
            r.ts,
            r.timestampType,
        )
        for r in rows
    )
    assert got == expected and len(got) == 600
