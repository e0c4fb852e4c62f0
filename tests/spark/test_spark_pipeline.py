"""pipeline.window_counts against a real broker, checked against a brute-force aggregation of
what kafka-python reads."""

import json
from collections import defaultdict

import pyarrow.parquet as pq

from pipeline.seed import seed
from pipeline.window_counts import run
from tests.spark.spark_helpers import consume_all, new_topic


def test_window_counts_to_parquet_and_topic(spark, broker, tmp_path):
    topic = new_topic(broker, 2, segment_bytes=16384)
    output = new_topic(broker, 1)
    seeded = seed(broker.bootstrap, topic, 3000, 10, batch=200)
    start = seeded["first_ms"] + 120_000 + 17  # mid-minute boundaries
    end = seeded["first_ms"] + 420_000 + 5
    summary = run(
        spark,
        bootstrap=broker.bootstrap,
        topic=topic,
        start_ms=start,
        end_ms=end,
        output_topic=output,
        parquet=str(tmp_path / "pq"),
    )

    want = defaultdict(lambda: [0, 0])
    for _, _, key, value, ts, _ in consume_all(broker, topic):
        if start <= ts < end:
            cell = want[(key, ts // 60_000 * 60_000)]
            cell[0] += 1
            cell[1] += len(value)
    assert summary["messages"] == sum(c[0] for c in want.values()) > 1000
    assert summary["rows"] == len(want)

    table = pq.read_table(tmp_path / "pq").to_pylist()
    got = {
        (r["key"], int(r["minute"].timestamp() * 1000)): [r["messages"], r["bytes"]] for r in table
    }
    assert got == dict(want)

    produced = consume_all(broker, output)
    assert len(produced) == len(want)
    for _, _, key, value, ts, _ in produced:
        doc = json.loads(value)
        assert doc["minute_ms"] == ts
        assert [doc["messages"], doc["bytes"]] == want[(key, ts)]


def test_kafka_source_gives_the_same_window(spark, broker, tmp_path):
    """--source kafka (Spark's own Kafka source) and chronolog's data source resolve the same
    window to the same offsets: the same rows, and the same summary from run()."""
    topic = new_topic(broker, 3, segment_bytes=8192)
    seeded = seed(broker.bootstrap, topic, 2000, 10, batch=150)
    start = seeded["first_ms"] + 90_000 + 11
    end = seeded["first_ms"] + 510_000 + 3
    summaries = {
        source: run(
            spark,
            bootstrap=broker.bootstrap,
            topic=topic,
            start_ms=start,
            end_ms=end,
            output_topic=None,
            parquet=str(tmp_path / source),
            source=source,
        )
        for source in ("chronolog", "kafka")
    }
    tables = {
        source: sorted(
            (r["key"], r["minute"], r["messages"], r["bytes"])
            for r in pq.read_table(tmp_path / source).to_pylist()
        )
        for source in summaries
    }
    assert tables["kafka"] == tables["chronolog"]
    assert summaries["kafka"] == {
        **summaries["chronolog"],
        "source": "kafka",
        "parquet": str(tmp_path / "kafka"),
    }
    # the window is a real slice: messages on both sides of it were left out
    in_window = sum(1 for m in consume_all(broker, topic) if start <= m[4] < end)
    assert 0 < summaries["kafka"]["messages"] == in_window < 2000
