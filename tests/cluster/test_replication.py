"""Layer 3: followers copy the leader's log exactly, consumers read up to the high watermark,
the ISR shrinks and grows, acks=all waits for the ISR and min.insync.replicas is honoured,
unclean.leader.election.enable too."""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from protocol.errors import ErrorCode
from protocol.records import TimestampType, iter_deep
from tests.integration.test_metrics import scrape
from tests.cluster.helpers import (
    produce,
    replica_bytes,
    replica_fetch,
    replica_offsets,
    wait_for,
)


def _followers(cluster, topic, partition=0):
    state = cluster.state(topic, partition)
    replicas = cluster.zk_json(f"/brokers/topics/{topic}")["partitions"][str(partition)]
    return [b for b in replicas if b != state["leader"]]


def _all_replicas_equal(cluster, topic, partition=0, brokers=(1, 2, 3)):
    """Every replica's bytes below its HW, when all are the same and at the same HW."""
    got = {b: replica_bytes(cluster.broker(b), topic, partition) for b in brokers}
    first = got[brokers[0]]
    return first if all(v == first for v in got.values()) else None


def test_acks_all_copies_the_log_exactly(cluster_factory):
    cluster = cluster_factory(3)
    configs = {"min.insync.replicas": "2", "message.timestamp.type": "LogAppendTime"}
    assert cluster.create_topic("t", 2, 3, configs) == 0
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=5, compression_type="gzip"
    )
    futures = [producer.send("t", b"v%d" % i, partition=i % 2) for i in range(400)]
    metadata = [f.get(timeout=30) for f in futures]
    producer.close()
    assert sorted(m.offset for m in metadata if m.partition == 0) == list(range(200))
    for p in (0, 1):
        data, hw = wait_for(
            lambda: _all_replicas_equal(cluster, "t", p),
            f"replicas of partition {p} equal",
            timeout=30,
        )
        assert hw == 200
        messages = list(iter_deep(data))
        assert [m.offset for m in messages] == list(range(200))
        assert {m.timestamp_type for m in messages} == {TimestampType.LOG_APPEND_TIME}
        # the followers kept the leader's LogAppendTime (byte-identical logs above say so too)
        for b in (1, 2, 3):
            assert replica_offsets(cluster.broker(b), "t", p, -1)[1] == 200
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False)
    tp = TopicPartition("t", 1)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    seen = []
    deadline = time.monotonic() + 30
    while len(seen) < 200 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            seen += [r.value for r in records]
    consumer.close()
    assert seen == [b"v%d" % i for i in range(1, 400, 2)]


def test_consumers_see_only_what_the_isr_has(cluster_factory):
    """...and an acks=all produce waits for the frozen follower in the produce purgatory."""
    cluster = cluster_factory(
        3,
        zookeeper_session_timeout_ms=30000,
        replica_lag_time_max_ms=30000,
        metrics_listener="http://127.0.0.1:0",
    )
    assert cluster.create_topic("t", 1, 3) == 0
    leader = cluster.broker(cluster.leader("t"))
    assert produce(leader, "t", [b"a", b"b"], acks=-1).error_code == 0
    purgatory = (
        "kafka_server_delayedoperationpurgatory_purgatorysize",
        (("delayedOperation", "Produce"),),
    )
    assert scrape(leader.metrics_url())[purgatory] == 0
    frozen = cluster.broker(_followers(cluster, "t")[0])
    frozen.proc.send_signal(signal.SIGSTOP)
    waiting = ThreadPoolExecutor(1)
    try:
        answer = produce(leader, "t", [b"c"], acks=1)
        assert answer.error_code == 0 and answer.base_offset == 2
        time.sleep(1.0)  # followers had many fetch rounds: the frozen one keeps the HW at 2
        assert replica_offsets(leader, "t", 0, -1, replica_id=-1)[1] == 2  # the HW
        assert replica_offsets(leader, "t", 0, -1)[1] == 3  # the leader's log end
        # a consumer's fetch stops at the HW (kafka-python would also try the frozen broker)
        part = replica_fetch(leader, "t", 0, 0, replica_id=-1)
        assert part.error_code == 0 and part.high_watermark == 2
        assert [m.value for m in iter_deep(part.records)] == [b"a", b"b"]
        acks_all = waiting.submit(produce, leader, "t", [b"d"], acks=-1, timeout_ms=25000)
        wait_for(
            lambda: scrape(leader.metrics_url())[purgatory] == 1, "a produce waiting", timeout=10
        )
        assert not acks_all.done()
    finally:
        frozen.proc.send_signal(signal.SIGCONT)
        waiting.shutdown()  # the produce returns once the follower catches up (or times out)
    answer = acks_all.result()
    assert answer.error_code == 0 and answer.base_offset == 3
    assert scrape(leader.metrics_url())[purgatory] == 0
    wait_for(
        lambda: replica_offsets(leader, "t", 0, -1, replica_id=-1)[1] == 4,
        "HW at 4 once caught up",
        timeout=30,
    )


def test_isr_shrinks_and_grows_and_min_insync_is_honoured(cluster_factory):
    cluster = cluster_factory(
        3,
        zookeeper_session_timeout_ms=30000,
        replica_lag_time_max_ms=3000,
        metrics_listener="http://127.0.0.1:0",
    )
    assert cluster.create_topic("t", 1, 3, {"min.insync.replicas": "2"}) == 0
    leader_id = cluster.leader("t")
    leader = cluster.broker(leader_id)
    f1, f2 = _followers(cluster, "t")
    under_replicated = ("kafka_server_replicamanager_underreplicatedpartitions", ())
    under_min_isr = ("kafka_server_replicamanager_underminisrpartitioncount", ())
    wait_for(lambda: len(cluster.state("t")["isr"]) == 3, "ISR of three", timeout=30)
    assert scrape(leader.metrics_url())[under_replicated] == 0
    assert scrape(leader.metrics_url())[under_min_isr] == 0
    cluster.broker(f1).proc.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        # waits until the leader drops the frozen follower from the ISR, then is acknowledged
        answer = produce(leader, "t", [b"x"], acks=-1, timeout_ms=20000)
        assert answer.error_code == 0
        assert time.monotonic() - started > 1.5
        assert sorted(cluster.state("t")["isr"]) == sorted([leader_id, f2])
        wait_for(
            lambda: f1 not in cluster.partition_view(leader_id, "t")[3], "metadata ISR", timeout=10
        )
        assert scrape(leader.metrics_url())[under_replicated] == 1
        cluster.broker(f2).proc.send_signal(signal.SIGSTOP)
        try:
            wait_for(
                lambda: cluster.state("t")["isr"] == [leader_id], "ISR of the leader", timeout=20
            )
            # The leader writes ZooKeeper first, then its own view, which decides the answer.
            wait_for(
                lambda: scrape(leader.metrics_url())[under_min_isr] == 1,
                "the leader's own ISR below min.insync.replicas",
                timeout=10,
            )
            refused = produce(leader, "t", [b"y"], acks=-1)
            assert refused.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
            assert produce(leader, "t", [b"z"], acks=1).error_code == 0
        finally:
            cluster.broker(f2).proc.send_signal(signal.SIGCONT)
    finally:
        cluster.broker(f1).proc.send_signal(signal.SIGCONT)
    wait_for(lambda: len(cluster.state("t")["isr"]) == 3, "ISR back to three", timeout=30)
    data, hw = wait_for(lambda: _all_replicas_equal(cluster, "t"), "replicas equal", timeout=30)
    assert [m.value for m in iter_deep(data)] == [b"x", b"z"] and hw == 2
    wait_for(
        lambda: scrape(leader.metrics_url())[under_replicated] == 0,
        "no under-replicated",
        timeout=10,
    )
    assert scrape(leader.metrics_url())[under_min_isr] == 0


def test_not_enough_replicas_after_append(cluster_factory):
    cluster = cluster_factory(3, zookeeper_session_timeout_ms=30000, replica_lag_time_max_ms=3000)
    assert cluster.create_topic("t", 1, 3, {"min.insync.replicas": "3"}) == 0
    leader = cluster.broker(cluster.leader("t"))
    frozen = cluster.broker(_followers(cluster, "t")[0])
    frozen.proc.send_signal(signal.SIGSTOP)
    try:
        # appended while the ISR still had three; committed only after the frozen one left
        answer = produce(leader, "t", [b"x"], acks=-1, timeout_ms=20000)
        assert answer.error_code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        assert produce(leader, "t", [b"y"], acks=-1).error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    finally:
        frozen.proc.send_signal(signal.SIGCONT)


def test_acks_all_times_out_while_the_isr_lags(cluster_factory):
    cluster = cluster_factory(3, zookeeper_session_timeout_ms=30000, replica_lag_time_max_ms=30000)
    assert cluster.create_topic("t", 1, 3) == 0
    leader = cluster.broker(cluster.leader("t"))
    frozen = cluster.broker(_followers(cluster, "t")[0])
    frozen.proc.send_signal(signal.SIGSTOP)
    try:
        answer = produce(leader, "t", [b"x"], acks=-1, timeout_ms=1500)
        assert answer.error_code == ErrorCode.REQUEST_TIMED_OUT
    finally:
        frozen.proc.send_signal(signal.SIGCONT)
    assert produce(leader, "t", [b"y"], acks=-1).error_code == 0


def _offline_after_losing_the_isr(cluster, topic):
    """Leave only an out-of-sync follower alive: freeze it until the ISR drops it, write more,
    kill the leader (and the other follower)."""
    leader_id = cluster.leader(topic)
    out_of_sync, other = _followers(cluster, topic)
    leader = cluster.broker(leader_id)
    assert produce(leader, topic, [b"committed"], acks=-1).error_code == 0
    cluster.broker(out_of_sync).proc.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: out_of_sync not in cluster.state(topic)["isr"], "ISR shrink", timeout=20)
        assert produce(leader, topic, [b"only-in-isr"], acks=-1).error_code == 0
        cluster.broker(other).kill()
        cluster.broker(leader_id).kill()
    finally:
        cluster.broker(out_of_sync).proc.send_signal(signal.SIGCONT)
    return leader_id, out_of_sync, other


def test_clean_election_waits_for_an_isr_member(cluster_factory):
    cluster = cluster_factory(3, zookeeper_session_timeout_ms=3000, replica_lag_time_max_ms=2000)
    assert cluster.create_topic("t", 1, 3) == 0
    leader_id, survivor, other = _offline_after_losing_the_isr(cluster, "t")
    state = wait_for(
        lambda: (s := cluster.state("t"))["leader"] == -1 and s, "partition offline", timeout=30
    )
    assert survivor not in state["isr"]
    cluster.broker(leader_id).start()
    wait_for(lambda: cluster.leader("t") == leader_id, "the ISR member leads again", timeout=30)
    data, _ = wait_for(
        lambda: _all_replicas_equal(cluster, "t", brokers=(leader_id, survivor)),
        "replicas equal",
        timeout=30,
    )
    assert [m.value for m in iter_deep(data)] == [b"committed", b"only-in-isr"]


def test_unclean_election_when_enabled(cluster_factory):
    cluster = cluster_factory(3, zookeeper_session_timeout_ms=3000, replica_lag_time_max_ms=2000)
    assert cluster.create_topic("t", 1, 3, {"unclean.leader.election.enable": "true"}) == 0
    _, survivor, _ = _offline_after_losing_the_isr(cluster, "t")
    wait_for(lambda: cluster.leader("t") == survivor, "the out-of-sync replica leads", timeout=30)
    assert cluster.state("t")["isr"] == [survivor]
    data, _ = replica_bytes(cluster.broker(survivor), "t")
    assert [m.value for m in iter_deep(data)] == [b"committed"]  # the rest is lost, as asked
