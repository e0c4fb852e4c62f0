"""Spark read throughput of the chronolog data source: rows/s for a 1,000,000-message read.

    .venv/bin/python bench/bench_spark.py                  # own broker, bench/results/spark.json
    .venv/bin/python bench/bench_spark.py --bootstrap 127.0.0.1:9092 --messages 200000

Starts a broker process (127.0.0.1, free port, temporary log dir) unless --bootstrap is given,
produces --messages messages (100-byte values, 8-byte keys) over --partitions partitions, then
times, --runs times each:
  spark  spark.read.format("chronolog") -> noop sink, local[2] (what a job sees)
  no-io  the same rows from an in-memory Arrow source -> noop sink (Spark's own ceiling)
  fetch  fetch + decode to Arrow of every range in this process, no Spark (connector ceiling)
  decode decode to Arrow of already fetched message sets (no I/O)
and writes medians and every run to bench/results/spark.json. Bounded: message count and a
timeout per Spark run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from protocol import ApiKey, ErrorCode, MessageSetBuilder  # noqa: E402
from pyspark_chronolog.arrow import decode  # noqa: E402
from pyspark_chronolog.client import BrokerClient, error_name  # noqa: E402
from pyspark_chronolog.options import parse_connect, parse_read  # noqa: E402
from pyspark_chronolog.planning import plan_batch  # noqa: E402
from pyspark_chronolog.reader import read_range  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(workdir: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "broker",
            "serve",
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override",
            f"log.dirs={workdir}/logs",
        ],
        cwd=REPO,
        stdout=open(f"{workdir}/broker.log", "wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"broker did not start; see {workdir}/broker.log")


def create_topic(client: BrokerClient, topic: str, partitions: int) -> None:
    conn = client._any_conn()
    body = conn.call(
        ApiKey.CREATE_TOPICS,
        0,
        {
            "topics": [
                {
                    "name": topic,
                    "num_partitions": partitions,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout_ms": 10000,
        },
    )
    code = body.topics[0].error_code
    if code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
        raise SystemExit(f"CreateTopics {topic}: {error_name(code)}")


def fill(bootstrap: str, topic: str, messages: int, partitions: int) -> float:
    value = b"v" * 100
    start = time.perf_counter()
    with BrokerClient(parse_connect({"bootstrap.servers": bootstrap})) as client:
        create_topic(client, topic, partitions)
        client.topics([topic])
        ts = int(time.time() * 1000)
        for first in range(0, messages, 10_000):
            sets = {}
            for p in range(partitions):
                builder = MessageSetBuilder(magic=2)
                for i in range(first + p, min(messages, first + 10_000), partitions):
                    builder.append(value, key=b"%08d" % i, timestamp=ts)
                sets[p] = builder.build()
            for p, result in client.produce(topic, sets, acks=1, timeout_ms=30_000).items():
                if result.error_code != ErrorCode.NONE:
                    raise SystemExit(f"produce {topic}[{p}]: {error_name(result.error_code)}")
    return time.perf_counter() - start


def _no_io_source():
    """A source yielding identical, pre-decoded batches of the same shape: the Spark + Arrow
    ceiling for these rows, without broker or fetches. Defined here so cloudpickle ships it by
    value to the workers."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class NoIoReader(DataSourceReader):
        def __init__(self, rows: int) -> None:
            self.rows = rows

        def partitions(self):
            return [InputPartition(self.rows // 2), InputPartition(self.rows - self.rows // 2)]

        def read(self, partition):
            builder = MessageSetBuilder(magic=2)
            for i in range(10_000):
                builder.append(b"v" * 100, key=b"%08d" % i, timestamp=1_700_000_000_000)
            batch, _ = decode(builder.build(), "bench", 0, start=0, end=2**62)
            left = partition.value
            while left > 0:
                yield batch.slice(0, min(left, batch.num_rows))
                left -= batch.num_rows

    class NoIoSource(DataSource):
        @classmethod
        def name(cls):
            return "chronolog_no_io"

        def schema(self):
            from pyspark_chronolog import SPARK_SCHEMA

            return SPARK_SCHEMA

        def reader(self, schema):
            return NoIoReader(int(self.options["rows"]))

    return NoIoSource


def _timed_noop(df, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        out.append(time.perf_counter() - start)
    return out


def spark_runs(
    bootstrap: str, topic: str, runs: int, messages: int
) -> tuple[list[float], list[float]]:
    """(chronolog read runs, no-I/O source runs), both local[2] into the noop sink."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from pyspark_chronolog import ChronologDataSource

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-spark")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(ChronologDataSource)
    spark.dataSource.register(_no_io_source())
    df = (
        spark.read.format("chronolog")
        .option("bootstrap.servers", bootstrap)
        .option("topic", topic)
        .load()
    )
    assert df.count() == messages, "read returned the wrong number of rows"  # warm-up
    no_io = spark.read.format("chronolog_no_io").option("rows", str(messages)).load()
    assert no_io.count() == messages
    read_s, no_io_s = [], []
    for _ in range(runs):  # alternate, so both see the same machine load
        read_s += _timed_noop(df, 1)
        no_io_s += _timed_noop(no_io, 1)
    spark.stop()
    return read_s, no_io_s


def fetch_runs(bootstrap: str, topic: str, runs: int) -> tuple[list[float], list[bytes]]:
    opts = parse_read({"bootstrap.servers": bootstrap, "topic": topic})
    with BrokerClient(opts.connect) as client:
        ranges = plan_batch(client, opts)
    out, sets = [], []
    for _ in range(runs):
        start = time.perf_counter()
        rows = sum(b.num_rows for r in ranges for b in read_range(opts, r))
        out.append(time.perf_counter() - start)
    # keep the raw sets of one partition for the decode-only figure
    with BrokerClient(opts.connect) as client:
        pos, r = ranges[0].start, ranges[0]
        while pos < r.end:
            res = client.fetch((r.topic, r.partition), pos, opts.max_partition_fetch_bytes)
            sets.append(res.record_set)
            _, pos = decode(res.record_set, r.topic, r.partition, start=pos, end=r.end)
    assert rows > 0
    return out, sets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--output", default=str(REPO / "bench/results/spark.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as workdir:
        proc = None
        bootstrap = args.bootstrap
        if not bootstrap:
            proc, bootstrap = start_broker(workdir)
        try:
            topic = f"bench-spark-{int(time.time())}"
            fill_s = fill(bootstrap, topic, args.messages, args.partitions)
            fetch_s, sets = fetch_runs(bootstrap, topic, args.runs)
            decode(sets[0], topic, 0, start=0, end=2**62)  # warm-up (lazy imports)
            decode_rows, start = 0, time.perf_counter()
            for record_set in sets:
                batch, _ = decode(record_set, topic, 0, start=0, end=2**62)
                decode_rows += batch.num_rows if batch is not None else 0
            decode_s = time.perf_counter() - start
            spark_s, no_io_s = spark_runs(bootstrap, topic, args.runs, args.messages)
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(30)
    n = args.messages
    result = {
        "benchmark": "spark_read",
        "messages": n,
        "partitions": args.partitions,
        "value_bytes": 100,
        "key_bytes": 8,
        "spark_master": "local[2]",
        "sink": "noop",
        "spark_rows_per_s_median": round(n / statistics.median(spark_s)),
        "spark_rows_per_s_best": round(n / min(spark_s)),
        "spark_seconds": [round(s, 3) for s in spark_s],
        "spark_no_io_same_rows_per_s_median": round(n / statistics.median(no_io_s)),
        "spark_no_io_seconds": [round(s, 3) for s in no_io_s],
        "fetch_decode_rows_per_s_one_process": round(n / statistics.median(fetch_s)),
        "fetch_seconds": [round(s, 3) for s in fetch_s],
        "decode_only_rows_per_s_one_core": round(decode_rows / decode_s),
        "produce_fill_seconds": round(fill_s, 1),
        "reference_ceiling_rows_per_s": "1.75-2.5 M (Arrow batches, no I/O; docs/notes)",
        "load_average_1m": os.getloadavg()[0],
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
