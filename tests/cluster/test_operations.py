"""Layer 6: controlled shutdown, preferred leader election, partition reassignment (and KIP-33's
reason for retention by message time), `chronolog cluster describe`."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

from kafka import KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import NoReassignmentInProgressError

from protocol.records import iter_deep
from protocol.errors import ErrorCode
from tests.conftest import REPO
from tests.cluster.helpers import (
    elect_leaders,
    list_reassignments,
    produce as produce_batch,
    reassign,
    replica_bytes,
    replica_offsets,
    wait_for,
)

DAY_MS = 86_400_000


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
    wait_for(lambda: len(acked) > 100, "acknowledgements", timeout=30)
    assert cluster.broker(victim).stop() == 0
    log = cluster.broker(victim).log_output(since_start=True)
    assert '"controlled shutdown complete: no partition left to lead"' in log
    for p in led:
        state = cluster.state("t", p)
        assert state["leader"] != victim and state["leader_epoch"] > epochs[p]
        assert victim not in state["isr"]
    before = len(acked)
    wait_for(lambda: len(acked) > before + 100, "acknowledgements after the shutdown", timeout=30)
    stop.set()
    thread.join(60)
    for p in range(3):
        data, _ = replica_bytes(cluster.broker(cluster.leader("t", p)), "t", p)
        stored = {m.value for m in iter_deep(data)}
        assert all(v in stored for part, v in acked if part == p)


def test_preferred_leader_election(cluster_factory):
    cluster = cluster_factory(3, zookeeper_session_timeout_ms=3000)
    assert cluster.create_topic("t", 3, 3) == 0
    preferred = cluster.zk_json("/brokers/topics/t")["partitions"]["0"][0]
    cluster.broker(preferred).kill()
    wait_for(lambda: cluster.leader("t", 0) not in (-1, preferred), "leader moved", timeout=30)
    assert elect_leaders(cluster, [("t", 0)]) == {
        ("t", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    }
    cluster.broker(preferred).start()
    wait_for(
        lambda: preferred in cluster.state("t", 0)["isr"], "preferred back in sync", timeout=30
    )
    # The leader writes the ISR; the controller counts the broker live from its /brokers/ids
    # watch, which can come later: until then it still answers PREFERRED_LEADER_NOT_AVAILABLE.
    unavailable = {("t", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}
    answer = wait_for(
        lambda: (a := elect_leaders(cluster, [("t", 0)])) != unavailable and a,
        "the controller to see the preferred replica live",
        timeout=30,
    )
    assert answer == {("t", 0): ErrorCode.NONE}
    assert cluster.leader("t", 0) == preferred
    assert elect_leaders(cluster, [("t", 0)]) == {("t", 0): ErrorCode.ELECTION_NOT_NEEDED}
    # every partition: those already led by their preferred replica are left out
    results = elect_leaders(cluster, None)
    assert all(code == ErrorCode.NONE for code in results.values())
    for p in range(3):
        replicas = cluster.zk_json("/brokers/topics/t")["partitions"][str(p)]
        assert cluster.leader("t", p) == replicas[0]
    wait_for(lambda: cluster.partition_view(1, "t", 0)[0] == preferred, "metadata", timeout=30)


def test_reassignment_moves_a_partition_and_its_data(cluster_factory):
    cluster = cluster_factory(3)
    assert cluster.create_topic("t", 1, assignment={0: [1]}) == 0
    values = [b"v%d" % i for i in range(50)]
    assert produce_batch(cluster.broker(1), "t", values, acks=-1).error_code == 0
    assert reassign(cluster, {("t", 0): [2, 3], ("t", 9): [1]}) == {
        ("t", 0): ErrorCode.NONE,
        ("t", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    wait_for(
        lambda: cluster.zk_json("/brokers/topics/t")["partitions"]["0"] == [2, 3],
        "reassignment complete",
        timeout=60,
    )
    assert list_reassignments(cluster) == {}
    state = cluster.state("t")
    assert state["leader"] in (2, 3) and sorted(state["isr"]) == [2, 3]
    for b in (2, 3):
        data, hw = wait_for(
            lambda: (got := replica_bytes(cluster.broker(b), "t"))[1] == 50 and got,
            "copy",
            timeout=30,
        )
        assert [m.value for m in iter_deep(data)] == values
    moved = os.path.join(cluster.broker(1).log_dirs[0], "t-0")
    wait_for(lambda: not os.path.exists(moved), "the old replica deleted", timeout=30)
    assert reassign(cluster, {("t", 0): [1, 9]}) == {("t", 0): ErrorCode.INVALID_REPLICA_ASSIGNMENT}
    assert reassign(cluster, {("t", 0): None}) == {("t", 0): ErrorCode.NO_REASSIGNMENT_IN_PROGRESS}


def test_a_reassignment_in_progress_is_listed_cancelled_and_completed(cluster_factory):
    """KIP-455 through kafka-python's KafkaAdminClient: while the broker a partition moves to is
    frozen (SIGSTOP) it cannot catch up, so the reassignment stays in progress and
    ListPartitionReassignments shows the replicas being added and removed; cancelling it (a None
    target) puts the partition back on its replicas; started again, it completes once the broker
    runs again, and nothing is listed any more."""
    # sessions outlast the freeze: the frozen broker must stay alive to be a reassignment target
    cluster = cluster_factory(3, zookeeper_session_timeout_ms=10000)
    controller = wait_for(lambda: cluster.controller() > 0, "a controller", timeout=30)
    # the partition moves from [kept, removed] to [kept, added]; the controller is not frozen
    added = next(b for b in (1, 2, 3) if b != controller)
    removed, kept = [b for b in (1, 2, 3) if b != added]
    assert cluster.create_topic("t", assignment={0: [removed, kept]}) == 0
    values = [b"v%d" % i for i in range(50)]
    assert produce_batch(cluster.broker(removed), "t", values, acks=-1).error_code == 0
    admin = KafkaAdminClient(
        bootstrap_servers=cluster.broker(controller).bootstrap, request_timeout_ms=15000
    )
    tp = TopicPartition("t", 0)
    moving = {
        "replicas": [kept, added, removed],
        "adding_replicas": [added],
        "removing_replicas": [removed],
    }
    try:
        assert admin.list_partition_reassignments() == {}  # connected to the controller first
        frozen = cluster.broker(added).proc
        frozen.send_signal(signal.SIGSTOP)
        try:
            assert admin.alter_partition_reassignments({tp: [kept, added]}) == {tp: None}
            assert admin.list_partition_reassignments() == {tp: moving}
            assert admin.list_partition_reassignments([tp]) == {tp: moving}
            doc = cluster.zk_json("/brokers/topics/t")  # kept in ZooKeeper, for a new controller
            assert doc["partitions"]["0"] == [kept, added, removed]
            assert doc["adding_replicas"] == {"0": [added]}
            assert doc["removing_replicas"] == {"0": [removed]}

            assert admin.alter_partition_reassignments({tp: None}) == {tp: None}
            assert admin.list_partition_reassignments() == {}
            # the original replicas, ordered as in the full set (Kafka's originReplicas)
            assert cluster.zk_json("/brokers/topics/t")["partitions"]["0"] == [kept, removed]
            assert cluster.state("t")["leader"] in (removed, kept)
            assert admin.alter_partition_reassignments({tp: None}) == {
                tp: NoReassignmentInProgressError
            }

            assert admin.alter_partition_reassignments({tp: [kept, added]}) == {tp: None}
            assert admin.list_partition_reassignments() == {tp: moving}
        finally:
            frozen.send_signal(signal.SIGCONT)
        wait_for(
            lambda: admin.list_partition_reassignments() == {}, "reassignment complete", timeout=60
        )
    finally:
        admin.close()
    assert cluster.zk_json("/brokers/topics/t")["partitions"]["0"] == [kept, added]
    assert sorted(cluster.state("t")["isr"]) == sorted([kept, added])
    data, _ = wait_for(
        lambda: (got := replica_bytes(cluster.broker(added), "t"))[1] == 50 and got,
        "copy",
        timeout=30,
    )
    assert [m.value for m in iter_deep(data)] == values
    old = os.path.join(cluster.broker(removed).log_dirs[0], "t-0")
    wait_for(lambda: not os.path.exists(old), "the removed replica deleted", timeout=30)


def test_kip33_a_moved_replica_deletes_old_messages_by_their_timestamps(cluster_factory):
    """KIP-33's reason for retention by message time: a partition holding week-old messages
    (CreateTime) moves to a broker that had no replica of it. Its files there are new, yet the
    first retention check after the copy deletes every segment holding only week-old messages."""
    check_s = 2.0
    copy_margin_s = 1.5  # the follower's first fetch, after its log is created
    test_began = time.time()
    cluster = cluster_factory(
        2,
        per_broker={
            1: {"log.retention.check.interval.ms": 3_600_000},  # the source never checks
            2: {
                "log.retention.check.interval.ms": int(check_s * 1000),
                # deleted segments stay as .deleted files, to be read afterwards
                "log.segment.delete.delay.ms": 600_000,
            },
        },
    )
    configs = {"retention.ms": str(DAY_MS), "segment.bytes": "1024"}
    assert cluster.create_topic("old", assignment={0: [1]}, configs=configs) == 0
    week_ago = int(time.time() * 1000) - 7 * DAY_MS
    for i in range(40):
        answer = produce_batch(cluster.broker(1), "old", [b"x" * 100], timestamps=[week_ago + i])
        assert answer.error_code == 0
    recent = produce_batch(cluster.broker(1), "old", [b"new"])
    assert recent.error_code == 0 and recent.base_offset == 40
    assert replica_offsets(cluster.broker(1), "old", 0, -2)[1] == 0  # nothing deleted there
    assert reassign(cluster, {("old", 0): [2]}) == {("old", 0): ErrorCode.NONE}
    new_broker = cluster.broker(2)

    def deletions():
        return [
            e for e in new_broker.log_events("retention deleted segments") if e["topic"] == "old"
        ]

    first_deletion = wait_for(deletions, "old segments deleted on the new replica", timeout=30)[0]
    wait_for(
        lambda: cluster.zk_json("/brokers/topics/old")["partitions"]["0"] == [2],
        "reassignment complete",
        timeout=60,
    )

    # Which segments hold only week-old messages, from the new replica's files themselves
    # (the deleted ones are still there as .deleted files).
    directory = os.path.join(new_broker.log_dirs[0], "old-0")
    segments = sorted(
        glob.glob(os.path.join(directory, "*.log"))
        + glob.glob(os.path.join(directory, "*.log.deleted"))
    )
    day_ago = int(time.time() * 1000) - DAY_MS
    holds_recent = [
        any(m.timestamp > day_ago for m in iter_deep(Path(path).read_bytes())) for path in segments
    ]
    first_kept = holds_recent.index(True)
    expected_start = int(os.path.basename(segments[first_kept])[:20])
    assert expected_start > 0, "the data must fill several segments for this test to mean anything"
    assert all(path.endswith(".deleted") for path in segments[:first_kept])
    assert not any(path.endswith(".deleted") for path in segments[first_kept:])
    # every file is younger than this test: retention by file time would keep them all a day
    assert all(os.path.getmtime(path) >= test_began for path in segments)

    # one retention pass deleted them all, for retention.ms, within one check interval (plus
    # the copy) of the replica's creation on the new broker
    assert first_deletion["segments"] == first_kept
    assert first_deletion["log_start_offset"] == expected_start
    reasons = [
        e["reason"] for e in new_broker.log_events("deleting segment") if e["topic"] == "old"
    ]
    assert reasons == ["retention.ms"] * first_kept
    [created] = [e for e in new_broker.log_events("created log") if e["topic"] == "old"]
    waited = logged_at(first_deletion) - logged_at(created)
    assert 0 < waited <= check_s + copy_margin_s, (
        f"deleted {waited:.2f} s after the replica's creation"
    )
    assert replica_offsets(new_broker, "old", 0, -2)[1] == expected_start
    data, _ = replica_bytes(new_broker, "old")
    assert [m.value for m in iter_deep(data)][-1] == b"new"


def logged_at(event: dict) -> float:
    """The time of a broker log line (its ISO timestamp), in seconds since the epoch."""
    return datetime.fromisoformat(event["timestamp"]).timestamp()


def test_chronolog_cluster_describe_and_elect_leaders(cluster_factory):
    cluster = cluster_factory(3)
    assert cluster.create_topic("t", 2, 3) == 0
    cli = [
        sys.executable,
        "-m",
        "broker",
        "cluster",
        "--bootstrap-server",
        cluster.brokers[0].bootstrap,
    ]
    out = subprocess.run([*cli, "describe", "t"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].endswith("3 live brokers")
    assert any(
        "(controller)" in line and f"broker {cluster.controller()} " in line for line in lines
    )
    for p in (0, 1):
        state = cluster.state("t", p)
        replicas = cluster.zk_json("/brokers/topics/t")["partitions"][str(p)]
        row = next(line for line in lines if line.strip().startswith(f"partition {p} "))
        assert f"leader {state['leader']} " in row
        assert f"replicas {','.join(map(str, replicas))} " in row
        assert "isr " in row and sorted(row.split("isr ")[1].split()[0].split(",")) == [
            "1",
            "2",
            "3",
        ]
    out = subprocess.run([*cli, "elect-leaders", "t"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0 and "preferred replica" in out.stdout, out.stdout + out.stderr
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker",
            "cluster",
            "--bootstrap-server",
            "127.0.0.1:1",
            "describe",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1 and "cannot reach" in bad.stderr


def test_chronolog_topics_create_and_describe_in_a_cluster(cluster_factory):
    """`chronolog topics` (the admin tool) on any broker of a cluster: create with a
    replication factor, describe shows each partition's leader, replicas and ISR."""
    cluster = cluster_factory(3)
    wait_for(lambda: cluster.controller() > 0, "a controller", timeout=30)
    other = next(
        b for b in cluster.brokers if int(b.overrides["broker.id"]) != cluster.controller()
    )
    cli = [sys.executable, "-m", "broker", "topics", "--bootstrap-server", other.bootstrap]
    made = subprocess.run(
        [*cli, "create", "t", "--partitions", "2", "--replication-factor", "3"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    cluster.wait_led("t")
    out = subprocess.run([*cli, "describe", "t"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if "Partition:" in line]
    assert len(rows) == 2
    for p, row in enumerate(rows):
        state = cluster.state("t", p)
        assert f"Leader: {state['leader']}" in row
        assert sorted(row.split("Isr: ")[1].split()[0].split(",")) == ["1", "2", "3"]
        assert len(row.split("Replicas: ")[1].split()[0].split(",")) == 3
