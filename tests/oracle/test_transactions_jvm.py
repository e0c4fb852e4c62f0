"""Transactions (issue 32) as Kafka's own Java side sees them, with Apache Kafka 4.1.1 run beside
chronolog as the oracle: the Java transactional KafkaProducer (commit, abort, a consume-transform-
produce loop with sendOffsetsToTransaction and group metadata) across two broker kill -9s; Kafka
Streams exactly_once_v2 (a word count with a repartition topic and a state store) against brute
force, also across a kill -9; Kafka's TransactionsCommand (list, describe, describe-producers,
find-hanging, abort) against chronolog and Kafka; Kafka's DumpLogSegments over the partitions'
segments, their .txnindex files and ``__transaction_state``; and one sequence of transactions
(committed on two partitions, aborted, left open, plain records between) run on both brokers,
which must agree on the last stable offset, the reads at both isolation levels, the markers'
offsets and the aborted-transaction index.

One Java client JVM (JavaClients) serves the module and drives both brokers (an op's ``config``
with ``bootstrap.servers`` points it at Kafka); the chronolog broker is the module's own, so it
can be killed; the Kafka broker is the session's ``kafka_oracle``.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from client import BrokerConnection
from protocol import ApiKey
from protocol import recordbatch as rb
from tests.conftest import BrokerProcess
from tests.integration.clients import topic_name
from tests.oracle.kafka_oracle import (
    CONFIG_COMMAND,
    DUMP_LOG_SEGMENTS,
    TRANSACTIONS_COMMAND,
    JavaClientError,
    JavaClients,
    run_kafka_tool,
)

pytestmark = pytest.mark.kafka_oracle

# The Java producer's own timeouts bound every blocking step (send, commit, abort) after a kill.
PRODUCER = {"transaction.timeout.ms": 30000, "max.block.ms": 30000, "linger.ms": 5}


@pytest.fixture(scope="module")
def chronolog(tmp_path_factory):
    """This module's broker (it kills it): every message flushed, as the kill -9 tests of
    tests/integration/test_transactions_librdkafka.py run it."""
    proc = BrokerProcess(
        tmp_path_factory.mktemp("txn-jvm"),
        {"log.flush.interval.messages": 1, "transaction.state.log.num.partitions": 3},
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def clients(chronolog):
    with JavaClients(chronolog.bootstrap) as java:
        yield java


def _on(bootstrap: str, config: dict | None = None) -> dict:
    return {"config": {"bootstrap.servers": bootstrap, **(config or {})}}


def _read(clients: JavaClients, bootstrap: str, topic: str, partition: int, isolation: str):
    """(offset, value) of every record a consumer at ``isolation`` reads from the start to the
    end that isolation sees (the last stable offset for read_committed)."""
    records = clients.call(
        "read_partition",
        topic=topic,
        partition=partition,
        **_on(bootstrap, {"isolation.level": isolation}),
    )["records"]
    return [(r["offset"], r["value"]) for r in records]


def _latest(clients: JavaClients, bootstrap: str, topic: str, partitions: int, isolation: str):
    answers = clients.call(
        "list_offsets",
        topic=topic,
        queries=[[p, "latest"] for p in range(partitions)],
        isolation=isolation,
        **_on(bootstrap),
    )["offsets"]
    return [a["offset"] for a in answers]


def _fatal_or_abortable(clients: JavaClients, name: str, txn_id: str, bootstrap: str) -> str:
    """Recover a transactional producer after a failed step as Kafka's javadoc says: abort the
    transaction; if even that fails (fenced, or a fatal error), close it and start a new one with
    the same transactional id (its initTransactions fences and aborts the old one). Returns what
    was done, for the test's record."""
    try:
        clients.call("txn_abort", name=name)
        return "aborted"
    except JavaClientError:
        clients.call("txn_producer", name=name, transactional_id=txn_id, **_on(bootstrap, PRODUCER))
        return "restarted"


# 1. The Java transactional producer: consume-transform-produce across two kill -9s.


def test_consume_transform_produce_exactly_once_across_two_kill9s(clients, chronolog):
    b = chronolog.bootstrap
    source, sink, group = topic_name("jin"), topic_name("jout"), topic_name("jetl")
    for topic in (source, sink):
        clients.call("create_topic", topic=topic, partitions=2)
    total = 300
    inputs = [f"value-{i:04d}" for i in range(total)]
    clients.call(
        "produce",
        topic=source,
        records=[{"partition": i % 2, "value": v} for i, v in enumerate(inputs)],
    )

    etl_id, side_id = topic_name("etl-txn"), topic_name("side-txn")
    clients.call("txn_producer", name="etl", transactional_id=etl_id, **_on(b, PRODUCER))
    clients.call("txn_producer", name="side", transactional_id=side_id, **_on(b, PRODUCER))
    clients.call(
        "group_consumer",
        name="etl-in",
        topic=source,
        group=group,
        config={"max.poll.records": 10, "metadata.max.age.ms": 1000},
    )
    side_committed: list[str] = []
    side_aborted: list[str] = []
    recoveries: list[tuple[int, str, str]] = []
    attempts = commits = kills = 0
    deadline = time.monotonic() + 150
    while True:
        assert time.monotonic() < deadline, (
            f"the transform loop did not finish: {commits} commits, recoveries {recoveries}"
        )
        records = clients.call("poll", name="etl-in", timeout_ms=500)["records"]
        if not records:
            # Nothing in flight: the group's committed offsets say how far the loop has come.
            if sum(clients.call("rewind", name="etl-in")["committed"].values()) == total:
                break
            continue
        attempts += 1
        try:
            clients.call("txn_begin", name="etl")
            clients.call(
                "txn_send",
                name="etl",
                topic=sink,
                records=[
                    {"partition": r["partition"], "value": r["value"].upper()} for r in records
                ],
            )
            if attempts % 4 == 0:  # beside it, a producer aborting every third transaction
                side = [f"side-{attempts}-{i}" for i in range(3)]
                clients.call("txn_begin", name="side")
                clients.call(
                    "txn_send",
                    name="side",
                    topic=sink,
                    records=[{"partition": 0, "value": v} for v in side],
                )
                aborting = attempts % 12 == 0
                clients.call("txn_abort" if aborting else "txn_commit", name="side")
                (side_aborted if aborting else side_committed).extend(side)
            if attempts in (5, 17):  # records sent, offsets and commit not yet
                chronolog.kill()
                chronolog.start()
                kills += 1
            clients.call("txn_send_offsets", name="etl", consumer="etl-in")
            clients.call("txn_commit", name="etl")
            commits += 1
        except JavaClientError as error:
            recoveries.append((attempts, error.error, error.message[:200]))
            _fatal_or_abortable(clients, "etl", etl_id, b)
            clients.call("rewind", name="etl-in")
    for name in ("etl", "side", "etl-in"):
        clients.call("close", name=name)

    out = [v for p in range(2) for _, v in _read(clients, b, sink, p, "read_committed")]
    transformed = Counter(v for v in out if v.startswith("VALUE-"))
    assert transformed == Counter(v.upper() for v in inputs)  # each input exactly once
    side_seen = [v for v in out if v.startswith("side-")]
    assert Counter(side_seen) == Counter(side_committed)
    assert side_aborted and not set(side_seen) & set(side_aborted)
    # Per partition, in input order: the loop reads each source partition in order.
    for p in range(2):
        mine = [v for _, v in _read(clients, b, sink, p, "read_committed") if v.startswith("VALUE")]
        assert mine == [v.upper() for i, v in enumerate(inputs) if i % 2 == p]
    everything = [v for p in range(2) for _, v in _read(clients, b, sink, p, "read_uncommitted")]
    assert set(side_aborted) <= set(everything), "the aborted records are stored, only hidden"
    # After the kills, Kafka's DumpLogSegments reads every batch of the output valid, and each
    # aborted record lies in a range of the segment's .txnindex, where read_committed looks.
    for p in range(2):
        batches = _dump_batches(chronolog.log_dir, sink, p)
        assert any(marker == "COMMIT" for *_, marker in batches)
    aborted_ranges = _dump_txnindex(chronolog.log_dir, sink, 0)
    for offset, value in _read(clients, b, sink, 0, "read_uncommitted"):
        if value in side_aborted:
            assert any(first <= offset <= last for first, last, _ in aborted_ranges), offset
    assert commits >= total // 20
    assert kills == 2, "the loop ended before both kills: the scenario did not run"


# 2. Kafka Streams exactly_once_v2: word count with a repartition topic and a state store.

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta"]


def _lines(start: int, count: int) -> list[str]:
    return [
        " ".join(WORDS[(i * 3 + j * 5) % len(WORDS)] for j in range(1 + i % 4))
        for i in range(start, start + count)
    ]


def _counts(lines: list[str]) -> dict[str, str]:
    return {w: str(n) for w, n in Counter(w for line in lines for w in line.split(" ")).items()}


def _wait_for_counts(clients, bootstrap, output, expected, app) -> dict[str, list[int]]:
    """Reads ``output`` read_committed until the last count of every word equals ``expected``;
    answers each word's counts in the order read. Fails with the app's state and errors."""
    deadline = time.monotonic() + 120
    while True:
        per_word: dict[str, list[int]] = defaultdict(list)
        for p in range(2):
            for r in clients.call(
                "read_partition",
                topic=output,
                partition=p,
                **_on(bootstrap, {"isolation.level": "read_committed"}),
            )["records"]:
                per_word[r["key"]].append(int(r["value"]))
        last = {w: str(counts[-1]) for w, counts in per_word.items()}
        if last == expected:
            return per_word
        state = clients.call("streams_state", name=app)
        assert time.monotonic() < deadline, (
            f"Streams' counts {last} never reached {expected}; state {state}"
        )
        time.sleep(0.3)


def _streams_topics(clients, prefix: str) -> tuple[str, str]:
    source, output = topic_name(f"{prefix}-lines"), topic_name(f"{prefix}-counts")
    for topic in (source, output):
        clients.call("create_topic", topic=topic, partitions=2)
    return source, output


def _start_word_count(clients, name, source, output, tmp_path) -> str:
    """Starts the word count with exactly_once_v2; returns its application id."""
    application_id = topic_name(name)
    clients.call(
        "streams_word_count",
        name=name,
        application_id=application_id,
        input=source,
        output=output,
        config={
            "processing.guarantee": "exactly_once_v2",
            "commit.interval.ms": 100,
            "state.dir": str(tmp_path / "streams-state"),
            "num.stream.threads": 1,
            "replication.factor": 1,
        },
    )
    return application_id


def _strictly_increasing(per_word: dict[str, list[int]]) -> None:
    """Exactly once: a count re-emitted after a crash (the same or a lower value) is a record the
    app processed twice or an uncommitted result a read_committed reader saw."""
    for word, counts in per_word.items():
        assert counts == sorted(set(counts)), f"{word}: {counts}"


def test_streams_exactly_once_v2_word_count(clients, chronolog, tmp_path):
    source, output = _streams_topics(clients, "eos")
    lines = _lines(0, 200)
    clients.call("produce", topic=source, records=[{"key": None, "value": v} for v in lines])
    _start_word_count(clients, "wc", source, output, tmp_path)
    try:
        per_word = _wait_for_counts(clients, chronolog.bootstrap, output, _counts(lines), "wc")
        _strictly_increasing(per_word)
        assert clients.call("streams_state", name="wc")["errors"] == []
    finally:
        clients.call("close", name="wc")
    # Exactly-once all the way: the output, the repartition topic and the state store's
    # changelog are written in transactions only, and their markers are in the logs.
    logs = Path(chronolog.log_dir)
    [repartition] = {d.name[: d.name.rindex("-")] for d in logs.glob("wc-*-words-repartition-*")}
    [changelog] = {d.name[: d.name.rindex("-")] for d in logs.glob("wc-*-counts-changelog-*")}
    for topic in (output, repartition, changelog):
        batches = [b for p in range(2) for b in _dump_batches(chronolog.log_dir, topic, p)]
        assert batches and all(b[2] for b in batches), f"{topic}: {batches}"
        assert any(b[4] == "COMMIT" for b in batches), f"{topic}: no COMMIT marker"


def test_streams_exactly_once_v2_across_a_kill9(clients, chronolog, tmp_path):
    source, output = _streams_topics(clients, "eos-kill")
    first, second = _lines(0, 150), list[str]()
    clients.call("produce", topic=source, records=[{"value": v} for v in first])
    application_id = _start_word_count(clients, "wck", source, output, tmp_path)
    repartition = f"{application_id}-words-repartition"
    b = chronolog.bootstrap
    try:
        _wait_for_counts(clients, b, output, _counts(first), "wck")
        # Killed while one of Streams' transactions is open (its records in the repartition
        # topic, its commit not yet): more input, 50 lines at a time, until the repartition
        # topic's last stable offset is seen below its high watermark. The high watermarks are
        # read first, so a transaction was open at the second reading.
        deadline = time.monotonic() + 60
        while True:
            chunk = _lines(150 + len(second), 50)
            clients.call("produce", topic=source, records=[{"value": v} for v in chunk])
            second += chunk
            high = _latest(clients, b, repartition, 2, "read_uncommitted")
            stable = _latest(clients, b, repartition, 2, "read_committed")
            if any(s < h for s, h in zip(stable, high)):
                break
            assert time.monotonic() < deadline, "no open Streams transaction was ever seen"
        chronolog.kill()
        chronolog.start()
        per_word = _wait_for_counts(clients, b, output, _counts(first + second), "wck")
        _strictly_increasing(per_word)
    finally:
        clients.call("close", name="wck")


# 3. Kafka's TransactionsCommand against chronolog and Kafka.


def _tool_table(bootstrap: str, *args: str) -> tuple[list[str], list[list[str]]]:
    """Runs ``kafka-transactions.sh --bootstrap-server bootstrap args``; its table as (headers,
    rows) (every column is one word)."""
    out = run_kafka_tool(TRANSACTIONS_COMMAND, "--bootstrap-server", bootstrap, *args).stdout
    lines = [line.split() for line in out.splitlines() if line.strip()]
    return lines[0], lines[1:]


def _open_transaction(clients, bootstrap: str, name: str, topic: str) -> tuple[str, list[int]]:
    """A Java producer's transaction left open: one plain record, then 3 in the transaction on
    partition 0. Returns its transactional id and the offsets acknowledged."""
    clients.call("create_topic", topic=topic, partitions=1, **_on(bootstrap))
    clients.call(
        "produce", topic=topic, records=[{"partition": 0, "value": "plain"}], **_on(bootstrap)
    )
    txn_id = topic_name(f"{name}-id")
    clients.call("txn_producer", name=name, transactional_id=txn_id, **_on(bootstrap, PRODUCER))
    clients.call("txn_begin", name=name)
    acks = clients.call(
        "txn_send",
        name=name,
        topic=topic,
        records=[{"partition": 0, "value": f"open-{i}"} for i in range(3)],
    )["records"]
    return txn_id, [a["offset"] for a in acks]


def _transactions_command_run(clients, bootstrap: str, side: str) -> dict:
    """list / describe / describe-producers / find-hanging / abort --start-offset over an open
    transaction, then the producer's own commit; what each showed, keyed by command."""
    topic = topic_name(f"tools-{side}")
    name = f"tools-{side}"
    txn_id, offsets = _open_transaction(clients, bootstrap, name, topic)
    seen: dict = {}
    headers, rows = _tool_table(bootstrap, "list")
    seen["list"] = (headers, [r for r in rows if r[0] == txn_id])
    headers, rows = _tool_table(bootstrap, "describe", "--transactional-id", txn_id)
    seen["describe"] = (headers, rows)
    headers, rows = _tool_table(
        bootstrap, "describe-producers", "--topic", topic, "--partition", "0"
    )
    seen["describe-producers"] = (headers, rows)
    coordinator = rows and seen["describe"][1][0][0]
    headers, rows = _tool_table(
        bootstrap, "find-hanging", "--broker-id", str(coordinator), "--max-transaction-timeout", "0"
    )
    seen["find-hanging"] = (headers, rows)
    assert _latest(clients, bootstrap, topic, 1, "read_committed") == [offsets[0]]
    abort = run_kafka_tool(
        TRANSACTIONS_COMMAND,
        "--bootstrap-server",
        bootstrap,
        "abort",
        "--topic",
        topic,
        "--partition",
        "0",
        "--start-offset",
        str(offsets[0]),
    )
    seen["abort"] = abort.stdout.strip()
    seen["lso after abort"] = _latest(clients, bootstrap, topic, 1, "read_committed")
    # The producer, unaware, commits: its records were aborted on the partition already.
    try:
        clients.call("txn_commit", name=name)
        seen["commit after abort"] = "committed"
    except JavaClientError as error:
        seen["commit after abort"] = error.error
    clients.call("close", name=name)
    seen["read_committed"] = _read(clients, bootstrap, topic, 0, "read_committed")
    seen["read_uncommitted"] = _read(clients, bootstrap, topic, 0, "read_uncommitted")
    seen["offsets"] = offsets
    seen["txn_id"] = txn_id
    return seen


def test_transactions_command_list_describe_abort(clients, chronolog, kafka_oracle):
    ours = _transactions_command_run(clients, chronolog.bootstrap, "chronolog")
    kafka = _transactions_command_run(clients, kafka_oracle.bootstrap, "kafka")
    for seen in (ours, kafka):
        txn_id, offsets = seen["txn_id"], seen["offsets"]
        assert offsets == [1, 2, 3]
        headers, rows = seen["list"]
        assert headers == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
        [(_, coordinator, producer_id, state)] = rows
        assert state == "Ongoing"
        headers, [row] = seen["describe"]
        described = dict(zip(headers, row))
        assert described["TransactionalId"] == txn_id
        assert described["CoordinatorId"] == coordinator
        assert described["ProducerId"] == producer_id
        assert described["TransactionState"] == "Ongoing"
        assert described["TransactionTimeoutMs"] == str(PRODUCER["transaction.timeout.ms"])
        assert described["TopicPartitions"].endswith("-0")
        headers, rows = seen["describe-producers"]
        ours_by_pid = {r[0]: dict(zip(headers, r)) for r in rows}
        assert ours_by_pid[producer_id]["CurrentTransactionStartOffset"] == str(offsets[0])
        # An ongoing transaction the coordinator knows on this partition is not hanging.
        assert seen["find-hanging"][1] == []
        assert seen["lso after abort"] == [5], "three records and the ABORT marker after offset 1"
        assert seen["read_committed"] == [(0, "plain")]
    # The same shapes and outcomes on both brokers; describe-producers row for row, but for the
    # producer ids and timestamps each broker picks.
    for command in ("list", "describe", "describe-producers", "find-hanging"):
        assert ours[command][0] == kafka[command][0], command

    def producer_rows(seen: dict) -> list[list[str]]:
        headers, rows = seen["describe-producers"]
        keep = [
            "ProducerEpoch",
            "LatestCoordinatorEpoch",
            "LastSequence",
            "CurrentTransactionStartOffset",
        ]
        return sorted([row[headers.index(k)] for k in keep] for row in rows)

    assert producer_rows(ours) == producer_rows(kafka)
    for key in ("abort", "lso after abort", "commit after abort", "read_committed"):
        assert ours[key] == kafka[key], key
    assert [v for _, v in ours["read_uncommitted"]] == [v for _, v in kafka["read_uncommitted"]]


def _hanging_batch(conn: BrokerConnection, topic: str) -> tuple[int, int]:
    """A transactional batch at offset 0 that the coordinator never heard of (Produce v11 with no
    AddPartitionsToTxn, let through with transaction.partition.verification.enable=false): a
    hanging transaction. Returns the producer id and epoch."""
    txn_id = topic_name("hanging")
    conn.call(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [txn_id]})
    init = conn.call(
        ApiKey.INIT_PRODUCER_ID,
        4,
        {
            "transactional_id": txn_id,
            "transaction_timeout_ms": 60000,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )
    assert init.error_code == 0
    spec = rb.BatchSpec(
        producer_id=init.producer_id,
        producer_epoch=init.producer_epoch,
        base_sequence=0,
        is_transactional=True,
    )
    batch = rb.build_batch(spec, [(0, int(time.time() * 1000), None, b"hanging", ())])
    body = {
        "transactional_id": txn_id,
        "acks": -1,
        "timeout_ms": 10000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    }
    # Kafka applies a dynamic config change asynchronously: until it has, its verification
    # refuses the batch (nothing is appended), so the same batch is sent again.
    deadline = time.monotonic() + 30
    while (
        error := conn.call(ApiKey.PRODUCE, 11, body).responses[0].partition_responses[0].error_code
    ):
        assert time.monotonic() < deadline, f"the hanging batch was refused with error {error}"
        time.sleep(0.2)
    return init.producer_id, init.producer_epoch


def _hanging_run(clients, server, broker_id: int) -> dict:
    """A hanging transaction at offset 0 (a plain record after it), found by find-hanging and
    aborted by ``abort --producer-id --producer-epoch --coordinator-epoch`` (the older brokers'
    form, which needs no DescribeProducers); what each step showed."""
    b = server.bootstrap
    topic = topic_name("hang")
    clients.call("create_topic", topic=topic, partitions=1, **_on(b))
    with BrokerConnection(server.host, server.port, client_id="hanging", timeout_s=15) as conn:
        producer_id, epoch = _hanging_batch(conn, topic)
    clients.call("produce", topic=topic, records=[{"partition": 0, "value": "after"}], **_on(b))
    find = ("find-hanging", "--broker-id", str(broker_id), "--max-transaction-timeout", "0")
    seen: dict = {"lso": _latest(clients, b, topic, 1, "read_committed")}
    headers, rows = _tool_table(b, *find)
    # Only this test's topic: the session's Kafka may hold other tests' leftovers.
    seen["find-hanging"] = (headers, [r[:6] for r in rows if r[0] == topic])
    seen["expected row"] = [topic, "0", str(producer_id), str(epoch), "-1", "0"]
    abort = run_kafka_tool(
        TRANSACTIONS_COMMAND,
        "--bootstrap-server",
        b,
        "abort",
        "--topic",
        topic,
        "--partition",
        "0",
        "--producer-id",
        str(producer_id),
        "--producer-epoch",
        str(epoch),
        "--coordinator-epoch",
        "-1",
    )
    seen["abort"] = abort.stdout.strip()
    seen["lso after abort"] = _latest(clients, b, topic, 1, "read_committed")
    seen["read_committed"] = _read(clients, b, topic, 0, "read_committed")
    seen["find-hanging after abort"] = [r for r in _tool_table(b, *find)[1] if r[0] == topic]
    return seen


def test_transactions_command_finds_and_aborts_a_hanging_transaction(
    clients, broker_factory, kafka_oracle
):
    ours = _hanging_run(
        clients, broker_factory({"transaction.partition.verification.enable": "false"}), 0
    )
    verification = ("--entity-type", "brokers", "--entity-default", "--alter")
    setting = "transaction.partition.verification.enable"
    run_kafka_tool(
        CONFIG_COMMAND,
        "--bootstrap-server",
        kafka_oracle.bootstrap,
        *verification,
        "--add-config",
        f"{setting}=false",
    )
    try:
        kafka = _hanging_run(clients, kafka_oracle, 1)
    finally:
        run_kafka_tool(
            CONFIG_COMMAND,
            "--bootstrap-server",
            kafka_oracle.bootstrap,
            *verification,
            "--delete-config",
            setting,
        )
    for seen in (ours, kafka):
        assert seen["lso"] == [0]  # the hanging transaction holds the LSO at its start
        headers, rows = seen["find-hanging"]
        assert headers[:6] == [
            "Topic",
            "Partition",
            "ProducerId",
            "ProducerEpoch",
            "CoordinatorEpoch",
            "StartOffset",
        ]
        assert rows == [seen["expected row"]]
        assert seen["lso after abort"] == [3]  # the hanging record, "after", the ABORT marker
        assert seen["read_committed"] == [(1, "after")]
        assert seen["find-hanging after abort"] == []
    assert ours["find-hanging"][0] == kafka["find-hanging"][0]
    assert ours["abort"] == kafka["abort"]


# 4 and 5. One sequence of transactions on both brokers; DumpLogSegments over both logs.


def _sequence(clients, bootstrap: str, topic: str, side: str) -> dict:
    """Plain records, txn A committed on 2 partitions, txn B aborted on 2, txn C left open on
    partition 0, plain records after; what the clients saw, with C still open."""
    clients.call("create_topic", topic=topic, partitions=2, **_on(bootstrap))

    def plain(values: list[tuple[int, str]]) -> list[int]:
        acks = clients.call(
            "produce",
            topic=topic,
            records=[{"partition": p, "value": v} for p, v in values],
            **_on(bootstrap),
        )["records"]
        return [a["offset"] for a in acks]

    def txn(name: str, values: list[tuple[int, str]], end: str | None) -> list[int]:
        clients.call(
            "txn_producer", name=name, transactional_id=topic_name(name), **_on(bootstrap, PRODUCER)
        )
        clients.call("txn_begin", name=name)
        acks = clients.call(
            "txn_send",
            name=name,
            topic=topic,
            records=[{"partition": p, "value": v} for p, v in values],
        )["records"]
        if end:
            clients.call(end, name=name)
            clients.call("close", name=name)
            settle()
        return [(a["partition"], a["offset"]) for a in acks]

    def settle() -> None:
        """Kafka answers EndTxn once the PrepareCommit/PrepareAbort is logged and writes the
        markers after (a plain record sent next has been seen to land before the marker): wait
        until no partition has an open transaction, so both logs get the same order."""
        deadline = time.monotonic() + 30
        while _latest(clients, bootstrap, topic, 2, "read_committed") != _latest(
            clients, bootstrap, topic, 2, "read_uncommitted"
        ):
            assert time.monotonic() < deadline, f"{side}: the markers were never written"
            time.sleep(0.05)

    acked = {
        "plain1": plain([(0, "p1"), (0, "p2")]),
        "A": txn(
            f"A-{side}", [(0, "a1"), (0, "a2"), (0, "a3"), (1, "a4"), (1, "a5")], "txn_commit"
        ),
        "plain2": plain([(1, "p3")]),
        "B": txn(f"B-{side}", [(0, "b1"), (0, "b2"), (1, "b3"), (1, "b4")], "txn_abort"),
        "C": txn(f"C-{side}", [(0, "c1"), (0, "c2")], None),
        "plain3": plain([(0, "p4"), (0, "p5"), (1, "p6")]),
    }
    seen = {
        "acked": acked,
        "latest read_uncommitted": _latest(clients, bootstrap, topic, 2, "read_uncommitted"),
        "latest read_committed": _latest(clients, bootstrap, topic, 2, "read_committed"),
        "read_committed": [_read(clients, bootstrap, topic, p, "read_committed") for p in range(2)],
        "read_uncommitted": [
            _read(clients, bootstrap, topic, p, "read_uncommitted") for p in range(2)
        ],
    }
    clients.call("txn_commit", name=f"C-{side}")
    clients.call("close", name=f"C-{side}")
    seen["latest read_committed after C"] = _latest(clients, bootstrap, topic, 2, "read_committed")
    seen["read_committed after C"] = [
        _read(clients, bootstrap, topic, p, "read_committed") for p in range(2)
    ]
    return seen


BATCH = re.compile(
    r"^baseOffset: (\d+) lastOffset: (\d+) .*?isTransactional: (\w+) .*?isControl: (\w+)"
)
MARKER = re.compile(r"endTxnMarker: (\w+)")


def _dump_batches(log_dir: str, topic: str, partition: int) -> list[tuple]:
    """DumpLogSegments --deep-iteration --print-data-log of the partition's segments: per batch
    (base offset, last offset, isTransactional, isControl, marker type or None)."""
    logs = sorted(str(f) for f in (Path(log_dir) / f"{topic}-{partition}").glob("*.log"))
    out = run_kafka_tool(
        DUMP_LOG_SEGMENTS, "--deep-iteration", "--print-data-log", "--files", ",".join(logs)
    ).stdout
    batches: list[tuple] = []
    for line in out.splitlines():
        if m := BATCH.match(line):
            assert "isvalid: true" in line, f"{topic}-{partition}: {line}"
            batches.append([int(m[1]), int(m[2]), m[3] == "true", m[4] == "true", None])
        elif (marker := MARKER.search(line)) and batches:
            batches[-1][4] = marker[1]
    return [tuple(b) for b in batches]


TXN_ENTRY = re.compile(
    r"producerId: (\d+),? firstOffset: (\d+),? lastOffset: (\d+),? lastStableOffset: (\d+)"
)


def _dump_txnindex(log_dir: str, topic: str, partition: int) -> list[tuple[int, int, int]]:
    """The aborted transactions in the partition's .txnindex files: (first offset, last offset,
    last stable offset) each."""
    files = sorted(str(f) for f in (Path(log_dir) / f"{topic}-{partition}").glob("*.txnindex"))
    if not files:
        return []
    out = run_kafka_tool(DUMP_LOG_SEGMENTS, "--files", ",".join(files)).stdout
    return [(int(m[2]), int(m[3]), int(m[4])) for m in TXN_ENTRY.finditer(out)]


def test_kafka_agrees_on_lso_reads_markers_and_aborted_index(clients, chronolog, kafka_oracle):
    topic = topic_name("diff-txn")
    ours = _sequence(clients, chronolog.bootstrap, topic, "chronolog")
    kafka = _sequence(clients, kafka_oracle.bootstrap, topic, "kafka")
    for key in kafka:
        assert ours[key] == kafka[key], f"{key}: chronolog {ours[key]}, Kafka {kafka[key]}"
    # What Kafka answered, spelled out: p0 holds p1 p2 | a1-a3 | COMMIT 5 | b1 b2 | ABORT 8 |
    # c1 c2 (open from 9) | p4 p5; p1 holds a4 a5 | COMMIT 2 | p3 | b3 b4 | ABORT 6 | p6.
    assert kafka["latest read_committed"] == [9, 8]
    assert kafka["latest read_committed after C"] == [14, 8]
    assert [[v for _, v in part] for part in kafka["read_committed"]] == [
        ["p1", "p2", "a1", "a2", "a3"],
        ["a4", "a5", "p3", "p6"],
    ]
    assert [[v for _, v in part] for part in kafka["read_committed after C"]] == [
        ["p1", "p2", "a1", "a2", "a3", "c1", "c2", "p4", "p5"],
        ["a4", "a5", "p3", "p6"],
    ]

    ours_dump = [_dump_batches(chronolog.log_dir, topic, p) for p in range(2)]
    kafka_dump = [_dump_batches(kafka_oracle.log_dir, topic, p) for p in range(2)]
    assert ours_dump == kafka_dump
    markers = [[(b[0], b[4]) for b in batches if b[3]] for batches in kafka_dump]
    assert markers == [[(5, "COMMIT"), (8, "ABORT"), (13, "COMMIT")], [(2, "COMMIT"), (6, "ABORT")]]
    # The batches the clients were acknowledged as transactional are flagged so.
    for p, batches in enumerate(ours_dump):
        transactional = {o for b in batches if b[2] and not b[3] for o in range(b[0], b[1] + 1)}
        acked = {o for name in "ABC" for part, o in ours["acked"][name] if part == p}
        assert transactional == acked
    ours_index = [_dump_txnindex(chronolog.log_dir, topic, p) for p in range(2)]
    kafka_index = [_dump_txnindex(kafka_oracle.log_dir, topic, p) for p in range(2)]
    assert ours_index == kafka_index
    assert kafka_index == [[(6, 8, 9)], [(4, 6, 7)]]  # LSO: the offset past the ABORT


DECODED = re.compile(r"^\| offset: (\d+) .* key: (\{.*\}) payload: (\{.*\})$")
# TransactionState's ids in __transaction_state values (Kafka's TransactionState.java).
TXN_STATES = {
    0: "Empty",
    1: "Ongoing",
    2: "PrepareCommit",
    3: "PrepareAbort",
    4: "CompleteCommit",
    5: "CompleteAbort",
    6: "Dead",
    7: "PrepareEpochFence",
}


def _decoded_transaction_log(log_dir: str, txn_id: str) -> list[tuple]:
    """DumpLogSegments --transaction-log-decoder over every __transaction_state segment: the
    records of ``txn_id`` in offset order, each (state, producer id, producer epoch, sorted
    partitions "topic-p")."""
    logs = sorted(str(f) for f in Path(log_dir).glob("__transaction_state-*/*.log"))
    assert logs, f"no __transaction_state segment in {log_dir}"
    out = run_kafka_tool(
        DUMP_LOG_SEGMENTS, "--transaction-log-decoder", "--files", ",".join(logs)
    ).stdout
    assert "Exception" not in out and "Unknown" not in out, out[-2000:]
    records = []
    for line in out.splitlines():
        if (m := DECODED.match(line)) and json.loads(m[2])["data"]["transactionalId"] == txn_id:
            data = json.loads(m[3])["data"]
            parts = sorted(
                f"{t['topic']}-{p}"
                for t in data["transactionPartitions"] or []
                for p in t["partitionIds"]
            )
            records.append(
                (
                    TXN_STATES[data["transactionStatus"]],
                    data["producerId"],
                    data["producerEpoch"],
                    parts,
                )
            )
    return records


def _commit_then_abort(clients, bootstrap: str, side: str) -> tuple[str, str]:
    topic, txn_id = topic_name(f"txlog-{side}"), topic_name(f"decoded-{side}")
    clients.call("create_topic", topic=topic, partitions=2, **_on(bootstrap))
    clients.call("txn_producer", name="dec", transactional_id=txn_id, **_on(bootstrap, PRODUCER))
    for end in ("txn_commit", "txn_abort"):
        clients.call("txn_begin", name="dec")
        for p in range(2):  # one partition at a time: the coordinator records each addition
            clients.call(
                "txn_send", name="dec", topic=topic, records=[{"partition": p, "value": end}]
            )
        clients.call(end, name="dec")
    clients.call("close", name="dec")
    return topic, txn_id


def test_transaction_log_decoder_reads_chronologs_transaction_state(
    clients, chronolog, kafka_oracle
):
    """Kafka's decoder reads every record chronolog's coordinator wrote for one producer (a
    commit, then an abort, each on 2 partitions), and the records tell the same story Kafka's
    coordinator writes for the same calls: states, epochs (relative), partitions."""
    stories = {}
    for side, server in (("chronolog", chronolog), ("kafka", kafka_oracle)):
        topic, txn_id = _commit_then_abort(clients, server.bootstrap, side)
        records = _decoded_transaction_log(server.log_dir, txn_id)
        assert records, f"{side}: no __transaction_state record of {txn_id}"
        assert {pid for _, pid, _, _ in records} == {records[0][1]}, records
        first_epoch = records[0][2]
        stories[side] = [
            (state, epoch - first_epoch, [p.replace(topic, "T") for p in parts])
            for state, _, epoch, parts in records
        ]
    assert [s for s, _, _ in stories["chronolog"]][:1] == ["Empty"]
    states = [s for s, _, _ in stories["chronolog"]]
    assert "CompleteCommit" in states and "CompleteAbort" in states, states
    assert stories["chronolog"] == stories["kafka"]
