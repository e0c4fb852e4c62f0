"""File and directory names of a Kafka log dir.

<log.dir>/<topic>-<partition>/<20-digit base offset>.log|.index|.timeindex|.txnindex (the last
only for a segment holding the marker of an aborted transaction), plus per log dir
``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``cleaner-offset-checkpoint`` and ``.kafka_cleanshutdown``.
"""

from __future__ import annotations

import os
import re

from storage.errors import InvalidTopicError

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
# Aborted transactions whose marker is in the segment (storage/txn_index.py), written lazily.
TXN_INDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
# <base>.replaces: the segments a cleaned segment being swapped in replaces (storage/swap.py).
SWAP_MANIFEST_SUFFIX = ".replaces"
# KIP-516: the partition's topic id, "version: 0\ntopic_id: <base64url uuid>\n"
PARTITION_METADATA_FILE = "partition.metadata"
# A partition directory renamed on topic deletion; removed at start-up if a crash left it.
DELETE_DIR_SUFFIX = "-delete"
# A partition's copy being built in another log dir (KIP-113): <topic>-<partition>.<uuid>-future
FUTURE_DIR_SUFFIX = "-future"
# In a partition directory just moved into place by a move between log dirs, until the copy it
# replaces is removed: at start-up it wins over that copy (storage/manager.py).
MOVED_MARKER = ".moved-here"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
# Log start offsets moved past their first segment's base (DeleteRecords), Kafka's name and format
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
# Kafka's LogCleanerManager checkpoint: per log, the first offset not yet cleaned.
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"

MAX_TOPIC_LENGTH = 249
_TOPIC_RE = re.compile(r"[a-zA-Z0-9._-]+")
_SEGMENT_RE = re.compile(r"(\d{20})\.(log|index|timeindex|txnindex)")


def validate_topic(topic: str, partition: int = 0) -> None:
    """Raise InvalidTopicError unless ``topic`` is a legal Kafka topic name and ``partition`` a
    non-negative int32."""
    if not isinstance(topic, str) or not topic:
        raise InvalidTopicError("topic name is empty")
    if topic in (".", ".."):
        raise InvalidTopicError(f"topic name {topic!r} is not allowed")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidTopicError(
            f"topic name is {len(topic)} characters long, the limit is {MAX_TOPIC_LENGTH}"
        )
    if not _TOPIC_RE.fullmatch(topic):
        raise InvalidTopicError(
            f"topic name {topic!r} may only contain ASCII letters, digits, '.', '_' and '-'"
        )
    if not isinstance(partition, int) or isinstance(partition, bool) or not 0 <= partition < 2**31:
        raise InvalidTopicError(
            f"partition {partition!r} of topic {topic!r} is not a non-negative int32"
        )


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) for a ``<topic>-<partition>`` directory name, None if it is not one."""
    topic, sep, number = name.rpartition("-")
    if not sep or not number.isdigit() or not number.isascii():
        return None
    try:
        validate_topic(topic, int(number))
    except InvalidTopicError:
        return None
    return topic, int(number)


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def segment_path(directory: str, base_offset: int, suffix: str) -> str:
    return os.path.join(directory, segment_file_name(base_offset, suffix))


def parse_segment_file(name: str) -> tuple[int, str] | None:
    """(base offset, suffix with dot) for a segment file name, None for anything else."""
    match = _SEGMENT_RE.fullmatch(name)
    if match is None:
        return None
    return int(match.group(1)), "." + match.group(2)
