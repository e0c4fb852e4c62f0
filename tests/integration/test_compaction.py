"""Log compaction with real clients: confluent-kafka produces keyed data into compacted topics
(record batches and, through message.format.version 0.10.2, magic-1 message sets; uncompressed,
gzip, lz4); once the broker's cleaner has cleaned them kafka-python reads exactly one value per
key, the newest, at its original offset, and kcat -Q and kafka-python's offsets_for_times stay
exact. Then kill -9 during cleaning, round after round: after each recovery no key's latest
value is lost, no swap is left half done and ``chronolog dump-log --verify`` finds every file
sound."""

from __future__ import annotations

import glob
import json
import os
import random
import time

import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer, TopicPartition

from tests.integration.clients import (
    create_topic,
    dump_log_verify,
    kcat_offset_for,
    kp_consume_all,
    topic_name,
)

BASE_TS = 1_700_000_000_000
SPREAD_MS = 500_000  # keyed records' timestamps; segment.ms is longer, so only size rolls


def compact_configs(**extra) -> dict[str, str]:
    configs = {
        "cleanup.policy": "compact",
        "segment.bytes": "16384",
        "segment.ms": str(10 * SPREAD_MS),
        "min.cleanable.dirty.ratio": "0.01",
    }
    configs.update({k.replace("_", "."): str(v) for k, v in extra.items()})
    return configs


def produce_keyed(bootstrap, topic, records, *, codec="none", idempotent=False) -> dict:
    """Produce (key, value, timestamp) records with confluent-kafka; returns key -> (offset,
    value, timestamp) of the last acknowledged record of each key."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "linger.ms": 5,
            "batch.size": 8000,  # well below segment.bytes
            "acks": "all",
            "enable.idempotence": idempotent,
        }
    )
    acked: dict[int, tuple] = {}
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked[msg.offset()] = (msg.key(), msg.value(), msg.timestamp()[1])

    for key, value, ts in records:
        producer.produce(topic, value=value, key=key, timestamp=ts, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(60) == 0 and errors == []
    latest = {}
    for offset in sorted(acked):
        key, value, ts = acked[offset]
        latest[key] = (offset, value, ts)
    return latest


def cleaned_up_to(broker, topic: str) -> int:
    """The largest end of a dirty section the broker logged cleaning for ``topic``, -1 if none."""
    end = -1
    for line in broker.log_output().splitlines():
        if '"cleaned log"' not in line:
            continue
        event = json.loads(line)
        if event.get("topic") == topic:
            end = max(end, int(event["dirty_section"].split(",")[1].strip(" )")))
    return end


def wait_cleaned(broker, topic: str, offset: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while cleaned_up_to(broker, topic) < offset:
        assert time.monotonic() < deadline, broker.log_tail()
        assert broker.running(), broker.log_tail()
        time.sleep(0.1)


def roll_with_sentinel(bootstrap, topic) -> int:
    """Produce a record stamped far after the others: segment.ms rolls the active segment
    first, so every keyed record lies in a cleanable segment. Returns its offset."""
    latest = produce_keyed(bootstrap, topic, [(b"sentinel", b"end", BASE_TS + 20 * SPREAD_MS)])
    return latest[b"sentinel"][0]


@pytest.mark.parametrize(
    "codec,message_format",
    [
        ("none", "3.0-IV1"),
        ("gzip", "3.0-IV1"),
        ("lz4", "3.0-IV1"),
        ("none", "0.10.2"),
        ("gzip", "0.10.2"),
        ("lz4", "0.10.2"),
    ],
)
def test_compacted_topic_keeps_the_newest_value_per_key(broker_factory, codec, message_format):
    broker = broker_factory(log_cleaner_backoff_ms=100)
    topic = topic_name(f"compact-{codec}")
    create_topic(
        broker.bootstrap, topic, configs=compact_configs(message_format_version=message_format)
    )
    rng = random.Random(f"{codec}{message_format}")
    records = [
        (
            b"key-%d" % rng.randrange(60),
            None if rng.random() < 0.05 else b"value-%d-" % i + rng.randbytes(40),
            BASE_TS + rng.randrange(SPREAD_MS),
        )
        for i in range(3000)
    ]
    latest = produce_keyed(
        broker.bootstrap, topic, records, codec=codec, idempotent=message_format == "3.0-IV1"
    )
    sentinel = roll_with_sentinel(broker.bootstrap, topic)
    wait_cleaned(broker, topic, sentinel)

    got = kp_consume_all(broker.bootstrap, topic)
    by_key = {}
    for r in got:
        assert r.key not in by_key, (
            f"{r.key} is there twice: offsets {by_key[r.key][0]}, {r.offset}"
        )
        by_key[r.key] = (r.offset, r.value, r.timestamp)
    expected = {k: v for k, v in latest.items() if k != b"sentinel"}
    # tombstones stay for delete.retention.ms (a day): they are the newest "value" of their key
    assert {k: v for k, v in by_key.items() if k != b"sentinel"} == expected
    assert by_key[b"sentinel"][0] == sentinel

    # timestamp searches over what remains equal brute force
    remaining = sorted((r.offset, r.timestamp) for r in got)
    stamps = sorted({ts for _, ts in remaining})
    targets = stamps[:: max(len(stamps) // 8, 1)] + [stamps[0] - 1, stamps[-1] + 1]
    targets += [BASE_TS + rng.randrange(SPREAD_MS) for _ in range(8)]
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
    tp = TopicPartition(topic, 0)
    try:
        for target in targets:
            brute = next((o for o, ts in remaining if ts >= target), None)
            found = consumer.offsets_for_times({tp: target})[tp]
            assert (found.offset if found else None) == brute, target
            assert kcat_offset_for(broker.bootstrap, topic, target) == (
                brute if brute is not None else -1
            ), target
    finally:
        consumer.close()


def wait_for_event(broker, event: str, topic: str, count: int, timeout_s: float = 30) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = sum(
            1
            for line in broker.log_output(since_start=True).splitlines()
            if f'"{event}"' in line and f'"{topic}"' in line
        )
        if seen >= count:
            return True
        time.sleep(0.02)
    return False


CLEANING_ENDS = (
    "cleaned log",
    "cleaning stopped: the log changed meanwhile",
    "cleaning dropped",
    "cleaning failed; the partition is not cleaned again until a restart",
)


def cleaning_under_way(broker, topic: str) -> bool:
    """Whether the broker's latest run logged a cleaning of ``topic`` that it did not end (one
    cleaner thread: its cleanings follow one another). After a kill, the log is final."""
    started = ended = 0
    for line in broker.log_output(since_start=True).splitlines():
        if f'"{topic}"' in line:
            event = json.loads(line).get("event")
            started += event == "cleaning log"
            ended += event in CLEANING_ENDS
    return started > ended


def test_kill_9_during_cleaning_loses_no_latest_value(broker_factory):
    # Slow cleanings (a throttled cleaner), so that a kill lands inside one.
    broker = broker_factory(log_cleaner_backoff_ms=100, log_cleaner_io_max_bytes_per_second=400_000)
    topic = topic_name("compact-kill")
    create_topic(broker.bootstrap, topic, configs=compact_configs(segment_bytes=65536))
    rng = random.Random(9)
    latest: dict[bytes, tuple] = {}
    kills = cleanings_hit = 0
    started = time.monotonic()
    for round_ in range(8):
        if time.monotonic() - started > 150:
            break
        records = [
            (b"key-%d" % rng.randrange(500), b"r%d-" % round_ + rng.randbytes(200), BASE_TS + i)
            for i in range(3000)
        ]
        latest.update(produce_keyed(broker.bootstrap, topic, records, codec="gzip"))
        latest.pop(b"sentinel", None)
        roll_with_sentinel(broker.bootstrap, topic)
        if wait_for_event(broker, "cleaning log", topic, 1):
            time.sleep(rng.uniform(0.0, 2.0))
        broker.kill()
        kills += 1
        cleanings_hit += cleaning_under_way(broker, topic)
        # What recovery made of the kill, with no cleaning to change it before it is checked.
        broker.overrides["log.cleaner.enable"] = "false"
        broker.start()
        got = {
            r.key: (r.offset, r.value)
            for r in kp_consume_all(broker.bootstrap, topic, timeout_s=60)
        }
        lost = [k for k, (o, v, _) in latest.items() if got.get(k) != (o, v)]
        assert lost == [], f"round {round_}: latest values lost for {lost[:5]}"
        broker.stop()
        assert_recovered_files_sound(broker.log_dir, topic)
        broker.overrides["log.cleaner.enable"] = "true"
        broker.start()
    # 8 of 8 kills land inside a cleaning on an idle machine; a loaded one cleans slower
    assert cleanings_hit >= 5, f"only {cleanings_hit} of {kills} kills during a cleaning"
    broker.stop()  # during a cleaning, most likely: it is given up
    assert_recovered_files_sound(broker.log_dir, topic)


def assert_recovered_files_sound(log_dir: str, topic: str) -> None:
    """No swap left half done (no .cleaned or .swap file) and dump-log --verify clean."""
    directory = os.path.join(log_dir, f"{topic}-*")
    leftovers = glob.glob(os.path.join(directory, "*.cleaned")) + glob.glob(
        os.path.join(directory, "*.swap")
    )
    assert leftovers == []
    dump_log_verify(log_dir, topic)
