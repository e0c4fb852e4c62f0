"""read_committed (the default) and read_uncommitted over transactional data.

decode() against ground truth on generated logs: which records belong to an aborted transaction
is known from how the log was built, not from the algorithm under test; the aborted list is the
one a broker sends (Kafka's collectAbortedTxns). Then spark.read / readStream against a broker
holding committed, aborted and open transactions of librdkafka producers beside plain records,
with the rows expected worked out from the producers' delivery reports.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import MessageSetBuilder, iter_shallow
from protocol import recordbatch as rb
from pyspark_chronolog import InvalidOptionError
from pyspark_chronolog.arrow import decode
from pyspark_chronolog.client import BrokerClient
from pyspark_chronolog.options import parse_connect, parse_read
from pyspark_chronolog.planning import plan_batch
from tests.integration.kafka_wire import WireClient, produce
from tests.spark.spark_helpers import new_topic

BASE_TS = 1_700_000_000_000
TXN_TIMEOUT_S = 60


# -- decode() against ground truth -------------------------------------------------------------


@dataclass
class Txn:
    producer_id: int
    first: int
    marker: int = -1
    committed: bool = False


def build_log(events, legacy: int):
    """A partition's bytes from ``events``: ("plain", n), ("data", producer, n) (opens that
    producer's transaction if none is open), ("end", producer, commit). Transactions still open
    at the end are ended (committed for even producers). ``legacy`` magic-0 messages come
    first, as in a topic whose format was upgraded. Returns (bytes, rows, txns): rows are
    (offset, value, txn or None)."""
    buf, rows, txns, open_txn = b"", [], [], {}
    offset = 0
    if legacy:
        old = MessageSetBuilder(magic=0, base_offset=0)
        for i in range(legacy):
            old.append(b"old-%d" % i)
            rows.append((i, b"old-%d" % i, None))
        buf, offset = old.build(), legacy

    def end(producer: int, commit: bool) -> None:
        nonlocal buf, offset
        txn = open_txn.pop(producer)
        txn.marker, txn.committed = offset, commit
        buf += rb.build_end_txn_marker(
            rb.EndTxnMarker(commit, 0),
            base_offset=offset,
            producer_id=producer,
            producer_epoch=0,
            timestamp=BASE_TS,
        )
        offset += 1

    for event in events:
        if event[0] == "end":
            if event[1] in open_txn:
                end(event[1], event[2])
            continue
        producer = event[1] if event[0] == "data" else rb.NO_PRODUCER_ID
        count = event[-1]
        txn = None
        if event[0] == "data":
            txn = open_txn.get(producer)
            if txn is None:
                txn = open_txn[producer] = Txn(producer, offset)
                txns.append(txn)
        records = []
        for i in range(count):
            value = b"v%d" % (offset + i)
            records.append((i, BASE_TS + offset + i, None, value, ()))
            rows.append((offset + i, value, txn))
        spec = rb.BatchSpec(
            base_offset=offset,
            producer_id=producer,
            producer_epoch=0 if txn else rb.NO_PRODUCER_EPOCH,
            is_transactional=txn is not None,
        )
        buf += rb.build_batch(spec, records)
        offset += count
    for producer in sorted(open_txn):
        end(producer, producer % 2 == 0)
    return buf, rows, txns


producers = st.integers(1, 3)
events = st.lists(
    st.one_of(
        st.tuples(st.just("plain"), st.integers(1, 4)),
        st.tuples(st.just("data"), producers, st.integers(1, 4)),
        st.tuples(st.just("end"), producers, st.booleans()),
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(events=events, legacy=st.sampled_from([0, 0, 2]), data=st.data())
def test_decode_drops_exactly_the_aborted_records(events, legacy, data):
    buf, rows, txns = build_log(events, legacy)
    entries = list(iter_shallow(buf))
    log_end = entries[-1].offset + 1 if entries else 0
    start = data.draw(st.integers(0, log_end))
    end = data.draw(st.integers(start, log_end + 1))
    # What a fetch at ``start`` returns: from the entry holding it (from the log start when
    # magic-0 messages are there, so the per-message path decodes it), cut anywhere after.
    first = next((e for e in entries if e.offset >= (0 if legacy else start)), None)
    at = first.position if first else len(buf)
    cut = data.draw(st.integers(at, len(buf)))
    fetched = buf[at:cut]
    complete = [e for e in entries if at <= e.position and e.position + 12 + e.size <= cut]
    upper = complete[-1].offset + 1 if complete else start
    fetch_offset = first.offset if first and legacy else start
    aborted = [
        (t.producer_id, t.first)
        for t in txns
        if not t.committed and t.marker >= fetch_offset and t.first < upper
    ]

    def visible(committed_only: bool) -> list[tuple[int, bytes]]:
        return [
            (off, value)
            for off, value, txn in rows
            if start <= off < min(end, upper) and not (committed_only and txn and not txn.committed)
        ]

    for committed_only in (True, False):
        batch, next_offset = decode(
            fetched, "t", 0, start=start, end=end, aborted=aborted if committed_only else None
        )
        got = (
            []
            if batch is None
            else list(zip(batch["offset"].to_pylist(), batch["value"].to_pylist()))
        )
        assert got == visible(committed_only)
        # markers and skipped batches count: the next fetch starts after the last complete entry
        assert next_offset == min(end, max(start, upper))


def test_a_fetch_of_only_markers_moves_on():
    buf, _, txns = build_log([("data", 1, 2), ("data", 2, 2), ("end", 1, False)], 0)
    assert [(t.producer_id, t.committed) for t in txns] == [(1, False), (2, True)]
    markers = buf[list(iter_shallow(buf))[2].position :]  # producer 1's ABORT, 2's COMMIT
    for aborted in ([(1, 0)], None):
        batch, next_offset = decode(markers, "t", 0, start=4, end=10, aborted=aborted)
        assert batch is None and next_offset == 6


# -- option ------------------------------------------------------------------------------------


def test_isolation_level_option():
    base = {"bootstrap.servers": "127.0.0.1:9092", "topic": "t"}
    assert parse_read(base).read_committed
    assert parse_read({**base, "kafka.isolation.level": "READ_COMMITTED"}).read_committed
    assert not parse_read({**base, "Kafka.Isolation.Level": "read_uncommitted"}).read_committed
    with pytest.raises(InvalidOptionError, match=r"kafka\.isolation\.level='committed'"):
        parse_read({**base, "kafka.isolation.level": "committed"})


# -- Spark against a broker --------------------------------------------------------------------


def read_rows(spark, broker, topic, **options) -> list[tuple[int, int, bytes]]:
    reader = spark.read.format("chronolog").option("bootstrap.servers", broker.bootstrap)
    reader = reader.option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    rows = reader.load().select("partition", "offset", "value").collect()
    return sorted((r.partition, r.offset, bytes(r.value)) for r in rows)


def stream_rows(spark, broker, topic) -> list[tuple[int, int, bytes]]:
    name = f"txn_{topic.replace('-', '_')}"
    query = (
        spark.readStream.format("chronolog")
        .option("bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .select("partition", "offset", "value")
        .writeStream.format("memory")
        .queryName(name)
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    return sorted((r.partition, r.offset, bytes(r.value)) for r in spark.table(name).collect())


def test_spark_reads_committed_records_by_default(spark, broker):
    topic = new_topic(broker, 2, message_format_version="0.9.0")
    sent: list[tuple[int, int, bytes, str]] = []  # (partition, offset, value, kind)
    # Partition 1 starts with magic-0 messages (a topic whose format was upgraded later), so its
    # fetches are decoded message by message; partition 0's by the vectorised walk.
    old = MessageSetBuilder(magic=0)
    for i in range(3):
        old.append(b"old-%d" % i)
    with WireClient(broker.host, broker.port) as client:
        answer = produce(client, topic, old.build(), partition=1, acks=-1)
    assert answer.error_code == 0
    sent += [(1, answer.base_offset + i, b"old-%d" % i, "plain") for i in range(3)]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    upgrade = ConfigEntry(
        "message.format.version", "3.0-IV1", incremental_operation=AlterConfigOpType.SET
    )
    for future in admin.incremental_alter_configs(
        [ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[upgrade])]
    ).values():
        future.result(30)

    def send(producer: Producer, partition: int, names: list[str], kind: str) -> None:
        # values of ~300 bytes, so that 1 KiB fetches hold a batch or two, or only markers
        def report(err, msg) -> None:
            assert err is None, err
            sent.append((msg.partition(), msg.offset(), msg.value(), kind))

        for name in names:
            value = name.encode() + b"." * 300
            producer.produce(topic, value=value, partition=partition, on_delivery=report)
        assert producer.flush(30) == 0

    def txn_producer(name: str) -> Producer:
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic}-{name}"}
        )
        producer.init_transactions(TXN_TIMEOUT_S)
        return producer

    plain = Producer({"bootstrap.servers": broker.bootstrap})
    t1, t2, t3 = txn_producer("t1"), txn_producer("t2"), txn_producer("t3")
    send(plain, 0, ["p0-a", "p0-b", "p0-c"], "plain")
    send(plain, 1, ["p1-a", "p1-b"], "plain")
    t1.begin_transaction()
    send(t1, 0, ["A0-%d" % i for i in range(4)], "committed")
    send(t1, 1, ["A1-%d" % i for i in range(4)], "committed")
    t1.commit_transaction(TXN_TIMEOUT_S)
    t1.begin_transaction()
    send(t1, 0, ["B0-%d" % i for i in range(3)], "aborted")
    send(t1, 1, ["B1-%d" % i for i in range(3)], "aborted")
    t1.abort_transaction(TXN_TIMEOUT_S)
    # t2's transaction spans t1's next one and plain records, then aborts
    t2.begin_transaction()
    send(t2, 0, ["C-%d" % i for i in range(2)], "aborted")
    t1.begin_transaction()
    send(t1, 0, ["D-%d" % i for i in range(2)], "committed")
    t1.commit_transaction(TXN_TIMEOUT_S)
    send(plain, 0, ["p0-d", "p0-e"], "plain")
    send(t2, 0, ["C-%d" % i for i in range(2, 4)], "aborted")
    t2.abort_transaction(TXN_TIMEOUT_S)
    # partition 1 ends with a commit marker, an aborted transaction and its marker
    t1.begin_transaction()
    send(t1, 1, ["E-0", "E-1"], "committed")
    t1.commit_transaction(TXN_TIMEOUT_S)
    t2.begin_transaction()
    send(t2, 1, ["F-0", "F-1"], "aborted")
    t2.abort_transaction(TXN_TIMEOUT_S)
    # partition 0 ends with an open transaction and plain records after it (past the LSO)
    t3.begin_transaction()
    send(t3, 0, ["G-%d" % i for i in range(3)], "open")
    send(plain, 0, ["p0-f", "p0-g"], "plain")

    with BrokerClient(parse_connect({"bootstrap.servers": broker.bootstrap})) as client:
        stored = client.fetch((topic, 1), 0, 1 << 20).record_set
    magics = {e.magic for e in iter_shallow(stored)}
    assert magics == {0, 2}, magics  # partition 1 really takes the per-message path

    # read_committed ends partition 0 where the open transaction begins, partition 1 at its end
    lso = {0: min(o for p, o, _, kind in sent if kind == "open"), 1: 1 << 62}

    def rows(*kinds: str, below_lso: bool = True) -> list[tuple[int, int, bytes]]:
        return sorted(
            (p, o, v) for p, o, v, kind in sent if kind in kinds and (not below_lso or o < lso[p])
        )

    committed = rows("plain", "committed")
    everything = rows("plain", "committed", "aborted", "open", below_lso=False)
    # partition 0: 3 plain, A0, D, 2 plain; partition 1: 3 old, 2 plain, A1, E
    assert len(committed) == (3 + 4 + 2 + 2) + (3 + 2 + 4 + 2)
    assert read_rows(spark, broker, topic) == committed
    assert read_rows(spark, broker, topic, **{"kafka.isolation.level": "read_uncommitted"}) == (
        everything
    )
    # tasks of 2 offsets and 1 KiB fetches: some ranges and fetches hold only markers or
    # aborted batches, and must end without rows instead of failing or looping
    small = {"maxRecordsPerPartition": 2, "kafka.max.partition.fetch.bytes": 1024}
    with BrokerClient(
        parse_connect({"bootstrap.servers": broker.bootstrap}), read_committed=True
    ) as client:
        ranges = plan_batch(
            client, parse_read({"bootstrap.servers": broker.bootstrap, "topic": topic, **small})
        )
        beyond = json.dumps({topic: {"0": lso[0] + 1, "1": -1}})
        with pytest.raises(InvalidOptionError, match="its last stable offset"):
            plan_batch(
                client,
                parse_read(
                    {"bootstrap.servers": broker.bootstrap, "topic": topic, "endingOffsets": beyond}
                ),
            )
    visible = {(p, o) for p, o, _ in committed}
    empty = [
        r for r in ranges if not any((r.partition, o) in visible for o in range(r.start, r.end))
    ]
    assert len(empty) >= 3, ranges
    assert max(r.end for r in ranges if r.partition == 0) == lso[0]
    assert read_rows(spark, broker, topic, **small) == committed
    assert stream_rows(spark, broker, topic) == committed

    t3.commit_transaction(TXN_TIMEOUT_S)  # the LSO moves to the end: G and what followed
    assert read_rows(spark, broker, topic) == rows("plain", "committed", "open", below_lso=False)
