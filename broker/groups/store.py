"""Durable committed offsets: records in the internal ``__consumer_offsets`` log.

Blocking file I/O on a storage ``Log``: the coordinator calls these in a worker thread while
holding the partition's lock (the broker's rule for every Log access). A commit is appended
and fsynced (``Log.flush``) before the client hears it succeeded, so a kill -9 right after the
response loses nothing; a torn append is cut off by the storage engine's recovery and was never
acknowledged.

Group-metadata records (a group's generation, members and assignments, Kafka's key v2 / value
v3) are appended the same way, by the coordinator's single writer, in the order the state
machine produced them; replay keeps the last one of each group (a tombstone removes it).

Compaction (:func:`compact`) keeps replay short: the live offsets and group records are appended
again as a snapshot, fsynced, and every segment wholly before the snapshot is deleted. A crash at
any point leaves a log whose replay gives the same offsets and groups (see :func:`compact`).
"""

from __future__ import annotations

from collections.abc import Iterable

import structlog

from broker.groups.offsets import (
    CommittedOffset,
    GroupKey,
    GroupRecord,
    OffsetCache,
    OffsetKey,
    OffsetRecordError,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from protocol.errors import ErrorCode
from protocol.records import MessageSetBuilder, iter_deep
from protocol.validator import Rejected, validate_produce

logger = structlog.get_logger(__name__)

READ_CHUNK_BYTES = 1 << 20
# Compaction writes its snapshot in message sets of about this size: far below the offsets
# topic's max.message.bytes per message and segment.bytes per set.
SNAPSHOT_SET_BYTES = 512 * 1024
_RECORD_OVERHEAD = 34  # log overhead 12 + magic-1 message header 22 (key/value lengths incl.)


class OffsetStoreError(Exception):
    """Raised when a batch of offset records cannot be appended to ``__consumer_offsets``
    (the validator refused it: ``error`` is the Kafka code); nothing was written."""

    def __init__(self, error: ErrorCode, reason: str) -> None:
        super().__init__(reason)
        self.error = error


def append_records(
    log, settings, records: Iterable[tuple[bytes, bytes | None]], now_ms: int
) -> int:
    """Append (key, value-or-None) records as one message set and fsync; returns the first
    offset. Raises OffsetStoreError when the set is refused; storage errors propagate."""
    first = _append(log, settings, records, now_ms)
    log.flush()
    return first


def _append(log, settings, records: Iterable[tuple[bytes, bytes | None]], now_ms: int) -> int:
    builder = MessageSetBuilder(magic=1, base_offset=log.log_end_offset)
    for key, value in records:
        builder.append(value, key=key, timestamp=now_ms)
    result = validate_produce(
        builder.build(), settings, next_offset=log.log_end_offset, now_ms=now_ms
    )
    if isinstance(result, Rejected):
        raise OffsetStoreError(result.error, result.reason)
    log.append(result)
    return result.first_offset


def needs_compaction(log, live: int, *, min_bytes: int, ratio: int) -> bool:
    """True when the log holds more than ``min_bytes`` and more than ``ratio`` records per
    live offset (records counted as offsets between log start and log end)."""
    records = log.log_end_offset - log.log_start_offset
    return log.size > min_bytes and records > ratio * max(live, 1)


def compact(
    log,
    settings,
    live: Iterable[tuple[OffsetKey, CommittedOffset]],
    now_ms: int,
    groups: Iterable[tuple[str, GroupRecord]] = (),
) -> tuple[int, int]:
    """Rewrite the live offsets and group records as a snapshot at the log end, then drop
    everything before it.

    Steps, each leaving a log whose replay gives exactly ``live``: roll (the snapshot starts a
    segment of its own); append the snapshot in sets of at most SNAPSHOT_SET_BYTES (a replay
    of old records followed by part of the snapshot re-puts values it already has); fsync;
    delete the segments wholly before the snapshot, oldest first (a replay of any suffix of
    the old records followed by the whole snapshot ends with the live values, and a key absent
    from the snapshot was last written as a tombstone before it, so it stays absent). The same
    holds for group records, keyed by group.
    Returns (snapshot's first offset, segments deleted). Raises OffsetStoreError when a set is
    refused (nothing is deleted then); storage errors propagate. Caller holds the lock.
    """
    log.roll()
    start = log.log_end_offset
    batch: list[tuple[bytes, bytes]] = []
    size = 0
    records = [
        (encode_offset_key(key.group, key.topic, key.partition), encode_offset_value(value))
        for key, value in live
    ]
    records.extend((encode_group_key(g), encode_group_value(r)) for g, r in groups)
    for record in records:
        batch.append(record)
        size += len(record[0]) + len(record[1]) + _RECORD_OVERHEAD
        if size >= SNAPSHOT_SET_BYTES:
            _append(log, settings, batch, now_ms)
            batch, size = [], 0
    if batch:
        _append(log, settings, batch, now_ms)
    log.flush()
    return start, log.delete_segments_before(start, now_ms)


def load_offsets(
    log,
    cache: OffsetCache,
    *,
    groups: dict[str, GroupRecord] | None = None,
    topic: str,
    partition: int,
) -> int:
    """Replay the whole log into ``cache`` and ``groups`` (later records win, null values
    delete). Returns the number of records replayed. Records that do not decode are skipped
    with an error log: they cannot be client commits (every record is written by this
    module)."""
    if groups is None:
        groups = {}
    offset = log.log_start_offset
    end = log.log_end_offset
    count = 0
    while offset < end:
        data = log.read(offset, READ_CHUNK_BYTES, min_one_message=True)
        buf = data.read_bytes()
        last = None
        for message in iter_deep(buf):
            if message.offset < offset:
                continue
            last = message.offset
            count += 1
            _apply(cache, groups, message, topic, partition)
        if last is None:
            break
        offset = last + 1
    return count


def _apply(
    cache: OffsetCache, groups: dict[str, GroupRecord], message, topic: str, partition: int
) -> None:
    if message.key is None:
        logger.error(
            "skipping a keyless record in the offsets log",
            topic=topic,
            partition=partition,
            offset=message.offset,
            action="something other than the group coordinator wrote to this topic",
        )
        return
    try:
        key = decode_key(message.key)
        if isinstance(key, GroupKey):
            if message.value is None:
                groups.pop(key.group, None)
            else:
                groups[key.group] = decode_group_value(message.value)
            return
        if message.value is None:
            cache.delete(key.group, key.topic, key.partition)
            return
        value: CommittedOffset = decode_offset_value(message.value)
    except OffsetRecordError as exc:
        logger.error(
            "skipping an undecodable record in the offsets log",
            topic=topic,
            partition=partition,
            offset=message.offset,
            reason=str(exc),
            action="something other than the group coordinator wrote to this topic",
        )
        return
    cache.put(key.group, key.topic, key.partition, value)
