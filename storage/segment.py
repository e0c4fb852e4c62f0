"""One log segment: a .log file of message-set entries plus its .index and .timeindex, and
its .txnindex once an aborted transaction's marker is in it (storage/txn_index.py).

Writing: ``LogSegment.append`` is the one code path that writes a segment's data and its offset
and time index entries (index.interval.bytes), as Kafka's LogSegment.append is: the Log's
appends, the cleaner's ``.cleaned`` segments (``file_suffix``; storage/cleaner.py) and, for the
indexes alone, ``recover``; a segment that stops taking appends gets the final time index
entry (its max timestamp) from ``_append_final_time_entry``.

Resources: the .log file descriptor is opened on first use and stays open until the Log
releases it (roll, least-recently-read eviction), ``close`` or ``delete_files`` (it survives the
``.deleted`` rename, so a fetch in flight still reads); scans map the file read-only for their
own duration. The indexes hold no descriptor (storage/index.py): the active segment's entries
are made in memory and written to their files by ``flush`` and ``seal``, so a written partition
costs one descriptor, not three. The indexes of an inactive segment are loaded on first lookup. Errors: OSError from the file system propagates;
CorruptRecordError (protocol.errors) escapes reads only if the file was damaged after recovery.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, NamedTuple

import structlog

from protocol import recordbatch as rb
from protocol.errors import CorruptRecordError
from protocol.records import (
    LOG_OVERHEAD,
    Codec,
    ShallowEntry,
    batch_first_at,
    check_entry,
    iter_deep,
    iter_shallow,
)
from storage.durable import fsync_file
from storage.config import INT_MAX, LONG_MAX, LogConfig
from storage.errors import CorruptIndexError, is_disk_failure
from storage.index import OffsetIndex, TimeIndex
from storage.layout import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_path,
)
from storage.txn_index import TransactionIndex
from storage import syscalls

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

# offset int64, size int32: the 12-byte log overhead of an entry
_OFFSET_SIZE = struct.Struct(">qi")
_I32 = struct.Struct(">i")
# how many entries a read walks to end on a whole one (record batches are few per fetch)
TRIM_STEPS = 128
# smallest magic-1 message; smaller entries are left to iter_shallow's checks
_MIN_V1_SIZE = 22

logger = structlog.get_logger(__name__)


class TimestampOffset(NamedTuple):
    """Answer of a search by timestamp: the first message with timestamp >= the target."""

    timestamp: int
    offset: int


class RecoveryResult(NamedTuple):
    """What ``LogSegment.recover`` found: bytes scanned and kept, bytes cut off, and why."""

    valid_bytes: int
    truncated_bytes: int
    reason: str | None


def _write_all(
    fd: int, data: bytes | bytearray | memoryview, position: int, *, undo_to: int
) -> None:
    """Write all of ``data`` at ``position``; on failure cut the file back to ``undo_to`` bytes
    (ftruncate needs no free space) and re-raise, so a full disk leaves no partial entry."""
    try:
        written = syscalls.pwrite(fd, data, position)
        if written < len(data):  # a short write (rare): the rest from where it stopped
            view = memoryview(data)[written:]
            while view:
                position += written
                written = syscalls.pwrite(fd, view, position)
                view = view[written:]
    except OSError:
        os.ftruncate(fd, undo_to)
        raise


class LogSegment:
    """A segment starting at ``base_offset``; see the module docstring for resources."""

    __slots__ = (
        "base_offset",
        "config",
        "log_path",
        "offset_index",
        "time_index",
        "txn_index",
        "size",
        "max_timestamp",
        "offset_of_max_timestamp",
        "rolling_based_timestamp",
        "created_ms",
        "jitter_ms",
        "bytes_since_last_index_entry",
        "_fd",
    )

    def __init__(
        self,
        directory: str,
        base_offset: int,
        config: LogConfig,
        *,
        now_ms: int,
        jitter_ms: int = 0,
        create: bool = False,
        file_suffix: str = "",
    ) -> None:
        self.base_offset = base_offset
        self.config = config
        self.log_path = segment_path(directory, base_offset, LOG_SUFFIX) + file_suffix
        self.offset_index = OffsetIndex(
            segment_path(directory, base_offset, INDEX_SUFFIX) + file_suffix,
            base_offset,
            config.segment_index_bytes,
        )
        self.time_index = TimeIndex(
            segment_path(directory, base_offset, TIME_INDEX_SUFFIX) + file_suffix,
            base_offset,
            config.segment_index_bytes,
        )
        self.txn_index = TransactionIndex(
            segment_path(directory, base_offset, TXN_INDEX_SUFFIX) + file_suffix, base_offset
        )
        self._fd: int | None = None
        if create:
            with open(self.log_path, "wb"):
                pass
            self.offset_index.reset()  # empties or creates the index files too
            self.time_index.reset()
        self.size = os.stat(self.log_path).st_size
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        # Max timestamp of the first set appended (KIP-33 roll rule); None = not known yet.
        self.rolling_based_timestamp: int | None = None
        self.created_ms = now_ms
        self.jitter_ms = jitter_ms
        self.bytes_since_last_index_entry = 0

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path!r}, size={self.size})"

    # -- files -------------------------------------------------------------------------------
    def fileno(self) -> int:
        """The .log file descriptor, opened on first use."""
        if self._fd is None:
            self._fd = os.open(self.log_path, os.O_RDWR)
        return self._fd

    def _view(self, size: int | None = None) -> bytes | mmap.mmap:
        """A read-only map of the first ``size`` bytes (default: the segment size)."""
        size = self.size if size is None else size
        if size == 0:
            return b""
        if self._fd is not None:
            return mmap.mmap(self._fd, size, access=mmap.ACCESS_READ)
        fd = os.open(self.log_path, os.O_RDONLY)
        try:
            return mmap.mmap(fd, size, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)

    @property
    def last_modified_ms(self) -> int:
        return os.stat(self.log_path).st_mtime_ns // 1_000_000

    @property
    def largest_timestamp(self) -> int:
        """The largest message timestamp, or the .log mtime when no message has one (magic 0
        data, KIP-33 migration)."""
        return self.max_timestamp if self.max_timestamp >= 0 else self.last_modified_ms

    def flush(self) -> None:
        """fsync the .log file (through a temporary descriptor when none is open: recovery may
        have left dirty pages without keeping the file open), then write the indexes' pending
        entries and fsync them: a Log advances its recovery point past this segment's data only
        after this, so the segments below the recovery point have complete indexes."""
        if self._fd is not None:
            syscalls.fsync(self._fd)
        else:
            fsync_file(self.log_path)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def seal(self) -> None:
        """Make this segment inactive (roll or close): append the final time index entry (the
        segment's max timestamp, so a restart reads it without a scan), fsync everything and
        release the index memory (the .log descriptor is the caller's call)."""
        self._append_final_time_entry()
        self.flush()
        self.offset_index.close()
        self.time_index.close()

    def release_fd(self) -> None:
        """Close the .log descriptor (reopened on next use); any FetchData still naming it is
        void from now on."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def has_open_fd(self) -> bool:
        return self._fd is not None

    def close(self) -> None:
        """Close every descriptor and drop the index memory, index entries not yet written
        included (``seal`` the active segment first)."""
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        self.release_fd()

    def rename_to_deleted(self, suffix: str) -> None:
        for index in (self.offset_index, self.time_index):
            index.close()
            if os.path.exists(index.path):
                index.rename(index.path + suffix)
        self.txn_index.rename(self.txn_index.path + suffix)
        os.rename(self.log_path, self.log_path + suffix)
        self.log_path += suffix

    def discard_indexes(self) -> None:
        """Remove both index files, pending entries included (their write failed on a full
        disk): any later start finds them missing and rebuilds them from the log."""
        self.offset_index.delete()
        self.time_index.delete()

    def delete_files(self) -> None:
        """Close every descriptor and remove the files (under whatever suffix they have)."""
        self.release_fd()
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        try:
            os.unlink(self.log_path)
        except FileNotFoundError:
            pass

    # -- loading -----------------------------------------------------------------------------
    def sanity_check(self) -> None:
        """Raise CorruptIndexError unless both indexes exist and pass their checks."""
        for index in (self.offset_index, self.time_index):
            if not os.path.exists(index.path):
                raise CorruptIndexError(f"{index.KIND} {index.path} is missing")
        self.offset_index.sanity_check(self.size)
        self.time_index.sanity_check()
        if (
            self.time_index.entries
            and self.time_index.last_entry()[1] >= self.base_offset + INT_MAX
        ):
            raise CorruptIndexError(f"{self.time_index.path}: last entry offset is out of range")

    def load_max_timestamp_from_index(self) -> None:
        """Max timestamp = the last time index entry (correct after a roll or clean close)."""
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry()

    def reload_max_timestamp(self) -> None:
        """Max timestamp = last time index entry, raised by a scan of the log after that entry's
        offset (the part not yet covered by the index)."""
        timestamp, offset = self.time_index.last_entry()
        _, position = self.offset_index.lookup(offset)
        for entry in iter_shallow(self._view(), position):
            if entry.timestamp > timestamp:
                timestamp, offset = entry.timestamp, entry.offset
        self.max_timestamp, self.offset_of_max_timestamp = timestamp, offset

    def recover(self, max_message_bytes: int) -> RecoveryResult:
        """Rebuild both indexes and the max timestamp by scanning every entry, each added as
        ``append`` adds a set (``_add_set``: an entry per index.interval.bytes) and sealed with
        the final time index entry; truncate the log at the first incomplete, corrupt (CRC,
        size, magic, key/value lengths) or out-of-order entry. The rebuilt entries are written
        in one write per index (not fsynced: the caller's ``flush`` does). The .txnindex is the
        Log's to rebuild (it needs the producer state)."""
        self.offset_index.reset()
        self.time_index.reset()
        file_size = os.stat(self.log_path).st_size
        view = self._view(file_size)
        self.size = 0
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
        self.bytes_since_last_index_entry = 0
        previous_offset = self.base_offset - 1
        reason = None
        add_set = self._add_set  # bound once: it runs for every entry
        try:
            for entry in iter_shallow(view):
                check_entry(view, entry, max_message_bytes)
                if entry.offset <= previous_offset:
                    raise CorruptRecordError(
                        f"entry at byte {entry.position} has offset {entry.offset}, not above "
                        f"the previous offset {previous_offset}",
                        offset=entry.position,
                    )
                if entry.offset - self.base_offset > INT_MAX:
                    raise CorruptRecordError(
                        f"entry at byte {entry.position} has offset {entry.offset}, beyond the "
                        f"int32 range of base offset {self.base_offset}",
                        offset=entry.position,
                    )
                # The entry starts right after the previous entry's offset (a magic-0/1 wrapper
                # names its last offset only).
                length = entry.next_position - entry.position
                add_set(previous_offset + 1, length, entry.timestamp, entry.offset)
                previous_offset = entry.offset
        except CorruptRecordError as exc:
            reason = str(exc)
        del view
        # Final entry, as a roll makes it: a later clean start reads the max from it.
        self._append_final_time_entry()
        try:
            self.offset_index.write_pending()
            self.time_index.write_pending()
        except OSError as exc:
            self._indexes_refused(exc)
        valid = self.size
        if valid < file_size and reason is None:
            reason = f"incomplete entry at byte {valid}"
        truncated = file_size - valid
        if truncated:
            os.truncate(self.log_path, valid)
        self.rolling_based_timestamp = None
        return RecoveryResult(valid, truncated, reason)

    def _indexes_refused(self, exc: OSError) -> None:
        """The write of the rebuilt indexes failed: when a full disk (or exhausted descriptors)
        refused it, both index files are removed: a start on a full disk serves the segment by
        scanning it, and the next start finds the indexes missing and rebuilds them, rather
        than trusting an index without its final entry (whose max timestamp retention and
        rolling read). A failing disk's error is re-raised."""
        if is_disk_failure(exc):
            raise exc
        self.discard_indexes()
        logger.warning(
            "no room for the segment's indexes during recovery; they are rebuilt at the next start",
            segment=self.log_path,
            error=repr(exc),
        )

    def next_offset(self) -> int:
        """The offset after the last entry (base offset when empty), by a scan from the last
        offset index entry."""
        offset, position = self.offset_index.last_entry()
        last = offset - 1
        for entry in iter_shallow(self._view(), position):
            last = entry.offset
        return max(last + 1, self.base_offset)

    # -- appending ---------------------------------------------------------------------------
    # One code path writes a segment's data and its index entries, whoever appends (Kafka's
    # LogSegment.append): the Log's appends, recovery (``_add_set`` alone: the data is already
    # there) and the cleaner (``append`` to a ``.cleaned`` segment, storage/cleaner.py).
    def append(
        self,
        first_offset: int,
        max_timestamp: int,
        offset_of_max_timestamp: int,
        buffer: bytes | bytearray | memoryview,
    ) -> None:
        """Append a validated message set whose first offset is ``first_offset`` at the end of
        the .log and add its index entries (``_add_set``).

        All or nothing: when the write fails (ENOSPC, EIO, EDQUOT) the .log file is cut back to
        where it was and the OSError propagates, so a failed append leaves no torn tail behind
        it; the index entries, made in memory, cannot fail but by InvalidAppendError, which
        cuts the .log back too."""
        position = self.size
        self._write(buffer, position)
        try:
            self._add_set(first_offset, len(buffer), max_timestamp, offset_of_max_timestamp)
        except BaseException:
            self._cut(position)
            raise
        if position == 0:
            self.rolling_based_timestamp = max_timestamp

    def _write(self, buffer: bytes | bytearray | memoryview, position: int) -> None:
        """Write ``buffer`` at ``position`` of the .log, or nothing (a full disk)."""
        _write_all(self.fileno(), buffer, position, undo_to=position)

    def _cut(self, position: int) -> None:
        """Undo ``_write``: the .log ends at ``position`` again."""
        os.ftruncate(self.fileno(), position)

    def _add_set(
        self,
        first_offset: int,
        length: int,
        max_timestamp: int,
        offset_of_max_timestamp: int,
    ) -> None:
        """Count a set of ``length`` bytes just written at ``self.size`` and index it when due
        (index.interval.bytes, Kafka's rule): when more than that many bytes were added since
        the last index entry (counted before this set, so a segment's first set is never
        indexed) and neither index is full, the offset index maps ``first_offset`` to the set's
        position and the time index gets the largest timestamp so far, this set's included.

        The entries are made (in memory: ``flush`` writes them) before any field changes:
        InvalidAppendError leaves the segment's fields and the offset index as they were."""
        position = self.size
        if (
            self.bytes_since_last_index_entry > self.config.index_interval_bytes
            and not self.indexes_full()
        ):
            if max_timestamp > self.max_timestamp:
                max_ts, max_ts_offset = max_timestamp, offset_of_max_timestamp
            else:
                max_ts, max_ts_offset = self.max_timestamp, self.offset_of_max_timestamp
            index_entries = self.offset_index.entries
            try:
                self.offset_index.append(first_offset, position)
                self.time_index.maybe_append(max_ts, max_ts_offset)
            except BaseException:
                self.offset_index.truncate_entries(index_entries)
                raise
            self.bytes_since_last_index_entry = 0
        self.size = position + length
        if max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = (
                max_timestamp,
                offset_of_max_timestamp,
            )
        self.bytes_since_last_index_entry += length

    def _append_final_time_entry(self) -> None:
        """The time index entry of the segment's max timestamp, written when it stops taking
        appends (roll, close, end of recovery, a cleaned segment), in the slot the time index
        keeps free for it: a later start reads the max from it without a scan."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(
                self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True
            )

    def _load_rolling_based_timestamp(self) -> None:
        if self.rolling_based_timestamp is None and self.size:
            first = next(iter_shallow(self._view()), None)
            self.rolling_based_timestamp = first.timestamp if first is not None else -1

    def time_waited_for_roll(self, clock: Callable[[], int], message_timestamp: int) -> int:
        """KIP-33 roll clock: the incoming set's max timestamp minus the first set's, or wall
        time (``clock()``, read only then) since creation when the first set had no timestamp.
        Using the incoming timestamp, not now, avoids KAFKA-4099 (rolling on every append of
        old data)."""
        first = self.rolling_based_timestamp
        if first is None:
            self._load_rolling_based_timestamp()
            first = self.rolling_based_timestamp
        if first is not None and first >= 0:
            return message_timestamp - first
        return clock() - self.created_ms

    def indexes_full(self) -> bool:
        """The offset or the time index has no slot for another set's entry (a roll is due)."""
        return self.offset_index.is_full() or self.time_index.is_full()

    def first_batch_timestamp(self) -> int:
        """The first entry's timestamp (read from the file once), LONG_MAX when the segment is
        empty or has no timestamps: the clock of max.compaction.lag.ms (Kafka's
        LogSegment.getFirstBatchTimestamp)."""
        self._load_rolling_based_timestamp()
        if self.rolling_based_timestamp is not None and self.rolling_based_timestamp >= 0:
            return self.rolling_based_timestamp
        return LONG_MAX

    # -- reading -----------------------------------------------------------------------------
    def _find_entry(self, offset: int) -> tuple[ShallowEntry | None, int]:
        """(first entry whose last offset is >= ``offset``, or None; the offset just before
        that entry's first offset)."""
        index_offset, position = self.offset_index.lookup(offset)
        previous = index_offset - 1
        view = self._view()
        # An index entry per index.interval.bytes can still leave a whole 1 MB produced set to
        # walk: skip entries below ``offset`` by offset and size alone; the entry found, and
        # anything unusual, go through iter_shallow with its checks.
        n = len(view)
        unpack = _OFFSET_SIZE.unpack_from
        unpack_delta = _I32.unpack_from
        while position + LOG_OVERHEAD <= n:
            entry_offset, size = unpack(view, position)
            if size < _MIN_V1_SIZE or position + LOG_OVERHEAD + size > n:
                break
            if view[position + rb.MAGIC_OFFSET] == rb.MAGIC:
                # a batch's offset field is its first offset; skip by its last one
                if size < rb.MIN_BATCH_LENGTH:
                    break
                entry_offset += unpack_delta(view, position + rb.LAST_OFFSET_DELTA_OFFSET)[0]
            if entry_offset >= offset:
                break
            previous = entry_offset
            position += LOG_OVERHEAD + size
        for entry in iter_shallow(view, position):
            if entry.offset >= offset:
                return entry, previous
            previous = entry.offset
        return None, previous

    def position_of(self, offset: int) -> int | None:
        """Where the first entry whose last offset is >= ``offset`` starts (a read of offsets
        below ``offset`` stops there), None when the segment ends before it."""
        entry, _ = self._find_entry(offset)
        return None if entry is None else entry.position

    def read(
        self, offset: int, max_bytes: int, *, min_one_message: bool
    ) -> tuple[int, int, int] | None:
        """(fileno, position, length) of up to ``max_bytes`` from the entry holding ``offset``
        (a compressed wrapper or record batch is returned whole from its start), or None when
        the segment ends before it. ``min_one_message`` widens the length to cover at least the
        first entry. Where the limit falls inside an entry, the read ends after the last whole
        entry before it (found within TRIM_STEPS entries; else the last entry is cut off, as in
        Kafka): a client would only discard the partial entry and fetch it again, and a record
        batch is often as large as a fetch, so sending it would double what crosses the wire."""
        entry, _ = self._find_entry(offset)
        if entry is None:
            return None
        entry_bytes = LOG_OVERHEAD + entry.size
        limit = max(max_bytes, entry_bytes) if min_one_message else max_bytes
        length = min(self.size - entry.position, limit)
        if length < self.size - entry.position:
            length = self._whole_entries(entry.position, length) or length
        return self.fileno(), entry.position, length

    def _whole_entries(self, position: int, length: int) -> int:
        """The bytes of the whole entries from ``position`` within ``length``; 0 when the first
        is not whole or they are more than TRIM_STEPS."""
        view = self._view(position + length)
        end = position
        for _ in range(TRIM_STEPS):
            if end + LOG_OVERHEAD > position + length:
                break
            _, size = _OFFSET_SIZE.unpack_from(view, end)
            if size < 0 or end + LOG_OVERHEAD + size > position + length:
                break
            end += LOG_OVERHEAD + size
        else:
            return 0
        return end - position

    def find_offset_by_timestamp(
        self, timestamp: int, min_offset: int = 0
    ) -> TimestampOffset | None:
        """The first message (deep inside compressed wrappers and record batches) at or after
        ``min_offset`` with timestamp >= ``timestamp``, starting from the time index entry just
        below it."""
        _, index_offset = self.time_index.lookup_before(timestamp)
        _, position = self.offset_index.lookup(max(index_offset, min_offset))
        view = self._view()
        for entry in iter_shallow(view, position):
            if entry.timestamp < timestamp:
                continue  # a wrapper or batch carries its largest inner timestamp
            if entry.magic == rb.MAGIC:
                found = batch_first_at(memoryview(view), entry, timestamp, min_offset)
                if found is not None:
                    return TimestampOffset(*found)
                continue
            if entry.codec == Codec.NONE:
                if entry.offset >= min_offset:
                    return TimestampOffset(entry.timestamp, entry.offset)
                continue
            wrapper = memoryview(view)[entry.position : entry.next_position]
            for message in iter_deep(wrapper):
                if message.timestamp >= timestamp and message.offset >= min_offset:
                    return TimestampOffset(message.timestamp, message.offset)
        return None

    def producer_batches(self) -> Iterator[tuple[Buffer, int, rb.BatchHeader]]:
        """(buffer, position, header) of every record batch with a producer id, in offset order
        (headers only: nothing is decompressed; the buffer is valid while iterating)."""
        view = self._view()
        for entry in iter_shallow(view):
            if entry.magic != rb.MAGIC:
                continue
            h = rb.read_header(view, entry.position)
            if h.producer_id >= 0:
                yield view, entry.position, h

    # -- truncating --------------------------------------------------------------------------
    def truncate_to(self, offset: int, now_ms: int) -> int | None:
        """Remove every entry whose last offset is >= ``offset`` (a compressed wrapper holding
        ``offset`` goes whole) and the index entries past them; return the new next offset, or
        None when nothing was removed. The file is only shortened when needed (KAFKA-3802:
        truncating to the same size must not touch the mtime)."""
        entry, previous = self._find_entry(offset)
        if entry is None:
            return None
        next_offset = max(previous + 1, self.base_offset)
        self.offset_index.truncate_to(next_offset)
        self.time_index.truncate_to(next_offset)
        self.txn_index.truncate_to(next_offset)
        if entry.position < os.stat(self.log_path).st_size:
            os.truncate(self.log_path, entry.position)
        self.size = entry.position
        self.bytes_since_last_index_entry = 0
        if self.size == 0:
            self.created_ms = now_ms
            self.rolling_based_timestamp = None
        self.reload_max_timestamp()
        return next_offset
