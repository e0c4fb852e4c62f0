"""Loading a partition's log from its directory (Kafka's LogLoader): the segments found on disk,
their indexes checked (or rebuilt), and after an unclean shutdown the recovery that scans from
the recovery point and truncates at the first bad entry.

Steps of :meth:`LogLoader.load`: complete or roll back an interrupted swap of cleaned segments
(storage/swap.py); remove index files without a .log; open a LogSegment per .log in base offset
order (a directory without one gets an empty segment at offset 0); check every segment's offset
and time index from their ends (the active segment's loaded, entry by entry) and its .txnindex,
rebuilding a missing or implausible offset or time index by a scan (``LogSegment.recover``);
then, unless the log was shut down cleanly, recover every segment from the one holding the
recovery point, dropping the segments after the first one truncated. A .txnindex emptied on
the way is rebuilt afterwards by the Log's producer state replay, from ``txn_rebuild_from``.

The Log owns what this returns; :func:`ensure_indexes` is also the Log's lazy load of an
inactive segment's indexes on its first lookup. Resources: the segments' descriptors, as
LogSegment describes them. Errors: OSError from the file system propagates; damage found in a
segment is repaired and logged, never raised.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from storage import swap
from storage.config import LogConfig
from storage.durable import fsync_dir
from storage.errors import CorruptIndexError
from storage.layout import LOG_SUFFIX, TXN_INDEX_SUFFIX, parse_segment_file
from storage.segment import LogSegment

logger = structlog.get_logger(__name__)


def recovery_size_limit(config: LogConfig) -> int:
    """Largest message size recovery accepts. Kafka uses max.message.bytes, so lowering that
    config turns older, larger messages into "corruption" and truncates them; a message can
    never exceed segment.bytes, and the CRC catches real damage, so we allow either."""
    return max(config.max_message_bytes, config.segment_bytes)


@dataclass
class LoadedSegments:
    """What :meth:`LogLoader.load` found: the segments in base offset order (never empty; the
    last one is the active segment) and the lowest base offset of the segments whose .txnindex
    was emptied (missing after a recovery, or damaged), None when none was."""

    segments: list[LogSegment]
    txn_rebuild_from: int | None


class LogLoader:
    """Loads one partition's segments; see the module docstring. ``new_segment(base, create)``
    makes the LogSegment objects (the Log's clock and roll jitter)."""

    def __init__(
        self,
        directory: str,
        topic: str,
        partition: int,
        config: LogConfig,
        new_segment: Callable[[int, bool], LogSegment],
    ) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self._new_segment = new_segment
        self._segments: list[LogSegment] = []
        self._txn_rebuild_from: int | None = None

    def load(self, recovery_point: int, needs_recovery: bool) -> LoadedSegments:
        """The segments on disk, checked, and recovered from ``recovery_point`` when
        ``needs_recovery`` (no clean-shutdown marker)."""
        self._load_segments()
        if needs_recovery:
            self._recover(recovery_point)
        return LoadedSegments(self._segments, self._txn_rebuild_from)

    def _load_segments(self) -> None:
        for action in swap.recover(self.directory):
            logger.info(
                "recovered an interrupted segment swap or delete",
                topic=self.topic,
                partition=self.partition,
                action=action,
            )
        names = os.listdir(self.directory)
        bases: set[int] = set()
        index_files: list[tuple[int, str]] = []
        for name in names:
            path = os.path.join(self.directory, name)
            parsed = parse_segment_file(name)
            if parsed is None:
                continue
            base, suffix = parsed
            if suffix == LOG_SUFFIX:
                bases.add(base)
            else:
                index_files.append((base, path))
        for base, path in index_files:
            if base not in bases:
                logger.info(
                    "removing index without a log file",
                    topic=self.topic,
                    partition=self.partition,
                    file=path,
                )
                os.unlink(path)
        ordered = sorted(bases)
        txn_indexes = {base for base, path in index_files if path.endswith(TXN_INDEX_SUFFIX)}
        for base in ordered:
            segment = self._new_segment(base, False)
            self._check_indexes(segment, active=base == ordered[-1])
            if base in txn_indexes:
                self._check_txn_index(segment)
            self._segments.append(segment)
        if not self._segments:
            self._segments.append(self._new_segment(0, True))
            fsync_dir(self.directory)

    def _check_indexes(self, segment: LogSegment, *, active: bool) -> None:
        """Sanity-check the indexes from their first and last entries and set the max timestamp
        from the time index; a missing or implausible index is rebuilt. The active segment's
        indexes are loaded (appends need them); an inactive segment's are read entry by entry
        and left on disk until a lookup needs them."""
        try:
            if active:
                segment.offset_index.load()
                segment.time_index.load()
            segment.sanity_check()
            segment.load_max_timestamp_from_index()
            if not active:
                segment.offset_index.close()
                segment.time_index.close()
        except CorruptIndexError as exc:
            rebuild_indexes(segment, self.config, self.topic, self.partition, str(exc))

    def _check_txn_index(self, segment: LogSegment) -> None:
        """Read a .txnindex; a damaged one is emptied and rebuilt by the producer state
        replay."""
        try:
            segment.txn_index.sanity_check()
        except CorruptIndexError as exc:
            logger.warning(
                "transaction index damaged; rebuilding it from the log",
                topic=self.topic,
                partition=self.partition,
                segment=segment.base_offset,
                reason=str(exc),
            )
            self._rebuild_txn_index(segment)

    def _rebuild_txn_index(self, segment: LogSegment) -> None:
        segment.txn_index.reset()
        if self._txn_rebuild_from is None or segment.base_offset < self._txn_rebuild_from:
            self._txn_rebuild_from = segment.base_offset

    def _recover(self, recovery_point: int) -> None:
        segments = self._segments
        start = max(bisect.bisect_right([s.base_offset for s in segments], recovery_point) - 1, 0)
        limit = recovery_size_limit(self.config)
        scanned = truncated = 0
        dropped: list[int] = []
        reason = None
        for i in range(start, len(segments)):
            segment = segments[i]
            result = segment.recover(limit)
            self._rebuild_txn_index(segment)  # Kafka's LogSegment.recover rebuilds it too
            scanned += result.valid_bytes + result.truncated_bytes
            if i < len(segments) - 1:
                segment.flush()
                segment.offset_index.close()
                segment.time_index.close()
            if result.truncated_bytes:
                truncated = result.truncated_bytes
                reason = f"segment {segment.base_offset}: {result.reason}"
                for later in segments[i + 1 :]:
                    truncated += later.size
                    dropped.append(later.base_offset)
                    later.delete_files()
                del segments[i + 1 :]
                break
        logger.info(
            "log recovered after unclean shutdown",
            topic=self.topic,
            partition=self.partition,
            recovery_point=recovery_point,
            scanned_segments=len(segments) - start,
            scanned_bytes=scanned,
            truncated_bytes=truncated,
            truncation_reason=reason,
            deleted_segments=dropped,
        )


def ensure_indexes(segment: LogSegment, config: LogConfig, topic: str, partition: int) -> None:
    """Load an inactive segment's indexes for a lookup, checking every entry; rebuild them if
    they fail now."""
    if segment.offset_index.is_loaded and segment.time_index.is_loaded:
        return
    try:
        segment.offset_index.load()
        segment.time_index.load()
        segment.sanity_check()
    except CorruptIndexError as exc:
        rebuild_indexes(segment, config, topic, partition, str(exc))


def rebuild_indexes(
    segment: LogSegment, config: LogConfig, topic: str, partition: int, why: str
) -> None:
    """Rebuild a segment's offset and time indexes by a scan (truncating a damaged tail)."""
    result = segment.recover(recovery_size_limit(config))
    logger.warning(
        "rebuilt segment indexes from the log",
        topic=topic,
        partition=partition,
        segment=segment.base_offset,
        reason=why,
        scanned_bytes=result.valid_bytes + result.truncated_bytes,
        truncated_bytes=result.truncated_bytes,
        truncation_reason=result.reason,
    )
