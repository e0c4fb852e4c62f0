"""The log cleaner: compaction of logs whose cleanup.policy includes compact, as Kafka 3.9's
LogCleaner, LogCleanerManager and SkimpyOffsetMap do it.

A log is split at its *first dirty offset* (the cleaner checkpoint, Log.first_dirty_offset):
below it the *clean* section, already compacted; from it to the *first uncleanable offset* (the
active segment, the high watermark, and the first segment holding a record younger than
min.compaction.lag.ms, KIP-58) the *dirty* section. One cleaning (:class:`CleaningJob`):

1. plan (:func:`plan_cleaning`, holding the log's lock; memory plus a stat or two): the dirty
   ratio dirty/(clean + dirty) bytes, and whether a dirty segment's first record is older than
   max.compaction.lag.ms (KIP-354), which makes the log due whatever its ratio;
2. build the offset map (no lock): key -> latest offset over the dirty section, at most as many
   keys as the dedupe buffer holds; when it is full the cleaning stops there, and the rest is
   dirty for the next one;
3. for each group of segments from the log start up to the end of the mapped section (grouped
   so that cleaned segments do not shrink to nothing, bounded by segment.bytes, the index size
   and int32 relative offsets): copy what survives into ``.cleaned`` files (no lock), then swap
   them in (the log's lock held; storage/swap.py's crash-safe protocol);
4. finish (the lock held): the checkpoint moves to the end of the mapped section.

Transactions (Kafka's CleanedTransactionMetadata): the cleanable range ends at the last stable
offset, so no batch of an undecided transaction is cleaned. The batches of aborted transactions
(known from the segments' .txnindex) are neither mapped nor kept; an ABORT marker stays while
this cleaning removed data of its transaction (and its .txnindex entry goes into the cleaned
segment), a COMMIT marker while data of its transaction remains. A marker with nothing left of
its transaction gets a delete horizon (delete.retention.ms from this cleaning, KIP-534) and is
removed by the first cleaning after it, unless it is its producer's last record (its epoch
fences zombies), which stays, emptied.

A record survives when it is past the mapped section, or it is the latest of its key and either
has a value or is a tombstone (null value) still within delete.retention.ms: for record batches
(magic 2) from the first cleaning that kept it (KIP-534: the horizon is written into the batch),
for magic 0/1 from the last modification of the segment it is in compared with that of the
newest clean segment (Kafka's legacy rule). Keyless records are dropped (a compacted topic does
not accept them). Offsets are kept, with gaps; a magic-0/1 wrapper that lost messages is rebuilt
at the offset of its last remaining message, stamped with its LogAppendTime or, under CreateTime,
the largest remaining timestamp (KIP-32); a record batch keeps its base offset, last offset,
producer id, epoch and base sequence, and a producer's last batch is kept even when empty, so
its sequence survives. A cleaned segment is a LogSegment with the .cleaned suffix, written by
LogSegment.append, so its offset and time index (KIP-33) are built as appends build them.

Concurrency: a Log is not thread-safe. Steps 1, the swaps and 4 run holding the log's lock;
steps 2 and 3 read segment files through descriptors of their own (a concurrent truncation or
deletion is noticed at the swap, which then discards the cleaning) and write only ``.cleaned``
files. :class:`CleanerManager` keeps two cleanings off one log and lets a deletion abort a
cleaning and wait until it has stopped writing. Errors: OSError propagates (with the
``.cleaned`` files removed); :class:`CleaningAbortedError` when aborted or stale;
CorruptRecordError (protocol.errors) for a damaged segment.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from protocol import recordbatch as rb
from protocol.compression import Codec
from protocol.records import (
    LOG_OVERHEAD,
    ShallowEntry,
    TimestampType,
    build_legacy,
    deep_messages,
    iter_shallow,
)
from storage import killpoints, swap
from storage.config import INT_MAX, LogConfig
from storage.errors import StorageError
from storage.index import OffsetIndex, TimeIndex
from storage.layout import CLEANED_SUFFIX
from storage.segment import LogSegment
from storage.txn_index import AbortedTxn, TransactionIndex

if TYPE_CHECKING:
    from storage.log import Log

logger = structlog.get_logger(__name__)

# Memory one offset map entry costs: a dict slot, a 16-byte digest object and an int, measured
# with tracemalloc at 10^6 keys (~123 bytes; Kafka's SkimpyOffsetMap needs 24).
OFFSET_MAP_ENTRY_BYTES = 128
# Kafka's log.cleaner.io.buffer.load.factor: the share of the map's slots a cleaning may fill.
LOAD_FACTOR = 0.9
# Bytes read (and written) per call; an entry larger than this is read whole.
IO_BUFFER_BYTES = 1 << 20
# Kafka's Throttler check interval.
THROTTLE_CHECK_INTERVAL_S = 0.3
_OFFSET_SIZE = struct.Struct(">qi")


class CleaningAbortedError(StorageError):
    """Raised inside a cleaning that must stop: the log is being deleted or taken offline, the
    cleaner is shutting down, or the log changed under it (a segment read was truncated or
    deleted). Its ``.cleaned`` files are removed and the log is as it was."""


# -- the offset map ------------------------------------------------------------------------------


def key_digest(key: bytes | memoryview) -> bytes:
    """The map's key: MD5 of the record key, as Kafka's SkimpyOffsetMap hashes it."""
    return hashlib.md5(key, usedforsecurity=False).digest()


class OffsetMap:
    """Key digest -> latest offset, for at most ``max_entries`` keys (the dedupe buffer's
    ``memory_bytes`` / OFFSET_MAP_ENTRY_BYTES slots times LOAD_FACTOR), plus the last offset
    mapped. Raises ValueError when the buffer cannot hold a single key."""

    def __init__(self, memory_bytes: int) -> None:
        self.slots = memory_bytes // OFFSET_MAP_ENTRY_BYTES
        self.max_entries = int(self.slots * LOAD_FACTOR)
        if self.max_entries < 1:
            raise ValueError(
                f"a dedupe buffer of {memory_bytes} bytes holds no key (each costs "
                f"{OFFSET_MAP_ENTRY_BYTES} bytes); raise log.cleaner.dedupe.buffer.size or lower "
                f"log.cleaner.threads"
            )
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1

    def clear(self) -> None:
        self._map = {}
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._map)

    def put(self, digest: bytes, offset: int) -> bool:
        """Map ``digest`` to ``offset``; False (nothing changed) when it is a new key and the
        map is full."""
        if len(self._map) >= self.max_entries and digest not in self._map:
            return False
        self._map[digest] = offset
        return True

    def get(self, digest: bytes) -> int:
        """The latest offset of the key, -1 when it is not mapped."""
        return self._map.get(digest, -1)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = max(self.latest_offset, offset)

    @property
    def utilization(self) -> float:
        return len(self._map) / self.slots


# -- throttling ----------------------------------------------------------------------------------


class Throttler:
    """Keeps the bytes read and written by every cleaner thread together at or below ``rate``
    bytes per second (log.cleaner.io.max.bytes.per.second): every THROTTLE_CHECK_INTERVAL_S (or
    sooner, once more than an interval's allowance was observed) the observed rate is compared
    with the desired one and the caller sleeps off the excess, as Kafka's Throttler does. Thread-safe; ``sleep`` may return early (a stop request)."""

    def __init__(
        self,
        rate: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        self.rate = rate
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._period_start = clock()
        self._observed = 0.0
        self.slept_s = 0.0

    def maybe_throttle(self, observed: int) -> None:
        with self._lock:
            self._observed += observed
            now = self._clock()
            elapsed = now - self._period_start
            # Kafka checks once per interval; a burst above a whole interval's allowance is
            # slept off at once, so a short cleaning of big chunks is throttled too.
            if elapsed <= 0 or (
                elapsed <= THROTTLE_CHECK_INTERVAL_S
                and self._observed <= self.rate * THROTTLE_CHECK_INTERVAL_S
            ):
                return
            if self._observed / elapsed > self.rate:
                pause = self._observed / self.rate - elapsed
                if pause > 0:
                    self.slept_s += pause
                    self._sleep(pause)
            self._period_start = self._clock()
            self._observed = 0.0


# -- planning ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """A segment as the plan saw it (under the log's lock)."""

    segment: LogSegment
    base_offset: int
    log_path: str
    size: int
    mtime_ns: int
    offset_index_bytes: int
    time_index_bytes: int
    # aborted transactions overlapping [base_offset, next segment's base): their batches go
    aborted: tuple[AbortedTxn, ...] = ()


@dataclass(frozen=True)
class CleaningPlan:
    """What :func:`plan_cleaning` found: Kafka's LogToClean. ``segments`` are the inactive
    segments below ``first_uncleanable_offset``; ``producer_last_records`` maps each producer id
    to (the last offset of its last data batch or -1, its epoch): that batch, else its last
    marker of that epoch, is kept, possibly empty (Kafka's lastRecordsOfActiveProducers)."""

    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool
    segments: tuple[SegmentInfo, ...]
    truncations: int
    producer_last_records: Mapping[int, tuple[int, int]]
    config: LogConfig
    legacy_delete_horizon_ms: int
    checkpoint_reset: bool

    @property
    def key(self) -> tuple[str, int]:
        return self.log.topic, self.log.partition

    @property
    def cleanable_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0

    @property
    def due(self) -> bool:
        """Whether the log should be cleaned now: its dirty ratio is above
        min.cleanable.dirty.ratio, or max.compaction.lag.ms has passed for a dirty record."""
        if self.cleanable_bytes <= 0:
            return False
        return (
            self.needs_compaction_now
            or self.cleanable_ratio > self.config.min_cleanable_dirty_ratio
        )


def _floor_index(bases: Sequence[int], offset: int) -> int:
    """Index of the segment holding ``offset`` (the first one below the log start)."""
    index = 0
    for i, base in enumerate(bases):
        if base <= offset:
            index = i
    return index


def plan_cleaning(log: Log, now_ms: int) -> CleaningPlan | None:
    """The cleanable range of a compacted log as of ``now_ms`` (Kafka's cleanableOffsets and
    LogToClean), None when it is not compacted or holds no data. Call it holding the log's lock:
    it reads the log's state (and may stat a segment file or read its first entry)."""
    config = log.config
    if not config.compact:
        return None
    segments = log.segments
    bases = [s.base_offset for s in segments]
    active = segments[-1]
    log_start, log_end = log.log_start_offset, log.log_end_offset
    checkpoint = log.first_dirty_offset
    reset = False
    if checkpoint is None:
        first_dirty = log_start
    elif checkpoint < log_start or checkpoint > log_end:
        if not (checkpoint < log_start and config.delete):
            logger.warning(
                "cleaner checkpoint outside the log; cleaning it from the log start offset",
                topic=log.topic,
                partition=log.partition,
                checkpoint=checkpoint,
                log_start_offset=log_start,
                log_end_offset=log_end,
            )
        first_dirty, reset = log_start, True
    else:
        first_dirty = checkpoint
    dirty = segments[_floor_index(bases, first_dirty) : -1]
    # Kafka never cleans past the last stable offset (itself at most the high watermark).
    uncleanable = [log.last_stable_offset, active.base_offset]
    if config.min_compaction_lag_ms > 0:
        young = next(
            (
                s.base_offset
                for s in dirty
                if s.largest_timestamp > now_ms - config.min_compaction_lag_ms
            ),
            None,
        )
        if young is not None:
            uncleanable.append(young)
    uncleanable_offset = max(first_dirty, min(uncleanable))
    # Kafka's calculateCleanableBytes: cleaning stops at a segment boundary.
    end = segments[_floor_index(bases, uncleanable_offset)].base_offset
    low = min(first_dirty, end)
    cleanable = [s for s in segments[_floor_index(bases, low) :] if s.base_offset < end]
    clean = [s for s in segments if s.base_offset < first_dirty]
    if not clean and not cleanable:
        return None
    earliest = min((s.first_batch_timestamp() for s in dirty), default=2**63 - 1)
    max_lag = max(config.max_compaction_lag_ms, 0)
    now_due = 0 < earliest < now_ms - max_lag
    last_clean = clean[-1] if clean else None
    legacy_horizon = (
        last_clean.last_modified_ms - config.delete_retention_ms if last_clean is not None else 0
    )
    infos = tuple(
        SegmentInfo(
            s,
            s.base_offset,
            s.log_path,
            s.size,
            os.stat(s.log_path).st_mtime_ns,
            s.offset_index.entries * OffsetIndex.ENTRY.size,
            s.time_index.entries * TimeIndex.ENTRY.size,
            tuple(log.aborted_transactions(s.base_offset, bases[i + 1])),
        )
        for i, s in enumerate(segments[:-1])
        if s.base_offset < end
    )
    producers = log.producer_state()
    last_data = {pid: last_offset for pid, _, _, _, last_offset, _ in producers.last_batches()}
    return CleaningPlan(
        log=log,
        first_dirty_offset=first_dirty,
        first_uncleanable_offset=end,
        clean_bytes=sum(s.size for s in clean),
        cleanable_bytes=sum(s.size for s in cleanable),
        needs_compaction_now=now_due,
        segments=infos,
        truncations=log.truncations,
        producer_last_records={
            p.producer_id: (last_data.get(p.producer_id, -1), p.producer_epoch)
            for p in producers.active_producers()
        },
        config=config,
        legacy_delete_horizon_ms=legacy_horizon,
        checkpoint_reset=reset,
    )


def choose_filthiest(plans: Sequence[CleaningPlan]) -> CleaningPlan | None:
    """The due plan with the highest dirty ratio (Kafka's grabFilthiestCompactedLog)."""
    due = [p for p in plans if p.due]
    return max(due, key=lambda p: p.cleanable_ratio) if due else None


def group_segments(
    segments: Sequence[SegmentInfo], max_size: int, max_index_bytes: int, first_uncleanable: int
) -> list[list[SegmentInfo]]:
    """Kafka's groupSegmentsBySize: consecutive segments whose log bytes, offset index bytes and
    time index bytes each stay within segment.bytes / segment.index.bytes, and whose offsets fit
    one segment's int32 relative offsets, are cleaned into one segment."""
    groups: list[list[SegmentInfo]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        log_size = segments[i].size
        index_size = segments[i].offset_index_bytes
        time_size = segments[i].time_index_bytes
        i += 1
        while i < len(segments):
            s = segments[i]
            last_offset = (
                segments[i + 1].base_offset - 1 if i + 1 < len(segments) else first_uncleanable - 1
            )
            if (
                log_size + s.size > max_size
                or index_size + s.offset_index_bytes > max_index_bytes
                or time_size + s.time_index_bytes > max_index_bytes
                or (s.size and last_offset - group[0].base_offset > INT_MAX)
            ):
                break
            group.append(s)
            log_size += s.size
            index_size += s.offset_index_bytes
            time_size += s.time_index_bytes
            i += 1
        groups.append(group)
    return groups


# -- progress and aborts -------------------------------------------------------------------------


class _Progress:
    """One cleaning's state as CleanerManager sees it."""

    __slots__ = ("aborted", "writing")

    def __init__(self) -> None:
        self.aborted = False
        self.writing = False


class CleanerManager:
    """Which logs are being cleaned (at most one cleaning per log), their aborts, and the logs
    the cleaner gave up on (Kafka's LogCleanerManager). Thread-safe."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._running: dict[tuple[str, int], _Progress] = {}
        self.uncleanable: dict[tuple[str, int], str] = {}

    def begin(self, key: tuple[str, int]) -> _Progress | None:
        """Mark ``key`` as being cleaned; None when it already is or was given up on."""
        with self._cond:
            if key in self._running or key in self.uncleanable:
                return None
            progress = self._running[key] = _Progress()
            return progress

    def end(self, key: tuple[str, int]) -> None:
        with self._cond:
            self._running.pop(key, None)
            self._cond.notify_all()

    def in_progress(self, key: tuple[str, int]) -> bool:
        with self._cond:
            return key in self._running

    def mark_uncleanable(self, key: tuple[str, int], why: str) -> None:
        """Skip ``key`` until a restart (Kafka marks a partition uncleanable after an error)."""
        with self._cond:
            self.uncleanable[key] = why

    def abort_and_wait(self, key: tuple[str, int]) -> None:
        """Make a cleaning of ``key`` stop and wait until it no longer writes files (it stops
        at its next read, removing its .cleaned files); no-op when none runs. Call it from a
        thread that may block, never from the cleaning's own."""
        with self._cond:
            progress = self._running.get(key)
            if progress is None:
                return
            progress.aborted = True
            while progress.writing:
                self._cond.wait()

    def enter(self, progress: _Progress) -> None:
        """A cleaning's thread starts a phase that touches files; raises CleaningAbortedError
        when it was aborted."""
        with self._cond:
            if progress.aborted:
                raise CleaningAbortedError("the cleaning was aborted")
            progress.writing = True

    def leave(self, progress: _Progress) -> None:
        with self._cond:
            progress.writing = False
            self._cond.notify_all()


# -- transactions --------------------------------------------------------------------------------


class CleanedTransactions:
    """Kafka's CleanedTransactionMetadata: the transactions a cleaning walks through, in offset
    order. Aborted transactions are added as the segments holding them come up
    (:meth:`add_aborted`); each batch is reported in turn and answered whether it may be
    discarded. ``cleaned_index``: where a kept ABORT marker's .txnindex entry goes."""

    def __init__(self) -> None:
        self._aborted: list[AbortedTxn] = []  # not yet reached, by first offset
        # producer -> (its aborted transaction being walked, last offset of a batch seen of it)
        self._ongoing_aborted: dict[int, tuple[AbortedTxn, int]] = {}
        self._ongoing_committed: set[int] = set()
        self.cleaned_index: TransactionIndex | None = None

    def add_aborted(self, txns: Sequence[AbortedTxn]) -> None:
        self._aborted = sorted([*self._aborted, *txns], key=lambda t: t.first_offset)

    def _reach(self, offset: int) -> None:
        while self._aborted and self._aborted[0].first_offset <= offset:
            txn = self._aborted.pop(0)
            self._ongoing_aborted.setdefault(txn.producer_id, (txn, -1))

    def on_control_batch(self, header: rb.BatchHeader, marker: rb.EndTxnMarker | None) -> bool:
        """A marker: whether it may be discarded (nothing of its transaction was seen; an
        emptied one always)."""
        self._reach(header.last_offset)
        if marker is None:
            return True
        pid = header.producer_id
        if not marker.commit:
            txn, seen = self._ongoing_aborted.pop(pid, (None, -1))
            if txn is not None and seen >= 0:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(txn)
                return False
            return True
        if pid in self._ongoing_committed:
            self._ongoing_committed.discard(pid)
            return False
        return True

    def on_batch(self, header: rb.BatchHeader) -> bool:
        """A data batch: whether it belongs to an aborted transaction (then it goes)."""
        self._reach(header.last_offset)
        if not header.is_transactional:
            return False
        pid = header.producer_id
        aborted = self._ongoing_aborted.get(pid)
        if aborted is not None:
            self._ongoing_aborted[pid] = (aborted[0], header.last_offset)
            return True
        self._ongoing_committed.add(pid)
        return False


# -- reading and writing segments ----------------------------------------------------------------


def _entries(
    path: str, size: int, check: Callable[[], None], throttler: Throttler | None
) -> Iterator[tuple[bytes, ShallowEntry]]:
    """(chunk, entry) for every entry of the first ``size`` bytes of a segment file, read with
    a descriptor of its own in chunks of IO_BUFFER_BYTES (bigger for a bigger entry); the
    entry's positions index the chunk. CleaningAbortedError when the file is gone or shorter."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise CleaningAbortedError(f"segment {path} was deleted while being cleaned") from None
    try:
        position, want = 0, IO_BUFFER_BYTES
        while position < size:
            check()
            chunk = os.pread(fd, min(want, size - position), position)
            if throttler is not None:
                throttler.maybe_throttle(len(chunk))
            consumed = 0
            for entry in iter_shallow(chunk):
                yield chunk, entry
                consumed = entry.next_position
            if consumed:
                position += consumed
                want = IO_BUFFER_BYTES
                continue
            if len(chunk) < LOG_OVERHEAD:
                raise CleaningAbortedError(f"segment {path} shrank while being cleaned")
            want = LOG_OVERHEAD + _OFFSET_SIZE.unpack_from(chunk)[1]
            if position + want > size or want <= len(chunk):
                raise CleaningAbortedError(
                    f"segment {path} has an incomplete entry at byte {position}; it changed "
                    f"while being cleaned"
                )
    finally:
        os.close(fd)


def _append_built(segment: LogSegment, first_offset: int, data: bytes) -> None:
    """Append an entry the cleaner rebuilt (its timestamp and last offset read back from it)."""
    entry = next(iter_shallow(data))
    segment.append(first_offset, entry.timestamp, entry.offset, data)


class _CleanedSegment(LogSegment):
    """A cleaned segment's ``.cleaned`` files (Kafka's cleaner writes a LogSegment with the
    .cleaned suffix): entries go in through ``LogSegment.append``, so its indexes are built as
    appends build them; the .log is written through a buffer of IO_BUFFER_BYTES, throttled.
    Resources: the .log descriptor and the index descriptors until ``finish`` or ``close``."""

    __slots__ = ("throttler", "_buffer", "_written")

    def __init__(
        self,
        directory: str,
        base: int,
        config: LogConfig,
        throttler: Throttler | None,
        now_ms: int,
    ) -> None:
        super().__init__(
            directory, base, config, now_ms=now_ms, create=True, file_suffix=CLEANED_SUFFIX
        )
        # written only when an ABORT marker with its entry is kept (CleanedTransactions)
        self.txn_index.reset()
        self.throttler = throttler
        self._buffer = bytearray()
        self._written = 0  # bytes of the .log on disk; the rest is in _buffer

    def _write(self, buffer: bytes | bytearray | memoryview, position: int) -> None:
        self._buffer += buffer
        if len(self._buffer) >= IO_BUFFER_BYTES:
            self._drain()

    def _cut(self, position: int) -> None:
        # an index entry refused: the entry is still in the buffer, or drained with it
        if position >= self._written:
            del self._buffer[position - self._written :]
        else:
            self._buffer.clear()
            os.ftruncate(self.fileno(), position)
            self._written = position

    def _drain(self) -> None:
        """Write the buffered bytes at the end of the .log (throttled). A failed write loses
        them, and the cleaner discards the cleaned files on any error."""
        data, self._buffer = self._buffer, bytearray()
        if self.throttler is not None and data:
            self.throttler.maybe_throttle(len(data))
        super()._write(data, self._written)
        self._written += len(data)

    def flush(self) -> None:
        self._drain()
        super().flush()

    def finish(self, mtime_ns: int) -> None:
        """Write the rest and the final time index entry, fsync everything and give the .log
        the replaced segments' modification time (Kafka keeps it, for the tombstone rule)."""
        self.seal()
        self.close()
        os.utime(self.log_path, ns=(mtime_ns, mtime_ns))


# -- cleaning ------------------------------------------------------------------------------------


@dataclass
class CleanerStats:
    """Kafka's CleanerStats: what one cleaning read and wrote, and how long it took."""

    started: float = field(default_factory=time.monotonic)
    cpu_started: float = field(default_factory=time.process_time)
    map_done: float = 0.0
    ended: float = 0.0
    cpu_s: float = 0.0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    messages_read: int = 0
    messages_written: int = 0
    invalid_messages: int = 0
    segments_before: int = 0
    segments_after: int = 0
    buffer_utilization: float = 0.0
    keys_mapped: int = 0

    @property
    def elapsed_s(self) -> float:
        return self.ended - self.started


@dataclass(frozen=True)
class CleanedGroup:
    """A group's ``.cleaned`` files, ready to swap in for ``replaced``."""

    base_offset: int
    replaced: tuple[SegmentInfo, ...]
    size: int


@dataclass(frozen=True)
class CleaningResult:
    """What a finished cleaning did: the dirty section [first_dirty_offset, end_offset) was
    cleaned (the new checkpoint is end_offset) and how; ``swapped`` False when the log changed
    under it and nothing was swapped in."""

    topic: str
    partition: int
    first_dirty_offset: int
    end_offset: int
    stats: CleanerStats
    swapped: bool


class Cleaner:
    """One cleaner thread's state: its offset map (``dedupe_buffer_bytes``) and the throttler
    shared by all threads. ``stop()`` (or setting the ``stopped`` event the threads share)
    makes a running cleaning abort at its next read."""

    def __init__(
        self,
        dedupe_buffer_bytes: int,
        throttler: Throttler | None = None,
        stopped: threading.Event | None = None,
    ) -> None:
        self.offset_map = OffsetMap(dedupe_buffer_bytes)
        self.throttler = throttler
        self.stopped = stopped or threading.Event()

    def stop(self) -> None:
        self.stopped.set()

    def clean(
        self, log: Log, now_ms: int, *, force: bool = False, manager: CleanerManager | None = None
    ) -> CleaningResult | None:
        """Clean ``log`` now in this thread, every step in turn (tests, tools, benchmarks: the
        caller guarantees no other thread uses the log). None when the log is not compacted or
        not due (``force`` cleans whatever is cleanable)."""
        plan = plan_cleaning(log, now_ms)
        if plan is None or plan.cleanable_bytes <= 0 or not (force or plan.due):
            return None
        manager = manager or CleanerManager()
        progress = manager.begin(plan.key)
        if progress is None:
            return None
        try:
            job = CleaningJob(plan, self, manager, progress, now_ms)
            job.build_offset_map()
            for group in job.groups:
                cleaned = job.clean_group(group)
                if not job.swap(cleaned):
                    break
            return job.finish()
        finally:
            manager.end(plan.key)


class CleaningJob:
    """One cleaning of one log (see the module docstring for its steps and which of them hold
    the log's lock): ``build_offset_map``, then for each of ``groups`` ``clean_group`` and
    ``swap``, then ``finish``."""

    def __init__(
        self,
        plan: CleaningPlan,
        cleaner: Cleaner,
        manager: CleanerManager,
        progress: _Progress,
        now_ms: int,
    ) -> None:
        self.plan = plan
        self.cleaner = cleaner
        self.manager = manager
        self.progress = progress
        self.now_ms = now_ms
        self.stats = CleanerStats()
        self.end_offset = plan.first_dirty_offset
        self.groups: list[list[SegmentInfo]] = []
        self.swapped = True
        self._map = cleaner.offset_map
        # carried from group to group, as Kafka's doClean does
        self._txns = CleanedTransactions()

    def _check(self) -> None:
        if self.progress.aborted or self.cleaner.stopped.is_set():
            raise CleaningAbortedError(f"cleaning of {self.plan.log.name} was aborted")

    # -- step 2 ----------------------------------------------------------------------------------
    def build_offset_map(self) -> None:
        """Map every key of the dirty section to its latest offset, as far as the map holds
        (Kafka's buildOffsetMap); set ``end_offset`` and ``groups``. No lock needed."""
        self.manager.enter(self.progress)
        try:
            self._build_offset_map()
        finally:
            self.manager.leave(self.progress)

    def _build_offset_map(self) -> None:
        plan, omap = self.plan, self._map
        omap.clear()
        start, end = plan.first_dirty_offset, plan.first_uncleanable_offset
        segments = plan.segments
        dirty = [
            (s, segments[i + 1].base_offset if i + 1 < len(segments) else end)
            for i, s in enumerate(segments)
            if (i + 1 < len(segments) and segments[i + 1].base_offset > start)
            or (i + 1 == len(segments) and end > start)
        ]
        txns = CleanedTransactions()
        txns.add_aborted([t for info, _ in dirty for t in info.aborted])
        for info, next_base in dirty:
            if self._map_segment(info, start, txns):
                break
            # Offsets may have gaps (a cleaned segment): the whole segment is mapped.
            omap.update_latest_offset(next_base - 1)
        self.end_offset = omap.latest_offset + 1
        if self.end_offset <= start:
            raise CleaningAbortedError(
                f"{plan.log.name}: the dedupe buffer ({omap.max_entries} keys) cannot hold the "
                f"keys of one record batch at offset {start}; raise "
                f"log.cleaner.dedupe.buffer.size"
            )
        self.stats.keys_mapped = len(omap)
        self.stats.buffer_utilization = omap.utilization
        self.stats.map_done = time.monotonic()
        self.groups = group_segments(
            [s for s in segments if s.base_offset < self.end_offset],
            plan.config.segment_bytes,
            plan.config.segment_index_bytes,
            plan.first_uncleanable_offset,
        )

    def _map_segment(self, info: SegmentInfo, start: int, txns: CleanedTransactions) -> bool:
        """Map one segment's keys at offsets >= ``start`` (not those of markers and aborted
        transactions); True when the map became full."""
        omap, stats = self._map, self.stats
        put, digest = omap.put, key_digest
        for chunk, entry in _entries(info.log_path, info.size, self._check, self.cleaner.throttler):
            stats.map_bytes_read += LOG_OVERHEAD + entry.size
            if entry.offset < start:
                continue
            if entry.magic == rb.MAGIC:
                header = rb.read_header(chunk, entry.position)
                if header.is_control:
                    txns.on_control_batch(
                        header, rb.stored_end_txn_marker(chunk, entry.position, header)
                    )
                    omap.update_latest_offset(entry.offset)
                    continue
                if txns.on_batch(header):
                    stats.map_messages_read += header.records_count
                    omap.update_latest_offset(entry.offset)
                    continue
                data, fields = rb.record_fields(chunk, header, entry.position)
                base = header.base_offset
                for i in range(0, len(fields), rb.POSITION_FIELDS):
                    stats.map_messages_read += 1
                    offset = base + fields[i + 1]
                    klen = fields[i + 3]
                    if klen >= 0 and offset >= start:
                        kstart = fields[i + 2]
                        if not put(digest(data[kstart : kstart + klen]), offset):
                            return True
            else:
                for m in deep_messages(chunk, entry):
                    stats.map_messages_read += 1
                    if m.key is not None and m.offset >= start:
                        if not put(digest(m.key), m.offset):
                            return True
            omap.update_latest_offset(entry.offset)
        return False

    # -- step 3 ----------------------------------------------------------------------------------
    def clean_group(self, group: list[SegmentInfo]) -> CleanedGroup:
        """Copy what survives of ``group`` into ``.cleaned`` files at its first base offset
        (Kafka's cleanSegments up to the swap). No lock needed. The files are removed again when
        this raises."""
        self.manager.enter(self.progress)
        try:
            return self._clean_group(group)
        finally:
            self.manager.leave(self.progress)

    def _clean_group(self, group: list[SegmentInfo]) -> CleanedGroup:
        plan = self.plan
        base = group[0].base_offset
        writer = _CleanedSegment(
            plan.log.directory, base, plan.config, self.cleaner.throttler, self.now_ms
        )
        self._txns.cleaned_index = writer.txn_index
        try:
            for info in group:
                self._txns.add_aborted(info.aborted)
                retain_legacy_deletes = info.mtime_ns // 1_000_000 > plan.legacy_delete_horizon_ms
                for chunk, entry in _entries(
                    info.log_path, info.size, self._check, self.cleaner.throttler
                ):
                    self.stats.bytes_read += LOG_OVERHEAD + entry.size
                    self._clean_entry(chunk, entry, writer, retain_legacy_deletes)
                killpoints.reached("cleaning")
            self._check()
            writer.finish(group[-1].mtime_ns)
            killpoints.reached("cleaned-written")
        except BaseException:
            writer.close()
            swap.discard_cleaned(plan.log.directory, base)
            raise
        self.stats.bytes_written += writer.size
        return CleanedGroup(base, tuple(group), writer.size)

    def _retained(
        self, offset: int, key: bytes | memoryview | None, tombstone: bool, keep_deletes: bool
    ) -> bool:
        """Kafka's shouldRetainRecord."""
        if offset > self._map.latest_offset:
            return True
        if key is None:
            self.stats.invalid_messages += 1
            return False
        return offset >= self._map.get(key_digest(key)) and (not tombstone or keep_deletes)

    def _clean_entry(
        self, chunk: bytes, entry: ShallowEntry, writer: _CleanedSegment, keep_legacy: bool
    ) -> None:
        if entry.magic == rb.MAGIC:
            self._clean_batch(chunk, entry, writer)
            return
        stats = self.stats
        messages = deep_messages(chunk, entry)
        stats.messages_read += len(messages)
        kept = [
            m for m in messages if self._retained(m.offset, m.key, m.value is None, keep_legacy)
        ]
        stats.messages_written += len(kept)
        if not kept:
            return
        if len(kept) == len(messages):
            writer.append(
                kept[0].offset,
                entry.timestamp,
                entry.offset,
                memoryview(chunk)[entry.position : entry.next_position],
            )
            return
        lat = entry.timestamp_type == TimestampType.LOG_APPEND_TIME
        data = build_legacy(
            [(m.offset, m.timestamp, m.attributes, m.key, m.value) for m in kept],
            entry.magic,
            Codec(entry.codec),
            entry.timestamp_type,
            entry.timestamp if lat else None,
        )
        _append_built(writer, kept[0].offset, data)

    def _clean_batch(self, chunk: bytes, entry: ShallowEntry, writer: _CleanedSegment) -> None:
        """Kafka's filterTo for one record batch, with its checkBatchRetention."""
        stats = self.stats
        header = rb.read_header(chunk, entry.position)
        horizon = header.delete_horizon_ms
        keep_deletes = horizon is None or self.now_ms < horizon
        if header.is_control:
            txn_gone = self._txns.on_control_batch(
                header, rb.stored_end_txn_marker(chunk, entry.position, header)
            )
            discard_records = txn_gone and not keep_deletes
        else:
            txn_gone = discard_records = self._txns.on_batch(header)
        data, fields = rb.record_fields(chunk, header, entry.position)
        count = len(fields) // rb.POSITION_FIELDS
        stats.messages_read += count
        kept: list[int] = []
        tombstones = False
        if header.is_control:
            kept = [] if discard_records else list(range(count))
        elif not discard_records:
            for n, i in enumerate(range(0, len(fields), rb.POSITION_FIELDS)):
                offset = header.base_offset + fields[i + 1]
                klen, tombstone = fields[i + 3], fields[i + 5] < 0
                key = data[fields[i + 2] : fields[i + 2] + klen] if klen >= 0 else None
                if self._retained(offset, key, tombstone, keep_deletes):
                    kept.append(n)
                    tombstones = tombstones or tombstone
        stats.messages_written += len(kept)
        spec = rb.BatchSpec(
            base_offset=header.base_offset,
            codec=Codec(header.codec),
            log_append_time=header.log_append_time,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            partition_leader_epoch=header.partition_leader_epoch,
            is_transactional=header.is_transactional,
            is_control=header.is_control,
        )
        if not kept:
            # A producer's last batch (or last marker) stays, empty, so that its sequence
            # number (its epoch) survives.
            if header.producer_id >= 0 and self._last_of_producer(header):
                out = rb.build_empty_batch(spec, header.last_offset_delta, header.max_timestamp)
                _append_built(writer, header.base_offset, out)
            return
        # A marker left without its transaction goes after delete.retention.ms, like a tombstone.
        tombstones = tombstones or (header.is_control and txn_gone)
        set_horizon = tombstones and horizon is None
        if len(kept) == count and not set_horizon:
            writer.append(
                header.base_offset,
                entry.timestamp,
                entry.offset,
                memoryview(chunk)[entry.position : entry.next_position],
            )
            return
        if set_horizon:
            horizon = self.now_ms + self.plan.config.delete_retention_ms
        if horizon is not None:
            spec = dataclasses.replace(spec, delete_horizon_ms=horizon)
        out = rb.rebuild_batch(spec, header, data, fields, kept)
        _append_built(writer, header.base_offset, out)

    def _last_of_producer(self, header: rb.BatchHeader) -> bool:
        """Kafka's isBatchLastRecordOfProducer."""
        last = self.plan.producer_last_records.get(header.producer_id)
        if last is None:
            return False
        last_data_offset, epoch = last
        if last_data_offset >= 0:
            return header.last_offset == last_data_offset
        return header.is_control and header.producer_epoch == epoch

    # -- steps 3 (swap) and 4, holding the log's lock ------------------------------------------
    def swap(self, cleaned: CleanedGroup) -> bool:
        """Swap ``cleaned`` in (the log's lock held); False when the log changed since the plan:
        then the cleaned files are removed and the cleaning should stop (``finish`` then keeps
        the checkpoint)."""
        log = self.plan.log
        try:
            self._check()
            new = log.replace_segments(
                [s.segment for s in cleaned.replaced], self.plan.truncations, self.now_ms
            )
        except BaseException:
            swap.discard_cleaned(log.directory, cleaned.base_offset)
            raise
        if new is None:
            swap.discard_cleaned(log.directory, cleaned.base_offset)
            self.swapped = False
            return False
        self.stats.segments_before += len(cleaned.replaced)
        self.stats.segments_after += 1
        return True

    def finish(self) -> CleaningResult:
        """Move the log's checkpoint to the end of the cleaned section (the log's lock held;
        memory only, the caller writes the checkpoint file) and return what was done."""
        log = self.plan.log
        if self.swapped and log.truncations == self.plan.truncations:
            log.first_dirty_offset = self.end_offset
        killpoints.reached("checkpoint")
        stats = self.stats
        stats.ended = time.monotonic()
        stats.cpu_s = time.process_time() - stats.cpu_started
        return CleaningResult(
            log.topic,
            log.partition,
            self.plan.first_dirty_offset,
            self.end_offset,
            stats,
            self.swapped,
        )

    def discard(self, cleaned: CleanedGroup) -> None:
        """Remove a cleaned group that will not be swapped in."""
        swap.discard_cleaned(self.plan.log.directory, cleaned.base_offset)
        self.swapped = False
