"""Transactions on a 3-broker cluster (issue #32 item 5): the transaction coordinator runs on the
leader of the transactional id's ``__transaction_state`` partition (replication factor 3,
min.insync.replicas 2), markers go to each data partition's leader, and produces are verified
with a coordinator on another broker (KIP-890).

A confluent-kafka consume-transform-produce loop (the single-broker version's, in
tests/integration/test_transactions_librdkafka.py) runs beside a producer that aborts every third
of its transactions, while a broker is killed with SIGKILL in the middle of one of the loop's
transactions (its partitions added, its records sent, its commit not yet asked): the
coordinator's leader in one test, the leader of the output partition in the other (a broker that
is not the coordinator's). A read_committed reader then finds every input exactly once and the
side producer's committed records, never an aborted one. Three raw-protocol tests: a produce
verified with (and, at Produce v12, added through) a coordinator on another broker, its markers
reaching the leader; TxnOffsetCommit v5 adding the offsets partition through a coordinator on
another broker than the group's; and a commit left in PrepareCommit by a killed coordinator,
completed by the next one. The five take about 65 s together on a quiet machine (each 5-25 s).
"""

from __future__ import annotations

from collections import Counter

from confluent_kafka import Producer

from broker.txn.coordinator import partition_for
from protocol import ApiKey
from protocol.errors import ErrorCode
from tests.cluster.helpers import call
from tests.waiting import wait_for
from tests.integration.clients import topic_name
from tests.integration.test_transactions_librdkafka import (
    NO_REBOOTSTRAP,
    TXN_TIMEOUT_S,
    _producer,
    _read_to_end,
    _run_transform,
    _txn_batch,
)

TXN_PARTITIONS = 3
TOTAL = 300
SETTINGS = {
    "transaction_state_log_num_partitions": TXN_PARTITIONS,
    "transaction_state_log_replication_factor": 3,
    "transaction_state_log_min_isr": 2,
    "offsets_topic_replication_factor": 3,
    "default_replication_factor": 3,
    "min_insync_replicas": 2,
}


def _coordinator_of(cluster, tid: str) -> int:
    """The running broker FindCoordinator names for ``tid``, as ZooKeeper has it (creating
    __transaction_state first)."""

    def found() -> int:
        asked = next(b for b in cluster.brokers if b.running())
        answer = call(asked, ApiKey.FIND_COORDINATOR, 1, {"key": tid, "key_type": 1})
        leader = cluster.leader("__transaction_state", partition_for(tid, TXN_PARTITIONS))
        ok = answer.error_code == 0 and answer.node_id == leader > 0
        return answer.node_id if ok and cluster.broker(leader).running() else 0

    return wait_for(found, f"a running coordinator for {tid}", timeout=60)


# What a coordinator answers while it loads its __transaction_state partition after becoming
# its leader (FindCoordinator already names it): the client retries.
LOADING = {ErrorCode.GROUP_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS}


def _init_producer_id(coordinator, version: int, body: dict):
    """InitProducerId at ``coordinator``, retried while it is still loading, as clients do."""

    def answered():
        answer = call(coordinator, ApiKey.INIT_PRODUCER_ID, version, body)
        return None if answer.error_code in LOADING else answer

    return wait_for(answered, "InitProducerId answered", timeout=60)


def _group_coordinator_of(cluster, group: str) -> int:
    """The running broker FindCoordinator names for ``group`` (creating __consumer_offsets)."""

    def found() -> int:
        asked = next(b for b in cluster.brokers if b.running())
        answer = call(asked, ApiKey.FIND_COORDINATOR, 1, {"key": group, "key_type": 0})
        return answer.node_id if answer.error_code == 0 and answer.node_id > 0 else 0

    return wait_for(found, f"a running coordinator for group {group}", timeout=60)


def _state(cluster, broker_id: int, tid: str) -> str:
    """DescribeTransactions: ``tid``'s state as ``broker_id`` knows it ("" on an error)."""
    answer = call(
        cluster.broker(broker_id), ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]}
    )
    state = answer.transaction_states[0]
    return state.transaction_state if state.error_code == 0 else ""


def _last_stable_offset(broker, topic: str) -> int:
    """ListOffsets v7 latest at read_committed of ``topic``-0, asked of ``broker``."""
    body = {
        "replica_id": -1,
        "isolation_level": 1,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
    }
    answer = call(broker, ApiKey.LIST_OFFSETS, 7, body).topics[0].partitions[0]
    assert answer.error_code == 0
    return answer.offset


def _ongoing(cluster, broker_id: int, tid: str, topic: str) -> bool:
    """DescribeTransactions: ``tid``'s transaction is open and holds a partition of ``topic``."""
    answer = call(
        cluster.broker(broker_id), ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]}
    )
    state = answer.transaction_states[0]
    return (
        state.error_code == 0
        and state.transaction_state == "Ongoing"
        and any(t.topic == topic for t in state.topics)
    )


def _scenario(cluster_factory, victim_of) -> None:
    """The loop, the side producer and one kill -9: ``victim_of(cluster, coordinator, sink)``
    names the broker to kill."""
    cluster = cluster_factory(**SETTINGS)
    source, sink = topic_name("in"), topic_name("out")
    # The victim never coordinates the loop's group: librdkafka (2.12-2.16) then waits for its
    # TxnOffsetCommit on the dead coordinator's connection past send_offsets_to_transaction's
    # timeout (the NO_REBOOTSTRAP note in test_transactions_librdkafka.py), and the loop hangs.
    # So the group is chosen with a coordinator other than the transaction's.
    while True:
        group = topic_name("etl")
        tid = f"{group}-txn"  # the transform loop's transactional id
        coordinator = _coordinator_of(cluster, tid)
        group_coordinator = _group_coordinator_of(cluster, group)
        if group_coordinator != coordinator:
            break
    # Output partition 0 led by the broker coordinating neither, so killing it or the
    # transaction's coordinator is two different failures, neither the group's.
    (sink_leader,) = {1, 2, 3} - {coordinator, group_coordinator}
    sink_assignment = {
        0: [sink_leader, coordinator, group_coordinator],
        1: [group_coordinator, sink_leader, coordinator],
    }
    assert cluster.create_topic(source, 2, configs={"min.insync.replicas": "2"}) == 0
    assert (
        cluster.create_topic(sink, assignment=sink_assignment, configs={"min.insync.replicas": "2"})
        == 0
    )
    victim = victim_of(coordinator, cluster.leader(sink, 0))
    bootstrap = cluster.bootstrap

    feeder = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    inputs = [b"value-%04d" % i for i in range(TOTAL)]
    for i, value in enumerate(inputs):
        feeder.produce(source, value=value, partition=i % 2)
    assert feeder.flush(30) == 0

    side = _producer(bootstrap, topic_name("aborter"), **NO_REBOOTSTRAP)
    side_transactions = 0
    aborted_values: list[bytes] = []
    committed_values: list[bytes] = []
    killed_at: list[int] = []

    def crash(attempt: int) -> None:
        nonlocal side_transactions
        if attempt % 2 == 0:  # the side producer: every third of its transactions aborted
            side_transactions += 1
            side.begin_transaction()
            values = [b"side-%d-%d" % (attempt, i) for i in range(3)]
            for i, v in enumerate(values):
                side.produce(sink, value=v, partition=i % 2)
            if side_transactions % 3 == 0:
                side.flush()  # stored before the abort
                side.abort_transaction(TXN_TIMEOUT_S)
                aborted_values.extend(values)
            else:
                side.commit_transaction(TXN_TIMEOUT_S)
                committed_values.extend(values)
        if attempt == 4:
            # Mid-transaction: the loop's transaction is open with the output partitions in it.
            wait_for(
                lambda: _ongoing(cluster, coordinator, tid, sink), "an open transaction", timeout=30
            )
            cluster.broker(victim).kill()
            killed_at.append(attempt)
        if attempt == 10:
            cluster.broker(victim).start()

    commits = _run_transform(bootstrap, source, sink, group, TOTAL, crash)
    assert killed_at == [4], "the kill never happened: the scenario did not run"
    assert commits >= TOTAL // 10
    if not cluster.broker(victim).running():
        cluster.broker(victim).start()
    out = [v for _, _, v in _read_to_end(cluster.bootstrap, sink, 2, "read_committed")]
    transformed = Counter(v for v in out if v.startswith(b"VALUE-"))
    assert transformed == Counter(v.upper() for v in inputs)  # each input exactly once
    side_seen = [v for v in out if v.startswith(b"side-")]
    assert Counter(side_seen) == Counter(committed_values)
    assert aborted_values, "the side producer aborted nothing: the scenario did not run"
    assert not set(side_seen) & set(aborted_values)


def test_coordinator_leader_killed_mid_transaction(cluster_factory):
    _scenario(cluster_factory, lambda coordinator, sink_leader: coordinator)


def test_output_partition_leader_killed_mid_transaction(cluster_factory):
    _scenario(cluster_factory, lambda coordinator, sink_leader: sink_leader)


def test_produce_verified_and_markers_written_across_brokers(cluster_factory):
    """On the wire, with the output partition led by a broker that is not the coordinator: a
    transactional batch for a partition outside the transaction is refused there (the leader
    asked the coordinator, KIP-890 part 1), accepted once AddPartitionsToTxn added it; the
    coordinator's COMMIT marker reaches that leader; Produce v12 (transaction version 2) adds
    the partition through the coordinator itself and EndTxn v5's ABORT marker hides it.
    Brokers that do not coordinate the id send the client to the one that does."""
    cluster = cluster_factory(**SETTINGS)
    tid = topic_name("txid")
    coordinator = _coordinator_of(cluster, tid)
    leader, third = [b for b in (1, 2, 3) if b != coordinator]
    topic = topic_name("verify")
    assignment = {0: [leader, coordinator, third]}
    assert cluster.create_topic(topic, assignment=assignment) == 0
    at_coordinator, at_leader = cluster.broker(coordinator), cluster.broker(leader)
    init_body = {"transactional_id": tid, "transaction_timeout_ms": 60000}
    elsewhere = call(at_leader, ApiKey.INIT_PRODUCER_ID, 1, init_body)
    assert elsewhere.error_code == ErrorCode.NOT_COORDINATOR_FOR_GROUP
    init = _init_producer_id(at_coordinator, 1, init_body)
    assert init.error_code == 0
    pid, epoch = init.producer_id, init.producer_epoch

    def produce(version: int, epoch: int, sequence: int, value: bytes) -> int:
        body = {
            "transactional_id": tid,
            "acks": -1,
            "timeout_ms": 10000,
            "topic_data": [
                {
                    "name": topic,
                    "partition_data": [
                        {"index": 0, "records": _txn_batch(pid, epoch, sequence, value)}
                    ],
                }
            ],
        }
        response = call(at_leader, ApiKey.PRODUCE, version, body)
        return response.responses[0].partition_responses[0].error_code

    def last_stable_offset() -> int:
        body = {
            "replica_id": -1,
            "isolation_level": 1,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        }
        answer = call(at_leader, ApiKey.LIST_OFFSETS, 7, body).topics[0].partitions[0]
        assert answer.error_code == 0
        return answer.offset

    assert produce(9, epoch, 0, b"stray") == ErrorCode.INVALID_TXN_STATE
    added = call(
        at_coordinator,
        ApiKey.ADD_PARTITIONS_TO_TXN,
        3,
        {
            "v3_and_below_transactional_id": tid,
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": topic, "partitions": [0]}],
        },
    )
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    assert produce(9, epoch, 0, b"committed") == 0
    end_body = {"transactional_id": tid, "producer_id": pid, "committed": True}
    assert call(at_leader, ApiKey.END_TXN, 3, {**end_body, "producer_epoch": epoch}).error_code == (
        ErrorCode.NOT_COORDINATOR_FOR_GROUP
    )
    ended = call(at_coordinator, ApiKey.END_TXN, 3, {**end_body, "producer_epoch": epoch})
    assert ended.error_code == 0
    wait_for(
        lambda: last_stable_offset() == 2, "the COMMIT marker on the partition's leader", timeout=30
    )

    assert produce(12, epoch, 1, b"aborted") == 0  # added by the coordinator for the leader
    assert _ongoing(cluster, coordinator, tid, topic)
    aborted = call(
        at_coordinator,
        ApiKey.END_TXN,
        5,
        {**end_body, "producer_epoch": epoch, "committed": False},
    )
    assert (aborted.error_code, aborted.producer_epoch) == (0, epoch + 1)
    wait_for(
        lambda: last_stable_offset() == 4, "the ABORT marker on the partition's leader", timeout=30
    )
    values = [v for _, _, v in _read_to_end(cluster.bootstrap, topic, 1, "read_committed")]
    assert values == [b"committed"]


def test_new_coordinator_completes_a_commit_the_old_one_left(cluster_factory):
    """A commit decided (PrepareCommit stored by the ISR) while its partition's only replica is
    down, so no marker can be written; then the coordinator is killed with SIGKILL. The id's
    new coordinator loads PrepareCommit and, once the partition is back, writes the COMMIT
    marker and stores CompleteCommit: the record is read_committed then."""
    cluster = cluster_factory(**SETTINGS)
    tid = topic_name("txid")
    coordinator = _coordinator_of(cluster, tid)
    leader = next(b for b in (1, 2, 3) if b != coordinator)
    topic = topic_name("left")
    configs = {"min.insync.replicas": "1"}
    assert cluster.create_topic(topic, assignment={0: [leader]}, configs=configs) == 0
    at_coordinator, at_leader = cluster.broker(coordinator), cluster.broker(leader)
    init = _init_producer_id(
        at_coordinator, 1, {"transactional_id": tid, "transaction_timeout_ms": 60000}
    )
    assert init.error_code == 0
    pid, epoch = init.producer_id, init.producer_epoch
    added = call(
        at_coordinator,
        ApiKey.ADD_PARTITIONS_TO_TXN,
        3,
        {
            "v3_and_below_transactional_id": tid,
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": topic, "partitions": [0]}],
        },
    )
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    body = {
        "transactional_id": tid,
        "acks": -1,
        "timeout_ms": 10000,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [{"index": 0, "records": _txn_batch(pid, epoch, 0, b"left")}],
            }
        ],
    }
    produced = call(at_leader, ApiKey.PRODUCE, 9, body)
    assert produced.responses[0].partition_responses[0].error_code == 0

    at_leader.kill()
    wait_for(lambda: cluster.leader(topic) == -1, "the partition without a leader", timeout=30)
    ended = call(
        at_coordinator,
        ApiKey.END_TXN,
        3,
        {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": True},
    )
    assert ended.error_code == 0
    assert _state(cluster, coordinator, tid) == "PrepareCommit"  # its marker cannot be written

    at_coordinator.kill()
    successor = _coordinator_of(cluster, tid)
    assert successor not in (coordinator, leader)
    loaded = wait_for(lambda: _state(cluster, successor, tid), "the id loaded", timeout=30)
    assert loaded == "PrepareCommit"
    at_leader.start()
    wait_for(
        lambda: _state(cluster, successor, tid) == "CompleteCommit",
        "the new coordinator to complete the commit",
        timeout=60,
    )
    assert _last_stable_offset(at_leader, topic) == 2  # the record and the COMMIT marker
    values = [v for _, _, v in _read_to_end(at_leader.bootstrap, topic, 1, "read_committed")]
    assert values == [b"left"]


def test_offsets_join_a_transaction_coordinated_by_another_broker(cluster_factory):
    """Transaction version 2 (Kafka 4's Java producer): TxnOffsetCommit v5 goes to the group's
    coordinator, which adds the offsets partition to the transaction through the id's
    coordinator on another broker; the offsets are committed with EndTxn v5 and not before."""
    cluster = cluster_factory(**SETTINGS)
    group, topic = topic_name("g"), topic_name("src")
    assert cluster.create_topic(topic, 1) == 0

    def group_coordinator() -> int:
        asked = next(b for b in cluster.brokers if b.running())
        answer = call(asked, ApiKey.FIND_COORDINATOR, 1, {"key": group, "key_type": 0})
        return answer.node_id if answer.error_code == 0 else 0

    offsets_broker = wait_for(group_coordinator, "the group coordinator", timeout=60)
    # A transactional id coordinated elsewhere than the group.
    _coordinator_of(cluster, "probe")  # creates __transaction_state
    tid = next(
        t
        for t in (f"{group}-txn-{i}" for i in range(100))
        if cluster.leader("__transaction_state", partition_for(t, TXN_PARTITIONS))
        not in (offsets_broker, -1)
    )
    coordinator = _coordinator_of(cluster, tid)
    at_group, at_coordinator = cluster.broker(offsets_broker), cluster.broker(coordinator)
    init = _init_producer_id(
        at_coordinator,
        5,
        {
            "transactional_id": tid,
            "transaction_timeout_ms": 60000,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )
    assert init.error_code == 0
    pid, epoch = init.producer_id, init.producer_epoch
    committed = call(
        at_group,
        ApiKey.TXN_OFFSET_COMMIT,
        5,
        {
            "transactional_id": tid,
            "group_id": group,
            "producer_id": pid,
            "producer_epoch": epoch,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 42,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        },
    )
    assert committed.topics[0].partitions[0].error_code == 0
    assert _ongoing(cluster, coordinator, tid, "__consumer_offsets")

    def stable_offset() -> int:
        body = {
            "group_id": group,
            "topics": [{"name": topic, "partition_indexes": [0]}],
            "require_stable": True,
        }
        answer = call(at_group, ApiKey.OFFSET_FETCH, 7, body).topics[0].partitions[0]
        return answer.committed_offset if answer.error_code == 0 else -2

    assert stable_offset() in (-1, -2)  # pending in the open transaction
    ended = call(
        at_coordinator,
        ApiKey.END_TXN,
        5,
        {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": True},
    )
    assert ended.error_code == 0
    wait_for(lambda: stable_offset() == 42, "the transaction's offset committed", timeout=30)
