"""Transactions (KIP-98) with librdkafka (confluent-kafka) against a broker process: what a
transactional producer commits reaches read_committed consumers exactly once and in order, what
it aborts never does (read_uncommitted consumers see both), an open transaction holds the last
stable offset back, a consume-transform-produce loop delivers every input exactly once across
two kill -9s of the broker beside a producer that aborts every third transaction, a hung
transaction is aborted at its timeout and its producer fenced, a second producer with the same
transactional id fences the first, and an open transaction survives a restart."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from client import BrokerConnection
from protocol import ApiKey
from protocol import recordbatch as rb
from protocol.errors import ErrorCode
from protocol.records import iter_shallow
from tests.integration.clients import create_topic, dump_log_verify, topic_name
from tests.integration.kafka_wire import WireClient, fetch_partition
from tests.waiting import wait_for

TXN_TIMEOUT_S = 60
# librdkafka 2.16 re-bootstraps when every known broker is down (KIP-899) and decommissions their
# handles; a send_offsets_to_transaction in flight then waits on the group coordinator's old
# handle past its own timeout (seen with debug=all: its TxnOffsetCommit is never sent). It does
# so against any single broker that restarts, Kafka too; the tests that kill the broker keep the
# known broker instead.
NO_REBOOTSTRAP = {"metadata.recovery.strategy": "none"}


def _producer(bootstrap: str, txn_id: str, **extra) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "linger.ms": 2,
            "retry.backoff.ms": 50,
            **extra,
        }
    )
    producer.init_transactions(TXN_TIMEOUT_S)
    return producer


def _consumer(bootstrap: str, isolation: str, group: str | None = None, **extra) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group or topic_name("g"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.wait.max.ms": 50,
            **extra,
        }
    )


def _read_to_end(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[tuple]:
    """Every record a consumer at ``isolation`` reads from the start of each partition up to its
    end as that isolation sees it (the last stable offset for read_committed): (partition,
    offset, value)."""
    consumer = _consumer(bootstrap, isolation)
    ends = {}
    for p in range(partitions):
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), 10)
        ends[p] = high
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[tuple] = []
    done: set[int] = {p for p, end in ends.items() if end == 0}
    deadline = time.monotonic() + 60
    while len(done) < partitions and time.monotonic() < deadline:
        m = consumer.poll(0.2)
        if m is None:
            for p in range(partitions):
                # Markers are not delivered: a partition is done once the position passes them.
                position = consumer.position([TopicPartition(topic, p)])[0].offset
                if position >= ends[p]:
                    done.add(p)
            continue
        assert m.error() is None, m.error()
        got.append((m.partition(), m.offset(), m.value()))
        if m.offset() + 1 >= ends[m.partition()]:
            done.add(m.partition())
    consumer.close()
    assert len(done) == partitions, f"read {len(got)} records, partitions {done} of {ends} done"
    return got


def _list_offset(bootstrap: str, topic: str, partition: int, isolation: int) -> int:
    """ListOffsets v7 latest at ``isolation`` (0 read_uncommitted, 1 read_committed)."""
    host, port = bootstrap.split(":")
    with BrokerConnection(host, int(port), client_id="txn-test", timeout_s=15) as conn:
        response = conn.call(
            ApiKey.LIST_OFFSETS,
            7,
            {
                "replica_id": -1,
                "isolation_level": isolation,
                "topics": [
                    {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}
                ],
            },
        )
    answer = response.topics[0].partitions[0]
    assert answer.error_code == 0
    return answer.offset


def _producers(bootstrap: str, topic: str) -> list:
    """DescribeProducers v0 of partition 0: the producers it knows."""
    host, port = bootstrap.split(":")
    with BrokerConnection(host, int(port), client_id="txn-test", timeout_s=15) as conn:
        response = conn.call(
            ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [{"name": topic, "partition_indexes": [0]}]}
        )
    answer = response.topics[0].partitions[0]
    assert answer.error_code == 0
    return list(answer.active_producers)


def test_commits_reach_read_committed_and_aborts_never(broker):
    topic = topic_name("txn")
    create_topic(broker.bootstrap, topic, partitions=3)
    producer = _producer(broker.bootstrap, topic_name("txid"))
    committed, aborted = [], []
    for txn in range(9):
        producer.begin_transaction()
        values = [f"{txn}-{i}".encode() for i in range(20)]
        for i, value in enumerate(values):
            producer.produce(topic, value=value, partition=i % 3)
        if txn % 3 == 2:
            producer.flush()  # stored before the abort: read_uncommitted sees them
            producer.abort_transaction(TXN_TIMEOUT_S)
            aborted += values
        else:
            producer.commit_transaction(TXN_TIMEOUT_S)
            committed += values
    producer.flush()
    seen = _read_to_end(broker.bootstrap, topic, 3, "read_committed")
    values = [v for _, _, v in seen]
    assert Counter(values) == Counter(committed)  # each exactly once, no aborted one
    for p in range(3):  # in order within each partition
        mine = [v for part, _, v in seen if part == p]
        assert mine == [v for i, v in enumerate(committed) if i % 20 % 3 == p]
    everything = [v for _, _, v in _read_to_end(broker.bootstrap, topic, 3, "read_uncommitted")]
    assert Counter(everything) == Counter(committed + aborted)


def test_a_topic_deleted_mid_transaction_does_not_hold_up_its_producer(broker):
    """A topic deleted after its records went into a transaction: the commit's marker for it is
    skipped (as Kafka skips a partition it no longer knows) instead of retried for ever, so the
    producer's next transaction is not refused CONCURRENT_TRANSACTIONS, and the other topic's
    records of both transactions reach read_committed."""
    kept, gone = topic_name("kept"), topic_name("gone")
    create_topic(broker.bootstrap, kept)
    create_topic(broker.bootstrap, gone)
    producer = _producer(broker.bootstrap, topic_name("txid"))
    producer.begin_transaction()
    producer.produce(kept, value=b"first")
    producer.produce(gone, value=b"lost with its topic")
    producer.flush()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.delete_topics([gone]).values():
        future.result(30)
    producer.commit_transaction(TXN_TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(kept, value=b"second")
    producer.commit_transaction(TXN_TIMEOUT_S)
    _wait_until_decided(broker.bootstrap, kept, 1)
    assert [v for _, _, v in _read_to_end(broker.bootstrap, kept, 1, "read_committed")] == [
        b"first",
        b"second",
    ]


def test_open_transaction_holds_the_last_stable_offset(broker):
    topic = topic_name("lso")
    create_topic(broker.bootstrap, topic)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(5):
        plain.produce(topic, value=b"before-%d" % i, partition=0)
    plain.flush()
    producer = _producer(broker.bootstrap, topic_name("txid"))
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, value=b"open-%d" % i, partition=0)
    producer.flush()
    for i in range(3):  # after the open transaction's records, not part of it
        plain.produce(topic, value=b"after-%d" % i, partition=0)
    plain.flush()
    assert _list_offset(broker.bootstrap, topic, 0, 0) == 12  # the high watermark
    assert _list_offset(broker.bootstrap, topic, 0, 1) == 5  # the open transaction's start
    open_txns = [p for p in _producers(broker.bootstrap, topic) if p.current_txn_start_offset >= 0]
    assert [p.current_txn_start_offset for p in open_txns] == [5]  # what find-hanging reads
    reader = _consumer(broker.bootstrap, "read_committed")
    reader.assign([TopicPartition(topic, 0, 0)])
    early = []
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        m = reader.poll(0.1)
        if m is not None and m.error() is None:
            early.append(m.value())
    assert early == [b"before-%d" % i for i in range(5)]
    producer.commit_transaction(TXN_TIMEOUT_S)
    # The commit is answered once decided; the marker follows at once, as in Kafka.
    deadline = time.monotonic() + 30
    while (lso := _list_offset(broker.bootstrap, topic, 0, 1)) == 5:
        assert time.monotonic() < deadline, "the COMMIT marker never came"
        time.sleep(0.02)
    assert lso == 13  # past the marker
    late = []
    deadline = time.monotonic() + 30
    while len(late) < 7 and time.monotonic() < deadline:
        m = reader.poll(0.1)
        if m is not None and m.error() is None:
            late.append(m.value())
    reader.close()
    assert late == [b"open-%d" % i for i in range(4)] + [b"after-%d" % i for i in range(3)]


def _run_transform(bootstrap: str, source: str, sink: str, group: str, total: int, crash) -> int:
    """A consume-transform-produce service: reads ``source`` read_committed, writes each value
    upper-cased to ``sink`` and commits its input offsets in the same transaction, 10 records a
    transaction, until the group's committed offsets cover ``total`` inputs. ``crash(n)`` runs
    after the n-th transaction's records are sent and before its commit. Recovers as the
    librdkafka docs say: an abortable error aborts and rewinds to the committed offsets; a fatal
    one (fenced) starts a new producer. Returns how many transactions it committed."""
    consumer = _consumer(
        bootstrap, "read_committed", group, **{"max.poll.interval.ms": 300000}, **NO_REBOOTSTRAP
    )
    consumer.subscribe([source])
    producer = _producer(bootstrap, f"{group}-txn", **NO_REBOOTSTRAP)
    commits = attempts = 0
    deadline = time.monotonic() + 240

    def rewind() -> None:
        assignment = consumer.assignment()
        for tp in consumer.committed(assignment, TXN_TIMEOUT_S):
            consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))

    def committed_inputs() -> int:
        tps = [TopicPartition(source, p) for p in range(2)]
        return sum(max(tp.offset, 0) for tp in consumer.committed(tps, TXN_TIMEOUT_S))

    while committed_inputs() < total:
        assert time.monotonic() < deadline, "the transform loop did not finish"
        messages = [m for m in consumer.consume(10, 0.5) if m.error() is None]
        if not messages:
            continue
        attempts += 1
        try:
            producer.begin_transaction()
            for m in messages:
                producer.produce(sink, value=m.value().upper(), partition=m.partition())
            crash(attempts)
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()),
                consumer.consumer_group_metadata(),
                TXN_TIMEOUT_S,
            )
            producer.commit_transaction(TXN_TIMEOUT_S)
            commits += 1
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.txn_requires_abort():
                producer.abort_transaction(TXN_TIMEOUT_S)
            elif error.fatal():
                producer = _producer(bootstrap, f"{group}-txn", **NO_REBOOTSTRAP)
            elif not error.retriable():
                raise
            rewind()
    consumer.close()
    return commits


def test_consume_transform_produce_exactly_once_across_two_kill9s(broker_factory):
    b = broker_factory(
        {"log.flush.interval.messages": 1, "transaction.state.log.num.partitions": 5}
    )
    source, sink = topic_name("in"), topic_name("out")
    create_topic(b.bootstrap, source, partitions=2)
    create_topic(b.bootstrap, sink, partitions=2)
    total = 400
    feeder = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True})
    inputs = [b"value-%04d" % i for i in range(total)]
    for i, value in enumerate(inputs):
        feeder.produce(source, value=value, partition=i % 2)
    assert feeder.flush(30) == 0

    # Beside it, a producer writing to the same output that aborts every third transaction.
    aborter = _producer(b.bootstrap, topic_name("aborter"), **NO_REBOOTSTRAP)
    aborted_values, committed_values = [], []

    def crash(attempt: int) -> None:
        if attempt % 6 == 0:
            aborter.begin_transaction()
            values = [b"side-%d-%d" % (attempt, i) for i in range(3)]
            for v in values:
                aborter.produce(sink, value=v, partition=0)
            if attempt % 18 == 0:
                aborter.flush()
                aborter.abort_transaction(TXN_TIMEOUT_S)
                aborted_values.extend(values)
            else:
                aborter.commit_transaction(TXN_TIMEOUT_S)
                committed_values.extend(values)
        if attempt in (7, 23):  # mid-transaction: records sent, commit not yet asked
            b.kill()
            b.start()

    commits = _run_transform(b.bootstrap, source, sink, topic_name("etl"), total, crash)
    assert commits >= total // 10
    out = [v for _, _, v in _read_to_end(b.bootstrap, sink, 2, "read_committed")]
    transformed = Counter(v for v in out if v.startswith(b"VALUE-"))
    assert transformed == Counter(v.upper() for v in inputs)  # each input exactly once
    side = [v for v in out if v.startswith(b"side-")]
    assert Counter(side) == Counter(committed_values)
    assert not set(side) & set(aborted_values)
    assert aborted_values, "the side producer aborted nothing: the scenario did not run"


def test_hung_transaction_is_aborted_at_its_timeout(broker_factory):
    b = broker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": 200})
    topic = topic_name("hung")
    create_topic(b.bootstrap, topic)
    producer = _producer(b.bootstrap, topic_name("txid"), **{"transaction.timeout.ms": 1500})
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=b"hung-%d" % i, partition=0)
    producer.flush()
    assert _list_offset(b.bootstrap, topic, 0, 1) == 0
    deadline = time.monotonic() + 30
    while _list_offset(b.bootstrap, topic, 0, 1) == 0:  # the coordinator aborts it
        assert time.monotonic() < deadline, "the hung transaction was never aborted"
        time.sleep(0.1)
    assert _list_offset(b.bootstrap, topic, 0, 1) == 6  # five records and the ABORT marker
    assert _read_to_end(b.bootstrap, topic, 1, "read_committed") == []
    with pytest.raises(KafkaException):
        producer.commit_transaction(10)  # fenced: its epoch was bumped by the abort
    assert any(
        e.get("transactional_id")
        for e in b.log_events("aborting a transaction open longer than its timeout")
    )


def test_second_producer_with_the_same_id_fences_the_first(broker):
    topic = topic_name("fence")
    create_topic(broker.bootstrap, topic)
    txn_id = topic_name("txid")
    first = _producer(broker.bootstrap, txn_id)
    first.begin_transaction()
    first.produce(topic, value=b"zombie", partition=0)
    first.flush()
    second = _producer(broker.bootstrap, txn_id)  # aborts the first's open transaction
    second.begin_transaction()
    second.produce(topic, value=b"live", partition=0)
    second.commit_transaction(TXN_TIMEOUT_S)
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(10)
    assert raised.value.args[0].fatal()
    values = [v for _, _, v in _read_to_end(broker.bootstrap, topic, 1, "read_committed")]
    assert values == [b"live"]


def test_open_transaction_survives_a_restart(broker_factory):
    b = broker_factory()
    topic = topic_name("restart")
    create_topic(b.bootstrap, topic)
    producer = _producer(b.bootstrap, topic_name("txid"), **NO_REBOOTSTRAP)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=b"r-%d" % i, partition=0)
    producer.flush()
    b.restart()  # a clean stop: the producer snapshot keeps the open transaction
    assert _list_offset(b.bootstrap, topic, 0, 1) == 0
    producer.commit_transaction(TXN_TIMEOUT_S)
    values = [v for _, _, v in _read_to_end(b.bootstrap, topic, 1, "read_committed")]
    assert values == [b"r-%d" % i for i in range(10)]


def _txn_batch(producer_id: int, epoch: int, sequence: int, value: bytes) -> bytes:
    spec = rb.BatchSpec(
        producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence, is_transactional=True
    )
    return rb.build_batch(spec, [(0, int(time.time() * 1000), None, value, ())])


def test_transaction_version_2_fences_a_late_write_of_the_previous_transaction(broker):
    """KIP-890 part 2 on the wire, as Kafka 4's Java producer speaks it when ApiVersions
    finalizes transaction.version 2: Produce v12 adds the partition itself, EndTxn v5 bumps the
    epoch, so a batch of the ended transaction that arrives late is refused, not counted in the
    next one."""
    topic = topic_name("tv2")
    create_topic(broker.bootstrap, topic)
    txn_id = topic_name("txid")
    host, port = broker.bootstrap.split(":")
    with BrokerConnection(host, int(port), client_id="tv2-test", timeout_s=15) as conn:
        versions = conn.call(ApiKey.API_VERSIONS, 3, {})
        [feature] = versions.finalized_features
        assert (feature.name, feature.max_version_level) == ("transaction.version", 2)
        conn.call(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [txn_id]})
        init = conn.call(
            ApiKey.INIT_PRODUCER_ID,
            5,
            {
                "transactional_id": txn_id,
                "transaction_timeout_ms": 60000,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
        assert init.error_code == 0
        pid, epoch = init.producer_id, init.producer_epoch

        def produce(epoch: int, sequence: int, value: bytes) -> int:
            body = {
                "transactional_id": txn_id,
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
            response = conn.call(ApiKey.PRODUCE, 12, body)
            return response.responses[0].partition_responses[0].error_code

        def end(epoch: int, commit: bool):
            return conn.call(
                ApiKey.END_TXN,
                5,
                {
                    "transactional_id": txn_id,
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "committed": commit,
                },
            )

        assert produce(epoch, 0, b"first") == 0  # no AddPartitionsToTxn: v12 adds it
        ended = end(epoch, True)
        assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (0, pid, epoch + 1)
        late = produce(epoch, 1, b"late")  # the committed transaction's epoch
        assert late in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH)
        # A retry of the commit: CONCURRENT_TRANSACTIONS while its markers are being written
        # (the client retries that), then NONE, never a fencing error.
        deadline = time.monotonic() + 30
        while (retried := end(epoch, True).error_code) == ErrorCode.CONCURRENT_TRANSACTIONS:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert retried == 0
        assert produce(epoch + 1, 0, b"second") == 0  # the next transaction, sequence 0
        aborted = end(epoch + 1, False)
        assert (aborted.error_code, aborted.producer_epoch) == (0, epoch + 2)
    values = [v for _, _, v in _read_to_end(broker.bootstrap, topic, 1, "read_committed")]
    assert values == [b"first"]


def random_transactions(bootstrap: str, topic: str, faults: dict[int, Callable[[], None]]) -> dict:
    """The Jepsen-style workload: three transactional producers, each in its own thread, commit
    (60%) or abort at random (seeded) transactions of 1-12 records over three partitions of
    ``topic``, 30 each; once every producer has finished ``n`` transactions, ``faults[n]()``
    runs (a kill -9 and restart). Returns {(producer, transaction): "committed" | "aborted" |
    "unknown"}, "unknown" when a commit failed fatally so its producer could not learn it."""
    outcomes: dict[tuple[int, int], str] = {}
    stop_at = 30
    progress = [0, 0, 0]
    errors: list[BaseException] = []

    def run(index: int) -> None:
        rng = random.Random(index)
        txn_id = f"{topic}-p{index}"
        producer = _producer(bootstrap, txn_id, **NO_REBOOTSTRAP)
        try:
            for txn in range(stop_at):
                commit = rng.random() < 0.6
                try:
                    producer.begin_transaction()
                    for i in range(rng.randint(1, 12)):
                        value = b"%d-%d-%d" % (index, txn, i)
                        producer.produce(topic, value=value, partition=i % 3)
                    if commit:
                        producer.commit_transaction(TXN_TIMEOUT_S)
                        outcomes[(index, txn)] = "committed"
                    else:
                        producer.abort_transaction(TXN_TIMEOUT_S)
                        outcomes[(index, txn)] = "aborted"
                except KafkaException as exc:
                    error: KafkaError = exc.args[0]
                    if error.txn_requires_abort():
                        producer.abort_transaction(TXN_TIMEOUT_S)
                        outcomes[(index, txn)] = "aborted"
                    else:
                        outcomes[(index, txn)] = "unknown"
                        producer = _producer(bootstrap, txn_id, **NO_REBOOTSTRAP)
                progress[index] = txn + 1
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    for when, fault in sorted(faults.items()):  # while every producer is mid-way
        deadline = time.monotonic() + 120
        while min(progress) < when and not errors:
            assert time.monotonic() < deadline, f"producers stuck at {progress}"
            time.sleep(0.05)
        fault()
    for t in threads:
        t.join(240)
        assert not t.is_alive(), f"a producer thread hung at {progress}"
    assert not errors, errors
    assert sum(1 for o in outcomes.values() if o == "aborted") >= 5
    return outcomes


def _wait_until_decided(bootstrap: str, topic: str, partitions: int) -> None:
    """Until no transaction is open on any partition of ``topic`` (the last stable offset equals
    the high watermark). A commit is promised once EndTxn answers, but its markers are written
    after: a producer's last transactions, or the ones a coordinator killed mid-way left to its
    successor (which first waits for ZooKeeper to expire the dead broker), may still be
    completing, and a read_committed reader stops at the first open one on each partition."""
    committed = _consumer(bootstrap, "read_committed")
    uncommitted = _consumer(bootstrap, "read_uncommitted")

    def decided() -> bool:
        for p in range(partitions):
            tp = TopicPartition(topic, p)
            stable = committed.get_watermark_offsets(tp, 10)[1]
            high = uncommitted.get_watermark_offsets(tp, 10)[1]
            assert stable == high, f"partition {p}: last stable offset {stable}, high {high}"
        return True

    try:
        wait_for(
            decided,
            "every transaction's markers",
            timeout=120,
            interval=0.2,
            transient=(KafkaException, AssertionError),
        )
    finally:
        committed.close()
        uncommitted.close()


def check_promises(bootstrap: str, topic: str, outcomes: dict) -> None:
    """What a read_committed reader of ``topic`` must see after :func:`random_transactions`:
    every record of every transaction its producer saw committed, exactly once, in order per
    producer and partition; nothing of one it saw aborted; an unknown one all or nothing."""
    _wait_until_decided(bootstrap, topic, 3)
    seen = _read_to_end(bootstrap, topic, 3, "read_committed")
    values = [v for _, _, v in seen]
    assert len(values) == len(set(values)), "a record was read twice"
    by_txn: dict[tuple[int, int], list[bytes]] = {}
    for value in values:
        p, t, _ = value.split(b"-")
        by_txn.setdefault((int(p), int(t)), []).append(value)
    for (p, t), outcome in outcomes.items():
        got = by_txn.get((p, t), [])
        if outcome == "aborted":
            assert got == [], f"records of aborted transaction {p}/{t} were read"
        elif outcome == "committed":
            assert got, f"committed transaction {p}/{t} is missing"
    for part in range(3):
        mine = [v for partition, _, v in seen if partition == part]
        for p in range(3):
            keys = [tuple(map(int, v.split(b"-"))) for v in mine if v.startswith(b"%d-" % p)]
            assert keys == sorted(keys), f"partition {part} producer {p} out of order"
    for (p, t), got in by_txn.items():
        counts = {int(v.split(b"-")[2]) for v in got}
        assert counts == set(range(max(counts) + 1)), f"transaction {p}/{t} is partial"


def test_random_commits_and_aborts_across_kill9s_keep_every_promise(broker_factory):
    """A Jepsen-style check on one broker: :func:`random_transactions` while the broker is
    killed twice, then :func:`check_promises`; the logs then pass dump-log --verify, .txnindex
    files included."""
    b = broker_factory({"transaction.state.log.num.partitions": 3, "log.segment.bytes": 20000})
    topic = topic_name("jepsen")
    create_topic(b.bootstrap, topic, partitions=3)

    def kill_and_restart() -> None:
        b.kill()
        b.start()

    outcomes = random_transactions(b.bootstrap, topic, {8: kill_and_restart, 18: kill_and_restart})
    check_promises(b.bootstrap, topic, outcomes)
    b.stop()
    dump_log_verify(b.log_dir, topic, (".log", ".index", ".timeindex", ".txnindex"))


def test_markers_of_a_log_append_time_topic_carry_the_broker_time(broker):
    """On a LogAppendTime topic the COMMIT marker is stamped as the data was: LogAppendTime, at
    or after the data's time (Kafka stamps a marker with the topic's timestamp type)."""
    topic = topic_name("lat")
    create_topic(broker.bootstrap, topic, configs={"message.timestamp.type": "LogAppendTime"})
    producer = _producer(broker.bootstrap, topic_name("txid"))
    producer.begin_transaction()
    producer.produce(topic, value=b"stamped", partition=0)
    producer.commit_transaction(TXN_TIMEOUT_S)
    assert [v for _, _, v in _read_to_end(broker.bootstrap, topic, 1, "read_committed")] == [
        b"stamped"
    ]
    host, port = broker.bootstrap.split(":")
    with WireClient(host, int(port)) as client:
        stored = fetch_partition(client, topic).records
    headers = [rb.read_header(stored, e.position) for e in iter_shallow(stored)]
    data, marker = headers
    assert marker.is_control and marker.log_append_time and data.log_append_time
    assert marker.max_timestamp >= data.max_timestamp
