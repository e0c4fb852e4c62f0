"""Idempotent producers' state for one partition (KIP-98 without transactions), as Kafka 3.9's
ProducerStateManager / ProducerAppendInfo keep it.

Per producer id: its epoch and the metadata of its last five appended batches (first and last
sequence, first and last offset, max timestamp). A batch is checked before it is appended:

- one equal (same first and last sequence) to one of the last five is a duplicate, a producer's
  retry of a batch already stored: the broker answers with the original offsets and stores
  nothing (:class:`Duplicate`);
- an epoch below the producer's -> :class:`InvalidProducerEpochError` (INVALID_PRODUCER_EPOCH);
- a new epoch must start at sequence 0, unless the producer is unknown here (its state was lost,
  e.g. to retention): then any sequence is accepted, as Kafka does;
- otherwise the first sequence must follow the last one (int32 wrap-around to 0) ->
  :class:`OutOfOrderSequenceError` (OUT_OF_ORDER_SEQUENCE_NUMBER).

Snapshots: at every roll and at close the Log writes the state to ``<20-digit offset>.snapshot``
in Kafka's format (ProducerStateManager.writeSnapshot, version 1); when it opens it loads the
newest one and replays the batch headers after it, so a start does not rescan the whole log.
As in Kafka, a snapshot keeps each producer's last batch only::

    version int16 (1), crc uint32 (CRC-32C of everything after it),
    count int32, count x entry:
      producer_id int64, epoch int16, last_sequence int32, last_offset int64,
      offset_delta int32 (last - first offset), timestamp int64,
      coordinator_epoch int32 (-1), current_txn_first_offset int64 (-1)     46 bytes
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass
from typing import Iterable

from crc32c import crc32c

from storage.errors import StorageError

__all__ = [
    "ProducerStateManager",
    "Duplicate",
    "ProducerStateError",
    "OutOfOrderSequenceError",
    "InvalidProducerEpochError",
    "CorruptSnapshotError",
    "BATCHES_KEPT",
    "SNAPSHOT_SUFFIX",
]

SNAPSHOT_SUFFIX = ".snapshot"
_SNAPSHOT_VERSION = 1
_SNAPSHOT_HEAD = struct.Struct(">hIi")  # version, crc, count: 10 bytes
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")  # 46 bytes, see the module docstring

BATCHES_KEPT = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
_INT32_MAX = 2**31 - 1


class ProducerStateError(StorageError):
    """Base of the idempotence errors; ``error_name`` is the Kafka error code's name."""

    error_name = ""


class OutOfOrderSequenceError(ProducerStateError):
    """Raised by :meth:`ProducerStateManager.check` when a batch's first sequence does not follow
    the producer's last one (or a new epoch does not start at 0): a batch was lost in between,
    and the producer must not go on as if it had not."""

    error_name = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class InvalidProducerEpochError(ProducerStateError):
    """Raised by :meth:`ProducerStateManager.check` for a batch from an older epoch of a producer
    id than one already seen: a fenced, zombie producer."""

    error_name = "INVALID_PRODUCER_EPOCH"


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
class _Batch:
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int


class _Producer:
    __slots__ = ("epoch", "batches")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.batches: deque[_Batch] = deque(maxlen=BATCHES_KEPT)


def _in_sequence(last: int, first: int) -> bool:
    return first == last + 1 or (first == 0 and last == _INT32_MAX)


class ProducerStateManager:
    """The producers of one partition; see the module docstring. Not thread-safe: callers hold
    the partition lock."""

    def __init__(self) -> None:
        self._producers: dict[int, _Producer] = {}

    def __len__(self) -> int:
        return len(self._producers)

    def check(
        self, producer_id: int, epoch: int, first_sequence: int, last_sequence: int
    ) -> Duplicate | None:
        """Check a batch before it is appended: a :class:`Duplicate` of a stored batch, None when
        it may be appended; raises :class:`InvalidProducerEpochError` or
        :class:`OutOfOrderSequenceError` otherwise."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return None
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {epoch} is older than its current epoch "
                f"{entry.epoch}: another producer with this id has taken over"
            )
        if epoch > entry.epoch:
            if first_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"producer {producer_id} started epoch {epoch} at sequence {first_sequence}, "
                    f"not 0"
                )
            return None
        for batch in entry.batches:
            if (batch.first_sequence, batch.last_sequence) == (first_sequence, last_sequence):
                return Duplicate(batch.first_offset, batch.last_offset, batch.max_timestamp)
        if entry.batches and not _in_sequence(entry.batches[-1].last_sequence, first_sequence):
            raise OutOfOrderSequenceError(
                f"producer {producer_id} epoch {epoch} sent sequence {first_sequence} after "
                f"{entry.batches[-1].last_sequence}; a batch in between is missing"
            )
        return None

    def update(
        self,
        producer_id: int,
        epoch: int,
        first_sequence: int,
        last_sequence: int,
        first_offset: int,
        last_offset: int,
        max_timestamp: int,
    ) -> None:
        """Record an appended batch (or one found in the log while rebuilding)."""
        entry = self._producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = self._producers[producer_id] = _Producer(epoch)
        entry.batches.append(
            _Batch(first_sequence, last_sequence, first_offset, last_offset, max_timestamp)
        )

    def rebuild(self, batches: Iterable[tuple[int, int, int, int, int, int, int]]) -> None:
        """Replay ``(producer_id, epoch, first_sequence, last_sequence, first_offset,
        last_offset, max_timestamp)`` of stored batches in offset order (on top of a loaded
        snapshot, or of nothing)."""
        for batch in batches:
            self.update(*batch)

    def last_batches(self) -> list[tuple[int, int, int, int, int, int]]:
        """(producer_id, epoch, first_sequence, last_sequence, last_offset, max_timestamp) of
        each producer's last batch, by producer id (what a snapshot keeps)."""
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

    def snapshot(self) -> bytes:
        """The state in Kafka's snapshot format (each producer's last batch)."""
        entries = bytearray()
        last_batches = self.last_batches()
        for producer_id, epoch, first_sequence, last_sequence, last_offset, ts in last_batches:
            first_offset = self._producers[producer_id].batches[-1].first_offset
            entries += _SNAPSHOT_ENTRY.pack(
                producer_id,
                epoch,
                last_sequence,
                last_offset,
                last_offset - first_offset,
                ts,
                -1,
                -1,
            )
        body = struct.pack(">i", len(last_batches)) + entries
        return struct.pack(">hI", _SNAPSHOT_VERSION, crc32c(body)) + body

    @classmethod
    def from_snapshot(cls, data: bytes) -> "ProducerStateManager":
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
        state = cls()
        for i in range(count):
            (producer_id, epoch, last_sequence, last_offset, offset_delta, timestamp, _, _) = (
                _SNAPSHOT_ENTRY.unpack_from(data, _SNAPSHOT_HEAD.size + i * _SNAPSHOT_ENTRY.size)
            )
            first_sequence = (last_sequence - offset_delta) & 0x7FFFFFFF
            state.update(
                producer_id,
                epoch,
                first_sequence,
                last_sequence,
                last_offset - offset_delta,
                last_offset,
                timestamp,
            )
        return state
