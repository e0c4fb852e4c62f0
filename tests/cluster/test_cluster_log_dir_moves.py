"""AlterReplicaLogDirs in a cluster: the follower's replica and then the leader's move to another
log dir of their broker while an acks=all producer writes at min.insync.replicas=2, so every
acknowledged record needed both replicas; the follower keeps fetching across its swap and the
leader keeps serving it, and both replicas end byte-identical in their new dirs."""

from __future__ import annotations

import threading

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from protocol import ApiKey
from tests.cluster.helpers import call, replica_bytes, wait_for

TOPIC = "moving"


def _dirs(tmp_path, broker_id: int) -> list[str]:
    return [str(tmp_path / f"b{broker_id}-disk{n}") for n in (1, 2)]


def _placement(broker) -> dict[tuple[int, bool], str]:
    answer = call(broker, ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})
    return {
        (p.partition_index, p.is_future_key): r.log_dir
        for r in answer.results
        for t in r.topics
        if t.name == TOPIC
        for p in t.partitions
    }


def _move(broker, target: str) -> int:
    body = {"dirs": [{"path": target, "topics": [{"name": TOPIC, "partitions": [0]}]}]}
    answer = call(broker, ApiKey.ALTER_REPLICA_LOG_DIRS, 2, body)
    return answer.results[0].partitions[0].error_code


class _Producer(threading.Thread):
    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2)
        self.acked: list[bytes] = []
        self.failed: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            value = b"m%06d-" % i + b"x" * 500
            try:
                self.producer.send(TOPIC, value, partition=0).get(timeout=30)
            except Exception as exc:  # noqa: BLE001 - reported by the test
                self.failed.append(repr(exc))
            else:
                self.acked.append(value)
            i += 1
        self.producer.close()


def test_moving_follower_then_leader_replica_keeps_replication_going(cluster_factory, tmp_path):
    cluster = cluster_factory(
        2,
        per_broker={b: {"log.dirs": ",".join(_dirs(tmp_path, b))} for b in (1, 2)},
        log_segment_bytes=256 * 1024,
        replica_alter_log_dirs_io_max_bytes_per_second=2 << 20,
    )
    assert cluster.create_topic(TOPIC, 1, 2, {"min.insync.replicas": "2"}) == 0
    leader = cluster.leader(TOPIC)
    follower = 3 - leader
    producer = _Producer(cluster.bootstrap)
    producer.start()
    wait_for(lambda: len(producer.acked) > 1000, "half a MiB acknowledged")
    for broker_id in (follower, leader):
        broker = cluster.broker(broker_id)
        source = _placement(broker)[(0, False)]
        target = next(d for d in _dirs(tmp_path, broker_id) if d != source)
        assert _move(broker, target) == 0
        wait_for(
            lambda: _placement(broker) == {(0, False): target},
            f"broker {broker_id}'s replica in its new dir",
            timeout=90,
        )
        moved = len(producer.acked)
        wait_for(lambda: len(producer.acked) > moved + 300, "acks=all goes on after the move")
    producer.stop.set()
    producer.join(60)
    assert producer.failed == []
    assert cluster.leader(TOPIC) == leader
    assert sorted(cluster.state(TOPIC)["isr"]) == [1, 2]

    def equal():
        got = [replica_bytes(cluster.broker(b), TOPIC) for b in (1, 2)]
        return got[0] if got[0] == got[1] and got[0][1] >= len(producer.acked) else None

    wait_for(equal, "both replicas byte-identical up to the high watermark", timeout=30)
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, consumer_timeout_ms=5000)
    consumer.assign([TopicPartition(TOPIC, 0)])
    consumer.seek_to_beginning()
    values = [r.value for r in consumer]
    consumer.close()
    assert values == producer.acked
