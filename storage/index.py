"""Offset index (.index) and time index (.timeindex) of one log segment.

Binary formats (big-endian, fixed-size entries, no header):

* ``.index``: 8-byte entries ``int32 relative offset, int32 file position``; entry (r, p) says the
  message set holding offset ``base + r`` starts at byte p of the .log file. Sparse: one entry
  every index.interval.bytes. Offsets and positions strictly increase.
* ``.timeindex``: 12-byte entries ``int64 timestamp, int32 relative offset``; entry (T, r) says the
  largest timestamp of the messages up to and including offset ``base + r`` is T. Timestamps
  strictly increase, offsets never decrease, within one file.

Unlike Kafka, the files are never preallocated: they hold a prefix of their entries at all times,
never a zero tail that reads as timestamp 0 (KAFKA-10207), and an idle partition costs no mmap.
The active segment's entries are made in a bytearray mirror, which its lookups read; the entries
not yet in the file are written in one write(), through a descriptor opened for it, by ``flush``
(then fsynced), ``write_pending`` (a rebuild) and the segment's ``seal`` (roll, close). No index
descriptor stays open, so a written partition holds one descriptor, its .log's, as in Kafka (which
maps its indexes and closes their descriptors): 10,000 written partitions needed 30,000 when each
index kept its own, and an append paid two write() calls more. The file may thus lag the log;
the recovery point never passes an entry not yet written and fsynced (a Log's flush writes them
first), and the recovery after an unclean shutdown rebuilds the indexes from the recovery point
on. An inactive segment's index is read into memory on first lookup only. "Full" is still
defined by segment.index.bytes, as in Kafka, and the time index keeps one slot free for the entry
written when the segment is rolled or closed.
"""

from __future__ import annotations

import abc
import errno
import os
import struct
from typing import Callable, ClassVar

from storage.config import INT_MAX
from storage.errors import CorruptIndexError, InvalidAppendError
from storage import syscalls


class AbstractIndex(abc.ABC):
    """An index file with fixed-size entries sorted by offset.

    Resources: no descriptor held (each write, fsync or read opens and closes its own); the
    entries live in memory once loaded, the first ``_written`` bytes of them in the file too.
    Errors: CorruptIndexError when the file length is not a whole number of entries (the caller
    rebuilds); InvalidAppendError when an append would break ordering or the index is full;
    OSError from the file system propagates.
    """

    ENTRY: ClassVar[struct.Struct]
    KIND: ClassVar[str]
    RESERVED_SLOTS: ClassVar[int] = 0  # slots an append may not take
    __slots__ = ("path", "base_offset", "max_entries", "_data", "_written", "_dirty")

    def __init__(self, path: str, base_offset: int, max_index_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_index_bytes // self.ENTRY.size
        self._data: bytearray | None = None
        self._written = 0  # bytes of _data in the file (the file's length, once loaded)
        # Whether the file may have changes not yet fsynced; True until the first fsync, since
        # a rebuild or a truncation before this object existed may have left dirty pages.
        self._dirty = True

    # -- loading -----------------------------------------------------------------------------
    def _loaded(self) -> bytearray:
        if self._data is None:
            try:
                with open(self.path, "rb") as f:
                    data = bytearray(f.read())
            except FileNotFoundError:
                data = bytearray()
            if len(data) % self.ENTRY.size:
                raise CorruptIndexError(
                    f"{self.KIND} {self.path} is {len(data)} bytes, not a multiple of the "
                    f"{self.ENTRY.size}-byte entry size; it will be rebuilt from the log"
                )
            self._data = data
            self._written = len(data)
        return self._data

    def load(self) -> None:
        """Read the entries into memory now (CorruptIndexError for a partial entry)."""
        self._loaded()

    @property
    def is_loaded(self) -> bool:
        return self._data is not None

    @property
    def entries(self) -> int:
        if self._data is not None:
            return len(self._data) // self.ENTRY.size
        try:
            length = os.stat(self.path).st_size
        except FileNotFoundError:
            return 0
        if length % self.ENTRY.size:
            self._loaded()  # raises with the full message
        return length // self.ENTRY.size

    def _unpack(self, slot: int) -> tuple[int, int]:
        """Entry ``slot`` as stored; read from the file when not loaded, so a sanity check or
        a last-entry read costs one pread rather than a full load."""
        size = self.ENTRY.size
        if self._data is not None:
            return self.ENTRY.unpack_from(self._data, slot * size)
        with open(self.path, "rb") as f:
            raw = os.pread(f.fileno(), size, slot * size)
        if len(raw) != size:
            raise CorruptIndexError(f"{self.KIND} {self.path} shrank while being read")
        return self.ENTRY.unpack(raw)

    def is_full(self) -> bool:
        """No slot left for an append (asked before every set a log appends: the loaded
        entries are counted without the ``entries`` property's call)."""
        data = self._data
        entries = len(data) // self.ENTRY.size if data is not None else self.entries
        return entries >= self.max_entries - self.RESERVED_SLOTS

    def _relative(self, offset: int) -> int:
        relative = offset - self.base_offset
        if not 0 <= relative <= INT_MAX:
            raise InvalidAppendError(
                f"offset {offset} does not fit a {self.KIND} entry relative "
                f"to base offset {self.base_offset}"
            )
        return relative

    # -- writing -----------------------------------------------------------------------------
    def _write_entry(self, entry: bytes) -> None:
        """Append one entry to the mirror; ``write_pending`` puts it in the file."""
        self._loaded().extend(entry)

    def write_pending(self) -> None:
        """Append the entries not yet in the file, through a descriptor opened for it."""
        if self._data is None or self._written == len(self._data):
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            self._write_pending(fd)
        finally:
            os.close(fd)

    def _write_pending(self, fd: int) -> None:
        """The entries not yet in the file, in one write() to ``fd`` (opened O_APPEND). A
        failed or short write (a full disk) is cut off the file again, so no torn entry
        misaligns the ones after it, and raises OSError with the file as it was and the entries
        still pending (a later call retries them)."""
        data = self._data
        if data is None or self._written == len(data):
            return
        pending = bytes(data[self._written :])
        self._dirty = True
        try:
            if syscalls.write(fd, pending) != len(pending):
                raise OSError(errno.ENOSPC, f"short write of {self.KIND} entries", self.path)
        except OSError:
            os.ftruncate(fd, self._written)  # shrinking needs no free space
            raise
        self._written = len(data)

    def truncate_entries(self, count: int) -> None:
        """Keep the first ``count`` entries (an append undone, a truncation); the file is cut
        only when it holds more."""
        data = self._loaded()
        size = count * self.ENTRY.size
        if size < len(data):
            del data[size:]
        if size < self._written:
            os.truncate(self.path, size)
            self._written = size
            self._dirty = True

    def reset(self) -> None:
        """Drop every entry (before a rebuild); the file is emptied, or created."""
        self._data = bytearray()
        self._written = 0
        self._dirty = True
        with open(self.path, "wb"):
            pass

    def flush(self) -> None:
        """Write the pending entries and fsync the file, through one descriptor opened for it;
        nothing when nothing changed since the last fsync (most appends make no index entry:
        index.interval.bytes). A missing file without pending entries stays missing (a
        rebuild is due at the next start: LogSegment._indexes_refused)."""
        pending = self._data is not None and self._written < len(self._data)
        if not pending and not self._dirty:
            return
        try:
            fd = os.open(
                self.path, os.O_WRONLY | os.O_APPEND | (os.O_CREAT if pending else 0), 0o644
            )
        except FileNotFoundError:
            return
        try:
            self._write_pending(fd)
            syscalls.fsync(fd)
        finally:
            os.close(fd)
        self._dirty = False

    def close(self) -> None:
        """Forget the loaded entries (reloaded lazily from the file). Pending entries are
        dropped: a segment kept writes them first (``LogSegment.seal``); otherwise it is being
        deleted, or abandoned on a failing disk, whose next start recovers it."""
        self._data = None

    def rename(self, new_path: str) -> None:
        os.rename(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    # -- searching ---------------------------------------------------------------------------
    def _last_slot_where(self, predicate: Callable[[tuple[int, int]], bool]) -> int:
        """Index of the last entry e with predicate(e) true, -1 if none; predicate must be true
        for a prefix of the entries."""
        self._loaded()
        lo, hi = 0, self.entries - 1
        found = -1
        while lo <= hi:
            mid = (lo + hi) // 2
            if predicate(self.entry(mid)):
                found = mid
                lo = mid + 1
            else:
                hi = mid - 1
        return found

    @abc.abstractmethod
    def entry(self, slot: int) -> tuple[int, int]:
        """Entry ``slot`` decoded, with the offset made absolute."""


class OffsetIndex(AbstractIndex):
    """Sparse map offset -> position of the message set holding it (8-byte entries)."""

    ENTRY = struct.Struct(">ii")
    KIND = "offset index"
    __slots__ = ()

    def entry(self, slot: int) -> tuple[int, int]:
        """(absolute offset, position) of entry ``slot``."""
        relative, position = self._unpack(slot)
        return self.base_offset + relative, position

    def last_entry(self) -> tuple[int, int]:
        count = self.entries
        return self.entry(count - 1) if count else (self.base_offset, 0)

    def lookup(self, offset: int) -> tuple[int, int]:
        """The entry with the largest offset <= ``offset``, or (base offset, 0)."""
        slot = self._last_slot_where(lambda e: e[0] <= offset)
        return self.entry(slot) if slot >= 0 else (self.base_offset, 0)

    def fetch_upper_bound(self, end_position: int) -> int | None:
        """Kafka's fetchUpperBoundOffset: the offset of the first entry at or after
        ``end_position``, which no record of a read ending there reaches (an entry names the
        first offset of the set starting at its position); None when no entry is that far."""
        slot = self._last_slot_where(lambda e: e[1] < end_position) + 1
        return self.entry(slot)[0] if slot < self.entries else None

    def append(self, offset: int, position: int) -> None:
        if self.is_full():
            raise InvalidAppendError(
                f"{self.KIND} {self.path} is full ({self.max_entries} entries)"
            )
        last_offset, last_position = self.last_entry()
        if self.entries and (offset <= last_offset or position <= last_position):
            raise InvalidAppendError(
                f"{self.KIND} {self.path}: entry ({offset}, {position}) does not follow the "
                f"last entry ({last_offset}, {last_position})"
            )
        self._write_entry(self.ENTRY.pack(self._relative(offset), position))

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= ``offset``."""
        self.truncate_entries(self._last_slot_where(lambda e: e[0] < offset) + 1)

    def sanity_check(self, log_size: int) -> None:
        """Raise CorruptIndexError unless the entries are plausible for a log of ``log_size``
        bytes: Kafka's check plus bounds on the first and last entry, and, when the entries are
        loaded, strict ordering of all of them."""
        count = self.entries
        if not count:
            return
        first_offset, first_position = self.entry(0)
        last_offset, last_position = self.entry(count - 1)
        if first_offset <= self.base_offset:
            raise CorruptIndexError(
                f"{self.KIND} {self.path}: first entry offset {first_offset} "
                f"is not above the base offset {self.base_offset}"
            )
        if last_offset < first_offset or last_position < first_position:
            raise CorruptIndexError(
                f"{self.KIND} {self.path}: last entry ({last_offset}, "
                f"{last_position}) precedes the first ({first_offset}, "
                f"{first_position})"
            )
        if last_position >= log_size:
            raise CorruptIndexError(
                f"{self.KIND} {self.path}: last entry points at position "
                f"{last_position}, beyond the {log_size}-byte log"
            )
        if self._data is not None:  # loaded anyway: check every entry, not just the ends
            previous = (-1, -1)
            for entry in self.ENTRY.iter_unpack(self._data):
                if entry[0] <= previous[0] or entry[1] <= previous[1]:
                    raise CorruptIndexError(
                        f"{self.KIND} {self.path}: entry {entry} (relative "
                        f"offset, position) does not follow {previous}"
                    )
                previous = entry


class TimeIndex(AbstractIndex):
    """Sparse map timestamp -> offset (12-byte entries), monotonic within the file."""

    ENTRY = struct.Struct(">qi")
    KIND = "time index"
    RESERVED_SLOTS = 1  # for the entry appended when the segment is rolled or closed
    __slots__ = ()

    def entry(self, slot: int) -> tuple[int, int]:
        """(timestamp, absolute offset) of entry ``slot``."""
        timestamp, relative = self._unpack(slot)
        return timestamp, self.base_offset + relative

    def last_entry(self) -> tuple[int, int]:
        """The last entry, or (-1, base offset) when empty."""
        count = self.entries
        return self.entry(count - 1) if count else (-1, self.base_offset)

    def lookup_before(self, timestamp: int) -> tuple[int, int]:
        """The last entry with a timestamp strictly below ``timestamp``, or (-1, base offset).

        Strict, unlike Kafka's ``<=``: every message up to that entry's offset is then older than
        the target, so a scan from there cannot miss an earlier message with an equal timestamp.
        """
        slot = self._last_slot_where(lambda e: e[0] < timestamp)
        return self.entry(slot) if slot >= 0 else (-1, self.base_offset)

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        """Append (timestamp, offset) if the timestamp is above the last entry's."""
        if not skip_full_check and self.is_full():
            raise InvalidAppendError(
                f"{self.KIND} {self.path} is full ({self.max_entries} entries)"
            )
        last_timestamp, last_offset = self.last_entry()
        if self.entries and offset < last_offset:
            raise InvalidAppendError(
                f"{self.KIND} {self.path}: offset {offset} is below the "
                f"last entry's offset {last_offset}"
            )
        if timestamp > last_timestamp:
            if self.entries >= self.max_entries:
                raise InvalidAppendError(f"{self.KIND} {self.path} has no free slot")
            self._write_entry(self.ENTRY.pack(timestamp, self._relative(offset)))

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= ``offset``."""
        self.truncate_entries(self._last_slot_where(lambda e: e[1] < offset) + 1)

    def sanity_check(self) -> None:
        """Raise CorruptIndexError unless the first and last entries are in order (Kafka's
        check; a zero-padded tail fails it) and, when loaded, every entry is."""
        count = self.entries
        if not count:
            return
        first_timestamp, first_offset = self.entry(0)
        last_timestamp, last_offset = self.entry(count - 1)
        if first_offset < self.base_offset or last_offset < first_offset:
            raise CorruptIndexError(
                f"{self.KIND} {self.path}: entry offsets {first_offset}.."
                f"{last_offset} are out of order for base offset "
                f"{self.base_offset}"
            )
        if last_timestamp < first_timestamp:
            raise CorruptIndexError(
                f"{self.KIND} {self.path}: last timestamp {last_timestamp} is "
                f"below the first {first_timestamp}"
            )
        if self._data is not None:  # loaded anyway: check every entry, not just the ends
            previous = (-(2**63), -1)
            for entry in self.ENTRY.iter_unpack(self._data):
                if entry[0] <= previous[0] or entry[1] < previous[1]:
                    raise CorruptIndexError(
                        f"{self.KIND} {self.path}: entry {entry} (timestamp, "
                        f"relative offset) does not follow {previous}"
                    )
                previous = entry
