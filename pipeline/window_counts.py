"""Per-key message counts and bytes per minute over one time window of a topic.

    .venv/bin/python -m pipeline.window_counts --bootstrap 127.0.0.1:9092 --topic clicks \
        --last-minutes 60 --output-topic clicks-per-minute --parquet build/pipeline/clicks-per-minute

The window [start, end) is resolved to offsets by the broker's time index (ListOffsets v1), so
only that slice of each partition is fetched. `--source chronolog` (the default) reads through
pyspark_chronolog; `--source kafka` through Spark's own Kafka source (spark-sql-kafka-0-10, jars in
build/spark-kafka/ from `make spark-kafka`), which resolves the same window the same way. Results go to Parquet (overwritten) and, one
message per (key, minute), to the output topic: key = the key, value = JSON {"minute_ms",
"messages", "bytes"}, timestamp (CreateTime) = the minute's start.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F


SOURCES = ("chronolog", "kafka")
SPARK_KAFKA_JARS = Path(__file__).resolve().parents[1] / "build" / "spark-kafka"


def session(source: str = "chronolog") -> SparkSession:
    """A local[2] session; for the kafka source with Spark's Kafka jars (SystemExit saying what to
    run when they are not installed)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark_chronolog import ChronologDataSource

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("chronolog-window-counts")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if source == "kafka":
        jars = sorted(SPARK_KAFKA_JARS.glob("*.jar"))
        if not jars:
            raise SystemExit(
                f"--source kafka needs Spark's Kafka source jars in {SPARK_KAFKA_JARS}: "
                "run `make spark-kafka` first"
            )
        builder = builder.config("spark.jars", ",".join(str(j) for j in jars))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    # Registering explicitly also works when the job is not started from the repository root.
    spark.dataSource.register(ChronologDataSource)
    return spark


def per_minute(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    start_ms: int,
    end_ms: int,
    source: str = "chronolog",
) -> DataFrame:
    """(key, minute, messages, bytes) for messages with start_ms <= timestamp < end_ms."""
    if source == "kafka":
        reader = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
        )
    else:
        reader = (
            spark.read.format("chronolog")
            .option("bootstrap.servers", bootstrap)
            .option("topic", topic)
        )
    messages = (
        reader.option("startingTimestamp", str(start_ms))
        .option("endingTimestamp", str(end_ms))
        # an empty window is a result, not an error
        .option("startingOffsetsByTimestampStrategy", "latest")
        .load()
    )
    return (
        messages.groupBy("key", F.window("timestamp", "1 minute").start.alias("minute"))
        .agg(
            F.count(F.lit(1)).alias("messages"),
            F.sum(F.coalesce(F.length("value"), F.lit(0))).cast("long").alias("bytes"),
        )
        .orderBy("minute", "key")
    )


def run(
    spark: SparkSession,
    *,
    bootstrap: str,
    topic: str,
    start_ms: int,
    end_ms: int,
    output_topic: str | None,
    parquet: str | None,
    source: str = "chronolog",
) -> dict:
    result = per_minute(spark, bootstrap, topic, start_ms, end_ms, source).cache()
    rows = result.count()
    if parquet:
        result.write.mode("overwrite").parquet(parquet)
    if output_topic:
        (
            result.select(
                F.col("key"),
                F.to_json(
                    F.struct(F.unix_millis("minute").alias("minute_ms"), "messages", "bytes")
                ).alias("value"),
                F.col("minute").alias("timestamp"),
            )
            .write.format("chronolog")
            .mode("append")
            .option("bootstrap.servers", bootstrap)
            .option("topic", output_topic)
            .save()
        )
    totals = result.agg(F.sum("messages"), F.sum("bytes")).first()
    result.unpersist()
    return {
        "source": source,
        "topic": topic,
        "start_ms": start_ms,
        "end_ms": end_ms,
        "rows": rows,
        "messages": int(totals[0] or 0),
        "bytes": int(totals[1] or 0),
        "parquet": parquet,
        "output_topic": output_topic,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--topic", required=True)
    parser.add_argument(
        "--source",
        choices=SOURCES,
        default="chronolog",
        help="chronolog's data source (default) or Spark's own Kafka source",
    )
    window = parser.add_mutually_exclusive_group()
    window.add_argument(
        "--last-minutes",
        type=int,
        default=60,
        help="window = the last N minutes up to now (default 60)",
    )
    window.add_argument("--start-ms", type=int, help="window start, ms since the epoch")
    parser.add_argument("--end-ms", type=int, help="window end (exclusive); default now")
    parser.add_argument("--output-topic", help="default: <topic>-per-minute")
    parser.add_argument("--no-output-topic", action="store_true")
    parser.add_argument("--parquet", help="default: build/pipeline/<topic>-per-minute")
    args = parser.parse_args(argv)
    end_ms = args.end_ms if args.end_ms is not None else int(time.time() * 1000)
    start_ms = args.start_ms if args.start_ms is not None else end_ms - args.last_minutes * 60_000
    if end_ms < start_ms:
        parser.error(f"--end-ms {end_ms} is before the window start {start_ms}")
    spark = session(args.source)
    try:
        summary = run(
            spark,
            bootstrap=args.bootstrap,
            topic=args.topic,
            start_ms=start_ms,
            end_ms=end_ms,
            output_topic=None
            if args.no_output_topic
            else args.output_topic or f"{args.topic}-per-minute",
            parquet=args.parquet or f"build/pipeline/{args.topic}-per-minute",
            source=args.source,
        )
    finally:
        spark.stop()
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
