"""What declining fetch sessions (KIP-227) costs the broker: its CPU per Fetch request as the
number of partitions in each request grows.

Without a session a consumer names every assigned partition in every Fetch, and the broker
answers for each of them. With an incremental session it names only partitions whose fetch
position changed, and the broker answers only for partitions with news. So the broker CPU a
session could save per request is about (partitions - partitions with news) x the marginal cost
of one partition, measured here.

One chronolog process; a topic of ``--partitions`` (default 1000) partitions, one message in
partition 0 so that every request returns data for exactly one partition (the busy-consumer
case sessions are for). For each request size N, ``--requests`` Fetch v12 requests
(max_wait_ms 0, session id 0, epoch -1: full requests, as every consumer sends today) are sent
back to back on one connection; broker CPU (user + system, from /proc) and wall time per request
are recorded.

Then the same with a real consumer: kafka-python (which opens a session when the broker offers
one) reads ``--consumer-partitions`` partitions while a producer trickles one message every
2 ms into them, round robin, for ``--seconds``; broker CPU per consumed message is compared
with sessions on (max.incremental.fetch.session.cache.slots=1000) and off (0).

Usage: python bench/bench_fetch_sessions.py [--requests 2000] [--partitions 1000]
Writes bench/results/fetch_sessions.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

from client import BrokerConnection
from protocol import ApiKey, MessageSetBuilder

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite.brokers import BrokerProcess  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "fetch_sessions.json"
TOPIC = "sessions"
SIZES = (1, 10, 100, 1000)


def _create_topic(port: int, partitions: int) -> BrokerConnection:
    """A connection to the broker on ``port`` after creating TOPIC with ``partitions`` on it."""
    client = BrokerConnection("127.0.0.1", port, client_id="bench-fetch-sessions", timeout_s=30)
    created = client.call(
        ApiKey.CREATE_TOPICS,
        0,
        {
            "topics": [
                {
                    "name": TOPIC,
                    "num_partitions": partitions,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout_ms": 60000,
        },
    )
    assert created.topics[0].error_code == 0, created
    return client


def fetch_body(partitions: int) -> dict:
    return {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 52428800,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": TOPIC,
                "partitions": [
                    {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1048576}
                    for p in range(partitions)
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


class _Broker(BrokerProcess):
    """A chronolog process with extra server properties."""

    def __init__(self, workdir: Path, overrides: dict[str, str]) -> None:
        super().__init__("chronolog", workdir)
        self.overrides = overrides

    def command(self) -> list[str]:
        extra = [arg for k, v in self.overrides.items() for arg in ("--override", f"{k}={v}")]
        return super().command() + extra


def consumer_run(slots: int, partitions: int, seconds: float) -> dict:
    """kafka-python reading ``partitions`` partitions of a trickle; broker CPU per message."""
    import threading

    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    with tempfile.TemporaryDirectory(prefix="bench-sessions-") as work:
        broker = _Broker(Path(work), {"max.incremental.fetch.session.cache.slots": str(slots)})
        broker.start()
        try:
            _create_topic(broker.port, partitions).close()
            consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
            tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            consumer.poll(timeout_ms=1000)  # connected, positions known, session open
            producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
            stop = threading.Event()
            sent = [0]

            def trickle() -> None:
                while not stop.is_set():
                    producer.send(TOPIC, b"x" * 100, partition=sent[0] % partitions)
                    sent[0] += 1
                    time.sleep(0.002)

            thread = threading.Thread(target=trickle)
            cpu0 = broker.usage().cpu_s
            thread.start()
            got = 0
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                got += sum(len(r) for r in consumer.poll(timeout_ms=100).values())
            stop.set()
            thread.join()
            producer.flush()
            deadline = time.monotonic() + 10
            while got < sent[0] and time.monotonic() < deadline:
                got += sum(len(r) for r in consumer.poll(timeout_ms=100).values())
            cpu = broker.usage().cpu_s - cpu0
            consumer.close()
            producer.close()
            assert got == sent[0], (got, sent[0])
            return {
                "session_cache_slots": slots,
                "partitions": partitions,
                "messages": got,
                "broker_cpu_s": round(cpu, 3),
                "broker_cpu_us_per_message": round(cpu / got * 1e6, 1),
            }
        finally:
            broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--consumer-partitions", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    sizes = [n for n in SIZES if n <= args.partitions]
    with tempfile.TemporaryDirectory(prefix="bench-sessions-") as work:
        broker = BrokerProcess("chronolog", Path(work))
        broker.start()
        try:
            client = _create_topic(broker.port, args.partitions)
            builder = MessageSetBuilder(magic=2)
            builder.append(b"x" * 100, key=None, timestamp=int(time.time() * 1000))
            produced = client.call(
                ApiKey.PRODUCE,
                9,
                {
                    "transactional_id": None,
                    "acks": 1,
                    "timeout_ms": 10000,
                    "topic_data": [
                        {
                            "name": TOPIC,
                            "partition_data": [{"index": 0, "records": builder.build()}],
                        }
                    ],
                },
            )
            assert produced.responses[0].partition_responses[0].error_code == 0, produced
            rows = []
            for n in sizes:
                body = fetch_body(n)
                response = client.call(ApiKey.FETCH, 12, body)  # warm-up, and a check
                parts = response.responses[0].partitions
                assert len(parts) == n and all(p.error_code == 0 for p in parts), response
                cpu0, wall0 = broker.usage().cpu_s, time.perf_counter()
                for _ in range(args.requests):
                    client.call(ApiKey.FETCH, 12, body)
                wall = time.perf_counter() - wall0
                cpu = broker.usage().cpu_s - cpu0
                rows.append(
                    {
                        "partitions_per_request": n,
                        "requests": args.requests,
                        "broker_cpu_us_per_request": round(cpu / args.requests * 1e6, 1),
                        "wall_us_per_request": round(wall / args.requests * 1e6, 1),
                    }
                )
                print(
                    f"{n:5d} partitions/request: broker CPU "
                    f"{rows[-1]['broker_cpu_us_per_request']:8.1f} us, wall "
                    f"{rows[-1]['wall_us_per_request']:8.1f} us per request"
                )
        finally:
            broker.stop()
    small, large = rows[0], rows[-1]
    marginal = (large["broker_cpu_us_per_request"] - small["broker_cpu_us_per_request"]) / (
        large["partitions_per_request"] - small["partitions_per_request"]
    )
    print(f"marginal broker CPU per partition in a request: {marginal:.2f} us")
    consumers = [consumer_run(slots, args.consumer_partitions, args.seconds) for slots in (1000, 0)]
    for row in consumers:
        print(
            f"kafka-python, {row['partitions']} partitions, sessions "
            f"{'on ' if row['session_cache_slots'] else 'off'}: broker CPU "
            f"{row['broker_cpu_s']:.2f} s for {row['messages']} messages "
            f"({row['broker_cpu_us_per_message']} us per message)"
        )
    RESULTS.write_text(
        json.dumps(
            {
                "benchmark": "broker CPU per Fetch v12 request by partitions per request (sessions "
                "declined: full requests)",
                "python": platform.python_version(),
                "machine": platform.machine(),
                "rows": rows,
                "marginal_broker_cpu_us_per_partition": round(marginal, 2),
                "kafka_python_consumer": consumers,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
