"""The transaction coordinator's decisions, as a pure state machine (Kafka 4.x's
TransactionCoordinator and TransactionMetadata, KIP-98 / KIP-360 / KIP-890).

No I/O and no clock: the caller passes ``now_ms`` and a producer-id source, writes every
:class:`Transit` to ``__transaction_state`` before it takes effect (:meth:`TxnMachine.begin`,
then :meth:`TxnMachine.complete` or :meth:`TxnMachine.abandon`), and sends the markers of a
transaction that reached PrepareCommit / PrepareAbort. While a transit is being written the
transactional id is *pending*: requests for it get CONCURRENT_TRANSACTIONS, which clients retry.

States and their transitions (TransactionState.java)::

    Empty / CompleteCommit / CompleteAbort --AddPartitions--> Ongoing
    Ongoing --EndTxn(commit)--> PrepareCommit --markers written--> CompleteCommit
    Ongoing --EndTxn(abort), timeout, InitProducerId fencing--> PrepareAbort --> CompleteAbort
    Empty / Complete* --InitProducerId--> Empty (epoch + 1, or a new producer id once the
    epoch is exhausted)

Transaction versions (the ``transaction.version`` feature, KIP-890): a client at version 2
(EndTxn v5, Produce v12) has its epoch bumped by every EndTxn, so a late write from the
previous transaction is fenced; clients at versions 0 and 1 keep their epoch until
InitProducerId.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from protocol.errors import ErrorCode

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 2**15 - 1

TopicPartition = tuple[str, int]


class TxnState(enum.Enum):
    """Kafka's TransactionState: ``value`` is the id stored in ``__transaction_state``,
    ``label`` the name DescribeTransactions and ListTransactions report."""

    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    def __init__(self, state_id: int, label: str) -> None:
        self.id = state_id
        self.label = label

    @classmethod
    def from_id(cls, state_id: int) -> TxnState:
        for state in cls:
            if state.id == state_id:
                return state
        raise ValueError(f"unknown transaction state id {state_id}")

    @classmethod
    def from_label(cls, label: str) -> TxnState | None:
        return next((s for s in cls if s.label == label), None)

    @property
    def completing(self) -> bool:
        """Markers are being written (PrepareCommit, PrepareAbort)."""
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def complete(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


def epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps Short.MaxValue free so that a fencing bump is always possible."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """One transactional id's state, as stored in ``__transaction_state``."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int
    last_update_ms: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    client_version: int = 0

    @property
    def epoch_bump_per_transaction(self) -> bool:
        return self.client_version >= 2


@dataclass(frozen=True, slots=True)
class Transit:
    """Write ``to`` to the transaction log, then answer ``error`` (NONE, or
    CONCURRENT_TRANSACTIONS when an ongoing transaction is being aborted first). When ``to``
    is PrepareCommit/PrepareAbort, its markers are to be written once it is stored."""

    to: TxnMetadata
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class Answer:
    """Answer now, nothing to write. ``metadata`` is the state answered from, if any."""

    error: ErrorCode
    metadata: TxnMetadata | None = None


Decision = Transit | Answer


class TxnMachine:
    """Every transactional id this coordinator owns. ``new_producer_id`` hands out a fresh,
    never reused producer id (the caller keeps one ready: it may need I/O)."""

    def __init__(self, *, max_timeout_ms: int, new_producer_id: Callable[[], int]) -> None:
        self.max_timeout_ms = max_timeout_ms
        self._new_producer_id = new_producer_id
        self.txns: dict[str, TxnMetadata] = {}
        self.pending: dict[str, TxnMetadata] = {}

    # ---- the write protocol --------------------------------------------------------------

    def begin(self, transit: Transit) -> None:
        """The transit is being written: its id is pending until complete/abandon."""
        tid = transit.to.transactional_id
        if tid in self.pending:
            raise AssertionError(f"transactional id {tid!r} already has a transit pending")
        self.pending[tid] = transit.to

    def complete(self, transit: Transit) -> None:
        """The transit is stored: it is the id's state now."""
        tid = transit.to.transactional_id
        self.pending.pop(tid, None)
        if transit.to.state is TxnState.DEAD:
            self.txns.pop(tid, None)
        else:
            self.txns[tid] = transit.to

    def abandon(self, transit: Transit) -> None:
        """The transit could not be written: the id keeps its stored state."""
        self.pending.pop(transit.to.transactional_id, None)

    def load(self, metadata: TxnMetadata | None, transactional_id: str) -> None:
        """Replay one ``__transaction_state`` record (None: a tombstone)."""
        if metadata is None or metadata.state is TxnState.DEAD:
            self.txns.pop(transactional_id, None)
        else:
            self.txns[transactional_id] = metadata

    # ---- requests ----------------------------------------------------------------------

    def init_producer_id(
        self,
        tid: str,
        timeout_ms: int,
        expected: tuple[int, int] | None,
        now_ms: int,
    ) -> Decision:
        """InitProducerId for a transactional id; ``expected`` (producer id, epoch) is what a
        v3+ client that already had an id sends (KIP-360), else None."""
        if not tid:
            return Answer(ErrorCode.INVALID_REQUEST)
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return Answer(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        if tid in self.pending:
            return Answer(ErrorCode.CONCURRENT_TRANSACTIONS)
        meta = self.txns.get(tid)
        if meta is None:
            meta = TxnMetadata(
                tid,
                self._new_producer_id(),
                NO_PRODUCER_EPOCH,
                timeout_ms,
                TxnState.EMPTY,
                frozenset(),
                -1,
                now_ms,
            )
        if expected is not None and not (
            meta.producer_epoch == NO_PRODUCER_EPOCH
            or expected[0] == meta.producer_id
            or (expected[0] == meta.previous_producer_id and epoch_exhausted(expected[1]))
        ):
            return Answer(ErrorCode.PRODUCER_FENCED)
        if meta.state.completing:
            return Answer(ErrorCode.CONCURRENT_TRANSACTIONS)
        if meta.state is TxnState.ONGOING:
            # Fence the producer and abort its transaction; the client retries and then gets
            # the epoch bumped once more.
            return Transit(self._fenced_abort(meta, now_ms), ErrorCode.CONCURRENT_TRANSACTIONS)
        if epoch_exhausted(meta.producer_epoch) and (
            expected is None or expected[1] == meta.producer_epoch
        ):
            return Transit(
                replace(
                    meta,
                    producer_id=self._new_producer_id(),
                    previous_producer_id=meta.producer_id,
                    producer_epoch=0,
                    last_producer_epoch=meta.producer_epoch if expected is not None else -1,
                    timeout_ms=timeout_ms,
                    state=TxnState.EMPTY,
                    partitions=frozenset(),
                    start_ms=-1,
                    last_update_ms=now_ms,
                )
            )
        if expected is None or meta.producer_epoch in (NO_PRODUCER_EPOCH, expected[1]):
            epoch, last = (
                meta.producer_epoch + 1,
                (NO_PRODUCER_EPOCH if expected is None else meta.producer_epoch),
            )
        elif expected[1] == meta.last_producer_epoch:
            # A retry of a bump that succeeded: answer the current epoch again.
            epoch, last = meta.producer_epoch, meta.last_producer_epoch
        else:
            return Answer(ErrorCode.PRODUCER_FENCED)
        return Transit(
            replace(
                meta,
                producer_epoch=epoch,
                last_producer_epoch=last,
                timeout_ms=timeout_ms,
                state=TxnState.EMPTY,
                partitions=frozenset(),
                start_ms=-1,
                last_update_ms=now_ms,
            )
        )

    def _owned(self, tid: str, producer_id: int, epoch: int) -> TxnMetadata | Answer:
        """The id's state when ``producer_id`` and ``epoch`` are its current ones and no
        transit is pending; else the Answer Kafka gives."""
        if not tid:
            return Answer(ErrorCode.INVALID_REQUEST)
        meta = self.txns.get(tid)
        if meta is None or meta.producer_id != producer_id:
            return Answer(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if meta.producer_epoch != epoch:
            return Answer(ErrorCode.PRODUCER_FENCED)
        if tid in self.pending or meta.state.completing:
            return Answer(ErrorCode.CONCURRENT_TRANSACTIONS)
        return meta

    def add_partitions(
        self,
        tid: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
        *,
        client_version: int | None = None,
    ) -> Decision:
        """AddPartitionsToTxn / AddOffsetsToTxn (and, at transaction version 2, a produce's
        implicit add): the partitions join the ongoing transaction, which starts here if
        none is open."""
        meta = self._owned(tid, producer_id, epoch)
        if isinstance(meta, Answer):
            return meta
        added = frozenset(partitions)
        if meta.state is TxnState.ONGOING and added <= meta.partitions:
            return Answer(ErrorCode.NONE, meta)
        starting = meta.state is not TxnState.ONGOING
        return Transit(
            replace(
                meta,
                state=TxnState.ONGOING,
                partitions=meta.partitions | added,
                start_ms=now_ms if starting else meta.start_ms,
                last_update_ms=now_ms,
                client_version=meta.client_version if client_version is None else client_version,
            )
        )

    def verify_partitions(
        self, tid: str, producer_id: int, epoch: int, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        """KIP-890 part 1: whether each partition is in the producer's ongoing transaction, for
        the broker to check before it appends a transactional batch (AddPartitionsToTxn v4+
        with verify_only). A pending transit is not checked: the append itself is final."""
        wanted = list(partitions)
        meta = self.txns.get(tid) if tid else None
        if not tid:
            error = ErrorCode.INVALID_REQUEST
        elif meta is None or meta.producer_id != producer_id:
            error = ErrorCode.INVALID_PRODUCER_ID_MAPPING
        elif meta.producer_epoch != epoch:
            error = ErrorCode.PRODUCER_FENCED
        elif meta.state.completing:
            error = ErrorCode.CONCURRENT_TRANSACTIONS
        else:
            return {
                tp: ErrorCode.NONE if tp in meta.partitions else ErrorCode.TRANSACTION_ABORTABLE
                for tp in wanted
            }
        return {tp: error for tp in wanted}

    def end_txn(
        self,
        tid: str,
        producer_id: int,
        epoch: int,
        commit: bool,
        now_ms: int,
        *,
        client_version: int = 0,
    ) -> Decision:
        """EndTxn from the client: Ongoing moves to PrepareCommit / PrepareAbort; a retry of
        an end already reached answers NONE; anything else is refused as Kafka refuses it."""
        if not tid:
            return Answer(ErrorCode.INVALID_REQUEST)
        meta = self.txns.get(tid)
        if meta is None:
            return Answer(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        v2 = meta.epoch_bump_per_transaction
        if v2 and (tid in self.pending or meta.state.completing):
            # Kafka 4.1 answers a write in progress before it looks at the epoch: the previous
            # end already bumped the epoch to the request's, so an EndTxn that races that
            # transaction's markers is a live producer's next one, to retry, not a zombie.
            return Answer(ErrorCode.CONCURRENT_TRANSACTIONS)
        # A v2 retry of an EndTxn that already bumped the epoch (Kafka's endTxnEpochBumped).
        retry_of_bump = v2 and meta.producer_epoch == epoch + 1
        retry_on_overflow = (
            v2
            and meta.previous_producer_id == producer_id
            and epoch == MAX_EPOCH - 1
            and meta.producer_epoch == 0
        )
        retry = retry_of_bump or retry_on_overflow
        if meta.producer_id != producer_id and not retry_on_overflow:
            return Answer(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if v2 and meta.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            valid = retry or epoch == meta.producer_epoch
        else:
            valid = epoch == meta.producer_epoch
        if not valid:
            return Answer(ErrorCode.PRODUCER_FENCED)
        if tid in self.pending:
            return Answer(ErrorCode.CONCURRENT_TRANSACTIONS)
        wanted_done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        wanted_prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if meta.state is TxnState.ONGOING:
            return Transit(self._prepare_end(meta, wanted_prepare, now_ms, client_version))
        if v2:
            if retry and meta.state is wanted_done:
                return Answer(ErrorCode.NONE, meta)  # the answer to the end that bumped was lost
            if not retry and not commit:
                # KIP-890: a v2 client may abort a transaction that added no partition (none
                # since the last end); the epoch is bumped all the same.
                return Transit(self._prepare_end(meta, wanted_prepare, now_ms, client_version))
            return Answer(ErrorCode.INVALID_TXN_STATE)
        if meta.state is wanted_done:
            return Answer(ErrorCode.NONE, meta)
        if meta.state is wanted_prepare:
            return Answer(ErrorCode.CONCURRENT_TRANSACTIONS)
        if meta.state is TxnState.EMPTY and client_version >= 2 and not commit:
            # KIP-890: a v2 client may abort a transaction that never added a partition; the
            # epoch is bumped all the same, so nothing of an earlier attempt can follow.
            return Transit(self._prepare_end(meta, wanted_prepare, now_ms, client_version))
        return Answer(ErrorCode.INVALID_TXN_STATE)

    def _prepare_end(
        self, meta: TxnMetadata, state: TxnState, now_ms: int, client_version: int
    ) -> TxnMetadata:
        if client_version >= 2:
            if epoch_exhausted(meta.producer_epoch):
                return replace(
                    meta,
                    state=state,
                    next_producer_id=self._new_producer_id(),
                    producer_epoch=meta.producer_epoch + 1,
                    last_producer_epoch=meta.producer_epoch,
                    last_update_ms=now_ms,
                    client_version=client_version,
                )
            return replace(
                meta,
                state=state,
                producer_epoch=meta.producer_epoch + 1,
                last_producer_epoch=meta.producer_epoch,
                last_update_ms=now_ms,
                client_version=client_version,
            )
        return replace(meta, state=state, last_update_ms=now_ms, client_version=client_version)

    def _fenced_abort(self, meta: TxnMetadata, now_ms: int) -> TxnMetadata:
        """PrepareAbort at a bumped epoch: the old producer's writes and EndTxn are fenced."""
        return replace(
            meta,
            state=TxnState.PREPARE_ABORT,
            producer_epoch=meta.producer_epoch + 1,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            last_update_ms=now_ms,
        )

    def markers_written(self, tid: str, now_ms: int) -> Transit | None:
        """The markers of a PrepareCommit / PrepareAbort are all written: the transit to
        CompleteCommit / CompleteAbort (None when the id is no longer completing)."""
        meta = self.txns.get(tid)
        if meta is None or not meta.state.completing or tid in self.pending:
            return None
        done = (
            TxnState.COMPLETE_COMMIT
            if meta.state is TxnState.PREPARE_COMMIT
            else TxnState.COMPLETE_ABORT
        )
        rotate = meta.next_producer_id != NO_PRODUCER_ID
        return Transit(
            replace(
                meta,
                state=done,
                producer_id=meta.next_producer_id if rotate else meta.producer_id,
                previous_producer_id=meta.producer_id if rotate else meta.previous_producer_id,
                next_producer_id=NO_PRODUCER_ID,
                producer_epoch=0 if rotate else meta.producer_epoch,
                last_producer_epoch=meta.producer_epoch,
                partitions=frozenset(),
                last_update_ms=now_ms,
            )
        )

    def timed_out(self, now_ms: int) -> list[Transit]:
        """Ongoing transactions open longer than their timeout: each is fenced and aborted."""
        return [
            Transit(self._fenced_abort(meta, now_ms))
            for tid, meta in self.txns.items()
            if meta.state is TxnState.ONGOING
            and tid not in self.pending
            and meta.start_ms + meta.timeout_ms < now_ms
            and meta.producer_epoch < MAX_EPOCH
        ]

    def completing(self) -> list[TxnMetadata]:
        """Transactions whose markers are still to be written (e.g. after a restart)."""
        return [m for m in self.txns.values() if m.state.completing]

    def abort(self, tid: str, now_ms: int) -> Decision:
        """An operator's abort of an ongoing transaction (fenced like a timeout)."""
        meta = self.txns.get(tid)
        if meta is None:
            return Answer(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
        if tid in self.pending or meta.state.completing:
            return Answer(ErrorCode.CONCURRENT_TRANSACTIONS)
        if meta.state is not TxnState.ONGOING:
            return Answer(ErrorCode.INVALID_TXN_STATE, meta)
        return Transit(self._fenced_abort(meta, now_ms))

    def expired(self, now_ms: int, expiration_ms: int) -> list[Transit]:
        """Ids idle for ``transactional.id.expiration.ms`` with no transaction open: Dead
        (written as a tombstone)."""
        return [
            Transit(replace(meta, state=TxnState.DEAD, partitions=frozenset()))
            for tid, meta in self.txns.items()
            if meta.state.complete
            and tid not in self.pending
            and meta.last_update_ms + expiration_ms <= now_ms
        ]

    # ---- views -------------------------------------------------------------------------

    def listing(
        self,
        *,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        min_duration_ms: int = -1,
        now_ms: int,
    ) -> list[TxnMetadata]:
        """ListTransactions with KIP-994's filters: by state label, producer id, and
        transactions running for at least ``min_duration_ms`` (-1: no filter)."""
        wanted_states = set(states)
        wanted_ids = set(producer_ids)
        return [
            m
            for m in self.txns.values()
            if (not wanted_states or m.state.label in wanted_states)
            and (not wanted_ids or m.producer_id in wanted_ids)
            and (
                min_duration_ms < 0
                or (m.state is TxnState.ONGOING and now_ms - m.start_ms >= min_duration_ms)
            )
        ]


def partitions_by_topic(partitions: Iterable[TopicPartition]) -> Mapping[str, list[int]]:
    """Topic -> sorted partition ids (the shape of the wire and the log records)."""
    out: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        out.setdefault(topic, []).append(partition)
    return out
