"""Spark finds the source by name and reports broker problems in words."""

import socket

import pytest

from pyspark_chronolog import SPARK_SCHEMA


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_auto_discovered_with_kafka_source_schema(spark):
    df = (
        spark.read.format("chronolog")
        .option("bootstrap.servers", "127.0.0.1:1")
        .option("topic", "t")
        .load()
    )
    assert df.schema.simpleString() == spark.createDataFrame([], SPARK_SCHEMA).schema.simpleString()
    assert df.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
    ]


def test_broker_down_is_explained(spark):
    port = closed_port()
    df = (
        spark.read.format("chronolog")
        .option("bootstrap.servers", f"127.0.0.1:{port}")
        .option("topic", "t")
        .load()
    )
    with pytest.raises(Exception) as info:
        df.count()
    text = str(info.value)
    assert f"cannot connect to chronolog broker at 127.0.0.1:{port}" in text
    assert "is it running" in text


def test_bad_option_fails_at_planning(spark):
    df = (
        spark.read.format("chronolog")
        .option("bootstrap.servers", "127.0.0.1:1")
        .option("topic", "t")
        .option("startingTimestamp", "20")
        .option("endingTimestamp", "10")
        .load()
    )
    with pytest.raises(Exception, match="endingTimestamp=10 is before startingTimestamp=20"):
        df.collect()
