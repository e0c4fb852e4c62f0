"""Client-side building blocks the scenarios share: payloads, checksums, topics, produce, consume.

Everything here runs inside a scenario's child process and talks to one broker on 127.0.0.1 with
real clients (confluent-kafka, kafka-python). Every loop is bounded by a message count and a
deadline; a broker that stops answering turns into a ScenarioError, never a hang.
"""

from __future__ import annotations

import random
import time
import zlib
from dataclasses import dataclass

import structlog

logger = structlog.get_logger(__name__)

MASK64 = (1 << 64) - 1

# Both consumers ask for up to 8 MiB per partition per Fetch instead of the clients' 1 MiB
# default. Tansu 0.6.0 does not honour the limit: asked for 1 MiB it answers about 5.7 MB (six
# 1 MB batches), where chronolog, as Kafka, answers one batch. At the default the two brokers so
# answered different requests, and kafka-python, whose cost is per Fetch as much as per record,
# spent 19% more CPU per message against the broker that kept the limit (bench/NOTES.md). With a
# limit above what Tansu sends, both answer the same request.
PARTITION_FETCH_BYTES = 8 * 1024 * 1024


class ScenarioError(Exception):
    """Raised when a scenario cannot produce a trustworthy figure: a client error, a timeout, or a
    consumed-back stream whose count or checksum differs from what was produced."""


@dataclass(frozen=True)
class Digest:
    """Order-independent fingerprint of a bag of values: count and sum of CRC32s (mod 2**64).

    Every value carries a unique sequence number, so a lost, duplicated or altered message changes
    the digest except with negligible probability.
    """

    count: int
    crc_sum: int

    @staticmethod
    def of(values) -> Digest:
        n = 0
        s = 0
        for v in values:
            s += zlib.crc32(v)
            n += 1
        return Digest(n, s & MASK64)

    def __add__(self, other: Digest) -> Digest:
        return Digest(self.count + other.count, (self.crc_sum + other.crc_sum) & MASK64)


def make_values(n: int, size: int, seed: int = 7, tag: int = 0) -> list[bytes]:
    """``n`` distinct values of exactly ``size`` bytes: a tag + sequence prefix, then hex text.

    Hex text compresses about 2:1 with lz4, like typical JSON/log payloads, so the compressed
    scenarios move less data than the uncompressed ones without being trivially compressible.
    """
    if size < 16:
        raise ValueError(f"value size {size} is below the 16-byte sequence prefix")
    filler = random.Random(seed).randbytes(size + 512).hex().encode()
    prefix = b"%05d:%010d"
    return [(prefix % (tag, i)) + filler[i % 512 : i % 512 + size - 16] + b"|" for i in range(n)]


def admin_create_topic(
    bootstrap: str, topic: str, partitions: int, config: dict | None = None, timeout: float = 30.0
) -> None:
    """Create ``topic`` with CreateTopics and wait until Metadata shows a leader for every partition.

    Raises ScenarioError if the broker refuses the topic or it has no leaders before ``timeout``.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config or {})],
        request_timeout=timeout,
    )
    try:
        futures[topic].result(timeout)
    except KafkaException as exc:
        err = exc.args[0]
        if err.name() != "TOPIC_ALREADY_EXISTS":
            raise ScenarioError(
                f"CreateTopics {topic} ({partitions} partitions, {config}): {err}"
            ) from exc
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(topic, timeout=5)
        tmd = md.topics.get(topic)
        if (
            tmd is not None
            and tmd.error is None
            and len(tmd.partitions) == partitions
            and all(p.leader >= 0 for p in tmd.partitions.values())
        ):
            return
        if time.monotonic() > deadline:
            raise ScenarioError(
                f"topic {topic}: no leader for all {partitions} partitions after {timeout}s "
                f"(metadata: {tmd and tmd.error})"
            )
        time.sleep(0.1)


def admin_delete_topic(bootstrap: str, topic: str) -> None:
    """Best-effort DeleteTopics so a memory-only peer does not carry earlier rounds' data."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    try:
        admin.delete_topics([topic], request_timeout=10)[topic].result(10)
    except Exception as exc:  # noqa: BLE001 - cleanup only; the figure is already taken
        logger.info("delete_topic_failed", topic=topic, error=str(exc))


def confluent_producer(bootstrap: str, **config):
    """A confluent-kafka Producer that only reports failed deliveries (keeps the hot loop in C)."""
    from confluent_kafka import Producer

    errors: list[str] = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(str(err))

    conf = {
        "bootstrap.servers": bootstrap,
        "delivery.report.only.error": True,
        "on_delivery": on_delivery,
        "queue.buffering.max.messages": 1_000_000,
    }
    conf.update(config)
    return Producer(conf), errors


def confluent_produce_all(
    producer, topic: str, values, deadline: float, partitions: int | None = None, timestamps=None
) -> None:
    """Send every value, backing off on a full local queue; raise ScenarioError past ``deadline``."""
    produce = producer.produce
    for i, v in enumerate(values):
        kwargs = {}
        if partitions is not None:
            kwargs["partition"] = i % partitions
        if timestamps is not None:
            kwargs["timestamp"] = timestamps[i]
        while True:
            try:
                produce(topic, v, **kwargs)
                break
            except BufferError:
                producer.poll(0.005)
                if time.monotonic() > deadline:
                    raise ScenarioError(
                        f"produce to {topic}: local queue still full at the deadline "
                        f"after {i} of {len(values)} messages"
                    ) from None
    remaining = producer.flush(max(0.0, deadline - time.monotonic()))
    if remaining:
        raise ScenarioError(
            f"produce to {topic}: {remaining} messages still undelivered at the deadline"
        )


def consume_confluent(
    bootstrap: str,
    topic: str,
    partitions: int,
    expected: int,
    deadline: float,
    on_first=None,
    **config,
) -> Digest:
    """Read ``expected`` messages from offset 0 of every partition; return their digest.

    ``on_first()``, if given, is called once the first message has been delivered (consumer start-up
    done: connections, coordinator, ListOffsets, first Fetch); the rest arrive after it.
    Raises ScenarioError on a client error or if fewer messages arrive before ``deadline``.
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    # fetch.queue.backoff.ms: librdkafka pauses fetching for this long (default 1000 ms) whenever its
    # local queue holds more than queued.min.messages (100,000) undelivered messages. A broker fast
    # enough to get that far ahead of this loop then measured ~160 k msg/s instead of ~600 k, at
    # random: the client's own sleep, not the broker. Both brokers get the same setting.
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{topic}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        "fetch.queue.backoff.ms": 10,
        "max.partition.fetch.bytes": PARTITION_FETCH_BYTES,
    }
    conf.update(config)
    consumer = Consumer(conf)
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        n = 0
        s = 0
        crc32 = zlib.crc32
        while n < expected:
            if time.monotonic() > deadline:
                raise ScenarioError(
                    f"consume {topic} (confluent): {n} of {expected} messages before the deadline"
                )
            # consume() waits for num_messages or the timeout, so never ask for more than remain.
            first = on_first is not None and n == 0
            batch = consumer.consume(
                num_messages=1 if first else min(10_000, expected - n), timeout=0.5
            )
            for m in batch:
                err = m.error()
                if err is not None:
                    raise ScenarioError(f"consume {topic}/{m.partition()} (confluent): {err}")
                s += crc32(m.value())
            n += len(batch)
            if first and n:
                on_first()
        return Digest(n, s & MASK64)
    finally:
        consumer.close()


def consume_kafka_python(
    bootstrap: str, topic: str, partitions: int, expected: int, deadline: float, on_first=None
) -> Digest:
    """kafka-python counterpart of consume_confluent (no group: assign + seek to the beginning)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        client_id=f"bench-{topic}",
        max_partition_fetch_bytes=PARTITION_FETCH_BYTES,
    )
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        n = 0
        s = 0
        crc32 = zlib.crc32
        while n < expected:
            if time.monotonic() > deadline:
                raise ScenarioError(
                    f"consume {topic} (kafka-python): {n} of {expected} messages before the deadline"
                )
            first = on_first is not None and n == 0
            for records in consumer.poll(
                timeout_ms=500, max_records=1 if first else 10_000
            ).values():
                for r in records:
                    s += crc32(r.value)
                n += len(records)
            if first and n:
                on_first()
        return Digest(n, s & MASK64)
    finally:
        consumer.close()


def verify(got: Digest, want: Digest, what: str) -> None:
    """Raise ScenarioError unless the consumed-back digest equals the produced one."""
    if got != want:
        raise ScenarioError(
            f"{what}: consumed back {got.count} messages (crc sum {got.crc_sum:#x}), "
            f"produced {want.count} (crc sum {want.crc_sum:#x}): data lost or altered"
        )
