"""The transaction coordinator's pure state machine (broker/txn/state.py) against Kafka 4.x's
TransactionCoordinator decisions, and its __transaction_state records and partitioning."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.txn import log as txn_log
from broker.txn.coordinator import java_string_hash, partition_for
from broker.txn.state import Answer, Transit, TxnMachine, TxnMetadata, TxnState
from protocol.errors import ErrorCode as E

MAX_TIMEOUT = 900_000


def machine() -> TxnMachine:
    ids = itertools.count(1000)
    return TxnMachine(max_timeout_ms=MAX_TIMEOUT, new_producer_id=lambda: next(ids))


def apply(m: TxnMachine, decision) -> TxnMetadata | None:
    """Store a transit as the coordinator does (begin, write, complete); the answered state."""
    if isinstance(decision, Answer):
        return decision.metadata
    m.begin(decision)
    m.complete(decision)
    return decision.to


def finish(m: TxnMachine, tid: str, now: int = 0) -> TxnMetadata:
    transit = m.markers_written(tid, now)
    assert transit is not None
    return apply(m, transit)


def test_init_bumps_the_epoch_and_fences_an_ongoing_transaction():
    m = machine()
    first = apply(m, m.init_producer_id("t", 60_000, None, 0))
    assert (first.producer_id, first.producer_epoch, first.state) == (1000, 0, TxnState.EMPTY)
    apply(m, m.add_partitions("t", 1000, 0, [("a", 0)], 1))
    fence = m.init_producer_id("t", 60_000, None, 2)
    assert isinstance(fence, Transit) and fence.error is E.CONCURRENT_TRANSACTIONS
    assert (fence.to.state, fence.to.producer_epoch) == (TxnState.PREPARE_ABORT, 1)
    apply(m, fence)
    assert m.init_producer_id("t", 60_000, None, 3) == Answer(E.CONCURRENT_TRANSACTIONS)
    finish(m, "t")
    again = apply(m, m.init_producer_id("t", 60_000, None, 4))
    assert (again.producer_id, again.producer_epoch) == (1000, 2)
    # the fenced producer's epoch no longer works
    assert m.add_partitions("t", 1000, 0, [("a", 0)], 5) == Answer(E.PRODUCER_FENCED)
    assert m.end_txn("t", 1000, 1, True, 5).error is E.PRODUCER_FENCED


def test_requests_are_refused_as_kafka_refuses_them():
    m = machine()
    assert m.init_producer_id("", 1000, None, 0) == Answer(E.INVALID_REQUEST)
    assert m.init_producer_id("t", MAX_TIMEOUT + 1, None, 0) == Answer(
        E.INVALID_TRANSACTION_TIMEOUT
    )
    assert m.add_partitions("t", 1, 0, [("a", 0)], 0) == Answer(E.INVALID_PRODUCER_ID_MAPPING)
    apply(m, m.init_producer_id("t", 1000, None, 0))
    assert m.add_partitions("t", 7, 0, [("a", 0)], 0) == Answer(E.INVALID_PRODUCER_ID_MAPPING)
    assert m.add_partitions("t", 1000, 5, [("a", 0)], 0) == Answer(E.PRODUCER_FENCED)
    assert m.end_txn("t", 1000, 0, True, 0) == Answer(E.INVALID_TXN_STATE)  # nothing open
    apply(m, m.add_partitions("t", 1000, 0, [("a", 0)], 0))
    # partitions already in the transaction: answered without a write
    assert m.add_partitions("t", 1000, 0, [("a", 0)], 0).error is E.NONE
    apply(m, m.end_txn("t", 1000, 0, True, 0))
    assert m.end_txn("t", 1000, 0, True, 0) == Answer(E.CONCURRENT_TRANSACTIONS)  # retry
    assert m.end_txn("t", 1000, 0, False, 0) == Answer(E.INVALID_TXN_STATE)
    assert m.add_partitions("t", 1000, 0, [("b", 0)], 0) == Answer(E.CONCURRENT_TRANSACTIONS)
    finish(m, "t")
    assert m.end_txn("t", 1000, 0, True, 0).error is E.NONE  # a retry after completion
    assert m.end_txn("t", 1000, 0, False, 0) == Answer(E.INVALID_TXN_STATE)


def test_a_pending_write_makes_requests_wait():
    m = machine()
    transit = m.init_producer_id("t", 1000, None, 0)
    m.begin(transit)
    assert m.init_producer_id("t", 1000, None, 0) == Answer(E.CONCURRENT_TRANSACTIONS)
    m.abandon(transit)  # the write failed: nothing changed
    assert "t" not in m.txns and not m.pending


def test_kip360_recovery_with_the_expected_producer_id_and_epoch():
    m = machine()
    apply(m, m.init_producer_id("t", 1000, None, 0))
    bumped = apply(m, m.init_producer_id("t", 1000, (1000, 0), 1))
    assert (bumped.producer_epoch, bumped.last_producer_epoch) == (1, 0)
    # a retry of that call (the response was lost) gets the same epoch, not another bump
    retried = apply(m, m.init_producer_id("t", 1000, (1000, 0), 2))
    assert retried.producer_epoch == 1
    assert m.init_producer_id("t", 1000, (99, 0), 3) == Answer(E.PRODUCER_FENCED)
    assert m.init_producer_id("t", 1000, (1000, 7), 3) == Answer(E.PRODUCER_FENCED)


def test_an_exhausted_epoch_rotates_the_producer_id():
    m = machine()
    apply(m, m.init_producer_id("t", 1000, None, 0))
    m.txns["t"] = TxnMetadata("t", 1000, 32766, 1000, TxnState.EMPTY, frozenset(), -1, 0)
    rotated = apply(m, m.init_producer_id("t", 1000, None, 1))
    assert (rotated.producer_id, rotated.producer_epoch) == (1001, 0)
    assert rotated.previous_producer_id == 1000


def test_timeouts_fence_and_abort_only_overdue_transactions():
    m = machine()
    for tid, start in (("old", 0), ("new", 5_000)):
        meta = apply(m, m.init_producer_id(tid, 1000, None, 0))
        apply(m, m.add_partitions(tid, meta.producer_id, 0, [("a", 0)], start))
    [transit] = m.timed_out(2_000)
    assert transit.to.transactional_id == "old"
    assert (transit.to.state, transit.to.producer_epoch) == (TxnState.PREPARE_ABORT, 1)


def test_transaction_version_2_bumps_the_epoch_at_every_end():
    m = machine()
    apply(m, m.init_producer_id("t", 1000, None, 0))
    apply(m, m.add_partitions("t", 1000, 0, [("a", 0)], 0, client_version=2))
    ended = apply(m, m.end_txn("t", 1000, 0, True, 1, client_version=2))
    assert (ended.state, ended.producer_epoch, ended.last_producer_epoch) == (
        TxnState.PREPARE_COMMIT,
        1,
        0,
    )
    # the client retries its EndTxn with the old epoch while markers are written
    assert m.end_txn("t", 1000, 0, True, 1, client_version=2) == Answer(E.CONCURRENT_TRANSACTIONS)
    done = finish(m, "t")
    assert (done.state, done.producer_epoch) == (TxnState.COMPLETE_COMMIT, 1)
    assert m.end_txn("t", 1000, 0, True, 2, client_version=2).error is E.NONE
    # a late write of the previous transaction (epoch 0) is fenced
    assert m.add_partitions("t", 1000, 0, [("a", 0)], 3) == Answer(E.PRODUCER_FENCED)


def test_transaction_version_2_end_racing_the_previous_markers_waits_for_them():
    """franz-go's TestTxnEtl: EndTxn v5 answers with the bumped epoch while its markers are still
    being written, and the producer's next EndTxn (an abort of a transaction that added nothing)
    comes at that epoch. Kafka 4.1.1 answers a write in progress before it checks the epoch (its
    TransactionCoordinator.endTransaction), so the producer waits instead of being fenced."""
    m = machine()
    apply(m, m.init_producer_id("t", 1000, None, 0))
    apply(m, m.add_partitions("t", 1000, 0, [("a", 0)], 0, client_version=2))
    apply(m, m.end_txn("t", 1000, 0, True, 1, client_version=2))  # PrepareCommit at epoch 1
    for commit in (False, True):
        assert m.end_txn("t", 1000, 1, commit, 2, client_version=2) == Answer(
            E.CONCURRENT_TRANSACTIONS
        )
    finish(m, "t")
    assert m.end_txn("t", 1000, 1, True, 3, client_version=2) == Answer(E.INVALID_TXN_STATE)
    aborted = apply(m, m.end_txn("t", 1000, 1, False, 3, client_version=2))
    assert (aborted.state, aborted.producer_epoch, aborted.last_producer_epoch) == (
        TxnState.PREPARE_ABORT,
        2,
        1,
    )
    finish(m, "t")
    # a retry of that abort (its answer lost) succeeds; a producer still at epoch 0 is fenced
    assert m.end_txn("t", 1000, 1, False, 4, client_version=2).error is E.NONE
    assert m.end_txn("t", 1000, 1, True, 4, client_version=2) == Answer(E.INVALID_TXN_STATE)
    assert m.end_txn("t", 1000, 0, False, 4, client_version=2) == Answer(E.PRODUCER_FENCED)


def test_verification_tells_which_partitions_are_in_the_transaction():
    m = machine()
    apply(m, m.init_producer_id("t", 1000, None, 0))
    apply(m, m.add_partitions("t", 1000, 0, [("a", 0)], 0))
    assert m.verify_partitions("t", 1000, 0, [("a", 0), ("a", 1)]) == {
        ("a", 0): E.NONE,
        ("a", 1): E.TRANSACTION_ABORTABLE,
    }
    assert m.verify_partitions("t", 1000, 1, [("a", 0)]) == {("a", 0): E.PRODUCER_FENCED}
    assert m.verify_partitions("x", 1000, 0, [("a", 0)]) == {
        ("a", 0): E.INVALID_PRODUCER_ID_MAPPING
    }


def test_listing_filters_by_state_producer_id_and_duration():
    m = machine()
    for tid in ("a", "b", "c"):
        apply(m, m.init_producer_id(tid, 100_000, None, 0))
    apply(m, m.add_partitions("a", 1000, 0, [("x", 0)], 1_000))
    apply(m, m.add_partitions("b", 1001, 0, [("x", 0)], 9_000))
    ids = lambda **kw: sorted(t.transactional_id for t in m.listing(now_ms=10_000, **kw))  # noqa
    assert ids() == ["a", "b", "c"]
    assert ids(states=["Ongoing"]) == ["a", "b"]
    assert ids(producer_ids=[1002]) == ["c"]
    assert ids(min_duration_ms=5_000) == ["a"]  # find-hanging's question


@given(st.text(max_size=30))
def test_java_string_hash_matches_javas_definition(text):
    expected = 0
    for unit in [
        int.from_bytes(text.encode("utf-16-be")[i : i + 2], "big")
        for i in range(0, len(text.encode("utf-16-be")), 2)
    ]:  # noqa: E501
        expected = (expected * 31 + unit) % 2**32
    if expected >= 2**31:
        expected -= 2**32
    assert java_string_hash(text) == expected
    assert 0 <= partition_for(text, 50) < 50


def test_known_java_hashes_and_partitions():
    # "hello".hashCode() == 99162322 and "Kafka".hashCode() == 72262506 in Java
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("😀") == java_string_hash(
        "\ud83d\ude00".encode("utf-16", "surrogatepass").decode("utf-16")
    )
    # Integer.MIN_VALUE-like hashes stay non-negative through Utils.abs (n & 0x7fffffff)
    assert (
        partition_for("polygenelubricants", 50)
        == (java_string_hash("polygenelubricants") & 0x7FFFFFFF) % 50
    )


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize(
    "state",
    [TxnState.EMPTY, TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.COMPLETE_ABORT],
)
def test_log_records_round_trip(state, version):
    partitions = (
        frozenset() if state is TxnState.EMPTY else frozenset({("a", 1), ("a", 0), ("b", 3)})
    )
    meta = TxnMetadata("tx-é", 42, 7, 60_000, state, partitions, 1_000, 2_000)
    key = txn_log.encode_key(meta.transactional_id)
    assert txn_log.decode_key(key) == "tx-é"
    value = txn_log.encode_value(meta, version)
    assert value[:2] == bytes([0, version])
    assert txn_log.decode_value("tx-é", value) == meta
    assert txn_log.decode_value("tx-é", None) is None


def test_log_value_v0_layout_is_kafkas():
    meta = TxnMetadata("t", 1, 2, 3, TxnState.ONGOING, frozenset({("a", 5)}), 6, 7)
    value = txn_log.encode_value(meta, 0)
    # version 0, producer id, epoch, timeout, status, [topic "a", [5]], last update, start
    assert value == (
        b"\x00\x00"
        + (1).to_bytes(8, "big")
        + (2).to_bytes(2, "big")
        + (3).to_bytes(4, "big")
        + b"\x01"
        + (1).to_bytes(4, "big")
        + b"\x00\x01a"
        + (1).to_bytes(4, "big")
        + (5).to_bytes(4, "big")
        + (7).to_bytes(8, "big")
        + (6).to_bytes(8, "big")
    )
    with pytest.raises(txn_log.TxnRecordError):
        txn_log.decode_value("t", b"\x00\x09" + value[2:])
    with pytest.raises(txn_log.TxnRecordError):
        txn_log.decode_value("t", value[:10])


class TransactionsAgainstAModel(RuleBasedStateMachine):
    """Random client calls for a few transactional ids; the machine must agree with a model of
    what each producer (id, epoch) may do, and never let two live producers share an id."""

    def __init__(self) -> None:
        super().__init__()
        self.m = machine()
        self.now = 0
        self.clients: dict[str, tuple[int, int]] = {}  # the newest producer of each id

    tids = st.sampled_from(["a", "b"])

    @rule(tid=tids)
    def init(self, tid):
        self.now += 1
        decision = self.m.init_producer_id(tid, 1000, None, self.now)
        meta = apply(self.m, decision)
        if isinstance(decision, Transit) and decision.error is E.NONE:
            assert meta.state is TxnState.EMPTY
            old = self.clients.get(tid)
            assert old is None or (meta.producer_id, meta.producer_epoch) > old
            self.clients[tid] = (meta.producer_id, meta.producer_epoch)

    @precondition(lambda self: self.clients)
    @rule(tid=tids, partition=st.integers(0, 2))
    def add(self, tid, partition):
        if tid not in self.clients:
            return
        self.now += 1
        pid, epoch = self.clients[tid]
        decision = self.m.add_partitions(tid, pid, epoch, [("x", partition)], self.now)
        meta = apply(self.m, decision)
        if decision.error is E.NONE:
            assert ("x", partition) in meta.partitions and meta.state is TxnState.ONGOING

    @precondition(lambda self: self.clients)
    @rule(tid=tids, commit=st.booleans())
    def end(self, tid, commit):
        if tid not in self.clients:
            return
        self.now += 1
        pid, epoch = self.clients[tid]
        apply(self.m, self.m.end_txn(tid, pid, epoch, commit, self.now))

    @rule(tid=tids)
    def markers(self, tid):
        transit = self.m.markers_written(tid, self.now)
        if transit is not None:
            apply(self.m, transit)
            assert transit.to.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
            assert not transit.to.partitions

    @rule()
    def time_passes(self):
        self.now += 2000
        for transit in self.m.timed_out(self.now):
            apply(self.m, transit)

    @rule(tid=tids)
    def zombie(self, tid):
        """An older epoch of the id can never add or end anything."""
        current = self.clients.get(tid)
        if current is None or current[1] == 0:
            return
        pid, epoch = current
        assert self.m.add_partitions(tid, pid, epoch - 1, [("x", 0)], self.now).error in (
            E.PRODUCER_FENCED,
            E.CONCURRENT_TRANSACTIONS,
        )

    @invariant()
    def states_are_consistent(self):
        for meta in self.m.txns.values():
            assert meta.producer_epoch >= 0
            if meta.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
                assert not meta.partitions
            if meta.state is TxnState.ONGOING:
                assert meta.partitions and meta.start_ms >= 0
            # what the log stores is what the machine holds, but for the last epoch, which
            # Kafka does not store either (a reload forgets it)
            value = txn_log.encode_value(meta, 1)
            stored = txn_log.decode_value(meta.transactional_id, value)
            assert stored == replace(meta, last_producer_epoch=-1)


TestTransactionsAgainstAModel = TransactionsAgainstAModel.TestCase
TestTransactionsAgainstAModel.settings = settings(max_examples=60, stateful_step_count=40)
