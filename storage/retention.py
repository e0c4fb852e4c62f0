"""Retention decisions (Kafka's UnifiedLog.deleteOldSegments and its predicates): which of a
log's oldest segments cleanup.policy delete removes. The Log deletes them
(Log.delete_expired_segments in storage/log.py) and moves its log start offset.

* retention.ms: a segment whose largest timestamp (the .log mtime when no message has one,
  KIP-33) is more than retention.ms before now (:meth:`RetentionChecks.time_expired`);
* retention.bytes: the oldest segments whose removal keeps the log at or above
  retention.bytes (:func:`size_breach`);
* either way, oldest first, stopping at the first segment to keep, at an empty active
  segment, and at the first segment not wholly below the high watermark (what every replica
  holds: :func:`deletable_segments`).

Memory only (a segment's largest timestamp may stat its .log); nothing here raises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import structlog

from storage.segment import LogSegment

logger = structlog.get_logger(__name__)


class RetentionChecks:
    """The retention.ms predicate of one log. A segment whose largest timestamp is in the future
    pins time retention (it and every later segment stay); that is reported once per segment
    and timestamp, so an operator can fix the producer clocks. Slotted, and the set made at the
    first warning: every idle partition holds one."""

    __slots__ = ("topic", "partition", "_reported_pins")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        # (segment base offset, largest timestamp) already reported
        self._reported_pins: set[tuple[int, int]] | None = None

    def time_expired(self, segment: LogSegment, now_ms: int, retention_ms: int) -> bool:
        largest = segment.largest_timestamp
        if now_ms - largest > retention_ms:
            return True
        if segment.size and largest > now_ms:
            if self._reported_pins is None:
                self._reported_pins = set()
            if (segment.base_offset, largest) in self._reported_pins:
                return False
            self._reported_pins.add((segment.base_offset, largest))
            logger.warning(
                "segment timestamp is in the future; time retention cannot delete "
                "it or any later segment until then (check producer clocks and "
                "timestamp units)",
                topic=self.topic,
                partition=self.partition,
                segment=segment.base_offset,
                largest_timestamp=largest,
                now=now_ms,
            )
        return False


def size_breach(log_size: int, retention_bytes: int) -> Callable[[LogSegment], bool] | None:
    """The retention.bytes predicate for a log of ``log_size`` bytes, to be asked of its
    segments oldest first: True while deleting the segment still leaves retention.bytes.
    None when the log is within retention.bytes (or it is -1, unlimited)."""
    if retention_bytes < 0:
        return None
    excess = log_size - retention_bytes
    if excess <= 0:
        return None

    def over_size(segment: LogSegment) -> bool:
        nonlocal excess
        if excess - segment.size >= 0:
            excess -= segment.size
            return True
        return False

    return over_size


def deletable_segments(
    segments: Sequence[LogSegment],
    bases: Sequence[int],
    log_end_offset: int,
    high_watermark: int,
    predicate: Callable[[LogSegment], bool],
) -> list[LogSegment]:
    """Kafka's deletableSegments: the oldest segments, in order, while ``predicate`` holds,
    the segment is not the empty active one and every offset in it is below
    ``high_watermark`` (``bases`` are the segments' base offsets)."""
    deletable = []
    for i, segment in enumerate(segments):
        if not predicate(segment):
            break
        if i + 1 == len(segments) and segment.size == 0:
            break
        if (bases[i + 1] if i + 1 < len(bases) else log_end_offset) > high_watermark:
            break
        deletable.append(segment)
    return deletable
