"""Layer 4: leader epochs (KIP-101 / KIP-279): a replica that comes back with messages the new
leader never had truncates exactly where the logs part (OffsetForLeaderEpoch), not at its high
watermark, and every replica ends with the same log and leader-epoch-checkpoint."""

from __future__ import annotations

import os
import signal
import time

from protocol import ApiKey
from protocol.errors import ErrorCode
from protocol.records import iter_deep
from tests.cluster.helpers import call, produce, replica_bytes, replica_offsets
from tests.waiting import wait_for


def _epochs(broker, topic, partition=0):
    path = os.path.join(broker.log_dirs[0], f"{topic}-{partition}", "leader-epoch-checkpoint")
    lines = open(path).read().split()
    return [(int(lines[i]), int(lines[i + 1])) for i in range(2, len(lines), 2)]


def test_divergent_tail_is_truncated_by_leader_epoch(cluster_factory):
    cluster = cluster_factory(2, zookeeper_session_timeout_ms=3000, replica_lag_time_max_ms=30000)
    assert cluster.create_topic("t", 1, 2, assignment=None) == 0
    old_id = cluster.leader("t")
    new_id = 3 - old_id
    old, new = cluster.broker(old_id), cluster.broker(new_id)
    assert produce(old, "t", [b"a0", b"a1", b"a2"], acks=-1).error_code == 0
    # The follower misses two messages the leader takes with acks=1, then the leader dies.
    new.proc.send_signal(signal.SIGSTOP)
    try:
        # the follower's parked fetch returns empty after replica.fetch.wait.max.ms (200):
        # nothing is then waiting on the leader to carry the next messages to it
        time.sleep(0.6)
        assert produce(old, "t", [b"lost0", b"lost1"], acks=1).error_code == 0
        old.kill()
    finally:
        new.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: cluster.leader("t") == new_id, "the follower leads", timeout=30)
    cluster.wait_led("t")
    answer = produce(new, "t", [b"b3", b"b4", b"b5"], acks=1)
    assert answer.error_code == 0 and answer.base_offset == 3
    old.start()
    wait_for(
        lambda: sorted(cluster.state("t")["isr"]) == [1, 2], "the old leader in sync", timeout=30
    )
    want = [b"a0", b"a1", b"a2", b"b3", b"b4", b"b5"]
    for broker in (old, new):
        data, hw = wait_for(
            lambda: (got := replica_bytes(broker, "t"))[1] == 6 and got, "HW 6", timeout=30
        )
        assert [m.value for m in iter_deep(data)] == want
    assert replica_bytes(old, "t") == replica_bytes(new, "t")
    assert _epochs(old, "t") == _epochs(new, "t")
    epochs = _epochs(new, "t")
    assert epochs[0] == (0, 0) and epochs[-1][1] == 3 and len(epochs) >= 2
    logged = old.log_output(since_start=True)
    assert '"follower truncated its log"' in logged and '"from_offset": 5' in logged
    assert '"to_offset": 3' in logged


def test_offset_for_leader_epoch_answers(cluster_factory):
    cluster = cluster_factory(2, zookeeper_session_timeout_ms=3000)
    assert cluster.create_topic("t", 1, 2) == 0
    leader_id = cluster.leader("t")
    leader = cluster.broker(leader_id)
    assert produce(leader, "t", [b"x"] * 4, acks=-1).error_code == 0
    epoch = cluster.state("t")["leader_epoch"]

    def ask(broker, leader_epoch, current=-1, replica_id=-1):
        body = {
            "replica_id": replica_id,
            "topics": [
                {
                    "topic": "t",
                    "partitions": [
                        {
                            "partition": 0,
                            "current_leader_epoch": current,
                            "leader_epoch": leader_epoch,
                        }
                    ],
                }
            ],
        }
        p = call(broker, ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, body).topics[0].partitions[0]
        return p.error_code, p.leader_epoch, p.end_offset

    assert ask(leader, epoch) == (0, epoch, 4)
    assert ask(leader, epoch + 5) == (0, -1, -1)
    assert ask(leader, epoch, current=epoch + 1)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH
    follower = cluster.broker(3 - leader_id)
    assert ask(follower, epoch)[0] == ErrorCode.NOT_LEADER_FOR_PARTITION
    wait_for(
        lambda: ask(follower, epoch, replica_id=-2) == (0, epoch, 4), "follower's own", timeout=10
    )
    # the follower leaves: the controller shrinks the ISR with a new epoch, fencing the old
    cluster.broker(3 - leader_id).kill()
    wait_for(lambda: cluster.state("t")["leader_epoch"] > epoch, "a new leader epoch", timeout=30)
    wait_for(
        lambda: ask(leader, epoch, current=epoch)[0] == ErrorCode.FENCED_LEADER_EPOCH,
        "the old epoch fenced",
        timeout=30,
    )


def test_log_append_time_never_goes_backwards_after_a_leader_change(cluster_factory):
    """Broker 2's clock is an hour behind. It takes over a LogAppendTime partition from broker
    1: its stamps continue from broker 1's, and both replicas answer offsets_for_times alike."""
    cluster = cluster_factory(2, start=False, zookeeper_session_timeout_ms=3000)
    cluster.skew_clock(2, -3600)
    cluster.start()
    configs = {"message.timestamp.type": "LogAppendTime"}
    assert cluster.create_topic("t", assignment={0: [1, 2]}, configs=configs) == 0
    first, second = cluster.broker(1), cluster.broker(2)
    answers = [produce(first, "t", [b"a%d" % i], acks=-1) for i in range(5)]
    assert all(a.error_code == 0 for a in answers)
    stamp = max(a.log_append_time_ms for a in answers)
    assert abs(stamp - time.time() * 1000) < 60_000
    first.kill()
    wait_for(lambda: cluster.leader("t") == 2, "broker 2 leads", timeout=30)
    cluster.wait_led("t")
    later = [produce(second, "t", [b"b%d" % i], acks=1) for i in range(5)]
    assert all(a.error_code == 0 for a in later), later
    assert all(a.log_append_time_ms >= stamp for a in later), (stamp, later)
    first.start()
    data, hw = wait_for(
        lambda: (got := replica_bytes(first, "t"))[1] == 10 and got,
        "broker 1 caught up",
        timeout=30,
    )
    stamps = [m.timestamp for m in iter_deep(data)]
    assert stamps == sorted(stamps) and len(stamps) == 10
    assert data == replica_bytes(second, "t")[0]
    for target in sorted(set(stamps)) + [stamps[0] - 1, stamps[-1] + 1]:
        assert replica_offsets(first, "t", 0, target) == replica_offsets(second, "t", 0, target)
