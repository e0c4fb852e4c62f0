"""Durable committed offsets: records in the internal ``__consumer_offsets`` log.

Blocking file I/O on a storage ``Log``: the coordinator calls these in a worker thread while
holding the partition's lock (the broker's rule for every Log access). A commit is appended
and fsynced (``Log.flush``) before the client hears it succeeded, so a kill -9 right after the
response loses nothing; a torn append is cut off by the storage engine's recovery and was never
acknowledged.
"""
from __future__ import annotations

from collections.abc import Iterable

import structlog

from broker.groups.offsets import (
    CommittedOffset, GroupKey, OffsetCache, OffsetKey, OffsetRecordError, decode_key,
    decode_offset_value)
from protocol.errors import ErrorCode
from protocol.records import MessageSetBuilder, iter_deep
from protocol.validator import Rejected, validate_produce

log = structlog.get_logger(__name__)

READ_CHUNK_BYTES = 1 << 20


class OffsetStoreError(Exception):
    """Raised when a batch of offset records cannot be appended to ``__consumer_offsets``
    (the validator refused it: ``error`` is the Kafka code); nothing was written."""

    def __init__(self, error: ErrorCode, reason: str) -> None:
        super().__init__(reason)
        self.error = error


def append_records(log_, settings, records: Iterable[tuple[bytes, bytes | None]],
                   now_ms: int) -> int:
    """Append (key, value-or-None) records as one message set and fsync; returns the first
    offset. Raises OffsetStoreError when the set is refused; storage errors propagate."""
    builder = MessageSetBuilder(magic=1, base_offset=log_.log_end_offset)
    for key, value in records:
        builder.append(value, key=key, timestamp=now_ms)
    result = validate_produce(builder.build(), settings, next_offset=log_.log_end_offset,
                              now_ms=now_ms)
    if isinstance(result, Rejected):
        raise OffsetStoreError(result.error, result.reason)
    log_.append(result)
    log_.flush()
    return result.first_offset


def load_offsets(log_, cache: OffsetCache, *, default_retention_ms: int,
                 topic: str, partition: int) -> int:
    """Replay the whole log into ``cache`` (later records win, null values delete). Returns the
    number of records replayed. Records that do not decode are skipped with an error log: they
    cannot be client commits (every commit is written by this module)."""
    offset = log_.log_start_offset
    end = log_.log_end_offset
    count = 0
    while offset < end:
        data = log_.read(offset, READ_CHUNK_BYTES, min_one_message=True)
        buf = data.read_bytes()
        last = None
        for message in iter_deep(buf):
            if message.offset < offset:
                continue
            last = message.offset
            count += 1
            _apply(cache, message, default_retention_ms, topic, partition)
        if last is None:
            break
        offset = last + 1
    return count


def _apply(cache: OffsetCache, message, default_retention_ms: int, topic: str,
           partition: int) -> None:
    if message.key is None:
        log.error("skipping a keyless record in the offsets log", topic=topic,
                  partition=partition, offset=message.offset,
                  action="something other than the group coordinator wrote to this topic")
        return
    try:
        key = decode_key(message.key)
        if isinstance(key, GroupKey):
            return  # membership is not restored across restarts; members rejoin
        assert isinstance(key, OffsetKey)
        if message.value is None:
            cache.delete(key.group, key.topic, key.partition)
            return
        value: CommittedOffset = decode_offset_value(
            message.value, default_retention_ms=default_retention_ms)
    except OffsetRecordError as exc:
        log.error("skipping an undecodable record in the offsets log", topic=topic,
                  partition=partition, offset=message.offset, reason=str(exc),
                  action="something other than the group coordinator wrote to this topic")
        return
    cache.put(key.group, key.topic, key.partition, value)
