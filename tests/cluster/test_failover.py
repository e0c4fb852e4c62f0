"""Layer 5: failover under load with real clients.

ZooKeeper and three brokers; a topic with replication factor 3 and min.insync.replicas=2;
confluent-kafka and kafka-python producers with acks=all send uniquely tagged messages all along,
while the leader of a partition (some rounds: the controller) is killed with SIGKILL and started
again, round after round. Afterwards:
- every acknowledged message is in the log (none lost; retries may have stored some twice);
- every replica holds the same bytes, so one sequence of offsets, up to the same high watermark;
- ``chronolog dump-log --verify`` is clean on every replica's segments;
- offsets_for_times (ListOffsets asked of each replica itself) is the same on every replica.
Bounded: ROUNDS rounds, each with its own deadlines.
"""

from __future__ import annotations

import random
import threading
import time

from confluent_kafka import Producer as CProducer
from kafka import KafkaProducer

from protocol.records import iter_deep
from tests.cluster.helpers import replica_bytes, replica_offsets
from tests.waiting import wait_for
from tests.integration.clients import dump_log_verify

ROUNDS = 8
PARTITIONS = 3
TOPIC = "failover"


class Acked:
    """Messages acknowledged by the producers (value -> partition), thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: dict[bytes, int] = {}
        self.errors = 0

    def add(self, value: bytes, partition: int) -> None:
        with self.lock:
            self.values[value] = partition

    def count(self) -> int:
        with self.lock:
            return len(self.values)


def _confluent_loop(bootstrap: str, acked: Acked, stop: threading.Event) -> None:
    producer = CProducer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "message.timeout.ms": 60000,
            "linger.ms": 5,
            "retry.backoff.ms": 200,
        }
    )

    def delivered(err, msg):
        if err is None:
            acked.add(msg.value(), msg.partition())
        else:
            acked.errors += 1

    i = 0
    while not stop.is_set():
        try:
            producer.produce(TOPIC, b"ck-%d" % i, partition=i % PARTITIONS, on_delivery=delivered)
            i += 1
        except BufferError:
            pass
        producer.poll(0.01 if i % 10 == 0 else 0)
        if i % 10 == 0:
            time.sleep(0.01)
    producer.flush(90)


def _kafka_python_loop(bootstrap: str, acked: Acked, stop: threading.Event) -> None:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        retries=1000,
        retry_backoff_ms=200,
        linger_ms=5,
        request_timeout_ms=10000,
        delivery_timeout_ms=60000,
        max_in_flight_requests_per_connection=1,
    )

    def done(value: bytes):
        return lambda metadata: acked.add(value, metadata.partition)

    def failed(_exc):
        acked.errors += 1

    i = 0
    while not stop.is_set():
        value = b"kp-%d" % i
        future = producer.send(TOPIC, value, partition=i % PARTITIONS)
        future.add_callback(done(value))
        future.add_errback(failed)
        i += 1
        time.sleep(0.01)
    producer.flush(90)
    producer.close(10)


def test_kill_leaders_and_the_controller_under_acks_all(cluster_factory):
    cluster = cluster_factory(
        3,
        zookeeper_session_timeout_ms=3000,
        replica_lag_time_max_ms=5000,
        log_segment_bytes=64 * 1024,
    )
    assert cluster.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"}) == 0
    bootstrap = cluster.bootstrap
    acked, stop = Acked(), threading.Event()
    threads = [
        threading.Thread(target=_confluent_loop, args=(bootstrap, acked, stop), daemon=True),
        threading.Thread(target=_kafka_python_loop, args=(bootstrap, acked, stop), daemon=True),
    ]
    for t in threads:
        t.start()
    rng = random.Random(15)
    kills = []
    try:
        wait_for(lambda: acked.count() > 200, "first acknowledgements", timeout=60)
        for round_ in range(ROUNDS):
            if round_ % 3 == 2:
                victim = cluster.controller()
            else:
                victim = cluster.leader(TOPIC, rng.randrange(PARTITIONS))
            assert victim in (1, 2, 3)
            kills.append(victim)
            before = acked.count()
            cluster.broker(victim).kill()
            # the cluster moves on: new leaders, and producers acknowledged again
            wait_for(
                lambda: all(
                    cluster.leader(TOPIC, p) not in (-1, victim) for p in range(PARTITIONS)
                ),
                f"round {round_}: leaders away from broker {victim}",
                timeout=60,
            )
            wait_for(lambda: acked.count() > before + 100, f"round {round_}: progress", timeout=60)
            cluster.broker(victim).start()
            wait_for(
                lambda: all(
                    sorted(cluster.state(TOPIC, p)["isr"]) == [1, 2, 3] for p in range(PARTITIONS)
                ),
                f"round {round_}: broker {victim} back in every ISR",
                timeout=90,
            )
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    assert not any(t.is_alive() for t in threads)
    print(f"kills {kills}, acknowledged {acked.count()}, failed sends {acked.errors}")
    assert acked.count() > 1000

    # every replica converges on the same bytes up to the same high watermark
    logs = {}
    for p in range(PARTITIONS):

        def converged(p=p):
            got = {b: replica_bytes(cluster.broker(b), TOPIC, p) for b in (1, 2, 3)}
            ends = {b: replica_offsets(cluster.broker(b), TOPIC, p, -1)[1] for b in (1, 2, 3)}
            first = got[1]
            same = all(v == first for v in got.values()) and set(ends.values()) == {first[1]}
            return first if same else None

        data, hw = wait_for(converged, f"partition {p}: replicas equal", timeout=60)
        logs[p] = data
        messages = list(iter_deep(data))
        assert [m.offset for m in messages] == list(range(hw))
        stored = {m.value for m in messages}
        lost = [v for v, part in acked.values.items() if part == p and v not in stored]
        assert lost == [], f"partition {p}: {len(lost)} acknowledged messages lost: {lost[:10]}"
        # offsets_for_times: the same on every replica
        stamps = sorted({m.timestamp for m in messages})
        probes = stamps[:: max(1, len(stamps) // 40)] + [stamps[-1] + 1]
        for ts in probes:
            answers = {replica_offsets(cluster.broker(b), TOPIC, p, ts) for b in (1, 2, 3)}
            assert len(answers) == 1, (p, ts, answers)
    assert set(kills) & {cluster.controller()} or len(set(kills)) >= 2
    cluster.stop()
    for broker in cluster.brokers:
        assert dump_log_verify(broker.log_dirs[0], TOPIC)
