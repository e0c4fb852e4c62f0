"""Throughput over SASL_SSL next to plaintext: one fresh broker with a PLAINTEXT and a SASL_SSL
listener (TLS from a CA made with openssl for the run, SCRAM-SHA-512), the same clients and
settings on both: confluent-kafka and kafka-python produce 100-byte messages (linger.ms=5,
acks=1) and consume them back from offset 0. Rounds alternate the listeners, so a machine
getting busier hurts both alike; the medians are reported.

Bounded: --rounds x 2 clients x 2 listeners x (produce + consume), each phase at most its
message count and --max-seconds. Writes bench/results/security.json.

    .venv/bin/python bench/bench_security.py [--rounds 3] [--messages 200000] [--max-seconds 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import confluent_kafka
import kafka
from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

BENCH = Path(__file__).resolve().parent
# bench_e2e, and the security tests' helpers (PKI, brokers with several listeners); tests/ last,
# so its protocol/ test folder does not shadow the protocol package.
sys.path[:0] = [str(BENCH), str(BENCH.parent)]
sys.path += [str(BENCH.parent / "tests"), str(BENCH.parent / "tests" / "integration")]

from bench_e2e import BATCHED, MESSAGE_BYTES, create_topic, machine, produce_phase, write_result  # noqa: E402
from security_helpers import SecureBroker, add_scram_user, make_pki, tls_properties  # noqa: E402

RESULT = BENCH / "results" / "security.json"
USER, PASSWORD = "bench", "bench-scram-pw"


def librdkafka_conf(listener: str, pki) -> dict:
    if listener == "PLAINTEXT":
        return {}
    return {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": pki.ca,
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": USER,
        "sasl.password": PASSWORD,
    }


def kafka_python_kw(listener: str, pki) -> dict:
    if listener == "PLAINTEXT":
        return {}
    return {
        "security_protocol": "SASL_SSL",
        "ssl_cafile": pki.ca,
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": USER,
        "sasl_plain_password": PASSWORD,
    }


def _rate(count: int, elapsed: float) -> dict:
    return {
        "messages": count,
        "seconds": round(elapsed, 3),
        "messages_per_s": round(count / elapsed),
        "mb_per_s": round(count * MESSAGE_BYTES / elapsed / 1e6, 2),
    }


def confluent_consume(bootstrap: str, conf: dict, topic: str, count: int, max_s: float) -> dict:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False, **conf}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    start = time.perf_counter()
    while got < count and time.perf_counter() - start < max_s:
        got += sum(1 for m in consumer.consume(10000, 1.0) if m.error() is None)
    elapsed = time.perf_counter() - start
    consumer.close()
    return _rate(got, elapsed)


def kafka_python_produce(bootstrap: str, kw: dict, topic: str, count: int, max_s: float) -> dict:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks=1, **kw)
    payload = b"x" * MESSAGE_BYTES
    start = time.perf_counter()
    futures = []
    while len(futures) < count and time.perf_counter() - start < max_s:
        futures.append(producer.send(topic, payload))
    producer.flush(max_s)
    elapsed = time.perf_counter() - start
    delivered = sum(1 for f in futures if f.succeeded())
    producer.close()
    return _rate(delivered, elapsed)


def kafka_python_consume(bootstrap: str, kw: dict, topic: str, count: int, max_s: float) -> dict:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **kw)
    tp = KpTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got = 0
    start = time.perf_counter()
    while got < count and time.perf_counter() - start < max_s:
        got += sum(len(records) for records in consumer.poll(timeout_ms=500).values())
    elapsed = time.perf_counter() - start
    consumer.close()
    return _rate(got, elapsed)


def run_client(client: str, broker, listener: str, pki, args, topic: str) -> dict:
    bootstrap = broker.bootstrap_for(listener)
    if client == "confluent-kafka":
        conf = librdkafka_conf(listener, pki)
        produced = produce_phase(
            bootstrap, topic, args.messages, args.max_seconds, {**BATCHED, **conf}
        )
        consumed = confluent_consume(bootstrap, conf, topic, produced["messages"], args.max_seconds)
    else:
        kw = kafka_python_kw(listener, pki)
        count = args.messages // 4  # kafka-python is about 4x slower per message
        produced = kafka_python_produce(bootstrap, kw, topic, count, args.max_seconds)
        consumed = kafka_python_consume(
            bootstrap, kw, topic, produced["messages"], args.max_seconds
        )
    return {"client": client, "listener": listener, "produce": produced, "consume": consumed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--max-seconds", type=float, default=8.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="chronolog-bench-security-"))
    pki = make_pki(work / "pki")
    broker = SecureBroker(
        work / "broker",
        {"PLAINTEXT": "PLAINTEXT", "SASL_SSL": "SASL_SSL"},
        {
            "log.dirs": str(work / "broker" / "logs"),
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            **tls_properties(pki),
        },
    )
    (work / "broker" / "logs").mkdir(parents=True)
    add_scram_user(broker, USER, PASSWORD, "SCRAM-SHA-512")
    broker.start()
    runs = []
    try:
        for round_ in range(args.rounds):
            for client in ("confluent-kafka", "kafka-python"):
                listeners = (
                    ("PLAINTEXT", "SASL_SSL") if round_ % 2 == 0 else ("SASL_SSL", "PLAINTEXT")
                )
                for listener in listeners:
                    topic = f"bench-{client}-{listener}-{round_}".lower()
                    create_topic(broker.bootstrap_for("PLAINTEXT"), topic)
                    run = run_client(client, broker, listener, pki, args, topic)
                    print(json.dumps(run), flush=True)
                    runs.append(run)
    finally:
        broker.stop()
    medians: dict = {}
    for client in ("confluent-kafka", "kafka-python"):
        medians[client] = {}
        for phase in ("produce", "consume"):
            rates = {
                listener: statistics.median(
                    r[phase]["messages_per_s"]
                    for r in runs
                    if r["client"] == client and r["listener"] == listener
                )
                for listener in ("PLAINTEXT", "SASL_SSL")
            }
            medians[client][phase] = {
                "plaintext_messages_per_s": rates["PLAINTEXT"],
                "sasl_ssl_messages_per_s": rates["SASL_SSL"],
                "sasl_ssl_to_plaintext": round(rates["SASL_SSL"] / rates["PLAINTEXT"], 3),
            }
    result = {
        "benchmark": "security",
        "clients": {
            "confluent-kafka": confluent_kafka.__version__,
            "kafka-python": kafka.__version__,
        },
        "message_bytes": MESSAGE_BYTES,
        "producer": {"linger.ms": 5, "acks": 1},
        "sasl_ssl": "TLS (Python ssl, server side) + SCRAM-SHA-512, one login per connection",
        "args": vars(args),
        "medians": medians,
        "runs": runs,
        **machine(),
    }
    write_result(RESULT, result)
    print(json.dumps(medians, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
