"""A partition's leader epochs (KIP-101 / KIP-279): ``leader-epoch-checkpoint`` in its directory.

Each entry says "leader epoch E started at offset O": the first offset written by the leader of
epoch E. Replicas use them after a leader change to find where their log and the new leader's
part (OffsetForLeaderEpoch), instead of truncating to the high watermark, which can lose
acknowledged messages or leave replicas diverged (KIP-101's scenarios).

File format (Kafka's LeaderEpochCheckpointFile, version 0), text, one item a line::

    0                      version
    <n>                    number of entries
    <epoch> <start offset> n times, epochs and offsets increasing

Every change is written atomically (storage.durable.write_atomically: temporary file, fsync,
rename, directory fsync), so a crash leaves the old or the new file. Changes are rare (a leader
change, a truncation, the log start moving past an epoch), never one per append.

Semantics follow Kafka 3.9's LeaderEpochFileCache. Errors: OSError from the file system
propagates; a malformed file raises CorruptEpochCheckpointError when loaded.
"""

from __future__ import annotations

import bisect
import os
from typing import NamedTuple

from storage.durable import write_atomically
from storage.errors import StorageError

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
_VERSION = 0


class CorruptEpochCheckpointError(StorageError):
    """Raised when a leader-epoch-checkpoint file does not follow the format; the Log then
    starts with an empty cache (as after a checkpoint lost to a crash) and logs why."""


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class EpochEndOffset(NamedTuple):
    """OffsetForLeaderEpoch's answer: the largest epoch <= the one asked and the offset where
    it ended (UNDEFINED_* when the cache cannot tell)."""

    epoch: int
    end_offset: int


class LeaderEpochCache:
    """The epochs of one partition, in memory and in ``<directory>/leader-epoch-checkpoint``.

    Not thread-safe: used under its Log's partition lock like every Log call."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, LEADER_EPOCH_CHECKPOINT)
        self._entries: list[EpochEntry] = []

    def load(self) -> None:
        """Read the file (absent: no entries). Raises CorruptEpochCheckpointError."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            self._entries = []
            return
        self._entries = _parse(raw, self.path)

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        """The newest epoch, UNDEFINED_EPOCH without any."""
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` (a leader at its election, or a
        follower appending the first batch of a newer epoch). Entries it contradicts (an epoch
        >= ``epoch`` or a start offset >= ``start_offset``) are dropped first, as Kafka does.
        Returns whether anything changed (and was written)."""
        if epoch < 0:
            return False
        latest = self._entries[-1] if self._entries else None
        if latest is not None and latest.epoch == epoch and latest.start_offset <= start_offset:
            return False
        self._entries = [
            e for e in self._entries if e.epoch < epoch and e.start_offset < start_offset
        ]
        self._entries.append(EpochEntry(epoch, start_offset))
        self._write()
        return True

    def end_offset_for(self, requested: int, log_end_offset: int) -> EpochEndOffset:
        """Kafka's endOffsetFor: (the largest epoch <= ``requested``, the start offset of the
        first epoch after it, or ``log_end_offset`` when ``requested`` is the latest).
        UNDEFINED for an undefined request, an empty cache, or an epoch above every one known;
        an epoch below the first known answers (``requested``, the first start offset)."""
        if requested == UNDEFINED_EPOCH or not self._entries:
            return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        if self._entries[-1].epoch == requested:
            return EpochEndOffset(requested, log_end_offset)
        epochs = [e.epoch for e in self._entries]
        higher = bisect.bisect_right(epochs, requested)
        if higher == len(self._entries):
            return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        if higher == 0:
            return EpochEndOffset(requested, self._entries[0].start_offset)
        return EpochEndOffset(self._entries[higher - 1].epoch, self._entries[higher].start_offset)

    def truncate_from_end(self, end_offset: int) -> bool:
        """The log was cut at ``end_offset``: drop the epochs starting at or after it."""
        kept = [e for e in self._entries if e.start_offset < end_offset]
        if len(kept) == len(self._entries):
            return False
        self._entries = kept
        self._write()
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at ``start_offset``: drop the epochs wholly before it and move
        the start of the one holding it up to it."""
        before = [e for e in self._entries if e.start_offset <= start_offset]
        if not before or (len(before) == 1 and before[0].start_offset == start_offset):
            return False
        self._entries = [EpochEntry(before[-1].epoch, start_offset)] + [
            e for e in self._entries if e.start_offset > start_offset
        ]
        self._write()
        return True

    def clear(self) -> None:
        """Forget every epoch (the log was emptied)."""
        if self._entries or os.path.exists(self.path):
            self._entries = []
            self._write()

    def _write(self) -> None:
        lines = [str(_VERSION), str(len(self._entries))]
        lines += [f"{e.epoch} {e.start_offset}" for e in self._entries]
        write_atomically(self.path, ("\n".join(lines) + "\n").encode("ascii"))


def _parse(raw: bytes, path: str) -> list[EpochEntry]:
    try:
        lines = [line for line in raw.decode("ascii").splitlines() if line.strip()]
        if len(lines) < 2 or lines[0].strip() != str(_VERSION):
            raise ValueError("not a version-0 checkpoint")
        count = int(lines[1])
        if count != len(lines) - 2:
            raise ValueError(f"announces {count} entries but holds {len(lines) - 2}")
        entries: list[EpochEntry] = []
        for line in lines[2:]:
            epoch, offset = (int(x) for x in line.split())
            if epoch < 0 or offset < 0:
                raise ValueError(f"negative value in {line!r}")
            if entries and (epoch <= entries[-1].epoch or offset < entries[-1].start_offset):
                raise ValueError(f"entry {line!r} does not follow the one before it")
            entries.append(EpochEntry(epoch, offset))
        return entries
    except ValueError as exc:
        raise CorruptEpochCheckpointError(f"leader epoch checkpoint {path}: {exc}") from None
