"""``chronolog groups reset-offsets`` and ``chronolog groups delete`` against a real broker.

--to-datetime goes through ListOffsets by timestamp (the time index); it is checked against
brute force (the first offset whose timestamp is at or after the time, else the log end) over a
topic of many small segments whose timestamps are slightly out of order. The refusals (a group
with members, an unknown topic or group) must name the broker and say what to do.
"""

from __future__ import annotations

import random
import time
from datetime import datetime, timezone

from kafka import KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.structs import OffsetAndMetadata

from tests.integration.clients import create_topic, kp_consume_all
from tests.integration.test_groups import (
    WAIT_S,
    PollingConsumer,
    kafka_consumer,
    bounded,
    partitions,
    run_cli,
    unique,
)
from tests.waiting import wait_for

PARTITIONS = 3
PER_PARTITION = 300


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")


def topics_of(bootstrap: str) -> set[str]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return set(admin.list_topics())
    finally:
        admin.close()


def committed(bootstrap: str, group: str) -> dict[int, int]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    try:
        return {tp.partition: o.offset for tp, o in admin.list_group_offsets(group)[group].items()}
    finally:
        admin.close()


def test_reset_offsets_to_datetime_matches_brute_force(broker):
    topic, group = unique("reset"), unique("g")
    create_topic(broker.bootstrap, topic, PARTITIONS, {"segment.bytes": 1024})
    rng = random.Random(7)
    base = int(time.time() * 1000) - 3_600_000
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0, batch_size=1)
    try:
        for i in range(PER_PARTITION):
            for p in range(PARTITIONS):
                ts = base + i * 10 + p + rng.randint(-15, 15)  # a little out of order
                producer.send(topic, f"{p}-{i}".encode(), partition=p, timestamp_ms=ts)
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=30)
    # brute force over what the broker stored
    stamps = {
        p: [(r.offset, r.timestamp) for r in kp_consume_all(broker.bootstrap, topic, p)]
        for p in range(PARTITIONS)
    }
    assert all(len(s) == PER_PARTITION for s in stamps.values())
    log_dir = broker.log_dirs[0] if broker.log_dirs else None
    if log_dir is not None:  # really many segments
        import os

        segments = [
            f for f in os.listdir(os.path.join(log_dir, f"{topic}-0")) if f.endswith(".log")
        ]
        assert len(segments) >= 10, segments

    def brute(p: int, target: int) -> int:
        return min((o for o, ts in stamps[p] if ts >= target), default=PER_PARTITION)

    every_ts = sorted(ts for s in stamps.values() for _, ts in s)
    targets = [base - 10_000, every_ts[-1] + 1, every_ts[0], every_ts[-1]]
    targets += rng.sample(every_ts, 5) + [rng.randint(every_ts[0], every_ts[-1]) for _ in range(5)]
    for target in targets:
        out = run_cli(
            "--bootstrap-server",
            broker.bootstrap,
            "reset-offsets",
            "--group",
            group,
            "--topic",
            topic,
            "--to-datetime",
            iso(target),
        )
        assert out.returncode == 0, out.stderr
        want = {p: brute(p, target) for p in range(PARTITIONS)}
        assert committed(broker.bootstrap, group) == want, f"target {iso(target)}"
        printed = {
            int(line.split()[2]): int(line.split()[3])
            for line in out.stdout.splitlines()
            if line.startswith(group)
        }
        assert printed == want
    # a zone other than UTC names the same moment
    target = every_ts[len(every_ts) // 2]
    local = datetime.fromtimestamp(target / 1000, tz=timezone.utc).astimezone()
    out = run_cli(
        "--bootstrap-server", broker.bootstrap, "reset-offsets", "--group", group,
        "--topic", topic, "--to-datetime", local.isoformat(timespec="milliseconds"),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert committed(broker.bootstrap, group) == {p: brute(p, target) for p in range(PARTITIONS)}


def test_reset_to_earliest_latest_dry_run_and_refusals(broker):
    topic, group = unique("reset2"), unique("g")
    create_topic(broker.bootstrap, topic, 2)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        for i in range(5):
            producer.send(topic, b"x", partition=0)
        producer.send(topic, b"y", partition=1)
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=30)

    def reset(*args: str):
        return run_cli(
            "--bootstrap-server", broker.bootstrap, "reset-offsets", "--group", group, *args
        )

    out = reset("--topic", topic, "--to-latest")
    assert out.returncode == 0, out.stderr
    assert committed(broker.bootstrap, group) == {0: 5, 1: 1}
    out = reset("--topic", topic, "--to-earliest", "--dry-run")
    assert out.returncode == 0 and "dry run" in out.stdout
    assert committed(broker.bootstrap, group) == {0: 5, 1: 1}
    out = reset("--topic", topic, "--to-earliest")
    assert out.returncode == 0, out.stderr
    assert committed(broker.bootstrap, group) == {0: 0, 1: 0}
    # errors name the broker and the fix
    out = reset("--topic", "no-such-topic", "--to-latest")
    assert out.returncode == 1
    assert broker.bootstrap in out.stderr and "check the topic name" in out.stderr
    assert "no-such-topic" not in topics_of(broker.bootstrap)  # the tool did not create it
    out = reset("--topic", topic, "--to-datetime", "yesterday")
    assert out.returncode == 1 and "not an ISO-8601 date and time" in out.stderr
    # a group with members is refused, as Kafka does
    member = PollingConsumer(broker.bootstrap, group, topic)
    member.start()
    try:
        wait_for(
            lambda: member.assignment == partitions(topic, 2),
            "the member's assignment",
            timeout=WAIT_S,
        )
        out = reset("--topic", topic, "--to-latest")
        assert out.returncode == 1
        assert broker.bootstrap in out.stderr and "stop its consumers" in out.stderr
        assert "Stable" in out.stderr
        assert committed(broker.bootstrap, group) == {0: 0, 1: 0}
        out = run_cli("--bootstrap-server", broker.bootstrap, "delete", "--group", group)
        assert out.returncode == 1
        assert "NON_EMPTY_GROUP" in out.stderr and "stop its consumers" in out.stderr
    finally:
        member.stop()
    # once empty it can be deleted, offsets and all
    wait_for(
        lambda: run_cli(
            "--bootstrap-server", broker.bootstrap, "list", "--state", "Empty"
        ).stdout.count(group)
        == 1,
        "the group to be empty",
        timeout=WAIT_S,
    )
    out = run_cli(
        "--bootstrap-server",
        broker.bootstrap,
        "delete",
        "--group",
        group,
        "--group",
        "nope-" + group,
    )
    assert out.returncode == 1
    assert f"deleted group {group!r}" in out.stdout
    assert "GROUP_ID_NOT_FOUND" in out.stderr and "chronolog groups list" in out.stderr
    assert group not in run_cli("--bootstrap-server", broker.bootstrap, "list").stdout
    assert committed(broker.bootstrap, group) == {}
    # a consumer of the deleted group starts from auto.offset.reset again
    fresh = kafka_consumer(broker.bootstrap, group)
    try:
        fresh.assign([TopicPartition(topic, 0)])
        assert fresh.committed(TopicPartition(topic, 0)) is None
        fresh.commit({TopicPartition(topic, 0): OffsetAndMetadata(2, "", -1)})
    finally:
        bounded(lambda: fresh.close(), what="KafkaConsumer.close()")
    assert committed(broker.bootstrap, group) == {0: 2}
