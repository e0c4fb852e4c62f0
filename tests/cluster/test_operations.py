"""Layer 6: controlled shutdown, preferred leader election, partition reassignment (and KIP-33's
reason for retention by message time), `chronolog cluster describe`."""

from __future__ import annotations

import threading
import time

from kafka import KafkaProducer

from protocol.records import iter_deep
from tests.cluster.helpers import replica_bytes, wait_for


def test_sigterm_moves_leadership_away_first(cluster_factory):
    cluster = cluster_factory(3, zookeeper_session_timeout_ms=30000)
    assert cluster.create_topic("t", 3, 3, {"min.insync.replicas": "2"}) == 0
    victim = cluster.leader("t", 0)
    led = [p for p in range(3) if cluster.leader("t", p) == victim]
    epochs = {p: cluster.state("t", p)["leader_epoch"] for p in range(3)}
    acked, stop = [], threading.Event()

    def produce():
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=2)
        i = 0
        while not stop.is_set():
            value = b"m%d" % i
            producer.send("t", value, partition=i % 3).add_callback(
                lambda md, v=value: acked.append((md.partition, v))
            )
            i += 1
            time.sleep(0.005)
        producer.flush(60)
        producer.close()

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    wait_for(lambda: len(acked) > 100, 30, "acknowledgements")
    assert cluster.broker(victim).stop() == 0
    log = cluster.broker(victim).log_output(since_start=True)
    assert '"controlled shutdown complete: no partition left to lead"' in log
    for p in led:
        state = cluster.state("t", p)
        assert state["leader"] != victim and state["leader_epoch"] > epochs[p]
        assert victim not in state["isr"]
    before = len(acked)
    wait_for(lambda: len(acked) > before + 100, 30, "acknowledgements after the shutdown")
    stop.set()
    thread.join(60)
    for p in range(3):
        data, _ = replica_bytes(cluster.broker(cluster.leader("t", p)), "t", p)
        stored = {m.value for m in iter_deep(data)}
        assert all(v in stored for part, v in acked if part == p)
