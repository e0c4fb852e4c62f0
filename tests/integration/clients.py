"""Helpers shared by the real-client integration tests."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import time
import uuid

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from tests.conftest import REPO


# For topics whose messages carry CreateTimes older than the default retention (7 days): the
# shared broker's retention pass (every 5 minutes) would otherwise delete them mid-test, as
# Kafka's would.
KEEP_OLD_MESSAGES = {"retention.ms": -1}


def topic_name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(bootstrap: str, topic: str, partitions: int = 1, configs=None) -> None:
    """Create a topic with kafka-python's admin client (CreateTopics v0 with configs)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    try:
        admin.create_topics(
            [
                NewTopic(
                    topic,
                    partitions,
                    1,
                    topic_configs={k: str(v) for k, v in (configs or {}).items()},
                )
            ]
        )
    finally:
        admin.close()


def kp_producer(bootstrap: str, **kw) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=bootstrap, **kw)


def kp_consume_all(
    bootstrap: str,
    topic: str,
    partition: int = 0,
    start: int | None = None,
    timeout_s: float = 20.0,
):
    """Every message from ``start`` (default: beginning) to the current end, kafka-python."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        consumer_timeout_ms=1000,
    )
    tp = TopicPartition(topic, partition)
    try:
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        if start is None:
            consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, start)
        out = []
        deadline = time.monotonic() + timeout_s
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                out.extend(records)
        return out
    finally:
        consumer.close()


def ck_poll_values(consumer, count: int, timeout_s: float = 30.0) -> list[bytes]:
    """The values of the first ``count`` messages a confluent-kafka consumer polls (error
    events skipped: librdkafka retries), fewer when ``timeout_s`` passes first."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            got.append(message.value())
    return got


def kcat_offset_for(bootstrap: str, topic: str, timestamp: int, options=()) -> int:
    """kcat -Q's offset of the first message of partition 0 at or after ``timestamp`` (-1 when
    none is that late); ``options`` are more kcat arguments (-X settings)."""
    out = subprocess.run(
        ["kcat", "-b", bootstrap, *options, "-Q", "-t", f"{topic}:0:{timestamp}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    # "<topic> [0] offset <n>"
    return int(out.split("offset")[1].split()[0])


def chronolog_quotas(bootstrap: str, *args: str) -> str:
    """``chronolog quotas --bootstrap-server bootstrap *args``: its output (the call must succeed)."""
    done = subprocess.run(
        [sys.executable, "-m", "broker", "quotas", "--bootstrap-server", bootstrap, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def dump_log_verify(
    log_dir: str, topic: str, suffixes: tuple[str, ...] = (".log", ".index", ".timeindex")
) -> list[str]:
    """Assert that ``chronolog dump-log --verify`` finds the files of ``topic``'s partitions
    ending in ``suffixes`` sound; returns them."""
    files = sorted(
        path
        for suffix in suffixes
        for path in glob.glob(os.path.join(log_dir, f"{topic}-*", f"*{suffix}"))
    )
    r = subprocess.run(
        [sys.executable, "-m", "broker", "dump-log", "--verify", *files],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return files
