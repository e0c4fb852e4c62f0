"""AlterReplicaLogDirs (KIP-113): moving a partition between a broker's log dirs while producers
keep writing, Kafka's error codes, and a kill -9 in the middle of a move."""

from __future__ import annotations

import os
import time
import threading

from protocol import ApiKey
from protocol.errors import ErrorCode
from tests.integration.clients import topic_name
from tests.integration.kafka_wire import WireClient, message_set, produce, read_all
from tests.integration.kafka_wire import create_topic as wire_create_topic
from tests.waiting import wait_for

VALUE = b"v" * 1000


def two_dir_broker(broker_factory, tmp_path, **overrides):
    dirs = [str(tmp_path / "disk1"), str(tmp_path / "disk2")]
    return broker_factory({"log.dirs": ",".join(dirs), **overrides}), dirs


def alter(c: WireClient, moves: dict[tuple[str, int], str], version: int = 2):
    """{(topic, partition): error code} of one AlterReplicaLogDirs request."""
    by_dir: dict[str, dict[str, list[int]]] = {}
    for (topic, partition), path in moves.items():
        by_dir.setdefault(path, {}).setdefault(topic, []).append(partition)
    body = {
        "dirs": [
            {"path": path, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
            for path, topics in by_dir.items()
        ]
    }
    response = c.call(ApiKey.ALTER_REPLICA_LOG_DIRS, version, body)
    return {
        (t.topic_name, p.partition_index): p.error_code
        for t in response.results
        for p in t.partitions
    }


def placement(c: WireClient, topic: str) -> dict[tuple[int, bool], str]:
    """{(partition, is_future): log dir} of ``topic`` from DescribeLogDirs."""
    response = c.call(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})
    return {
        (p.partition_index, p.is_future_key): r.log_dir
        for r in response.results
        for t in r.topics
        if t.name == topic
        for p in t.partitions
    }


def fill(c: WireClient, topic: str, megabytes: int) -> dict[int, bytes]:
    acked = {}
    for i in range(megabytes * 10):
        values = [b"%d-%d-" % (i, j) + VALUE for j in range(100)]
        r = produce(c, topic, message_set(values), acks=-1)
        assert r.error_code == 0
        acked.update({r.base_offset + j: v for j, v in enumerate(values)})
    return acked


class Producer(threading.Thread):
    """Produces with acks=-1 until stopped, remembering every acknowledged offset's value."""

    def __init__(self, host: str, port: int, topic: str) -> None:
        super().__init__(daemon=True)
        self.host, self.port, self.topic = host, port, topic
        self.acked: dict[int, bytes] = {}
        self.errors: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            with WireClient(self.host, self.port) as c:
                i = 0
                while not self.stop.is_set():
                    values = [b"live-%d-%d" % (i, j) for j in range(20)]
                    r = produce(c, self.topic, message_set(values), acks=-1)
                    if r.error_code:
                        self.errors.append(r.error_code)
                        continue
                    self.acked.update({r.base_offset + j: v for j, v in enumerate(values)})
                    i += 1
        except OSError:  # the broker was killed under us
            return


def test_a_partition_moves_while_a_producer_writes(broker_factory, tmp_path):
    b, dirs = two_dir_broker(
        broker_factory,
        tmp_path,
        **{
            "log.segment.bytes": 1 << 20,
            "replica.alter.log.dirs.io.max.bytes.per.second": 3 << 20,
        },
    )
    topic = topic_name("move")
    with WireClient(b.host, b.port) as c:
        assert wire_create_topic(c, topic) == 0
        acked = fill(c, topic, 6)
        source = placement(c, topic)[(0, False)]
        target = next(d for d in dirs if d != source)
        producer = Producer(b.host, b.port, topic)
        producer.start()
        wait_for(lambda: len(producer.acked) > 100, "the producer writes")
        assert alter(c, {(topic, 0): target}) == {(topic, 0): 0}
        # DescribeLogDirs shows the future replica in the target dir while it is copied
        wait_for(lambda: placement(c, topic).get((0, True)) == target, "the future replica")
        assert alter(c, {(topic, 0): target}) == {(topic, 0): 0}  # already under way
        wait_for(
            lambda: placement(c, topic) == {(0, False): target},
            "the partition in its new log dir",
            timeout=60,
        )
        wait_for(lambda: len(producer.acked) > 2000, "the producer writes after the move")
        producer.stop.set()
        producer.join(30)
        assert producer.errors == []
        acked.update(producer.acked)
        stored = {m.offset: m.value for m in read_all(c, topic)}
        assert sorted(stored) == list(range(len(stored)))
        assert {o: stored.get(o) for o in acked} == acked
    assert os.path.exists(os.path.join(target, f"{topic}-0", "00000000000000000000.log"))
    assert not [n for n in os.listdir(source) if n.startswith(f"{topic}-0")]
    assert b.log_events("partition moved to another log dir")

    b.stop()
    b.start()
    with WireClient(b.host, b.port) as c:
        assert placement(c, topic) == {(0, False): target}
        assert {m.offset: m.value for m in read_all(c, topic)} == stored
        assert produce(c, topic, message_set([b"after"]), acks=-1).base_offset == len(stored)


def test_kafkas_error_codes(broker_factory, tmp_path):
    b, dirs = two_dir_broker(broker_factory, tmp_path)
    topic = topic_name("codes")
    with WireClient(b.host, b.port) as c:
        assert wire_create_topic(c, topic, partitions=1) == 0
        here = placement(c, topic)[(0, False)]
        assert alter(c, {(topic, 0): here}, version=1) == {(topic, 0): 0}
        assert alter(c, {(topic, 0): "/no/such/dir"}) == {(topic, 0): ErrorCode.LOG_DIR_NOT_FOUND}
        later = topic_name("later")
        assert alter(c, {(topic, 7): here, (later, 0): here}) == {
            (topic, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            (later, 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }
        assert placement(c, topic) == {(0, False): here}
        # the dir asked for is kept: the partition is created there (not in the emptier dir)
        assert wire_create_topic(c, later) == 0
        assert placement(c, later) == {(0, False): here}


def test_kill9_mid_move_then_restart_keeps_every_acknowledged_record(broker_factory, tmp_path):
    b, dirs = two_dir_broker(
        broker_factory,
        tmp_path,
        **{
            "log.segment.bytes": 1 << 20,
            "log.flush.interval.messages": 1,
            "replica.alter.log.dirs.io.max.bytes.per.second": 1 << 20,
        },
    )
    topic = topic_name("killmove")
    with WireClient(b.host, b.port) as c:
        assert wire_create_topic(c, topic) == 0
        acked = fill(c, topic, 8)
        source = placement(c, topic)[(0, False)]
        target = next(d for d in dirs if d != source)
        producer = Producer(b.host, b.port, topic)
        producer.start()
        assert alter(c, {(topic, 0): target}) == {(topic, 0): 0}

        def copied() -> int:
            response = c.call(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})
            return sum(
                p.partition_size
                for r in response.results
                for t in r.topics
                if t.name == topic
                for p in t.partitions
                if p.is_future_key
            )

        wait_for(lambda: copied() > 2 << 20, "a few MiB of the partition copied")
    b.kill()
    producer.stop.set()
    producer.join(30)
    acked.update(producer.acked)
    futures = [n for n in os.listdir(target) if n.endswith("-future")]
    assert futures  # the kill came mid-move

    b.start()
    assert b.log_events(
        "removing the unfinished copy of a partition being moved here; the move starts again"
    )
    with WireClient(b.host, b.port) as c:
        stored = {m.offset: m.value for m in read_all(c, topic)}
        assert {o: stored.get(o) for o in acked} == acked
        # the move starts again by itself and finishes
        wait_for(
            lambda: placement(c, topic) == {(0, False): target},
            "the interrupted move done after the restart",
            timeout=60,
        )
        assert {m.offset: m.value for m in read_all(c, topic)} == stored
    assert not [n for n in os.listdir(target) if n.endswith("-future")]


def _set_broker_config(c: WireClient, broker: str, name: str, value: str):
    body = {
        "resources": [
            {
                "resource_type": 4,  # BROKER; "" is the cluster-wide default
                "resource_name": broker,
                "configs": [{"name": name, "config_operation": 0, "value": value}],
            }
        ],
        "validate_only": False,
    }
    answer = c.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body).responses[0]
    return answer.error_code, answer.error_message


def test_the_move_quota_changes_at_run_time_per_broker(broker_factory, tmp_path):
    b, dirs = two_dir_broker(broker_factory, tmp_path, **{"log.segment.bytes": 1 << 20})
    topic = topic_name("quota")
    quota = "replica.alter.log.dirs.io.max.bytes.per.second"
    with WireClient(b.host, b.port) as c:
        assert wire_create_topic(c, topic) == 0
        fill(c, topic, 4)
        code, message = _set_broker_config(c, "", quota, "1048576")
        assert code == ErrorCode.INVALID_REQUEST and quota in message  # per broker only
        assert _set_broker_config(c, "0", quota, "1048576") == (0, None)
        source = placement(c, topic)[(0, False)]
        target = next(d for d in dirs if d != source)
        asked = time.monotonic()
        assert alter(c, {(topic, 0): target}) == {(topic, 0): 0}
        wait_for(lambda: placement(c, topic).get((0, True)) == target, "the future replica")
        wait_for(
            lambda: placement(c, topic) == {(0, False): target},
            "the partition in its new log dir",
            timeout=60,
        )
        assert time.monotonic() - asked > 3  # 4 MiB at 1 MiB/s (unthrottled: milliseconds)
