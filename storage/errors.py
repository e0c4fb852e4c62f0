"""Exceptions raised by storage/.

Every exception derives from :class:`StorageError`; ``str(exc)`` names the topic/partition or file
concerned and, where there is one, what to do about it.
"""

from __future__ import annotations

import errno


class StorageError(Exception):
    """Base of every error storage/ raises on purpose."""


class OffsetOutOfRangeError(StorageError):
    """Raised by ``Log.read`` when the requested offset is below the log start offset or above
    the log end offset (Kafka error OFFSET_OUT_OF_RANGE, 1)."""

    def __init__(
        self, message: str, *, offset: int, log_start_offset: int, log_end_offset: int
    ) -> None:
        super().__init__(message)
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class InvalidTopicError(StorageError):
    """Raised when a topic name breaks Kafka's rules ([a-zA-Z0-9._-]{1,249}, not "." or "..") or a
    partition number is negative (Kafka error INVALID_TOPIC_EXCEPTION, 17)."""


class LogNotFoundError(StorageError):
    """Raised when an operation names a topic/partition that has no log in any log dir."""


class CorruptIndexError(StorageError):
    """Raised by an index sanity check (bad file length, entries out of order, entries pointing
    outside the segment). The segment catches it and rebuilds the index from its log file; it only
    escapes from the dump tool's ``--verify`` and direct index use."""


class InvalidAppendError(StorageError):
    """Raised by ``Log.append`` for a message set that cannot be appended as given: its first
    offset is not the log end offset, its offsets run backwards, or it is empty. Nothing is
    written."""


class RecordSetTooLargeError(StorageError):
    """Raised by ``Log.append`` when a message set is larger than segment.bytes, so no segment
    could ever hold it (Kafka error RECORD_LIST_TOO_LARGE, 18). Nothing is written."""


class InvalidConfigError(StorageError, ValueError):
    """Raised when a LogConfig value is out of range or an override names an unknown key or holds
    a non-integer."""


class InconsistentTopicIdError(StorageError):
    """Raised by :meth:`storage.log.Log.assign_topic_id` when the partition directory's
    partition.metadata names another topic id: the directory belongs to an older topic of the
    same name (Kafka: INCONSISTENT_TOPIC_ID)."""


class LogClosedError(StorageError):
    """Raised when a closed or deleted Log is used."""


# Failures that pass by themselves: no space (until some is freed), no file descriptor or memory
# (until connections or readers go away). The log dir degrades and heals.
_PASSING = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN}
)


def is_disk_failure(exc: OSError) -> bool:
    """Whether an OSError from a log means its disk is failing (EIO, EROFS, ...), so its log dir
    must be taken offline (KIP-112), rather than a full disk or exhausted descriptors, which
    pass and leave the log as it was."""
    return exc.errno not in _PASSING
