"""Durable committed offsets: records in the internal ``__consumer_offsets`` log.

Blocking file I/O on a storage ``Log``: the coordinator calls these in a worker thread while
holding the partition's lock (the broker's rule for every Log access). A commit is appended
and fsynced (``Log.flush``) before the client hears it succeeded, so a kill -9 right after the
response loses nothing; a torn append is cut off by the storage engine's recovery and was never
acknowledged.

Group-metadata records (a group's generation, members and assignments, Kafka's key v2 / value
v3) are appended the same way, by the coordinator's single writer, in the order the state
machine produced them; replay keeps the last one of each group (a tombstone removes it).

The broker's log cleaner compacts the topic (cleanup.policy=compact): it keeps the last record
of every key at its offset, so a replay of the cleaned log gives the same offsets and groups.
"""

from __future__ import annotations

from collections.abc import Iterable

import structlog

from broker.log_replay import log_entries
from broker.groups.offsets import (
    CommittedOffset,
    GroupKey,
    GroupRecord,
    OffsetCache,
    OffsetRecordError,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from protocol import recordbatch as rb
from protocol.errors import ErrorCode
from protocol.records import Message, MessageSetBuilder, iter_deep
from protocol.validator import Rejected, TopicSettings, validate_produce
from storage.log import Log

logger = structlog.get_logger(__name__)


class OffsetStoreError(Exception):
    """Raised when a batch of offset records cannot be appended to ``__consumer_offsets``
    (the validator refused it: ``error`` is the Kafka code); nothing was written."""

    def __init__(self, error: ErrorCode, reason: str) -> None:
        super().__init__(reason)
        self.error = error


def append_records(
    log: Log,
    settings: TopicSettings,
    records: Iterable[tuple[bytes, bytes | None]],
    now_ms: int,
    *,
    producer: tuple[int, int] | None = None,
    fsync: bool = True,
) -> int:
    """Append (key, value-or-None) records as one message set (magic 1, or a v2 batch where
    the topic keeps v2) and (``fsync``) fsync it; returns the first offset. With ``producer``
    (id, epoch) the set is a transactional v2 batch of that producer
    (a TxnOffsetCommit: its offsets count once the transaction's COMMIT marker follows). Kafka
    writes these at sequence 0 and skips the sequence check for the coordinator; here they take
    the producer's next sequence in this partition, so the log's one check applies unchanged.
    Raises OffsetStoreError when the set is refused; storage errors (ProducerStateError for a
    fenced producer) propagate."""
    if producer is None and settings.magic < 2:
        builder = MessageSetBuilder(magic=1, base_offset=log.log_end_offset)
        for key, value in records:
            builder.append(value, key=key, timestamp=now_ms)
        data = builder.build()
    else:
        # A log of v2 batches gets one as it keeps it (a magic 1 set would be converted
        # message by message: at 10,000 offsets most of a commit's time).
        if producer is None:
            spec = rb.BatchSpec(base_offset=log.log_end_offset)
        else:
            producer_id, epoch = producer
            entry = log.producer_state().entry(producer_id)
            sequence = 0 if entry is None or entry.epoch != epoch else entry.last_sequence + 1
            spec = rb.BatchSpec(
                base_offset=log.log_end_offset,
                producer_id=producer_id,
                producer_epoch=epoch,
                base_sequence=sequence & 0x7FFFFFFF,
                is_transactional=True,
            )
        data = rb.build_batch(
            spec, [(i, now_ms, key, value, ()) for i, (key, value) in enumerate(records)]
        )
    result = validate_produce(data, settings, next_offset=log.log_end_offset, now_ms=now_ms)
    if isinstance(result, Rejected):
        raise OffsetStoreError(result.error, result.reason)
    assert result is not None  # None only with native_only
    log.append(result)
    if fsync:
        log.flush()
    return result.first_offset


def load_offsets(
    log: Log,
    cache: OffsetCache,
    *,
    groups: dict[str, GroupRecord] | None = None,
    pending: dict[int, list[Message]] | None = None,
    topic: str,
    partition: int,
) -> int:
    """Replay the whole log into ``cache`` and ``groups`` (later records win, null values
    delete). Records of a transactional batch count once their producer's COMMIT marker
    follows and never after an ABORT; those of a transaction still open at the log end are
    left in ``pending`` (producer id -> records) for the marker to come. Returns the number of
    records replayed. Records that do not decode are skipped with an error log: they cannot be
    client commits (every record is written by this module)."""
    if groups is None:
        groups = {}
    if pending is None:
        pending = {}
    count = 0
    for buf, entry, skip_below in log_entries(log):
        header = rb.read_header(buf, entry.position) if entry.magic == rb.MAGIC else None
        if header is not None and header.is_control:
            marker = rb.stored_end_txn_marker(buf, entry.position, header)
            if marker is None:
                continue
            for message in pending.pop(header.producer_id, []):
                if marker.commit:
                    _apply(cache, groups, message, topic, partition)
            continue
        messages = [
            m
            for m in iter_deep(buf[entry.position : entry.next_position])
            if m.offset >= skip_below
        ]
        count += len(messages)
        if header is not None and header.is_transactional:
            pending.setdefault(header.producer_id, []).extend(messages)
            continue
        for message in messages:
            _apply(cache, groups, message, topic, partition)
    return count


def pending_offsets(
    messages: Iterable[Message], *, topic: str, partition: int
) -> dict[tuple[str, str, int], CommittedOffset]:
    """The offsets an open transaction's records (left in ``pending`` by :func:`load_offsets`)
    will commit: (group, topic, partition) -> offset."""
    cache = OffsetCache()
    for message in messages:
        _apply(cache, {}, message, topic, partition)
    return {
        (group, t, p): value
        for group in cache.groups()
        for (t, p) in cache.of_group(group)
        if (value := cache.get(group, t, p)) is not None
    }


def _apply(
    cache: OffsetCache, groups: dict[str, GroupRecord], message: Message, topic: str, partition: int
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
