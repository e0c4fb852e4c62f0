"""Layer 2: the controller assigns replicas at CreateTopics, elects leaders, and every broker's
Metadata lists the same leader, replicas and ISR; a dead leader is replaced."""

from __future__ import annotations

import os

from confluent_kafka.admin import AdminClient, NewTopic

from protocol import ApiKey
from protocol.errors import ErrorCode
from tests.cluster.helpers import call
from tests.waiting import wait_for


def _views(cluster, topic, partition=0, brokers=(1, 2, 3)):
    return {b: cluster.partition_view(b, topic, partition) for b in brokers}


def _same_everywhere(cluster, topic, partition):
    views = _views(cluster, topic, partition)
    return views if len({str(v) for v in views.values()}) == 1 else None


def test_create_topic_assigns_and_elects(cluster_factory):
    cluster = cluster_factory(3)
    assert cluster.create_topic("orders", partitions=6, replication_factor=3) == 0
    doc = cluster.zk_json("/brokers/topics/orders")
    assert doc["version"] == 3 and doc["topic_id"]
    assignment = {int(p): r for p, r in doc["partitions"].items()}
    assert sorted(assignment) == list(range(6))
    assert all(sorted(r) == [1, 2, 3] for r in assignment.values())
    # Kafka's spread: every broker is the preferred leader of two partitions
    assert sorted(r[0] for r in assignment.values()) == [1, 1, 2, 2, 3, 3]
    for p, replicas in assignment.items():
        state = cluster.state("orders", p)
        assert state["leader"] == replicas[0] and state["leader_epoch"] == 0
        assert sorted(state["isr"]) == [1, 2, 3]
        views = wait_for(
            lambda: _same_everywhere(cluster, "orders", p), "same metadata", timeout=30
        )
        leader, epoch, replicas_seen, isr = views[1]
        assert (leader, epoch, replicas_seen) == (replicas[0], 0, replicas)
        assert sorted(isr) == [1, 2, 3]
    assert cluster.create_topic("orders") == ErrorCode.TOPIC_ALREADY_EXISTS
    assert cluster.create_topic("big", replication_factor=4) == ErrorCode.INVALID_REPLICATION_FACTOR
    assert cluster.create_topic("placed", assignment={0: [3, 1], 1: [2, 3]}) == ErrorCode.NONE
    assert cluster.zk_json("/brokers/topics/placed")["partitions"] == {"0": [3, 1], "1": [2, 3]}
    assert cluster.leader("placed", 0) == 3
    assert (
        cluster.create_topic("bad", assignment={0: [1, 9]}) == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    )


def test_replicas_span_racks_when_brokers_have_broker_rack(cluster_factory):
    """broker.rack (KIP-36): brokers 1, 2 in rack a and 3, 4 in rack b. Every partition of a
    replication-factor-2 topic created by a client gets one replica in each rack (with 8
    partitions the rack-blind spread always puts some pair in one rack, whatever its random
    start), and clients learn each broker's rack."""
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    cluster = cluster_factory(4, per_broker={b: {"broker.rack": r} for b, r in racks.items()})
    cluster.wait_controller_knows_brokers()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("spread", 8, 2)])["spread"].result(60)
    cluster.wait_led("spread")
    assignment = {
        int(p): r for p, r in cluster.zk_json("/brokers/topics/spread")["partitions"].items()
    }
    assert sorted(assignment) == list(range(8))
    for p, replicas in assignment.items():
        assert sorted(racks[b] for b in replicas) == ["a", "b"], (p, replicas)
    # the leaders still spread evenly: every broker is the preferred leader of two partitions
    assert sorted(r[0] for r in assignment.values()) == [1, 1, 2, 2, 3, 3, 4, 4]
    described = admin.describe_cluster().result(30)
    assert {n.id: n.rack for n in described.nodes} == racks
    for version in (1, 12):  # Metadata carries racks from v1
        meta = call(cluster.broker(1), ApiKey.METADATA, version, {"topics": []})
        assert {b.node_id: b.rack for b in meta.brokers} == racks


def test_dead_leader_is_replaced_and_comes_back_as_follower(cluster_factory):
    cluster = cluster_factory(3)
    assert cluster.create_topic("t", partitions=1, replication_factor=3) == 0
    old = cluster.leader("t")
    cluster.broker(old).kill()
    new_state = wait_for(
        lambda: (s := cluster.state("t")) and s["leader"] not in (-1, old) and s,
        "a new leader",
        timeout=30,
    )
    assert new_state["leader_epoch"] >= 1 and old not in new_state["isr"]
    alive = [b for b in (1, 2, 3) if b != old]
    wait_for(
        lambda: all(
            cluster.partition_view(b, "t")[:2] == (new_state["leader"], new_state["leader_epoch"])
            for b in alive
        ),
        "metadata naming the new leader",
        timeout=30,
    )
    cluster.broker(old).start()
    # it catches up and the leader takes it back into the ISR
    wait_for(lambda: sorted(cluster.state("t")["isr"]) == [1, 2, 3], "ISR of three", timeout=30)
    assert cluster.leader("t") == new_state["leader"]


def test_a_dead_leader_is_replaced_though_the_controller_had_not_read_its_last_write(
    cluster_factory,
):
    """The controller elects from its cached partition state, written conditionally on that
    state's ZooKeeper version. A leader's last ISR update, written just before it died and
    not yet read by the controller, makes that write fail; the controller reads the state
    again and elects from it. Before, it dropped the partition, which stayed with its dead
    leader until some other event (CI: test_failover's round 3 waited 60 s for it)."""
    cluster = cluster_factory(3)
    assert cluster.create_topic("t", partitions=3, replication_factor=3) == 0
    controller = cluster.controller()
    partition = next(p for p in range(3) if cluster.leader("t", p) not in (-1, controller))
    leader = cluster.leader("t", partition)
    # The leader's write behind the controller's back: the state's version moves on, and no
    # ISR change notification tells the controller.
    path = f"/brokers/topics/t/partitions/{partition}/state"
    data, _ = cluster.zk.get(path)
    cluster.zk.set(path, data)
    cluster.broker(leader).kill()
    new_state = wait_for(
        lambda: (s := cluster.state("t", partition)) and s["leader"] not in (-1, leader) and s,
        "a new leader",
        timeout=30,
    )
    assert leader not in new_state["isr"]


def test_controller_failover_keeps_partitions_led(cluster_factory):
    cluster = cluster_factory(3)
    assert cluster.create_topic("t", partitions=3, replication_factor=2) == 0
    controller = cluster.controller()
    cluster.broker(controller).kill()
    wait_for(lambda: cluster.controller() not in (-1, controller), "a new controller", timeout=30)
    for p in range(3):
        wait_for(
            lambda: cluster.state("t", p)["leader"] not in (-1, controller),
            f"partition {p} led by a live broker",
            timeout=30,
        )


def test_delete_topic_removes_every_replica(cluster_factory):
    cluster = cluster_factory(3)
    assert cluster.create_topic("gone", 2, 3) == 0
    dirs = [os.path.join(b.log_dirs[0], f"gone-{p}") for b in cluster.brokers for p in range(2)]
    assert all(os.path.isdir(d) for d in dirs)
    answer = call(
        cluster.broker(cluster.controller()),
        ApiKey.DELETE_TOPICS,
        0,
        {"topic_names": ["gone", "never"], "timeout_ms": 20000},
        timeout=30,
    )
    codes = {r.name: r.error_code for r in answer.responses}
    assert codes == {"gone": 0, "never": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert not cluster.zk.exists("/brokers/topics/gone")
    assert not cluster.zk.exists("/config/topics/gone")
    wait_for(lambda: not any(os.path.exists(d) for d in dirs), "replica logs deleted", timeout=30)
    for b in (1, 2, 3):
        assert cluster.metadata(b, ["gone"]).topics[0].error_code == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
    # any broker serves CreateTopics and DeleteTopics (they only write ZooKeeper); v6 by name
    other = cluster.broker(next(b for b in (1, 2, 3) if b != cluster.controller()))
    entry = {"name": "again", "num_partitions": 1, "replication_factor": 3}
    made = call(other, ApiKey.CREATE_TOPICS, 7, {"topics": [entry], "timeout_ms": 20000})
    assert made.topics[0].error_code == 0
    body = {"topics": [{"name": "again"}], "timeout_ms": 20000}
    gone = call(other, ApiKey.DELETE_TOPICS, 6, body, timeout=30)
    assert gone.responses[0].error_code == 0
    assert not cluster.zk.exists("/brokers/topics/again")


def test_describe_cluster_and_create_partitions_in_a_cluster(cluster_factory):
    cluster = cluster_factory(3)
    wait_for(lambda: cluster.controller() > 0, "a controller", timeout=30)
    assert cluster.create_topic("t", 1, 3) == 0
    for b in (1, 2, 3):
        answer = call(cluster.broker(b), ApiKey.DESCRIBE_CLUSTER, 0, {})
        assert answer.error_code == 0
        assert sorted(x.broker_id for x in answer.brokers) == [1, 2, 3]
        assert answer.controller_id == cluster.controller()
    body = {
        "topics": [{"name": "t", "count": 3, "assignments": None}],
        "timeout_ms": 5000,
        "validate_only": False,
    }
    # CreatePartitions v0 on any broker (tests/cluster/test_cluster_admin.py has the details)
    answer = call(cluster.broker(1), ApiKey.CREATE_PARTITIONS, 0, body)
    assert answer.results[0].error_code == 0
    assert len(cluster.zk_json("/brokers/topics/t")["partitions"]) == 3
    assert len(cluster.metadata(1, ["t"]).topics[0].partitions) == 3
