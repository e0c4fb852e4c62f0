"""Producers' state for one partition (KIP-98: idempotence and transactions), as Kafka 3.9's
ProducerStateManager / ProducerAppendInfo / ProducerStateEntry keep it.

Per producer id (:class:`ProducerStateEntry`): its epoch, the metadata of its last five appended
batches (first and last sequence, first and last offset, max timestamp), the epoch of the
transaction coordinator that wrote its last marker, and the first offset of its ongoing
transaction. The Log checks every batch a client appends, then records it
(:meth:`ProducerStateManager.prepare_client_append`, :meth:`ProducerAppendInfo.append_data`,
:meth:`ProducerStateManager.update`); a batch is

- a duplicate when it equals (same epoch, first and last sequence) one of the last five: a
  producer's retry of a batch already stored, answered with the original offsets
  (:class:`Duplicate`), nothing stored;
- refused for an epoch below the producer's (:class:`InvalidProducerEpochError`,
  INVALID_PRODUCER_EPOCH: a fenced zombie);
- refused unless a new epoch starts at sequence 0 (but a producer unknown here, whose state was
  lost to retention, may start anywhere) and otherwise the first sequence follows the last one,
  int32 wrap-around to 0 (:class:`OutOfOrderSequenceError`, OUT_OF_ORDER_SEQUENCE_NUMBER);
- refused when it is not transactional while its producer has an ongoing transaction
  (:class:`InvalidTxnStateError`, INVALID_TXN_STATE); a transactional batch starts the
  producer's transaction at its first offset, or continues it.

A COMMIT or ABORT marker (a control batch, :meth:`ProducerAppendInfo.append_marker`) is refused
for an epoch below the producer's or a coordinator epoch below the last marker's
(:class:`TransactionCoordinatorFencedError`); it completes the ongoing transaction, if any (a
marker for a producer without one is written anyway, as Kafka does), and a newer epoch bumps the
producer's (KIP-890: its next batch starts at sequence 0). Batches a follower copies or a load
replays are checked less (Kafka's REPLICATION origin): no duplicates and sequences, stale epochs
accepted.

Transactions: ongoing ones by first offset; completed ones stay "unreplicated" until the high
watermark passes their marker, and the first unstable offset is the first offset of the oldest
of either (the last stable offset is that, capped by the high watermark: storage/log.py).

Snapshots: at every roll and at close the Log writes the state to ``<20-digit offset>.snapshot``
in Kafka's format (ProducerStateManager.writeSnapshot, version 1); when it opens it loads the
newest one and replays the batches after it, so a start does not rescan the whole log. As in
Kafka, a snapshot keeps each producer's last batch only (a producer whose batches a marker's
epoch bump dropped has last_sequence -1, last_offset -1, offset_delta 0)::

    version int16 (1), crc uint32 (CRC-32C of everything after it),
    count int32, count x entry:
      producer_id int64, epoch int16, last_sequence int32, last_offset int64,
      offset_delta int32 (last - first offset), timestamp int64 (the producer's last),
      coordinator_epoch int32 (-1: no marker yet),
      current_txn_first_offset int64 (-1: no ongoing transaction)                   46 bytes
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import structlog
from crc32c import crc32c

from protocol import recordbatch as rb
from storage.errors import StorageError

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

    from protocol.validator import ProducerBatch

__all__ = [
    "ProducerStateManager",
    "ProducerStateEntry",
    "ProducerAppendInfo",
    "ProducerInfo",
    "CompletedTxn",
    "Duplicate",
    "ProducerStateError",
    "OutOfOrderSequenceError",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "TransactionCoordinatorFencedError",
    "DuplicateSequenceError",
    "CorruptSnapshotError",
    "BATCHES_KEPT",
    "SNAPSHOT_SUFFIX",
]

logger = structlog.get_logger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
_SNAPSHOT_VERSION = 1
_SNAPSHOT_HEAD = struct.Struct(">hIi")  # version, crc, count: 10 bytes
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")  # 46 bytes, see the module docstring

BATCHES_KEPT = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
_INT32_MAX = 2**31 - 1


class ProducerStateError(StorageError):
    """Base of the errors of a producer's batch or marker that :meth:`storage.log.Log.append`
    and :meth:`~storage.log.Log.append_control` refuse (nothing is appended);
    ``error_name`` is the Kafka error code's name the broker answers with."""

    error_name = ""


class OutOfOrderSequenceError(ProducerStateError):
    """Raised when a batch's first sequence does not follow the producer's last one (or a new
    epoch does not start at 0): a batch was lost in between, and the producer must not go on
    as if it had not."""

    error_name = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class InvalidProducerEpochError(ProducerStateError):
    """Raised for a batch or marker from an older epoch of a producer id than one already seen:
    a fenced, zombie producer (or a marker of a transaction already superseded)."""

    error_name = "INVALID_PRODUCER_EPOCH"


class InvalidTxnStateError(ProducerStateError):
    """Raised for a non-transactional batch from a producer whose transaction is ongoing in
    this partition: it must commit or abort it first."""

    error_name = "INVALID_TXN_STATE"


class TransactionCoordinatorFencedError(ProducerStateError):
    """Raised for a marker whose coordinator epoch is below the one of the producer's last
    marker: it comes from a transaction coordinator that has since been replaced."""

    error_name = "TRANSACTION_COORDINATOR_FENCED"


class DuplicateSequenceError(ProducerStateError):
    """Raised for a set of several batches one of which is a retry of a stored batch: only a
    lone duplicate can be answered with its original offsets."""

    error_name = "DUPLICATE_SEQUENCE_NUMBER"


class CorruptSnapshotError(StorageError):
    """Raised by :meth:`ProducerStateManager.from_snapshot` for a snapshot file that is
    truncated, of another version, or fails its CRC-32C: the Log then rebuilds from the log."""


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A retried batch already in the log, with its original offsets and max timestamp."""

    first_offset: int
    last_offset: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker completed: Kafka's CompletedTxn (``last_offset`` is the
    marker's)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class ProducerInfo(NamedTuple):
    """One producer as DescribeProducers shows it (-1: none)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


class _Batch(NamedTuple):  # a NamedTuple: made once per append, a frozen dataclass costs 3x
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int


class ProducerStateEntry:
    """One producer's state (Kafka's ProducerStateEntry); -1 fields mean none."""

    __slots__ = (
        "producer_id",
        "epoch",
        "batches",
        "coordinator_epoch",
        "current_txn_first_offset",
        "last_timestamp",
    )

    def __init__(
        self,
        producer_id: int,
        epoch: int = rb.NO_PRODUCER_EPOCH,
        coordinator_epoch: int = -1,
        current_txn_first_offset: int = -1,
        last_timestamp: int = -1,
    ) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: deque[_Batch] = deque(maxlen=BATCHES_KEPT)
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = current_txn_first_offset
        self.last_timestamp = last_timestamp

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else rb.NO_SEQUENCE

    def _maybe_update_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch

    def find_duplicate(self, epoch: int, first_sequence: int, last_sequence: int) -> _Batch | None:
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch[0] == first_sequence and batch[1] == last_sequence:
                return batch
        return None


def _in_sequence(last: int, first: int) -> bool:
    return first == last + 1 or (first == 0 and last == _INT32_MAX)


class ProducerAppendInfo:
    """The changes one append makes to one producer, checked against its current entry and
    kept apart until :meth:`ProducerStateManager.update` applies them (Kafka's
    ProducerAppendInfo; the fields are the updated entry's, ``batches`` those added).
    ``client``: a producer's own batches (every check), else a follower's copy or a replay of
    the log (no sequence checks; stale epochs accepted)."""

    __slots__ = (
        "producer_id",
        "_current",
        "epoch",
        "batches",
        "coordinator_epoch",
        "current_txn_first_offset",
        "last_timestamp",
        "started",
        "_client",
        "_where",
    )

    def __init__(
        self, producer_id: int, current: ProducerStateEntry | None, *, client: bool, where: str
    ) -> None:
        self.producer_id = producer_id
        self._current = current
        if current is None:
            self.epoch = rb.NO_PRODUCER_EPOCH
            self.coordinator_epoch = self.current_txn_first_offset = self.last_timestamp = -1
        else:
            self.epoch = current.epoch
            self.coordinator_epoch = current.coordinator_epoch
            self.current_txn_first_offset = current.current_txn_first_offset
            self.last_timestamp = current.last_timestamp
        self.batches: list[_Batch] = []
        self.started: list[int] = []  # first offsets of the transactions this append starts
        self._client = client
        self._where = where

    def _update_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.batches = []
            self.epoch = epoch

    def _check_epoch(self, epoch: int, offset: int) -> None:
        if epoch < self.epoch and self._client:
            raise InvalidProducerEpochError(
                f"{self._where}: producer {self.producer_id} epoch {epoch} at offset {offset} "
                f"is older than its current epoch {self.epoch}: another producer with "
                f"this id has taken over"
            )

    def _check_sequence(self, epoch: int, first_sequence: int, offset: int) -> None:
        if epoch != self.epoch:
            if first_sequence != 0 and self.epoch != rb.NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"{self._where}: producer {self.producer_id} started epoch {epoch} at "
                    f"sequence {first_sequence} (offset {offset}), not 0; its current epoch is "
                    f"{self.epoch}"
                )
            return
        current = self._current
        if self.batches:
            last = self.batches[-1].last_sequence
        elif current is not None and epoch == current.epoch:
            last = current.last_sequence
        else:
            last = rb.NO_SEQUENCE
        # An unknown producer (its state lost to retention or DeleteRecords) may start anywhere.
        if (
            current is not None
            and current.epoch != rb.NO_PRODUCER_EPOCH
            and not _in_sequence(last, first_sequence)
        ):
            raise OutOfOrderSequenceError(
                f"{self._where}: producer {self.producer_id} epoch {epoch} sent sequence "
                f"{first_sequence} (offset {offset}) after {last}; a batch in between is missing"
            )

    def append_data(
        self,
        epoch: int,
        first_sequence: int,
        last_sequence: int,
        first_offset: int,
        last_offset: int,
        max_timestamp: int,
        is_transactional: bool,
    ) -> None:
        """Check and add a data batch; raises a :class:`ProducerStateError`."""
        self._check_epoch(epoch, first_offset)
        if self._client:
            self._check_sequence(epoch, first_sequence, first_offset)
        if self.current_txn_first_offset >= 0 and not is_transactional:
            raise InvalidTxnStateError(
                f"{self._where}: producer {self.producer_id} sent a non-transactional batch "
                f"(offset {first_offset}) while its transaction from offset "
                f"{self.current_txn_first_offset} is ongoing; commit or abort it first"
            )
        self._update_epoch(epoch)
        self.batches.append(
            _Batch(first_sequence, last_sequence, first_offset, last_offset, max_timestamp)
        )
        self.last_timestamp = max_timestamp
        if self.current_txn_first_offset < 0 and is_transactional:
            self.current_txn_first_offset = first_offset
            self.started.append(first_offset)

    def append_marker(
        self, epoch: int, coordinator_epoch: int, offset: int, timestamp: int, commit: bool
    ) -> CompletedTxn | None:
        """Check and add an end-transaction marker at ``offset``; the transaction it completes,
        None when the producer had none ongoing. Raises a :class:`ProducerStateError`."""
        self._check_epoch(epoch, offset)
        if self.coordinator_epoch > coordinator_epoch and self._client:
            raise TransactionCoordinatorFencedError(
                f"{self._where}: marker for producer {self.producer_id} at offset {offset} comes "
                f"from coordinator epoch {coordinator_epoch}, older than the current "
                f"{self.coordinator_epoch}: a replaced transaction coordinator"
            )
        completed = None
        if self.current_txn_first_offset >= 0:
            completed = CompletedTxn(
                self.producer_id, self.current_txn_first_offset, offset, not commit
            )
        self._update_epoch(epoch)
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = -1
        self.last_timestamp = timestamp
        return completed

    def append_stored(self, buf: Buffer, position: int, h: rb.BatchHeader) -> CompletedTxn | None:
        """Add a batch as stored in a log (a follower's copy, a replay); the transaction a
        marker completes."""
        if h.is_control:
            marker = rb.stored_end_txn_marker(buf, position, h)
            if marker is None:
                return None  # emptied by the cleaner: its transaction is gone too
            return self.append_marker(
                h.producer_epoch,
                marker.coordinator_epoch,
                h.base_offset,
                h.max_timestamp,
                marker.commit,
            )
        self.append_data(
            h.producer_epoch,
            h.base_sequence,
            h.last_sequence,
            h.base_offset,
            h.last_offset,
            h.max_timestamp,
            h.is_transactional,
        )
        return None


class ProducerStateManager:
    """The producers and transactions of one partition; see the module docstring. Not
    thread-safe: callers hold the partition lock. ``where`` names the partition in errors."""

    def __init__(self, where: str = "") -> None:
        self.where = where
        self._producers: dict[int, ProducerStateEntry] = {}
        # first offset -> producer id of each ongoing transaction, in offset order
        self._ongoing: dict[int, int] = {}
        # first offset -> marker offset of completed transactions the high watermark has not
        # passed yet (Kafka's unreplicatedTxns)
        self._unreplicated: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._producers)

    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    # -- checking and recording -------------------------------------------------------------
    def prepare_update(self, producer_id: int, *, client: bool) -> ProducerAppendInfo:
        return ProducerAppendInfo(
            producer_id, self._producers.get(producer_id), client=client, where=self.where
        )

    def find_duplicate(
        self, producer_id: int, epoch: int, first_sequence: int, last_sequence: int
    ) -> Duplicate | None:
        """The stored batch a client's batch repeats (same epoch and sequences), if any."""
        entry = self._producers.get(producer_id)
        batch = entry and entry.find_duplicate(epoch, first_sequence, last_sequence)
        if not batch:
            return None
        return Duplicate(batch.first_offset, batch.last_offset, batch.max_timestamp)

    def prepare_client_append(
        self, batches: Sequence[ProducerBatch]
    ) -> list[ProducerAppendInfo] | Duplicate:
        """Check a client's batches (in offset order) without recording anything: the changes
        to apply after the append, or the :class:`Duplicate` a lone retried batch is. Raises a
        :class:`ProducerStateError` (:class:`DuplicateSequenceError` for a duplicate among
        several batches)."""
        infos: dict[int, ProducerAppendInfo] = {}
        for b in batches:
            pid = b.producer_id
            entry = self._producers.get(pid)
            stored = entry and entry.find_duplicate(
                b.producer_epoch, b.base_sequence, b.last_sequence
            )
            if stored:
                if len(batches) == 1:
                    return Duplicate(stored.first_offset, stored.last_offset, stored.max_timestamp)
                raise DuplicateSequenceError(
                    f"{self.where}: batch of producer {pid} sequences "
                    f"{b.base_sequence}..{b.last_sequence} is already stored, among other batches"
                )
            info = infos.get(pid)
            if info is None:
                info = infos[pid] = ProducerAppendInfo(pid, entry, client=True, where=self.where)
            info.append_data(
                b.producer_epoch,
                b.base_sequence,
                b.last_sequence,
                b.first_offset,
                b.last_offset,
                b.max_timestamp,
                b.is_transactional,
            )
        return list(infos.values())

    def check(
        self,
        producer_id: int,
        epoch: int,
        first_sequence: int,
        last_sequence: int,
        *,
        is_transactional: bool = False,
    ) -> Duplicate | None:
        """What appending one client batch would meet, recording nothing: a
        :class:`Duplicate`, None when it may be appended, else the :class:`ProducerStateError`
        raised."""
        duplicate = self.find_duplicate(producer_id, epoch, first_sequence, last_sequence)
        if duplicate is None:
            self.prepare_update(producer_id, client=True).append_data(
                epoch, first_sequence, last_sequence, 0, 0, -1, is_transactional
            )
        return duplicate

    def update(self, info: ProducerAppendInfo) -> None:
        """Apply an append's checked changes to its producer (Kafka's update)."""
        entry = self._producers.get(info.producer_id)
        if entry is None:
            entry = self._producers[info.producer_id] = ProducerStateEntry(info.producer_id)
        entry._maybe_update_epoch(info.epoch)
        entry.batches.extend(info.batches)
        entry.coordinator_epoch = info.coordinator_epoch
        entry.current_txn_first_offset = info.current_txn_first_offset
        entry.last_timestamp = info.last_timestamp
        for first_offset in info.started:
            self._ongoing[first_offset] = info.producer_id

    def last_stable_offset(self, txn: CompletedTxn) -> int:
        """The LSO once ``txn`` is complete, before :meth:`complete_txn` (what its .txnindex
        entry records): the first offset of the oldest transaction of another producer still
        ongoing, else one past the marker."""
        for first_offset, producer_id in self._ongoing.items():
            if producer_id != txn.producer_id:
                return first_offset
        return txn.last_offset + 1

    def complete_txn(self, txn: CompletedTxn) -> None:
        """Move a completed transaction from ongoing to unreplicated."""
        if self._ongoing.pop(txn.first_offset, None) is None:
            raise ValueError(
                f"{self.where}: transaction of producer {txn.producer_id} from offset "
                f"{txn.first_offset} completed but was never started"
            )
        self._unreplicated[txn.first_offset] = txn.last_offset

    def replay(self, buf: Buffer, position: int, h: rb.BatchHeader) -> CompletedTxn | None:
        """Record a stored batch with a producer id (a follower's copy or a replay of the
        log); the transaction a marker completed, which the caller indexes then passes to
        :meth:`complete_txn`."""
        info = self.prepare_update(h.producer_id, client=False)
        completed = info.append_stored(buf, position, h)
        self.update(info)
        return completed

    # -- transactions ------------------------------------------------------------------------
    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the oldest ongoing transaction or of the oldest completed one
        whose marker is at or above ``high_watermark``; None when there is neither. Changes
        nothing (the broker reads it without the partition lock): each dict is copied at once,
        under the GIL."""
        if not self._unreplicated and not self._ongoing:  # most partitions: one look each
            return None
        candidates = [f for f, last in list(self._unreplicated.items()) if last >= high_watermark]
        candidates += list(self._ongoing)[:1]
        return min(candidates) if candidates else None

    def forget_replicated(self, high_watermark: int) -> None:
        """Drop the completed transactions whose marker is below ``high_watermark`` (Kafka's
        onHighWatermarkUpdated)."""
        self._unreplicated = {
            first: last for first, last in self._unreplicated.items() if last >= high_watermark
        }

    def ongoing_transactions(self) -> list[tuple[int, int]]:
        """(first offset, producer id) of each ongoing transaction, oldest first."""
        return list(self._ongoing.items())

    # -- reporting ---------------------------------------------------------------------------
    def active_producers(self) -> list[ProducerInfo]:
        """Every producer, by producer id, as DescribeProducers shows them (Kafka's
        activeProducers)."""
        return [
            ProducerInfo(
                pid,
                e.epoch,
                e.last_sequence,
                e.last_timestamp,
                e.coordinator_epoch,
                e.current_txn_first_offset,
            )
            for pid, e in sorted(self._producers.items())
        ]

    def last_batches(self) -> list[tuple[int, int, int, int, int, int]]:
        """(producer_id, epoch, first_sequence, last_sequence, last_offset, max_timestamp) of
        each producer's last batch, by producer id (producers with a batch only)."""
        return [
            (
                pid,
                e.epoch,
                e.batches[-1].first_sequence,
                e.batches[-1].last_sequence,
                e.batches[-1].last_offset,
                e.batches[-1].max_timestamp,
            )
            for pid, e in sorted(self._producers.items())
            if e.batches
        ]

    # -- snapshots ---------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        """The state in Kafka's snapshot format (each producer's last batch)."""
        entries = bytearray()
        for producer_id, e in sorted(self._producers.items()):
            last = e.batches[-1] if e.batches else None
            entries += _SNAPSHOT_ENTRY.pack(
                producer_id,
                e.epoch,
                last.last_sequence if last else rb.NO_SEQUENCE,
                last.last_offset if last else -1,
                last.last_offset - last.first_offset if last else 0,
                e.last_timestamp,
                e.coordinator_epoch,
                e.current_txn_first_offset,
            )
        body = struct.pack(">i", len(self._producers)) + entries
        return struct.pack(">hI", _SNAPSHOT_VERSION, crc32c(body)) + body

    @classmethod
    def from_snapshot(cls, data: bytes, where: str = "") -> "ProducerStateManager":
        """The state a snapshot holds; raises :class:`CorruptSnapshotError`."""
        if len(data) < _SNAPSHOT_HEAD.size:
            raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is shorter than its header")
        version, crc, count = _SNAPSHOT_HEAD.unpack_from(data)
        if version != _SNAPSHOT_VERSION:
            raise CorruptSnapshotError(f"snapshot version {version}, only 1 is known")
        if crc32c(data[6:]) != crc:
            raise CorruptSnapshotError("snapshot fails its CRC-32C check")
        if count < 0 or len(data) != _SNAPSHOT_HEAD.size + count * _SNAPSHOT_ENTRY.size:
            raise CorruptSnapshotError(f"snapshot of {len(data)} bytes cannot hold {count} entries")
        state = cls(where)
        ongoing = []
        for i in range(count):
            (
                producer_id,
                epoch,
                last_sequence,
                last_offset,
                offset_delta,
                timestamp,
                coordinator_epoch,
                txn_first_offset,
            ) = _SNAPSHOT_ENTRY.unpack_from(data, _SNAPSHOT_HEAD.size + i * _SNAPSHOT_ENTRY.size)
            entry = ProducerStateEntry(
                producer_id, epoch, coordinator_epoch, txn_first_offset, timestamp
            )
            if last_offset >= 0:
                entry.batches.append(
                    _Batch(
                        (last_sequence - offset_delta) & 0x7FFFFFFF,
                        last_sequence,
                        last_offset - offset_delta,
                        last_offset,
                        timestamp,
                    )
                )
            state._producers[producer_id] = entry
            if txn_first_offset >= 0:
                ongoing.append((txn_first_offset, producer_id))
        state._ongoing = dict(sorted(ongoing))
        return state
