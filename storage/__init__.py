"""Kafka 0.10.1-format partition storage: segmented logs with offset and time indexes.

Files only, synchronous; time comes from an injected clock (ms). See docs/interfaces.md.
"""
from storage.config import LogConfig
from storage.errors import (CorruptIndexError, InvalidAppendError, InvalidConfigError,
                            InvalidTopicError, LogClosedError, LogNotFoundError,
                            OffsetOutOfRangeError, RecordSetTooLargeError, StorageError)
from storage.log import FetchData, Log
from storage.manager import LogManager
from storage.segment import TimestampOffset

__all__ = [
    "LogConfig", "Log", "LogManager", "FetchData", "TimestampOffset",
    "StorageError", "OffsetOutOfRangeError", "InvalidTopicError", "LogNotFoundError",
    "CorruptIndexError", "InvalidAppendError", "RecordSetTooLargeError", "InvalidConfigError",
    "LogClosedError",
]
