"""DeleteRecords v0-v2 (KIP-107) against real brokers: the log start offset moves, Fetch below
it answers OFFSET_OUT_OF_RANGE, ListOffsets earliest and the Fetch answer's log_start_offset
follow it, whole segments below it leave the disk, and it holds after a kill -9."""

from __future__ import annotations

import os
import uuid

import pytest

from protocol import ApiKey
from tests.integration.kafka_wire import (
    WireClient,
    create_topic,
    fetch_partition,
    message_set,
    produce,
    read_all,
)


def name(prefix: str = "rec") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def delete_records(client, version, topic, *partitions):
    body = {
        "topics": [
            {
                "name": topic,
                "partitions": [{"partition_index": p, "offset": o} for p, o in partitions],
            }
        ],
        "timeout_ms": 10000,
    }
    (result,) = client.call(ApiKey.DELETE_RECORDS, version, body).topics
    return [(p.partition_index, p.error_code, p.low_watermark) for p in result.partitions]


def earliest(client, topic, partition=0):
    body = {
        "replica_id": -1,
        "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -2}]}
        ],
    }
    return client.call(ApiKey.LIST_OFFSETS, 1, body).topics[0].partitions[0].offset


def fill(client, topic, count, partition=0, size=500):
    for i in range(count):
        records = message_set([b"%d:" % i + b"x" * size], keys=[b"k%d" % i])
        answer = produce(client, topic, records, partition=partition)
        assert answer.error_code == 0


def segment_bases(broker, topic, partition=0):
    directory = os.path.join(broker.log_dir, f"{topic}-{partition}")
    return sorted(int(f[:-4]) for f in os.listdir(directory) if f.endswith(".log"))


@pytest.mark.parametrize("version", range(3))
def test_delete_records_moves_the_log_start_offset(broker, version):
    topic = name()
    with WireClient(broker.host, broker.port) as client:
        assert create_topic(client, topic, 2) == 0
        fill(client, topic, 10)
        assert delete_records(client, version, topic, (0, 4)) == [(0, 0, 4)]
        assert earliest(client, topic) == 4
        below = fetch_partition(client, topic, 0, 3)
        assert below.error_code == 1  # OFFSET_OUT_OF_RANGE
        at = fetch_partition(client, topic, 0, 4)
        assert (at.error_code, at.log_start_offset) == (0, 4)
        assert [m.offset for m in read_all(client, topic, 0, 4)] == list(range(4, 10))
        # never backwards; -1 is the high watermark
        assert delete_records(client, version, topic, (0, 2)) == [(0, 0, 4)]
        assert delete_records(client, version, topic, (0, -1)) == [(0, 0, 10)]
        assert fetch_partition(client, topic, 0, 10).error_code == 0
        assert earliest(client, topic, 1) == 0  # the other partition is untouched


def test_delete_records_errors(broker):
    topic, compacted = name(), name()
    with WireClient(broker.host, broker.port) as client:
        assert create_topic(client, topic) == 0
        assert create_topic(client, compacted, 1, {"cleanup.policy": "compact"}) == 0
        fill(client, topic, 3)
        fill(client, compacted, 3)
        assert delete_records(client, 2, topic, (0, 4), (5, 1), (0, -7)) == [
            (0, 1, -1),  # the last offset given wins: -7 is not valid
            (5, 3, -1),
        ]
        assert delete_records(client, 2, topic, (0, 4)) == [(0, 1, -1)]  # past the end
        assert delete_records(client, 2, compacted, (0, 1)) == [(0, 44, -1)]  # POLICY_VIOLATION
        assert delete_records(client, 2, name(), (0, 1)) == [(0, 3, -1)]
        assert earliest(client, topic) == 0 and earliest(client, compacted) == 0


def test_whole_segments_go_and_the_start_survives_kill_9(broker_factory):
    broker = broker_factory(log_segment_bytes=2000)
    topic = name()
    with WireClient(broker.host, broker.port) as client:
        assert create_topic(client, topic) == 0
        fill(client, topic, 12)  # three messages of about 570 bytes to a segment
        assert segment_bases(broker, topic) == [0, 3, 6, 9]
        assert delete_records(client, 1, topic, (0, 7)) == [(0, 0, 7)]
        assert segment_bases(broker, topic) == [6, 9]  # 0-2 and 3-5 wholly below 7
    broker.kill()
    broker.start()
    with WireClient(broker.host, broker.port) as client:
        assert earliest(client, topic) == 7
        assert fetch_partition(client, topic, 0, 6).error_code == 1
        assert [m.offset for m in read_all(client, topic, 0, 7)] == list(range(7, 12))
        fill(client, topic, 1)
        assert delete_records(client, 0, topic, (0, -1)) == [(0, 0, 13)]
    broker.restart()
    with WireClient(broker.host, broker.port) as client:
        assert earliest(client, topic) == 13
        assert produce(client, topic, message_set([b"next"])).base_offset == 13
