"""The aborted-transaction index of one log segment, ``<base offset>.txnindex`` (KIP-98), as
Kafka's TransactionIndex / AbortedTxn keep it.

One entry per aborted transaction whose ABORT marker is in the segment, in marker order (so
``last_offset`` strictly increases). Binary format, big-endian, no header::

    version int16 (0), producer_id int64, first_offset int64 (the transaction's first offset),
    last_offset int64 (its ABORT marker's offset), last_stable_offset int64 (the partition's
    LSO once the marker was written: the first offset of the oldest other ongoing
    transaction, else last_offset + 1)                                              34 bytes

A read_committed fetch from offset F up to U is sent every entry with ``last_offset >= F`` and
``first_offset < U``, collected segment after segment from the one holding F until an entry's
``last_stable_offset >= U`` (no transaction still open at U started earlier).

The file is created with its first entry (a segment without aborts has none), renamed and
deleted with its segment, cut by truncation and rebuilt by recovery (storage/log.py replays the
producer state over the segment). Resources: no descriptor is kept (an append opens the file,
writes 34 bytes, closes it); the entries are read into memory on first use. Errors:
CorruptIndexError for a file that is not whole version-0 entries in order (the Log rebuilds
it from the log); OSError from the file system propagates, an append that fails leaves the
file as it was.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from storage.durable import fsync_dir, fsync_file
from storage.errors import CorruptIndexError

__all__ = ["AbortedTxn", "TransactionIndex", "ENTRY"]

ENTRY = struct.Struct(">hqqqq")  # 34 bytes, see the module docstring
_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: Kafka's AbortedTxn (a read_committed Fetch answers with
    ``producer_id`` and ``first_offset``)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def pack(self) -> bytes:
        return ENTRY.pack(
            _VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


def parse(data: bytes, path: str, base_offset: int) -> list[AbortedTxn]:
    """The entries of a .txnindex file's bytes; CorruptIndexError unless they are whole
    version-0 entries whose last offsets increase from ``base_offset`` on."""
    if len(data) % ENTRY.size:
        raise CorruptIndexError(
            f"transaction index {path} is {len(data)} bytes, not a multiple of the "
            f"{ENTRY.size}-byte entry size"
        )
    entries = []
    previous = base_offset - 1
    for position in range(0, len(data), ENTRY.size):
        version, producer_id, first, last, lso = ENTRY.unpack_from(data, position)
        if version != _VERSION or last <= previous or first > last:
            raise CorruptIndexError(
                f"transaction index {path} entry at byte {position} (version {version}, "
                f"producer {producer_id}, offsets {first}..{last}, last stable offset {lso}) is "
                f"not a version-0 entry following the previous one (last offset {previous})"
            )
        entries.append(AbortedTxn(producer_id, first, last, lso))
        previous = last
    return entries


class TransactionIndex:
    """The .txnindex of the segment at ``base_offset``; see the module docstring."""

    __slots__ = ("path", "base_offset", "_entries", "_unsynced")

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None
        self._unsynced = False  # appended since the last flush (the file may be new)

    @property
    def entries(self) -> list[AbortedTxn]:
        """Every entry, read from the file on first use (CorruptIndexError)."""
        if self._entries is None:
            try:
                with open(self.path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                data = b""
            self._entries = parse(data, self.path, self.base_offset)
        return self._entries

    @property
    def last_offset(self) -> int:
        """The last entry's marker offset, -1 when there is none."""
        entries = self.entries
        return entries[-1].last_offset if entries else -1

    def append(self, txn: AbortedTxn) -> None:
        """Add an aborted transaction whose marker follows every entry's (ValueError if not, a
        caller bug). OSError leaves the file and the entries as they were."""
        entries = self.entries
        if txn.last_offset <= self.last_offset or txn.last_offset < self.base_offset:
            raise ValueError(
                f"transaction index {self.path}: aborted transaction ending at {txn.last_offset} "
                f"does not follow the last entry's {self.last_offset}"
            )
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            position = len(entries) * ENTRY.size
            data = txn.pack()
            try:
                if os.pwrite(fd, data, position) != len(data):
                    raise OSError(f"short write to {self.path}")
            except OSError:
                os.ftruncate(fd, position)
                raise
        finally:
            os.close(fd)
        entries.append(txn)
        self._unsynced = True

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """(entries overlapping [fetch_offset, upper_bound), whether the search is complete: an
        entry's last stable offset reached ``upper_bound``), Kafka's collectAbortedTxns."""
        found = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset``."""
        entries = self.entries
        keep = next((i for i, t in enumerate(entries) if t.last_offset >= offset), len(entries))
        if keep == len(entries):
            return
        if keep == 0:
            self.delete()
            self._entries = []
            return
        os.truncate(self.path, keep * ENTRY.size)
        del entries[keep:]

    def reset(self) -> None:
        """Remove every entry and the file (recovery rebuilds them)."""
        self.delete()
        self._entries = []

    def sanity_check(self) -> None:
        """Read the file now: CorruptIndexError if it is damaged."""
        self._entries = None
        _ = self.entries

    def flush(self) -> None:
        """fsync what was appended since the last flush (and the directory entry of a file
        created meanwhile)."""
        if self._unsynced and os.path.exists(self.path):
            fsync_file(self.path)
            fsync_dir(os.path.dirname(self.path))
        self._unsynced = False

    def rename(self, path: str) -> None:
        """Rename the file (if there is one) to ``path``, which names it from now on."""
        if os.path.exists(self.path):
            os.rename(self.path, path)
        self.path = path

    def delete(self) -> None:
        """Remove the file, if there is one; the entries are read again on next use."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self._entries = None
        self._unsynced = False

    def close(self) -> None:
        """Drop the entries from memory (read again on next use)."""
        self._entries = None
