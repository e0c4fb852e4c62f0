"""Client quotas over a minute, with Kafka's default windows (11 x 1 s), on chronolog and on
Apache Kafka 4.1.1 beside it (issue #33's "within 10 % over a minute").

For each broker: a producer_byte_rate of --rate B/s for the client ids ``ck-producer`` and
``java-producer`` and a consumer_byte_rate for ``ck-consumer`` (set with AlterClientQuotas);
then, one after another, each for --seconds:
- confluent-kafka producing 10 kB messages as fast as it may: the bytes acknowledged per second
  from its first acknowledgement, and librdkafka's throttle statistics (max and average ms);
- Kafka's Java producer (ProducerPerformance, kafka-clients 4.1.1) with as many 10 kB records as
  --seconds at the quota carry: its own throughput figure and its produce-throttle-time-avg/max;
- a confluent-kafka consumer reading the topic from the start: bytes per second.
Writes bench/results/quotas.json (--out elsewhere). About 6 x --seconds plus the brokers' starts.

    .venv/bin/python bench/bench_quotas.py [--seconds 60] [--rate 1000000] [--no-kafka]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, KafkaError, Producer  # noqa: E402

from bench.bench_e2e import machine, write_result  # noqa: E402
from client import BrokerConnection  # noqa: E402
from protocol import ApiKey  # noqa: E402
from tests.conftest import BrokerProcess  # noqa: E402
from tests.oracle.kafka_oracle import KafkaServer, run_kafka_tool  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "bench" / "results" / "quotas.json"
TOPIC = "quota-bench"
RECORD = 10_000


def set_quotas(host: str, port: int, rate: int) -> None:
    entries = [
        {
            "entity": [{"entity_type": "client-id", "entity_name": client}],
            "ops": [{"key": key, "value": float(rate), "remove": False}],
        }
        for client, key in (
            ("ck-producer", "producer_byte_rate"),
            ("java-producer", "producer_byte_rate"),
            ("ck-consumer", "consumer_byte_rate"),
        )
    ]
    with BrokerConnection(host, port, client_id="bench-quotas", timeout_s=30) as c:
        body = c.call(ApiKey.ALTER_CLIENT_QUOTAS, 1, {"entries": entries, "validate_only": False})
        errors = [(e.error_code, e.error_message) for e in body.entries if e.error_code]
        assert not errors, errors
        c.call(
            ApiKey.CREATE_TOPICS,
            4,
            {
                "topics": [
                    {"name": TOPIC, "num_partitions": 1, "replication_factor": 1, "assignments": []}
                ],
                "timeout_ms": 30000,
            },
        )
    time.sleep(1)  # KRaft brokers apply quota records from the metadata log


def confluent_produce(bootstrap: str, seconds: float) -> dict:
    throttles: list[tuple[int, int]] = []

    def stats(text: str) -> None:
        for b in json.loads(text)["brokers"].values():
            if b["nodeid"] >= 0 and b["throttle"]["cnt"]:
                throttles.append((b["throttle"]["max"], b["throttle"]["avg"]))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "ck-producer",
            "linger.ms": 5,
            "queue.buffering.max.kbytes": 2048,
            "statistics.interval.ms": 1000,
            "stats_cb": stats,
        }
    )
    acked: list[float] = []

    def delivered(err, msg) -> None:
        if err is None:
            acked.append(time.monotonic())

    payload = b"p" * RECORD
    deadline = None
    while deadline is None or time.monotonic() < deadline:
        try:
            producer.produce(TOPIC, payload, on_delivery=delivered)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
        if deadline is None and acked:
            deadline = acked[0] + seconds
    producer.purge()
    producer.flush(30)
    start = acked[0]
    count = sum(1 for at in acked if at < start + seconds)
    return {
        "bytes_per_s": round(count * RECORD / seconds),
        "throttle_max_ms": max((m for m, _ in throttles), default=0),
        "throttle_avg_ms": round(sum(a for _, a in throttles) / len(throttles)) if throttles else 0,
    }


def java_produce(bootstrap: str, seconds: float, rate: int) -> dict:
    records = int(rate * seconds / RECORD)
    done = run_kafka_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic",
        TOPIC,
        "--num-records",
        str(records),
        "--record-size",
        str(RECORD),
        "--throughput",
        "-1",
        "--print-metrics",
        "--producer-props",
        f"bootstrap.servers={bootstrap}",
        "client.id=java-producer",
        timeout=seconds * 4 + 120,
    )
    summary = re.search(r"([\d.]+) records/sec \(([\d.]+) MB/sec\)", done.stdout)
    metrics = {}
    for name in ("produce-throttle-time-avg", "produce-throttle-time-max"):
        found = re.search(
            rf"producer-metrics:{name}:\{{client-id=java-producer\}}\s*:\s*([\d.NaE-]+)",
            done.stdout,
        )
        metrics[name.replace("-", "_") + "_ms"] = float(found.group(1)) if found else None
    records_per_s = float(summary.group(1)) if summary else 0.0
    return {"bytes_per_s": round(records_per_s * RECORD), **metrics}


def confluent_consume(bootstrap: str, seconds: float) -> dict:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "ck-consumer",
            "group.id": "quota-bench",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([TOPIC])
    first = None
    received = 0
    while first is None or time.monotonic() < first + seconds:
        msg = consumer.poll(0.5)
        if msg is None or (msg.error() and msg.error().code() == KafkaError._PARTITION_EOF):
            if first is not None and time.monotonic() > first + seconds:
                break
            continue
        if first is None:
            first = time.monotonic()
        received += len(msg.value() or b"")
    consumer.close()
    return {"bytes_per_s": round(received / seconds)}


def run(name: str, host: str, port: int, args: argparse.Namespace) -> dict:
    bootstrap = f"{host}:{port}"
    set_quotas(host, port, args.rate)
    row = {
        "confluent_producer": confluent_produce(bootstrap, args.seconds),
        "java_producer": java_produce(bootstrap, args.seconds, args.rate),
        "confluent_consumer": confluent_consume(bootstrap, args.seconds),
    }
    for phase in row.values():
        phase["of_quota"] = round(phase["bytes_per_s"] / args.rate, 3)
    print(f"{name}: {json.dumps(row)}", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=int, default=1_000_000)
    parser.add_argument("--no-kafka", action="store_true", help="chronolog only")
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="chronolog-bench-quotas-"))
    result = {"seconds": args.seconds, "quota_bytes_per_s": args.rate, "record_bytes": RECORD}
    try:
        broker = BrokerProcess(work / "chronolog").start()
        try:
            result["chronolog"] = run("chronolog", broker.host, broker.port, args)
        finally:
            broker.stop()
        if not args.no_kafka:
            kafka = KafkaServer(work / "kafka").start()
            try:
                result["kafka"] = run("kafka 4.1.1", kafka.host, kafka.port, args)
            finally:
                kafka.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result.update(machine())
    write_result(args.out, result)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
