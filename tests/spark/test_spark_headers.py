"""Record headers through Spark: includeHeaders on read, a headers column on write, and the
stored format (record batches read natively, with Fetch v4+)."""

from __future__ import annotations

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from pyspark.sql import functions as F

from protocol import iter_shallow
from pyspark_chronolog.client import BrokerClient
from pyspark_chronolog.options import parse_connect
from tests.spark.spark_helpers import new_topic


def read(spark, broker, topic, **options):
    reader = (
        spark.read.format("chronolog")
        .option("bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
    )
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def test_headers_from_a_real_producer_with_include_headers(spark, broker):
    topic = new_topic(broker, 2)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, compression_type="zstd", linger_ms=5
    )
    sent = {}
    for i in range(200):
        headers = [("n", b"%d" % i), ("empty", b"")] if i % 2 else []
        producer.send(topic, value=b"v%d" % i, partition=i % 2, headers=headers)
        sent[b"v%d" % i] = [(k, v) for k, v in headers]
    producer.flush()
    producer.close()
    with BrokerClient(parse_connect({"bootstrap.servers": broker.bootstrap})) as client:
        stored = client.fetch((topic, 0), 0, 1 << 20).record_set
    assert {e.magic for e in iter_shallow(stored)} == {2}  # batches, read as stored
    df = read(spark, broker, topic, includeHeaders="true")
    assert df.schema["headers"].dataType.simpleString() == "array<struct<key:string,value:binary>>"
    got = {
        bytes(r.value): [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers]
        for r in df.collect()
    }
    assert got == sent
    assert "headers" not in read(spark, broker, topic).columns  # off by default, as in Spark


def test_write_headers_then_read_them_back(spark, broker):
    topic = new_topic(broker, 3)
    rows = [
        (b"k%d" % i, b"v%d" % i, [(f"h{j}", b"x" * j if j else None) for j in range(i % 3)])
        for i in range(120)
    ]
    schema = "key binary, value binary, headers array<struct<key:string,value:binary>>"
    df = spark.createDataFrame(rows, schema)
    (
        df.write.format("chronolog")
        .option("bootstrap.servers", broker.bootstrap)
        .option("topic", topic)
        .mode("append")
        .save()
    )
    back = read(spark, broker, topic, includeHeaders="true").select("key", "value", "headers")
    got = sorted(
        (
            bytes(r.key),
            bytes(r.value),
            [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers],
        )
        for r in back.collect()
    )
    assert got == sorted(rows)
    # and a Kafka client sees the same headers
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=None, consumer_timeout_ms=2000
    )
    tps = [TopicPartition(topic, p) for p in range(3)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    seen = {r.value: [(k, v) for k, v in r.headers] for r in consumer}
    consumer.close()
    assert seen == {v: h for _, v, h in rows}


def test_a_headers_column_of_the_wrong_type_is_refused(spark, broker):
    import pytest

    topic = new_topic(broker, 1)
    df = spark.range(1).select(F.lit(b"v").alias("value"), F.lit("x").alias("headers"))
    with pytest.raises(Exception, match="array<struct<key:string,value:binary>>"):
        (
            df.write.format("chronolog")
            .option("bootstrap.servers", broker.bootstrap)
            .option("topic", topic)
            .mode("append")
            .save()
        )
