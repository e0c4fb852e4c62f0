"""Produce demo messages spread over the last N minutes, so `make pipeline` has data.

    .venv/bin/python -m pipeline.seed --bootstrap 127.0.0.1:9092 --topic clicks --messages 100000

Keys are user-<n> for a few dozen users; timestamps (CreateTime) increase evenly from now - N
minutes to now. Uses the connector's client directly (no Spark) and checks every produce
response.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from protocol import ErrorCode, MessageSetBuilder
from pyspark_chronolog.client import BrokerClient, error_name
from pyspark_chronolog.options import parse_connect
from pyspark_chronolog.writer import partition_for_key


def seed(
    bootstrap: str,
    topic: str,
    messages: int,
    minutes: int,
    *,
    batch: int = 2000,
    rng: random.Random | None = None,
) -> dict:
    rng = rng or random.Random(7)
    now = int(time.time() * 1000)
    first = now - minutes * 60_000
    step = max(1, (now - first) // max(1, messages))
    with BrokerClient(parse_connect({"bootstrap.servers": bootstrap})) as client:
        partitions = len(client.topics([topic], allow_create=True)[topic].partitions)
        sent = 0
        while sent < messages:
            sets: dict[int, MessageSetBuilder] = {}
            for i in range(sent, min(messages, sent + batch)):
                key = f"user-{rng.randrange(40)}".encode()
                value = json.dumps({"n": i, "page": f"/p/{rng.randrange(500)}"}).encode()
                part = partition_for_key(key, partitions)
                sets.setdefault(part, MessageSetBuilder(magic=2)).append(
                    value, key=key, timestamp=first + i * step
                )
            results = client.produce(
                topic, {p: b.build() for p, b in sets.items()}, acks=-1, timeout_ms=30_000
            )
            for part, result in results.items():
                if result.error_code != ErrorCode.NONE:
                    raise SystemExit(
                        f"producing to {topic}[{part}] at {bootstrap} failed: "
                        f"{error_name(result.error_code)}; check the broker log "
                        "and run the seed again"
                    )
            sent += sum(len(b) for b in sets.values())
    return {
        "topic": topic,
        "messages": sent,
        "first_ms": first,
        "last_ms": first + (sent - 1) * step,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--minutes", type=int, default=60)
    args = parser.parse_args()
    print(json.dumps(seed(args.bootstrap, args.topic, args.messages, args.minutes)))


if __name__ == "__main__":
    main()
