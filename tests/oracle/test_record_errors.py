"""KIP-467 per-record errors, asked of chronolog and of Kafka 4.1.1 alike: a Produce v9 batch of
100 records into a compacted topic, 10 of them without a key (librdkafka's 0011 sends this), is
refused with INVALID_RECORD, and ``record_errors`` names exactly the 10 by their index in the
batch; with a timestamp outside message.timestamp.before.max.ms among them, INVALID_TIMESTAMP.
Nothing of the batch is stored."""

from __future__ import annotations

import time
import uuid

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from client import BrokerConnection
from protocol import ApiKey

KEYLESS = set(range(5, 100, 10))
LATE = 7  # the record whose timestamp is too old in the second batch


def _connect(server) -> BrokerConnection:
    return BrokerConnection(server.host, server.port, client_id="record-errors", timeout_s=20)


def _create_compacted(conn: BrokerConnection, topic: str) -> None:
    body = {
        "topics": [
            {
                "name": topic,
                "num_partitions": 1,
                "replication_factor": 1,
                "assignments": [],
                "configs": [
                    {"name": "cleanup.policy", "value": "compact"},
                    {"name": "message.timestamp.before.max.ms", "value": "60000"},
                ],
            }
        ],
        "timeout_ms": 15000,
    }
    (created,) = conn.call(ApiKey.CREATE_TOPICS, 5, body).topics
    assert created.error_code == 0, created


def _batch(now_ms: int, late: bool) -> bytes:
    """A batch built by kafka-python's record code (an independent encoder)."""
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size=10**7)
    for i in range(100):
        timestamp = now_ms - 600_000 if late and i == LATE else now_ms
        builder.append(i, timestamp, None if i in KEYLESS else b"k%d" % i, b"v%d" % i, [])
    return bytes(builder.build())


def _produce(conn: BrokerConnection, topic: str, records: bytes) -> tuple:
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 15000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    }
    (part,) = conn.call(ApiKey.PRODUCE, 9, body).responses[0].partition_responses
    return part.error_code, sorted(e.batch_index for e in part.record_errors), part.error_message


def _end_offset(conn: BrokerConnection, topic: str) -> int:
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
    }
    (part,) = conn.call(ApiKey.LIST_OFFSETS, 5, body).topics[0].partitions
    return part.offset


def scenario(server) -> dict[str, object]:
    topic = f"record-errors-{uuid.uuid4().hex[:8]}"
    with _connect(server) as conn:
        _create_compacted(conn, topic)
        deadline = time.monotonic() + 30
        while True:  # Kafka answers NOT_LEADER until the new partition's leader is known
            keyless = _produce(conn, topic, _batch(int(time.time() * 1000), late=False))
            if keyless[0] != 6 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        late = _produce(conn, topic, _batch(int(time.time() * 1000), late=True))
        return {
            "keyless": keyless[:2],
            "keyless_message": keyless[2],
            "late": late[:2],
            "stored": _end_offset(conn, topic),
        }


EXPECTED = {
    "keyless": (87, sorted(KEYLESS)),  # INVALID_RECORD
    "late": (32, sorted(KEYLESS | {LATE})),  # INVALID_TIMESTAMP
    "stored": 0,
}


def test_chronolog_lists_the_refused_records(broker):
    got = scenario(broker)
    assert {k: got[k] for k in EXPECTED} == EXPECTED
    assert "10 of its 100 records refused" in got["keyless_message"]


@pytest.mark.kafka_oracle
def test_kafka_lists_the_same_records(kafka_oracle):
    got = scenario(kafka_oracle)
    assert {k: got[k] for k in EXPECTED} == EXPECTED
