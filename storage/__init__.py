"""Kafka-format partition storage: segmented logs (message formats v0-v2, as Kafka 3.9 writes
them) with offset, time and aborted-transaction indexes and producer-state snapshots.

Files only, synchronous, not thread-safe per Log (the broker serialises calls per partition);
time comes from an injected clock (ms). See docs/interfaces.md for the contract.

Where this package deliberately departs from Kafka ("we do better"; the first reference was 0.10.1):

* Index files are never preallocated: they always hold exactly their entries, so no zero tail
  can read as timestamp 0 (KAFKA-10207) and an idle partition costs no 10 MiB mmap.
* Search by timestamp does not stop at a segment without message timestamps (picked by its
  mtime) that holds no match; later segments are searched, so KIP-79's guarantee holds
  exactly. The time index lookup is strict (entry timestamp < target) so equal timestamps
  before the entry's offset are not skipped.
* A segment whose .timeindex is missing (migration from 0.9) gets one rebuilt by a scan; its
  largest timestamp falls back to the .log mtime only when no message carries a timestamp.
* Recovery also refuses entries whose offsets do not increase, and judges message size against
  max(max.message.bytes, segment.bytes) so lowering max.message.bytes cannot truncate older
  messages; an index that is loaded lazily is
  checked entry by entry (Kafka checks only the ends) and rebuilt if it fails.
* Rolling uses the incoming set's timestamp (KAFKA-4099 fixed) and fsyncs the old segment
  before returning; truncation happens at message-set boundaries.
"""

from storage.config import LogConfig
from storage.errors import (
    CorruptIndexError,
    InconsistentTopicIdError,
    InvalidAppendError,
    InvalidConfigError,
    InvalidTopicError,
    LogClosedError,
    LogNotFoundError,
    OffsetOutOfRangeError,
    RecordSetTooLargeError,
    StorageError,
)
from storage.leader_epoch import EpochEndOffset, LeaderEpochCache
from storage.log import AppendResult, FetchData, Log, ReplicaAppend
from storage.manager import LogManager, Maintenance
from storage.segment import TimestampOffset

__all__ = [
    "LogConfig",
    "Log",
    "AppendResult",
    "ReplicaAppend",
    "LeaderEpochCache",
    "EpochEndOffset",
    "LogManager",
    "Maintenance",
    "FetchData",
    "TimestampOffset",
    "StorageError",
    "OffsetOutOfRangeError",
    "InvalidTopicError",
    "LogNotFoundError",
    "CorruptIndexError",
    "InvalidAppendError",
    "RecordSetTooLargeError",
    "InvalidConfigError",
    "LogClosedError",
    "InconsistentTopicIdError",
]
