"""A partition's log: an ordered list of segments in ``<log.dir>/<topic>-<partition>/``.

Split as Kafka splits it: opening the directory and recovery are storage/log_loader.py
(Kafka's LogLoader), which segments retention deletes is storage/retention.py, one segment's
files (and the one code path writing their data and indexes) storage/segment.py; this module
is the log itself (Kafka's UnifiedLog with its LocalLog): appends with their producer state,
rolls, reads, truncation, the deletion of segments, flushing and closing.

Invariants: segments are sorted by base offset and never empty as a list; only the last one
(the active segment) is appended to; ``log_end_offset`` is the offset the next appended set must
start at; ``recovery_point`` <= ``log_end_offset`` and everything below it has been fsynced.

Flush policy: ``append`` flushes by itself when flush.messages unflushed messages have
accumulated (so with flush.messages=1 an acks=-1 produce is on disk when ``append`` returns, and
the broker need not call ``flush``); flush.ms is applied by ``flush_if_due``, which the
LogManager calls. A roll fsyncs the old segment and advances the recovery point.

Resources: see LogSegment (one lazily opened descriptor per segment that has been read or
appended, index memory only for the active segment and for inactive segments that were
searched). Errors: the StorageError subclasses named on each method; OSError from the file system
propagates unchanged.
"""

from __future__ import annotations

import bisect
import base64
import os
import random
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, overload

import structlog

from protocol import recordbatch as rb
from protocol.errors import CorruptRecordError
from protocol.records import LOG_OVERHEAD, check_entry, first_offset, iter_shallow
from storage.durable import fsync_dir, write_atomically
from storage.config import INT_MAX, LogConfig
from storage.errors import (
    InconsistentTopicIdError,
    InvalidAppendError,
    InvalidTopicError,
    LogClosedError,
    OffsetOutOfRangeError,
    RecordSetTooLargeError,
)
from storage import killpoints, swap
from storage.layout import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    PARTITION_METADATA_FILE,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_partition_dir,
    segment_path,
)
from storage.log_loader import LogLoader, ensure_indexes, recovery_size_limit
from storage.leader_epoch import CorruptEpochCheckpointError, LeaderEpochCache
from storage.producer_state import (
    SNAPSHOT_SUFFIX,
    CompletedTxn,
    CorruptSnapshotError,
    Duplicate,
    ProducerAppendInfo,
    ProducerStateManager,
)
from storage.retention import RetentionChecks, deletable_segments, size_breach
from storage.segment import LogSegment, TimestampOffset
from storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from protocol.validator import ValidatedRecords

logger = structlog.get_logger(__name__)

# Shared by default: seeding a Random per log costs more than opening an idle log.
_JITTER_RNG = random.Random()

MAX_OPEN_INACTIVE_FDS = 4
# What a segment without message timestamps (magic 0, judged by its mtime) counts as in
# _running_max_timestamps: a search never passes over it unread.
UNBOUNDED_TIMESTAMP = 2**63 - 1
# Where the last appended sets of the active segment start, for reads without an index scan.
RECENT_SETS = 64
_SIZE_FIELD = struct.Struct(">i")  # the first entry's size, at byte 8 of a set

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


@dataclass(frozen=True, slots=True)
class FetchData:
    """A byte range of a segment file for a fetch response: sendfile ``length`` bytes of
    ``fileno`` from ``position``, or call ``read_bytes``. ``length`` 0 (and ``fileno`` -1) means
    no data. The last message may be cut off, as in Kafka. The descriptor belongs to the Log:
    it is valid until the next ``read``, ``append`` or ``roll`` of this Log (a roll closes the
    old segment's file, and at most MAX_OPEN_INACTIVE_FDS inactive segment files stay open per
    log), the segment's physical deletion or ``close``; dup() it to keep it longer."""

    fileno: int
    position: int
    length: int
    high_watermark: int
    # No record of the range is at or past it (Kafka's fetchUpperBoundOffset): where a
    # read_committed fetch stops collecting aborted transactions. The fetch offset when empty.
    upper_bound: int = -1

    def read_bytes(self) -> bytes:
        """The bytes of the range (os.pread; shorter only if the file shrank meanwhile)."""
        chunks = []
        position, remaining = self.position, self.length
        while remaining > 0:
            chunk = os.pread(self.fileno, remaining, position)
            if not chunk:
                break
            chunks.append(chunk)
            position += len(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)


class AppendResult(NamedTuple):
    """What :meth:`Log.append` did besides appending."""

    rolled: int | None  # base offset of the segment it rolled, or None
    synced: bool  # it fsynced (a roll, or flush.messages reached)
    # A lone batch an idempotent producer retried, already stored: nothing was appended, the
    # producer is answered with these original offsets.
    duplicate: Duplicate | None = None


class ReplicaAppend(NamedTuple):
    """What :meth:`Log.append_replica` appended: offsets ``first_offset``..``last_offset`` in
    ``entries`` entries taking ``size`` bytes of the buffer (0 entries: nothing complete)."""

    first_offset: int
    last_offset: int
    entries: int
    size: int
    rolled: int | None
    synced: bool


class Log:
    """One partition's segmented log; see the module docstring.

    ``needs_recovery`` (no clean-shutdown marker) makes the constructor scan every segment from
    the one holding ``recovery_point``, truncate at the first bad entry and drop later segments.
    An interrupted swap of cleaned segments is completed or rolled back first (storage/swap.py).

    ``first_dirty_offset`` is the log cleaner's checkpoint (storage/cleaner.py): everything
    below it has been cleaned; None when the log was never cleaned. A truncation below it lowers
    it and calls ``on_first_dirty_lowered`` (the LogManager rewrites its checkpoint file, so a
    crash cannot leave appends made after the truncation counted as clean).
    """

    def __init__(
        self,
        directory: str,
        config: LogConfig,
        *,
        clock: Callable[[], int],
        recovery_point: int = 0,
        log_start_offset: int = 0,
        needs_recovery: bool = True,
        rng: random.Random | None = None,
        first_dirty_offset: int | None = None,
        on_first_dirty_lowered: Callable[[], None] | None = None,
    ) -> None:
        parsed = parse_partition_dir(os.path.basename(os.path.normpath(directory)))
        if parsed is None:
            raise InvalidTopicError(
                f"log directory {directory!r} is not named "
                f"<topic>-<partition> with a legal topic name"
            )
        self.topic, self.partition = parsed
        self.directory = directory
        self.config = config
        self._clock = clock
        self._rng = rng or _JITTER_RNG
        # loaded below (storage/log_loader.py)
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        # Per inactive segment, the largest message timestamp in it and every segment before it
        # (unbounded from a segment without message timestamps on): bisected by
        # offset_for_timestamp to pass over the segments that cannot hold a timestamp. Every
        # change to the segment list clears it (None); the next search rebuilds it.
        self._running_max_timestamps: list[int] | None = None
        # (due time ms, segment renamed to .deleted) awaiting physical removal.
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._retention = RetentionChecks(self.topic, self.partition)
        # Inactive segments whose .log descriptor a read opened, least recently read first.
        self._open_inactive: list[LogSegment] = []
        # first offset -> (position, first entry bytes) of the last RECENT_SETS sets appended to
        # _recent_segment (the active segment when it was filled; emptied on truncation).
        self._recent_sets: dict[int, tuple[int, int]] = {}
        self._producers = ProducerStateManager(self.name)  # loaded below: _load_producer_state
        # The lowest base offset of the segments whose .txnindex loading emptied or found
        # damaged: the producer state is replayed from there to rebuild them.
        self._txn_rebuild_from: int | None = None
        self._recent_segment: LogSegment | None = None
        self._closed = False
        # The high watermark of a replicated partition (set by the broker's replica manager);
        # None: a single replica, whose every appended message is committed.
        self._high_watermark: int | None = None
        self.first_dirty_offset = first_dirty_offset
        self.on_first_dirty_lowered = on_first_dirty_lowered
        # Counts truncations: a cleaning prepared before one must not be swapped in after it.
        self.truncations = 0
        os.makedirs(directory, exist_ok=True)
        self.leader_epochs = LeaderEpochCache(directory)
        loaded = LogLoader(
            directory,
            self.topic,
            self.partition,
            config,
            lambda base, create: self._new_segment(base, create=create),
        ).load(recovery_point, needs_recovery)
        self._segments = loaded.segments
        self._bases = [segment.base_offset for segment in loaded.segments]
        self._txn_rebuild_from = loaded.txn_rebuild_from
        self.recovery_point = recovery_point
        active = self.active_segment
        self._ensure_index(active)
        # Its max timestamp came from recovery, or from the final time index entry written
        # when it was sealed at the clean shutdown: no scan needed.
        self.log_end_offset = active.next_offset()
        if not needs_recovery or self.recovery_point > self.log_end_offset:
            self.recovery_point = self.log_end_offset
        self._log_start_offset = max(log_start_offset, self._bases[0])
        if self._log_start_offset > self.log_end_offset:
            # Kafka's LogLoader does the same: the messages up to the checkpointed log start
            # were lost in a crash (never fsynced); offsets below it must not be handed out
            # again, so the log restarts empty there.
            logger.warning(
                "log start offset is beyond the recovered log end; the log restarts empty there",
                topic=self.topic,
                partition=self.partition,
                log_start_offset=self._log_start_offset,
                log_end_offset=self.log_end_offset,
                action="none: the messages lost were never fsynced and had been deleted "
                "(DeleteRecords) anyway",
            )
            self.truncate_fully_and_start_at(self._log_start_offset)
        self._load_producer_state(clean_shutdown=not needs_recovery)
        self._load_leader_epochs()
        self.last_flush_ms = clock()

    # -- properties --------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def log_start_offset(self) -> int:
        """The first offset readable: the first segment's base offset, or more once DeleteRecords
        (KIP-107) has moved it into that segment (:meth:`increment_log_start_offset`)."""
        return self._log_start_offset

    @property
    def first_segment_base(self) -> int:
        """The base offset of the oldest segment (Kafka's localLogStartOffset); <= the log
        start offset."""
        return self._bases[0]

    def increment_log_start_offset(self, offset: int) -> bool:
        """KIP-107 (DeleteRecords): make ``offset`` the first readable offset; returns whether
        the log start offset moved (False: it was already at or past ``offset``). Nothing is
        written: the caller checkpoints it (LogManager.checkpoint_log_start_offsets) and may
        delete the segments now wholly below it (:meth:`delete_segments_before`; retention does
        it too). Raises OffsetOutOfRangeError beyond the high watermark, ValueError below 0."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"{self.name}: log start offset {offset} is negative")
        if offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"Cannot increment the log start offset to {offset} of partition {self.name} "
                f"since it is larger than the high watermark {self.high_watermark}",
                offset=offset,
                log_start_offset=self._log_start_offset,
                log_end_offset=self.log_end_offset,
            )
        if offset <= self._log_start_offset:
            return False
        self._log_start_offset = offset
        self._recent_sets = {k: v for k, v in self._recent_sets.items() if k >= offset}
        self.leader_epochs.truncate_from_start(offset)
        logger.info(
            "log start offset moved",
            topic=self.topic,
            partition=self.partition,
            log_start_offset=offset,
        )
        return True

    @property
    def high_watermark(self) -> int:
        """The offset below which messages are committed: the log end offset for a single
        replica, else what :meth:`update_high_watermark` last set."""
        hw = self._high_watermark
        return self.log_end_offset if hw is None else hw

    @property
    def replicated(self) -> bool:
        """Whether the high watermark is kept apart from the log end offset."""
        return self._high_watermark is not None

    def update_high_watermark(self, offset: int) -> int:
        """Make this a replicated log with high watermark ``offset``, kept within
        [log_start_offset, log_end_offset]; returns the value set. Truncation and retention
        keep it within those bounds afterwards."""
        hw = min(max(offset, self.log_start_offset), self.log_end_offset)
        self._high_watermark = hw
        return hw

    def _clamp_high_watermark(self) -> None:
        # Written only when it changes: the broker sets the high watermark from its event loop
        # while retention (which never passes it) runs in a worker thread.
        hw = self._high_watermark
        if hw is not None:
            clamped = min(max(hw, self.log_start_offset), self.log_end_offset)
            if clamped != hw:
                self._high_watermark = clamped

    @property
    def size(self) -> int:
        return sum(segment.size for segment in self._segments)

    @property
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self.recovery_point

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.name} in {self.directory} is closed")

    def _jitter(self) -> int:
        jitter = min(self.config.segment_jitter_ms, self.config.segment_ms)
        return self._rng.randrange(jitter) if jitter > 0 else 0

    def _new_segment(self, base_offset: int, *, create: bool) -> LogSegment:
        return LogSegment(
            self.directory,
            base_offset,
            self.config,
            now_ms=self._clock(),
            jitter_ms=self._jitter(),
            create=create,
        )

    # -- loading (storage/log_loader.py) ----------------------------------------------------
    def _ensure_index(self, segment: LogSegment) -> None:
        before = segment.max_timestamp
        ensure_indexes(segment, self.config, self.topic, self.partition)
        if segment.max_timestamp != before:  # its indexes were rebuilt by a scan
            self._running_max_timestamps = None

    # -- appending ---------------------------------------------------------------------------
    @overload
    def append(self, validated: ValidatedRecords) -> AppendResult: ...
    @overload
    def append(self, validated: ValidatedRecords, *, may_sync: bool) -> AppendResult | None: ...
    def append(self, validated: ValidatedRecords, *, may_sync: bool = True) -> AppendResult | None:
        """Append a validated message set (final offsets and CRCs) at the log end and record
        its producers' batches; returns whether it rolled a new segment and whether it fsynced,
        or the :class:`~storage.producer_state.Duplicate` a lone retried batch is (then nothing
        is appended). With ``may_sync`` False, None when the append would fsync (a roll, or
        flush.messages reached), nothing done: the caller appends again where waiting on the
        disk is allowed (the broker's event loop is not); otherwise it only writes to the page
        cache and the index maps.

        Every batch with a producer id is checked against the producer state first (Kafka's
        UnifiedLog.analyzeAndValidateProducerState: duplicates, epochs, sequences, ongoing
        transactions; storage/producer_state.py) and recorded only once the set is written:
        either all of it is appended and recorded, or nothing changes. A transactional batch
        starts or continues its producer's transaction.

        Rolls first when the set would not fit (segment.bytes, full index, relative offset
        overflow) or segment.ms has passed on message timestamps; flushes afterwards when
        flush.messages is reached. Raises InvalidAppendError if the set does not start at
        ``log_end_offset`` or is empty, RecordSetTooLargeError if it exceeds segment.bytes
        (checked before anything changes: segment.bytes is checked here and nowhere else), a
        ProducerStateError (OutOfOrderSequenceError, InvalidProducerEpochError,
        InvalidTxnStateError, DuplicateSequenceError) for a refused batch, nothing written.
        A write or fsync that fails (a full or failing disk) raises OSError and leaves the log
        as it was before the call: no torn tail, no index entry, the same log end offset."""
        self._check_open()
        buffer = validated.buffer
        first, last = validated.first_offset, validated.last_offset
        if first != self.log_end_offset:
            raise InvalidAppendError(
                f"{self.name}: message set starts at offset {first}, but "
                f"the log end offset is {self.log_end_offset}"
            )
        if not len(buffer) or last < first:
            raise InvalidAppendError(
                f"{self.name}: empty message set or offsets {first}..{last} running backwards"
            )
        if len(buffer) > self.config.segment_bytes:
            raise RecordSetTooLargeError(
                f"{self.name}: message set of {len(buffer)} bytes exceeds segment.bytes "
                f"{self.config.segment_bytes}"
            )
        roll = self._roll_due(len(buffer), last, validated.max_timestamp)
        if not may_sync and (roll or last + 1 - self.recovery_point >= self.config.flush_messages):
            return None
        infos: list[ProducerAppendInfo] = []
        if validated.producer_batches:
            checked = self._producers.prepare_client_append(validated.producer_batches)
            if isinstance(checked, Duplicate):
                return AppendResult(None, False, checked)
            infos = checked
        rolled = self._append_set(
            first, last, validated.max_timestamp, validated.offset_of_max_timestamp, buffer, roll
        )
        for info in infos:
            self._producers.update(info)
        return AppendResult(rolled, self._flush_appended(first) or rolled is not None)

    def append_control(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        leader_epoch: int,
        now_ms: int,
        *,
        log_append_time: bool = False,
    ) -> int:
        """Write a COMMIT or ABORT marker of ``producer_id``'s transaction at the log end (what
        WriteTxnMarkers asks of a partition leader) and return its offset.

        The marker is a control batch as Kafka's MemoryRecords.withEndTransactionMarker builds
        it: one record (EndTransactionMarker key and value, timestamp ``now_ms``), transactional
        and control attributes, the producer's id and epoch, base sequence -1, partition leader
        epoch ``leader_epoch``, LogAppendTime with ``log_append_time`` (the topic's type, as
        Kafka's validator stamps it); it is appended like any set (rolling, flush.messages). It
        completes the producer's ongoing transaction: an ABORT gets an entry in the segment's
        .txnindex, and the last stable offset moves past the transaction. A producer without
        an ongoing transaction gets its marker all the same (aborts of empty or unknown
        transactions), and a newer epoch becomes the producer's (KIP-890: its next batch
        starts at sequence 0).

        Raises InvalidProducerEpochError for an epoch older than the producer's,
        TransactionCoordinatorFencedError for a coordinator epoch older than its last marker's
        (nothing written), OSError as :meth:`append` does (the log as it was)."""
        self._check_open()
        offset = self.log_end_offset
        info = self._producers.prepare_update(producer_id, client=True)
        completed = info.append_marker(producer_epoch, coordinator_epoch, offset, now_ms, commit)
        batch = rb.build_end_txn_marker(
            rb.EndTxnMarker(commit, coordinator_epoch),
            base_offset=offset,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            timestamp=now_ms,
            partition_leader_epoch=leader_epoch,
            log_append_time=log_append_time,
        )
        self._append_set(offset, offset, now_ms, offset, batch)
        try:
            self._record(info, completed, self.active_segment)
        except OSError:
            self.truncate_to(offset)  # the .txnindex entry could not be written
            raise
        self._flush_appended(offset)
        self._producers.forget_replicated(self.high_watermark)
        return offset

    def _record(
        self, info: ProducerAppendInfo, completed: CompletedTxn | None, segment: LogSegment
    ) -> None:
        """Apply an appended batch's producer changes; a transaction it completed is indexed
        (an abort, in the .txnindex of ``segment``, which holds the marker) then completed.
        OSError from the .txnindex leaves the producer state as it was."""
        if completed is not None:
            self._index_completed(self._producers, completed, segment, info)
        else:
            self._producers.update(info)

    @staticmethod
    def _index_completed(
        producers: ProducerStateManager,
        txn: CompletedTxn,
        segment: LogSegment,
        info: ProducerAppendInfo | None = None,
    ) -> None:
        """Kafka's UnifiedLog.append after a marker: the aborted transaction's .txnindex entry
        (with the LSO it leaves; unless the index already has it: a replay over an intact
        index), then the transaction completed. ``info`` (the marker's changes) is applied
        after the entry is written."""
        lso = producers.last_stable_offset(txn)
        if txn.is_aborted and segment.txn_index.last_offset < txn.last_offset:
            segment.txn_index.append(
                AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso)
            )
        if info is not None:
            producers.update(info)
        producers.complete_txn(txn)

    def _append_set(
        self,
        first: int,
        last: int,
        max_timestamp: int,
        offset_of_max_timestamp: int,
        buffer: bytes | bytearray | memoryview,
        roll: bool | None = None,
    ) -> int | None:
        """Append one set (rolling first when due, or as ``roll`` says when the caller has
        asked ``_roll_due`` already); the base offset of a segment rolled, or None. OSError
        leaves the segment as it was (LogSegment.append)."""
        before = self.active_segment
        if roll is None:
            roll = self._roll_due(len(buffer), last, max_timestamp)
        segment = self.roll() if roll else before
        rolled = segment.base_offset if segment is not before else None
        position = segment.size
        segment.append(first, max_timestamp, offset_of_max_timestamp, buffer)
        self.log_end_offset = last + 1
        recent = self._recent_sets
        if self._recent_segment is not segment:
            recent.clear()
            self._recent_segment = segment
        recent[first] = (position, LOG_OVERHEAD + _SIZE_FIELD.unpack_from(buffer, 8)[0])
        if len(recent) > RECENT_SETS:
            del recent[next(iter(recent))]
        return rolled

    def _flush_appended(self, first: int) -> bool:
        """After appending from ``first``: flush when flush.messages is reached; whether it
        fsynced. A failed fsync takes the appended sets back (flush.messages promised them
        durable before the answer) and raises the OSError."""
        if self.unflushed_messages < self.config.flush_messages:
            return False
        try:
            self.flush()
        except OSError:
            self.truncate_to(first)
            raise
        return True

    def append_replica(self, buffer: bytes | memoryview) -> ReplicaAppend:
        """A follower's append of the leader's entries as they are (KIP-32: no re-validation,
        no LogAppendTime re-stamping, no offset assignment): every complete entry of
        ``buffer`` (a fetch response may end inside one; the rest is ignored), each as its own
        set, so this log builds its own indexes as the leader's did for one-batch produces.
        Record batches of a newer partition leader epoch start that epoch here.

        Batches with a producer id are recorded as the leader's were (Kafka's REPLICATION
        origin: no sequence or duplicate checks, stale epochs accepted), markers complete
        their transactions and aborts are indexed, as on the leader.

        Raises CorruptRecordError for an entry whose CRC or size is wrong (nothing of it or
        after it is appended), InvalidAppendError when offsets do not follow the log end
        offset and each other (gaps, as compaction leaves them, are allowed),
        InvalidTxnStateError for a non-transactional batch of a producer in a transaction,
        OSError as :meth:`append` does (what was appended before it stays)."""
        self._check_open()
        limit = recovery_size_limit(self.config)
        first = last = -1
        count = size = 0
        rolled: int | None = None
        for entry in iter_shallow(buffer):
            if entry.magic > rb.MAGIC:
                raise CorruptRecordError(
                    f"{self.name}: entry at offset {entry.offset} has unknown magic {entry.magic}"
                )
            check_entry(buffer, entry, limit)
            start = first_offset(buffer, entry)
            if start < self.log_end_offset or entry.offset < start:
                raise InvalidAppendError(
                    f"{self.name}: replicated entry holds offsets {start}..{entry.offset}, but "
                    f"the log end offset is {self.log_end_offset}"
                )
            data = memoryview(buffer)[entry.position : entry.next_position]
            h = rb.read_header(buffer, entry.position) if entry.magic == rb.MAGIC else None
            info = completed = None
            if h is not None and h.producer_id >= 0:
                info = self._producers.prepare_update(h.producer_id, client=False)
                completed = info.append_stored(buffer, entry.position, h)
            if h is not None and h.partition_leader_epoch > self.leader_epochs.latest_epoch:
                self.leader_epochs.assign(h.partition_leader_epoch, h.base_offset)
            try:
                set_rolled = self._append_set(
                    start, entry.offset, entry.timestamp, entry.offset, data
                )
                if info is not None:
                    self._record(info, completed, self.active_segment)
            except OSError:
                if self.log_end_offset > start:  # the .txnindex entry failed: take it back
                    self.truncate_to(start)
                self.leader_epochs.truncate_from_end(self.log_end_offset)
                raise
            rolled = set_rolled if set_rolled is not None else rolled
            first = start if first < 0 else first
            last = entry.offset
            count += 1
            size = entry.next_position
        synced = count > 0 and self._flush_appended(first)
        self._producers.forget_replicated(self.high_watermark)
        return ReplicaAppend(first, last, count, size, rolled, synced or rolled is not None)

    def update_config(self, config: LogConfig) -> None:
        """Apply a changed topic config: later appends, rolls, retention and flushes use it."""
        self._check_open()
        self.config = config

    def latest_timestamp(self) -> int:
        """The largest message timestamp of the newest non-empty segment, -1 if none (where a
        LogAppendTime topic continues after a restart, whatever the wall clock says)."""
        for segment in reversed(self._segments):
            if segment.size > 0:
                return segment.max_timestamp
        return -1

    @property
    def topic_id(self) -> uuid.UUID | None:
        """The KIP-516 topic id in this directory's partition.metadata, None without one."""
        path = os.path.join(self.directory, PARTITION_METADATA_FILE)
        try:
            with open(path, encoding="ascii") as f:
                fields = dict(line.split(": ", 1) for line in f.read().splitlines() if ": " in line)
        except FileNotFoundError:
            return None
        text = fields.get("topic_id", "")
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        if fields.get("version") != "0" or len(raw) != 16:
            raise InconsistentTopicIdError(
                f"{self.name}: {path} is not a version-0 partition "
                f"metadata file with a 16-byte topic id"
            )
        return uuid.UUID(bytes=raw)

    def assign_topic_id(self, topic_id: uuid.UUID) -> None:
        """Write partition.metadata (Kafka's format: ``version: 0`` and ``topic_id: <base64>``)
        unless it already names ``topic_id``; raises InconsistentTopicIdError when it names
        another."""
        self._check_open()
        stored = self.topic_id
        if stored == topic_id:
            return
        if stored is not None:
            raise InconsistentTopicIdError(
                f"{self.name}: partition.metadata holds topic id {stored}, not {topic_id}: the "
                f"directory belongs to another topic of the same name"
            )
        text = base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()
        write_atomically(
            os.path.join(self.directory, PARTITION_METADATA_FILE),
            f"version: 0\ntopic_id: {text}\n".encode("ascii"),
        )

    def _load_leader_epochs(self) -> None:
        """Kafka's LogLoader: the epochs cut to the log as recovered (a crash may have lost
        the tail an epoch started in, or retention moved the start)."""
        try:
            self.leader_epochs.load()
        except CorruptEpochCheckpointError as exc:
            logger.warning(
                "leader epoch checkpoint unreadable; starting without epochs",
                topic=self.topic,
                partition=self.partition,
                reason=str(exc),
                action="none: epochs are learnt again from the next leader; a follower "
                "truncates to its high watermark until then",
            )
            self.leader_epochs.clear()
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        self.leader_epochs.truncate_from_start(self.log_start_offset)

    def producer_state(self) -> ProducerStateManager:
        """The producers of this partition (storage/producer_state.py), loaded when the log
        opened and after every truncation; appends keep it current. Read it; only the Log
        records into it."""
        self._check_open()
        return self._producers

    # -- transactions ------------------------------------------------------------------------
    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction not yet decided, or decided by a marker
        the high watermark has not passed (Kafka's firstUnstableOffset, never below the log
        start offset); None when there is none. Memory only, safe without the lock."""
        first = self._producers.first_unstable_offset(self.high_watermark)
        return None if first is None else max(first, self._log_start_offset)

    @property
    def last_stable_offset(self) -> int:
        """The offset a read_committed consumer reads up to (KIP-98): the first unstable
        offset, capped by the high watermark."""
        first = self.first_unstable_offset
        hw = self.high_watermark
        return hw if first is None else min(first, hw)

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Every aborted transaction whose offsets overlap [start_offset, upper_bound_offset)
        (a read_committed fetch from ``start_offset`` sending data below
        ``upper_bound_offset``), from the .txnindex of the segment holding ``start_offset``
        and of the later ones until an entry's last stable offset reaches the upper bound
        (Kafka's LocalLog.collectAbortedTransactions). Raises CorruptIndexError for a .txnindex
        damaged since the log opened."""
        self._check_open()
        found: list[AbortedTxn] = []
        for segment in self._segments[self._segment_index(start_offset) :]:
            txns, complete = segment.txn_index.collect(start_offset, upper_bound_offset)
            found += txns
            if complete:
                break
        return found

    def _load_producer_state(self, *, clean_shutdown: bool) -> None:
        """Kafka's LogLoader.rebuildProducerState: the newest sound snapshot within the log,
        then the batch headers after it.

        A cleanly shut down log without any snapshot was written before snapshots existed (or
        by a version that kept none): as Kafka does, skip the scan of every segment and write
        empty snapshots at the last two segment bases and the log end, so that a later
        truncation or reload does not scan either. Every close writes a snapshot at the log end,
        so an ordinary clean start replays nothing."""
        # Kafka's removeStraySnapshots: recovery or truncation cut the log below them.
        self._delete_producer_snapshots(
            lambda snapshot: self.log_start_offset <= snapshot <= self.log_end_offset
        )
        if clean_shutdown and not self._snapshot_offsets() and self._txn_rebuild_from is None:
            self._producers = ProducerStateManager(self.name)
            if self.log_end_offset == self.log_start_offset:
                return  # nothing to scan, ever
            for offset in sorted({*self._bases[-2:], self.log_end_offset}):
                self._write_producer_snapshot(offset)
            return
        # Recovery emptied some .txnindex files: replay from a snapshot below them.
        rebuild_from, self._txn_rebuild_from = self._txn_rebuild_from, None
        producers, start = self._load_producer_snapshot(rebuild_from)
        first = self._segment_index(max(start, self.log_start_offset))
        for segment in self._segments[first:]:
            for buf, position, h in segment.producer_batches():
                if h.base_offset < start:
                    continue
                completed = producers.replay(buf, position, h)
                if completed is not None:
                    self._index_completed(producers, completed, segment)
        self._producers = producers

    def _snapshot_offsets(self) -> list[int]:
        return sorted(
            int(name[: -len(SNAPSHOT_SUFFIX)])
            for name in os.listdir(self.directory)
            if name.endswith(SNAPSHOT_SUFFIX) and name[: -len(SNAPSHOT_SUFFIX)].isdigit()
        )

    def _load_producer_snapshot(self, at_most: int | None) -> tuple[ProducerStateManager, int]:
        """(state, offset it holds up to) from the newest sound snapshot (all lie within the
        log) at or below ``at_most`` (None: any), or an empty state from the log start."""
        for offset in reversed(self._snapshot_offsets()):
            if at_most is not None and offset > at_most:
                continue
            path = segment_path(self.directory, offset, SNAPSHOT_SUFFIX)
            try:
                with open(path, "rb") as f:
                    return ProducerStateManager.from_snapshot(f.read(), self.name), offset
            except (OSError, CorruptSnapshotError) as exc:
                logger.warning(
                    "ignoring producer state snapshot",
                    topic=self.topic,
                    partition=self.partition,
                    file=path,
                    reason=str(exc),
                    action="none: the state is rebuilt from the log",
                )
        return ProducerStateManager(self.name), self.log_start_offset

    def _write_producer_snapshot(self, offset: int) -> None:
        """Kafka's takeSnapshot: the loaded state as of ``offset`` (the log end), durably."""
        write_atomically(
            segment_path(self.directory, offset, SNAPSHOT_SUFFIX), self._producers.snapshot()
        )

    def _delete_producer_snapshots(self, keep: Callable[[int], bool]) -> None:
        for offset in self._snapshot_offsets():
            if not keep(offset):
                os.unlink(segment_path(self.directory, offset, SNAPSHOT_SUFFIX))

    def _roll_due(self, set_size: int, last_offset: int, max_timestamp: int) -> bool:
        """Kafka's LogSegment.shouldRoll: the set would not fit segment.bytes or the offset
        index's relative offsets, an index is full, or segment.ms has passed (KIP-33's clock,
        read only for a segment that has sets). Asked before every append: the cheap tests
        come first."""
        segment = self.active_segment
        config = self.config
        size = segment.size
        return (
            size > config.segment_bytes - set_size
            or last_offset - segment.base_offset > INT_MAX
            or segment.indexes_full()
            or (
                size > 0
                and segment.time_waited_for_roll(self._clock, max_timestamp)
                > config.max_segment_ms - segment.jitter_ms
            )
        )

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (a no-op on an empty active
        segment), seal and fsync the old one and advance the recovery point to it."""
        self._check_open()
        old = self.active_segment
        if old.size == 0:
            return old
        base = self.log_end_offset
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            path = segment_path(self.directory, base, suffix)
            if os.path.exists(path):
                logger.warning(
                    "removing stale file in the way of a new segment",
                    topic=self.topic,
                    partition=self.partition,
                    file=path,
                )
                os.unlink(path)
        segment = self._new_segment(base, create=True)
        old.seal()
        old.release_fd()
        self._segments.append(segment)
        self._bases.append(base)
        self._running_max_timestamps = None
        self._write_producer_snapshot(base)
        fsync_dir(self.directory)
        self.flush(base)
        return segment

    # -- flushing ----------------------------------------------------------------------------
    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding data between the recovery point and ``offset`` (default:
        the log end offset) and advance the recovery point to it."""
        self._check_open()
        offset = self.log_end_offset if offset is None else offset
        if offset <= self.recovery_point:
            return
        start = self._segment_index(self.recovery_point)
        for segment in self._segments[start:]:
            if segment.base_offset >= offset:
                break
            segment.flush()
        self.recovery_point = offset
        self.last_flush_ms = self._clock()

    def flush_due(self, now_ms: int) -> bool:
        """Whether unflushed data is older than flush.ms (memory only: no I/O)."""
        return self.unflushed_messages > 0 and now_ms - self.last_flush_ms >= self.config.flush_ms

    def flush_if_due(self, now_ms: int) -> bool:
        """Flush when :meth:`flush_due`; True if it flushed."""
        if self.flush_due(now_ms):
            self.flush()
            return True
        return False

    # -- reading -----------------------------------------------------------------------------
    def _segment_index(self, offset: int) -> int:
        """Index in ``_segments`` of the segment that would hold ``offset`` (0 below the log
        start)."""
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        min_one_message: bool = False,
        max_offset: int | None = None,
    ) -> FetchData:
        """Up to ``max_bytes`` from ``offset`` (from the start of the compressed wrapper holding
        it); with ``min_one_message`` at least the whole first message (Fetch v3). Empty at the
        log end. ``max_offset`` (a consumer's high watermark): nothing at or after it is
        returned, not even with ``min_one_message``. Raises OffsetOutOfRangeError outside
        [log_start_offset, log_end_offset], ValueError for a negative ``max_bytes``."""
        self._check_open()
        if max_bytes < 0:
            raise ValueError(f"{self.name}: max_bytes {max_bytes} is negative")
        if not self.log_start_offset <= offset <= self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"{self.name}: offset {offset} is outside the log's range "
                f"[{self.log_start_offset}, {self.log_end_offset}]",
                offset=offset,
                log_start_offset=self.log_start_offset,
                log_end_offset=self.log_end_offset,
            )
        if max_offset is not None and offset >= max_offset:
            return FetchData(-1, 0, 0, self.high_watermark, offset)
        first = self._segment_index(offset)
        for i, segment in enumerate(self._segments[first:], first):
            self._ensure_index(segment)
            found = segment.read(offset, max_bytes, min_one_message=min_one_message)
            if found is not None:
                if segment is not self.active_segment:
                    self._track_open_fd(segment)
                fileno, position, length = found
                if max_offset is not None and (
                    i + 1 == len(self._bases) or self._bases[i + 1] > max_offset
                ):
                    stop = segment.position_of(max_offset)
                    if stop is not None:
                        length = min(length, stop - position)
                        if length <= 0:
                            return FetchData(-1, 0, 0, self.high_watermark, offset)
                upper = segment.offset_index.fetch_upper_bound(position + length)
                if upper is None:
                    upper = self._bases[i + 1] if i + 1 < len(self._bases) else self.log_end_offset
                if max_offset is not None:
                    upper = min(upper, max_offset)
                return FetchData(fileno, position, length, self.high_watermark, upper)
        return FetchData(-1, 0, 0, self.high_watermark, offset)

    def read_cached(
        self,
        offset: int,
        max_bytes: int,
        *,
        min_one_message: bool = False,
        max_offset: int | None = None,
    ) -> FetchData | None:
        """``read`` answered from memory alone, or None when it needs the files (then call
        ``read``). Answered: a read at the log end (or at ``max_offset``), and a read at the
        first offset of one of the last RECENT_SETS sets appended to the active segment (where a
        consumer at the tail reads next), whose position is remembered, so no index lookup or
        scan touches the disk, when everything from there to the log end fits in the limit and
        ``max_offset`` (if given) is the log end. Raises ValueError for a negative
        ``max_bytes``."""
        self._check_open()
        if max_bytes < 0:
            raise ValueError(f"{self.name}: max_bytes {max_bytes} is negative")
        if offset == self.log_end_offset or offset == max_offset:
            return FetchData(-1, 0, 0, self.high_watermark, offset)
        if offset < self._log_start_offset:
            return None  # read() raises OffsetOutOfRangeError
        if max_offset is not None and max_offset < self.log_end_offset:
            return None
        segment = self.active_segment
        found = self._recent_sets.get(offset)
        if found is None or self._recent_segment is not segment:
            return None
        position, entry_bytes = found
        limit = max(max_bytes, entry_bytes) if min_one_message else max_bytes
        if segment.size - position > limit:
            return None  # read() ends the answer on a whole entry: that needs the file
        return FetchData(
            segment.fileno(),
            position,
            segment.size - position,
            self.high_watermark,
            self.log_end_offset,
        )

    def _track_open_fd(self, segment: LogSegment) -> None:
        """Keep at most MAX_OPEN_INACTIVE_FDS inactive segment files open per log (least
        recently read closed first), so consumers reading history cannot run the broker out of
        descriptors."""
        if segment in self._open_inactive:
            self._open_inactive.remove(segment)
        self._open_inactive.append(segment)
        while len(self._open_inactive) > MAX_OPEN_INACTIVE_FDS:
            self._open_inactive.pop(0).release_fd()

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """KIP-79: the earliest message with timestamp >= ``timestamp`` as (timestamp, offset),
        None if there is none. -1 (latest) gives (-1, high watermark), -2 (earliest) gives
        (-1, log start offset).

        Segments whose largest timestamp is below the target are skipped; a segment whose
        candidate scan finds nothing (one without message timestamps, judged by its mtime) does
        not end the search as it does in Kafka: later segments are searched too. Messages below
        the log start offset are not found (Kafka's startingOffset)."""
        self._check_open()
        if timestamp == LATEST_TIMESTAMP:
            return TimestampOffset(-1, self.high_watermark)
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampOffset(-1, self.log_start_offset)
        if timestamp < 0:
            raise ValueError(
                f"{self.name}: timestamp {timestamp} is negative and neither -1 "
                f"(latest) nor -2 (earliest)"
            )
        segments = self._segments
        start = max(
            self._segment_index(self._log_start_offset),
            bisect.bisect_left(self._running_max(), timestamp),
        )
        for i in range(start, len(segments)):
            segment = segments[i]
            if segment.largest_timestamp < timestamp:
                continue
            self._ensure_index(segment)
            found = segment.find_offset_by_timestamp(timestamp, self._log_start_offset)
            if found is not None:
                return found
        return None

    def _running_max(self) -> list[int]:
        """_running_max_timestamps, rebuilt when the segment list changed. An inactive
        segment's max timestamp no longer changes; the active segment is not in it."""
        running = self._running_max_timestamps
        if running is None:
            running, largest = [], -1
            for segment in self._segments[:-1]:
                own = segment.max_timestamp
                largest = max(largest, own if own >= 0 else UNBOUNDED_TIMESTAMP)
                running.append(largest)
            self._running_max_timestamps = running
        return running

    def offset_of_max_timestamp(self) -> TimestampOffset | None:
        """KIP-734 (ListOffsets -3): the first message holding the largest timestamp in the log,
        as Kafka 3.9 answers it (the segment with the largest timestamp, first on ties, then the
        first message there with that timestamp); None when no message has a timestamp."""
        self._check_open()
        best = None
        for segment in self._segments:
            if segment.size and segment.max_timestamp > (best.max_timestamp if best else -1):
                best = segment
        if best is None:
            return None
        self._ensure_index(best)
        return best.find_offset_by_timestamp(best.max_timestamp)

    def legacy_offsets_before(self, timestamp: int, max_num: int) -> list[int]:
        """ListOffsets v0: segment base offsets (plus the log end offset when the active
        segment holds data) whose segment mtime is <= ``timestamp``, newest first, at most
        ``max_num``; -1 starts at the log end, -2 at the log start. A base offset below the
        log start offset counts as the log start offset (as in Kafka)."""
        self._check_open()
        start_offset = self._log_start_offset
        pairs = [(max(s.base_offset, start_offset), s.last_modified_ms) for s in self._segments]
        if self.active_segment.size > 0:
            pairs.append((self.log_end_offset, self._clock()))
        if timestamp == LATEST_TIMESTAMP:
            start = len(pairs) - 1
        elif timestamp == EARLIEST_TIMESTAMP:
            start = 0
        else:
            start = len(pairs) - 1
            while start >= 0 and pairs[start][1] > timestamp:
                start -= 1
        count = max(min(max_num, start + 1), 0)
        return sorted((pairs[start - j][0] for j in range(count)), reverse=True)

    # -- truncation --------------------------------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        """Remove every message at or after ``offset``. Truncation happens at message-set
        boundaries: a compressed wrapper holding ``offset`` is removed whole, so
        ``log_end_offset`` may end up below ``offset``. Below the first segment the log is
        emptied and restarted at ``offset``; the log start offset never stays above the new
        log end offset."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"{self.name}: cannot truncate to negative offset {offset}")
        if offset >= self.log_end_offset:
            return
        self.truncations += 1
        try:
            self._truncate(offset)
        finally:
            if (
                self.first_dirty_offset is not None
                and self.first_dirty_offset > self.log_end_offset
            ):
                self.first_dirty_offset = self.log_end_offset
                if self.on_first_dirty_lowered is not None:
                    self.on_first_dirty_lowered()

    def _truncate(self, offset: int) -> None:
        self._recent_sets.clear()
        self._delete_producer_snapshots(lambda snapshot: snapshot <= offset)
        now = self._clock()
        if offset < self._bases[0]:
            self.truncate_fully_and_start_at(offset)
            return
        keep = self._segment_index(offset)
        for segment in self._segments[keep + 1 :]:
            self._delete_segment(segment, now, reason="truncated")
        del self._segments[keep + 1 :]
        del self._bases[keep + 1 :]
        self._running_max_timestamps = None
        segment = self._segments[keep]
        if segment in self._open_inactive:  # active again: its descriptor is not tracked
            self._open_inactive.remove(segment)
        self._ensure_index(segment)
        next_offset = segment.truncate_to(offset, now)
        if next_offset is not None:
            self.log_end_offset = next_offset
        else:
            self.log_end_offset = segment.next_offset()
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self._log_start_offset = min(self._log_start_offset, self.log_end_offset)
        self._clamp_high_watermark()
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        self._load_producer_state(clean_shutdown=False)  # Kafka's truncateAndReload
        logger.info(
            "log truncated",
            topic=self.topic,
            partition=self.partition,
            requested_offset=offset,
            log_end_offset=self.log_end_offset,
        )

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at ``offset`` (a follower below its leader's log
        start); the log start offset becomes ``offset``."""
        self._check_open()
        self._recent_sets.clear()
        now = self._clock()
        self._delete_producer_snapshots(lambda snapshot: False)
        for segment in self._segments:
            self._delete_segment(segment, now, reason="truncated fully")
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            path = segment_path(self.directory, offset, suffix)
            if os.path.exists(path):
                os.unlink(path)
        self._segments = [self._new_segment(offset, create=True)]
        self._bases = [offset]
        self._running_max_timestamps = None
        self._open_inactive = []
        fsync_dir(self.directory)
        self.log_end_offset = self.recovery_point = self._log_start_offset = offset
        if self._high_watermark is not None:
            self._high_watermark = offset
        self.leader_epochs.clear()
        self._producers = ProducerStateManager(self.name)
        logger.info(
            "log emptied and restarted",
            topic=self.topic,
            partition=self.partition,
            log_start_offset=offset,
        )

    # -- retention (storage/retention.py decides which segments) -----------------------------
    def delete_expired_segments(self, now_ms: int) -> int:
        """Delete the segments wholly below the log start offset (moved by DeleteRecords), then,
        when cleanup.policy includes delete, apply retention.ms (on each segment's largest
        timestamp) then retention.bytes, oldest segment first, stopping at the first segment to
        keep (Kafka's deleteOldSegments); return how many segments were deleted. A non-empty
        active segment that qualifies is rolled first, then deleted."""
        self._check_open()
        deleted = 0
        if len(self._bases) > 1 and self._bases[1] <= self._log_start_offset:
            deleted += self.delete_segments_before(self._log_start_offset, now_ms)
        if not self.config.delete:
            return deleted
        retention_ms = self.config.retention_ms
        if retention_ms >= 0:
            deleted += self._delete_old_segments(
                lambda segment: self._retention.time_expired(segment, now_ms, retention_ms),
                now_ms,
                "retention.ms",
            )
        over_size = size_breach(self.size, self.config.retention_bytes)
        if over_size is not None:
            deleted += self._delete_old_segments(over_size, now_ms, "retention.bytes")
        return deleted

    def delete_segments_before(self, offset: int, now_ms: int) -> int:
        """Delete every segment wholly below ``offset`` (its successor's base offset <=
        ``offset``), oldest first; the active segment is never deleted. The log start offset
        moves to the first kept segment's base. Returns how many segments were deleted.

        Files are renamed to .deleted and removed after file.delete.delay.ms (Kafka's
        deletion). Each rename is made durable (directory fsync) before the next, so a crash
        leaves the log as a suffix of the segments, never with a hole in the middle: a reader
        replaying the log (e.g. the group coordinator's offsets) sees either a record or
        every record after it. Raises ValueError for a negative ``offset``."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"{self.name}: cannot delete segments before negative offset {offset}")
        deleted = 0
        while len(self._segments) > 1 and self._bases[1] <= offset:
            segment = self._segments[0]
            self._delete_segment(segment, now_ms, reason=f"before offset {offset}")
            fsync_dir(self.directory)
            del self._segments[0]
            del self._bases[0]
            self._running_max_timestamps = None
            deleted += 1
        self._start_moved()
        return deleted

    def _start_moved(self) -> None:
        """After segments were deleted from the start: the log start offset is at least the
        first remaining segment's base; the recovery point, high watermark, producer snapshots
        and leader epochs follow it."""
        self._log_start_offset = max(self._log_start_offset, self._bases[0])
        self.recovery_point = max(self.recovery_point, self.log_start_offset)
        self._clamp_high_watermark()
        self._delete_producer_snapshots(lambda snapshot: snapshot >= self.log_start_offset)
        self.leader_epochs.truncate_from_start(self.log_start_offset)

    def _delete_old_segments(
        self, predicate: Callable[[LogSegment], bool], now_ms: int, reason: str
    ) -> int:
        deletable = deletable_segments(
            self._segments, self._bases, self.log_end_offset, self.high_watermark, predicate
        )
        if not deletable:
            return 0
        if len(deletable) == len(self._segments):
            self.roll()
        for segment in deletable:
            self._delete_segment(segment, now_ms, reason=reason)
        del self._segments[: len(deletable)]
        del self._bases[: len(deletable)]
        self._running_max_timestamps = None
        self._start_moved()
        return len(deletable)

    def _delete_segment(self, segment: LogSegment, now_ms: int, *, reason: str) -> None:
        """Rename the segment's files to .deleted; remove them after file.delete.delay.ms."""
        logger.info(
            "deleting segment",
            topic=self.topic,
            partition=self.partition,
            segment=segment.base_offset,
            size=segment.size,
            reason=reason,
        )
        if segment in self._open_inactive:
            self._open_inactive.remove(segment)
        segment.rename_to_deleted(DELETED_SUFFIX)
        if self.config.file_delete_delay_ms <= 0:
            segment.delete_files()
        else:
            self._pending_deletes.append((now_ms + self.config.file_delete_delay_ms, segment))

    # -- compaction --------------------------------------------------------------------------
    def replace_segments(
        self, old: list[LogSegment], truncations: int, now_ms: int
    ) -> LogSegment | None:
        """Swap in the cleaned segment whose ``.cleaned`` files the cleaner wrote at
        ``old[0].base_offset`` for ``old``, a run of inactive segments of this log, as they were
        when this log had seen ``truncations`` truncations (storage/swap.py's protocol: commit,
        the old segments renamed to .deleted and removed after file.delete.delay.ms, install).
        Returns the new segment, or None when ``old`` is no longer such a run (a truncation,
        retention or another swap came first): nothing changed then and the caller discards
        its cleaned files. OSError after the commit point means the log dir is failing; the
        next start completes the swap."""
        self._check_open()
        first = next((i for i, s in enumerate(self._segments) if s is old[0]), None)
        if (
            first is None
            or truncations != self.truncations
            or first + len(old) >= len(self._segments)
            or any(a is not b for a, b in zip(self._segments[first : first + len(old)], old))
        ):
            return None
        base = old[0].base_offset
        swap.commit(self.directory, base, [s.base_offset for s in old])
        for segment in old:
            self._delete_segment(segment, now_ms, reason="replaced by its cleaned segment")
        killpoints.reached("replaced-deleted")
        swap.install(self.directory, base)
        segment = self._new_segment(base, create=False)
        segment.load_max_timestamp_from_index()
        self._segments[first : first + len(old)] = [segment]
        self._bases[first : first + len(old)] = [base]
        self._running_max_timestamps = None
        return segment

    def deleted_files_due(self, now_ms: int) -> bool:
        """Whether a .deleted segment's file.delete.delay.ms has passed (memory only)."""
        # Asked of every log every second: most have nothing pending, so skip the generator.
        return bool(self._pending_deletes) and any(t <= now_ms for t, _ in self._pending_deletes)

    def remove_deleted_files(self, now_ms: int) -> int:
        """Physically remove .deleted segments whose delay has passed; return how many."""
        due = [s for t, s in self._pending_deletes if t <= now_ms]
        self._pending_deletes = [(t, s) for t, s in self._pending_deletes if t > now_ms]
        for segment in due:
            segment.delete_files()
        return len(due)

    # -- closing -----------------------------------------------------------------------------
    def close(self) -> bool:
        """Seal and fsync the active segment, close every descriptor and remove the pending
        .deleted files. Returns whether everything was written: False when a full or failing
        disk refused the active segment's index entries or the producer snapshot, which the
        next start rebuilds by recovery (so the caller must not write a clean-shutdown marker).
        Raises OSError when the data itself cannot be fsynced; the descriptors are closed
        anyway."""
        if self._closed:
            return True
        complete = True
        try:
            try:
                self.active_segment.seal()
            except OSError as exc:
                complete = False
                self._close_incomplete("the active segment's index entries", exc)
                # Else the flush below would retry the write and fail; missing, the index
                # files are rebuilt at the next start.
                self.active_segment.discard_indexes()
            self.flush()
            try:
                self._write_producer_snapshot(self.log_end_offset)  # a start replays nothing
            except OSError as exc:
                complete = False
                self._close_incomplete("the producer state snapshot", exc)
        finally:
            for segment in self._segments:
                segment.close()
            for _, segment in self._pending_deletes:
                segment.delete_files()
            self._pending_deletes = []
            self._closed = True
        return complete

    def abandon(self) -> None:
        """Stop using a log whose disk fails (KIP-112's offline log dir): close every
        descriptor without writing anything more; errors closing them are ignored. Later calls
        raise LogClosedError."""
        self._closed = True
        for segment in self._segments:
            try:
                segment.close()
            except OSError:
                pass
        self._pending_deletes = []

    def _close_incomplete(self, what: str, exc: OSError) -> None:
        logger.warning(
            f"could not write {what} at close",
            topic=self.topic,
            partition=self.partition,
            error=repr(exc),
            action="none: the data is fsynced; the next start recovers this log",
        )
