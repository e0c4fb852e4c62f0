"""Committed offsets: Kafka's ``__consumer_offsets`` record formats and the in-memory view.

Pure code (no I/O). store.py writes these records to the internal log and replays them at
start-up into an :class:`OffsetCache`.

Record formats (GroupMetadataManager.scala, 0.10.1; STRING = int16 length + UTF-8)::

    offset key   (version 0 or 1, 8 + len(group) + len(topic) bytes):
        int16 version, STRING group, STRING topic, int32 partition
    offset value (version 1, 2 + 8 + 2+len(metadata) + 8 + 8 bytes):
        int16 version, int64 offset, STRING metadata, int64 commit_timestamp,
        int64 expire_timestamp
    offset value (version 0, read only): int16 version, int64 offset, STRING metadata,
        int64 timestamp  (expire = timestamp + the configured retention)
    group key    (version 2): int16 version, STRING group

A record with a null value is a tombstone: the key's offset (or group) is gone. Group
metadata records (key version 2) are recognised and skipped: this coordinator does not
restore membership across restarts (members rejoin), only offsets.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

OFFSET_KEY_VERSION = 1
OFFSET_VALUE_VERSION = 1
GROUP_KEY_VERSION = 2

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_TWO_INT64 = struct.Struct(">qq")
_MAX_STRING = 32767


class OffsetRecordError(ValueError):
    """Raised when a ``__consumer_offsets`` key or value does not decode: truncated, trailing
    bytes, a negative length, bad UTF-8 or an unknown schema version."""


@dataclass(frozen=True)
class CommittedOffset:
    """One committed offset with the client's metadata string and its lifetime (ms)."""

    offset: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


def _put_string(out: bytearray, s: str, what: str) -> None:
    raw = s.encode("utf-8")
    if len(raw) > _MAX_STRING:
        raise OffsetRecordError(f"{what} is {len(raw)} bytes; the limit is {_MAX_STRING}")
    out += _INT16.pack(len(raw))
    out += raw


class _Reader:
    __slots__ = ("buf", "pos", "what")

    def __init__(self, buf: bytes, what: str) -> None:
        self.buf = memoryview(buf)
        self.pos = 0
        self.what = what

    def take(self, st: struct.Struct) -> tuple:
        if self.pos + st.size > len(self.buf):
            raise OffsetRecordError(
                f"{self.what} truncated at byte {self.pos} (length {len(self.buf)})"
            )
        values = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return values

    def string(self) -> str:
        (n,) = self.take(_INT16)
        if n < 0 or self.pos + n > len(self.buf):
            raise OffsetRecordError(
                f"{self.what}: string length {n} at byte {self.pos - 2} does not fit in "
                f"{len(self.buf)} bytes"
            )
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise OffsetRecordError(f"{self.what}: string is not UTF-8 ({exc})") from None

    def done(self) -> None:
        if self.pos != len(self.buf):
            raise OffsetRecordError(
                f"{self.what}: {len(self.buf) - self.pos} bytes left over after the last field"
            )


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    out = bytearray(_INT16.pack(OFFSET_KEY_VERSION))
    _put_string(out, group, "group id")
    _put_string(out, topic, "topic")
    out += _INT32.pack(partition)
    return bytes(out)


def encode_offset_value(value: CommittedOffset) -> bytes:
    out = bytearray(_INT16.pack(OFFSET_VALUE_VERSION))
    out += _INT64.pack(value.offset)
    _put_string(out, value.metadata, "offset metadata")
    out += _TWO_INT64.pack(value.commit_timestamp_ms, value.expire_timestamp_ms)
    return bytes(out)


def decode_key(buf: bytes) -> OffsetKey | GroupKey:
    r = _Reader(buf, "offsets key")
    (version,) = r.take(_INT16)
    if version in (0, 1):
        group = r.string()
        topic = r.string()
        (partition,) = r.take(_INT32)
        r.done()
        return OffsetKey(group, topic, partition)
    if version == GROUP_KEY_VERSION:
        group = r.string()
        r.done()
        return GroupKey(group)
    raise OffsetRecordError(f"offsets key has unknown version {version}")


def decode_offset_value(buf: bytes, *, default_retention_ms: int) -> CommittedOffset:
    r = _Reader(buf, "offset value")
    (version,) = r.take(_INT16)
    if version == 0:
        (offset,) = r.take(_INT64)
        metadata = r.string()
        (timestamp,) = r.take(_INT64)
        r.done()
        return CommittedOffset(offset, metadata, timestamp, timestamp + default_retention_ms)
    if version == 1:
        (offset,) = r.take(_INT64)
        metadata = r.string()
        commit_ts, expire_ts = r.take(_TWO_INT64)
        r.done()
        return CommittedOffset(offset, metadata, commit_ts, expire_ts)
    raise OffsetRecordError(f"offset value has unknown version {version}")


def expire_timestamp(*, now_ms: int, retention_ms: int, commit_timestamp: int) -> int:
    """When a commit expires (KafkaApis.handleOffsetCommitRequest): ``retention_ms`` is the
    request's retention_time (v2) or the broker default; ``commit_timestamp`` is v1's
    per-partition timestamp, -1 meaning now."""
    base = now_ms if commit_timestamp == -1 else commit_timestamp
    return base + retention_ms


class OffsetCache:
    """The latest committed offset of every (group, topic, partition)."""

    def __init__(self) -> None:
        self._groups: dict[str, dict[tuple[str, int], CommittedOffset]] = {}

    def put(self, group: str, topic: str, partition: int, value: CommittedOffset) -> None:
        self._groups.setdefault(group, {})[(topic, partition)] = value

    def delete(self, group: str, topic: str, partition: int) -> None:
        offsets = self._groups.get(group)
        if offsets is not None:
            offsets.pop((topic, partition), None)
            if not offsets:
                del self._groups[group]

    def get(self, group: str, topic: str, partition: int) -> CommittedOffset | None:
        offsets = self._groups.get(group)
        return offsets.get((topic, partition)) if offsets is not None else None

    def has_group(self, group: str) -> bool:
        return group in self._groups

    def groups(self) -> list[str]:
        return list(self._groups)

    def __len__(self) -> int:
        return sum(len(offsets) for offsets in self._groups.values())

    def items(self) -> Iterator[tuple[OffsetKey, CommittedOffset]]:
        """Every live (key, committed offset), group by group."""
        for group, offsets in self._groups.items():
            for (topic, partition), value in offsets.items():
                yield OffsetKey(group, topic, partition), value

    def as_dict(self) -> dict[OffsetKey, CommittedOffset]:
        return dict(self.items())

    def expired(self, now_ms: int) -> Iterator[OffsetKey]:
        """Keys whose expire timestamp is before ``now_ms`` (Kafka: strictly before)."""
        for group, offsets in self._groups.items():
            for (topic, partition), value in offsets.items():
                if value.expire_timestamp_ms < now_ms:
                    yield OffsetKey(group, topic, partition)
