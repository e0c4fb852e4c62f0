"""Layer 7: a network partition cuts the leader off from the other brokers and from ZooKeeper
(TCP proxies on loopback, tests/cluster/proxy.py) while a client still reaches it.

A writer keeps producing with acks=all straight to the old leader, another to whoever ZooKeeper
names leader. After the partition heals and the old leader has rejoined as a follower:
- no acknowledged write is lost, and every replica holds the same log;
- no two brokers acknowledged writes of the same leader epoch (each acknowledged message's batch
  carries the epoch it was written in; the broker that acknowledged it must be that epoch's only
  acknowledger), and the isolated leader acknowledged nothing once it was cut off.
"""

from __future__ import annotations

import threading
import time

from protocol import recordbatch as rb
from protocol.errors import ErrorCode
from protocol.records import iter_deep, iter_shallow
from tests.cluster.helpers import produce, replica_bytes
from tests.waiting import wait_for
from tests.cluster.proxy import Partition


class Writer(threading.Thread):
    """Produces tagged values with acks=all to ``target()``'s broker; records every
    acknowledgement as (time acknowledged, broker id, value)."""

    def __init__(self, cluster, tag: bytes, target, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.cluster, self.tag, self.target, self.stop_event = cluster, tag, target, stop
        self.acked: list[tuple[float, int, bytes]] = []
        self.refusals: dict[int, int] = {}

    def run(self) -> None:
        i = 0
        while not self.stop_event.is_set():
            broker_id = self.target()
            if broker_id not in (1, 2, 3):
                time.sleep(0.05)
                continue
            value = b"%s-%d" % (self.tag, i)
            i += 1
            try:
                answer = produce(
                    self.cluster.broker(broker_id), "t", [value], acks=-1, timeout_ms=2000
                )
            except Exception:  # connection refused or timed out: try again
                time.sleep(0.05)
                continue
            if answer.error_code == 0:
                self.acked.append((time.monotonic(), broker_id, value))
            else:
                self.refusals[answer.error_code] = self.refusals.get(answer.error_code, 0) + 1
                time.sleep(0.02)


def _epochs_of_values(data: bytes) -> dict[bytes, int]:
    """value -> partition leader epoch of the batch holding it."""
    out = {}
    for entry in iter_shallow(data):
        epoch = rb.read_header(data, entry.position).partition_leader_epoch
        for message in iter_deep(data[entry.position : entry.next_position]):
            out[message.value] = epoch
    return out


def test_isolated_leader_acknowledges_nothing_and_loses_nothing(cluster_factory, zookeeper):
    cluster = cluster_factory(
        3,
        start=False,
        zookeeper_session_timeout_ms=3000,
        replica_lag_time_max_ms=3000,
    )
    partition = Partition()
    try:
        for broker_id, broker in enumerate(cluster.brokers, 1):
            proxy = partition.broker_proxy(broker_id, lambda b=broker: b.port)
            zk = partition.zookeeper_proxy(broker_id, zookeeper.port)
            broker.overrides["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{proxy.port}"
            broker.overrides["zookeeper.connect"] = f"127.0.0.1:{zk.port}{cluster.chroot}"
        cluster.start()
        assert cluster.create_topic("t", 1, 3, {"min.insync.replicas": "2"}) == 0
        old = cluster.leader("t")
        stop = threading.Event()
        to_old = Writer(cluster, b"old", lambda: old, stop)
        to_current = Writer(cluster, b"cur", lambda: cluster.leader("t"), stop)
        to_old.start()
        to_current.start()
        wait_for(
            lambda: len(to_old.acked) > 20 and len(to_current.acked) > 20, "writes", timeout=30
        )
        cut_at = time.monotonic()
        partition.isolate(old)
        new = wait_for(
            lambda: (leader := cluster.leader("t")) not in (-1, old) and leader,
            "a leader on the majority side",
            timeout=30,
        )
        before = sum(1 for _, b, _ in to_current.acked if b == new)
        wait_for(
            lambda: sum(1 for _, b, _ in to_current.acked if b == new) > before + 50,
            "acknowledgements from the new leader",
            timeout=30,
        )
        time.sleep(1.0)  # the old leader keeps being asked while cut off
        partition.heal()
        wait_for(
            lambda: sorted(cluster.state("t")["isr"]) == [1, 2, 3], "old leader in sync", timeout=60
        )
        stop.set()
        to_old.join(30)
        to_current.join(30)
        data, _ = wait_for(
            lambda: len({replica_bytes(cluster.broker(b), "t") for b in (1, 2, 3)}) == 1
            and replica_bytes(cluster.broker(1), "t"),
            "identical replicas",
            timeout=60,
        )
    finally:
        cluster.stop()
        partition.close()
    epochs = _epochs_of_values(data)
    acked = to_old.acked + to_current.acked
    lost = [v for _, _, v in acked if v not in epochs]
    assert lost == [], f"{len(lost)} acknowledged writes lost: {lost[:10]}"
    acknowledgers: dict[int, set[int]] = {}
    for _, broker_id, value in acked:
        acknowledgers.setdefault(epochs[value], set()).add(broker_id)
    assert all(len(b) == 1 for b in acknowledgers.values()), acknowledgers
    # once cut off, the old leader acknowledged nothing (its followers could not fetch)
    late = [v for t, b, v in acked if b == old and t > cut_at + 0.5]
    assert late == [], late[:10]
    assert (
        to_old.refusals.get(ErrorCode.REQUEST_TIMED_OUT, 0)
        + to_old.refusals.get(ErrorCode.NOT_LEADER_FOR_PARTITION, 0)
        > 0
    )
