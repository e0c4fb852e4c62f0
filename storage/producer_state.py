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

The state is rebuilt from the log's batch headers (:meth:`rebuild`): after a restart or a
truncation the Log scans its segments once, so a retry after a crash is still recognised. Kafka
bounds that scan with ``.snapshot`` files; chronolog does not write them yet.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterable

from storage.errors import StorageError

__all__ = ["ProducerStateManager", "Duplicate", "ProducerStateError", "OutOfOrderSequenceError",
           "InvalidProducerEpochError", "BATCHES_KEPT"]

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

    def check(self, producer_id: int, epoch: int, first_sequence: int,
              last_sequence: int) -> Duplicate | None:
        """Check a batch before it is appended: a :class:`Duplicate` of a stored batch, None when
        it may be appended; raises :class:`InvalidProducerEpochError` or
        :class:`OutOfOrderSequenceError` otherwise."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return None
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {epoch} is older than its current epoch "
                f"{entry.epoch}: another producer with this id has taken over")
        if epoch > entry.epoch:
            if first_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"producer {producer_id} started epoch {epoch} at sequence {first_sequence}, "
                    f"not 0")
            return None
        for batch in entry.batches:
            if (batch.first_sequence, batch.last_sequence) == (first_sequence, last_sequence):
                return Duplicate(batch.first_offset, batch.last_offset, batch.max_timestamp)
        if entry.batches and not _in_sequence(entry.batches[-1].last_sequence, first_sequence):
            raise OutOfOrderSequenceError(
                f"producer {producer_id} epoch {epoch} sent sequence {first_sequence} after "
                f"{entry.batches[-1].last_sequence}; a batch in between is missing")
        return None

    def update(self, producer_id: int, epoch: int, first_sequence: int, last_sequence: int,
               first_offset: int, last_offset: int, max_timestamp: int) -> None:
        """Record an appended batch (or one found in the log while rebuilding)."""
        entry = self._producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = self._producers[producer_id] = _Producer(epoch)
        entry.batches.append(_Batch(first_sequence, last_sequence, first_offset, last_offset,
                                    max_timestamp))

    def rebuild(self, batches: Iterable[tuple[int, int, int, int, int, int, int]]) -> None:
        """Forget everything, then replay ``(producer_id, epoch, first_sequence, last_sequence,
        first_offset, last_offset, max_timestamp)`` of every stored batch in offset order."""
        self._producers.clear()
        for batch in batches:
            self.update(*batch)
