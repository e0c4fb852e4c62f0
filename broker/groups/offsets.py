"""``__consumer_offsets`` record formats (Kafka 3.9's group-coordinator schemas) and the
in-memory view of committed offsets.

Pure code (no I/O). store.py writes these records to the internal log and replays them at
start-up. STRING = int16 length + UTF-8 (-1 = null where nullable), BYTES = int32 length::

    offset key   (OffsetCommitKey v1; v0 is read too):
        int16 version, STRING group, STRING topic, int32 partition
    offset value (OffsetCommitValue): int16 version, then
        v0: int64 offset, STRING metadata, int64 commit_timestamp
        v1: int64 offset, STRING metadata, int64 commit_timestamp, int64 expire_timestamp
        v2: int64 offset, STRING metadata, int64 commit_timestamp
        v3: int64 offset, int32 leader_epoch, STRING metadata, int64 commit_timestamp
        v4: v3 in the flexible encoding (compact strings, tagged fields; read only)
    group key    (GroupMetadataKey v2): int16 version, STRING group
    group value  (GroupMetadataValue): int16 version, STRING protocol_type, int32 generation,
        nullable STRING protocol, nullable STRING leader, int64 current_state_timestamp (v2+),
        [member]; member = STRING member_id, nullable STRING group_instance_id (v3+),
        STRING client_id, STRING client_host, int32 rebalance_timeout (v1+),
        int32 session_timeout, BYTES subscription, BYTES assignment
        (v4: v3 in the flexible encoding; read only)

Written as Kafka 3.9 writes them at the broker's inter.broker.protocol.version
(GroupMetadataManager.groupMetadataValue / offsetCommitValue, see :func:`group_value_version` and
:func:`offset_value_version`): at the default, offset values v3, or v1 when the commit carries
its own retention (OffsetCommit v2-v4's retention_time_ms), and group values v3; every version
0-4 is read. A v1 offset value's expire timestamp -1 means none. A record with a null value is a
tombstone: the key's offset (or group) is gone.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from broker.config import metadata_version_at_least

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
LATEST_GROUP_VALUE_VERSION = 3
LATEST_OFFSET_VALUE_VERSION = 3
NO_LEADER_EPOCH = -1
NO_EXPIRE_TIMESTAMP = (
    -1
)  # a v1 offset value without its own expiry (OffsetCommitRequest.DEFAULT_TIMESTAMP)

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_MAX_STRING = 32767


class OffsetRecordError(ValueError):
    """Raised when a ``__consumer_offsets`` key or value does not decode: truncated, trailing
    bytes, a negative length, bad UTF-8 or an unknown schema version; or when a value to
    encode has a string longer than the format allows."""


@dataclass(frozen=True)
class CommittedOffset:
    """One committed offset with the client's metadata string. ``expire_timestamp_ms`` is set
    only for commits that asked for their own retention (v1 records); others expire by the
    group's state (see :meth:`OffsetCache.expired`)."""

    offset: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None
    leader_epoch: int = NO_LEADER_EPOCH


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


@dataclass(frozen=True)
class MemberRecord:
    """One member in a group-metadata record."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupRecord:
    """A group-metadata record value: the group as its last generation completed."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberRecord, ...]


def _put_string(out: bytearray, s: str | None, what: str) -> None:
    if s is None:
        out += _INT16.pack(-1)
        return
    raw = s.encode("utf-8")
    if len(raw) > _MAX_STRING:
        raise OffsetRecordError(f"{what} is {len(raw)} bytes; the limit is {_MAX_STRING}")
    out += _INT16.pack(len(raw))
    out += raw


def _put_bytes(out: bytearray, b: bytes) -> None:
    out += _INT32.pack(len(b))
    out += b


class _Reader:
    __slots__ = ("buf", "pos", "what", "flexible")

    def __init__(self, buf: bytes, what: str) -> None:
        self.buf = memoryview(buf)
        self.pos = 0
        self.what = what
        self.flexible = False

    def take(self, st: struct.Struct) -> tuple[Any, ...]:
        if self.pos + st.size > len(self.buf):
            raise OffsetRecordError(
                f"{self.what} truncated at byte {self.pos} (length {len(self.buf)})"
            )
        values = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return values

    def int16(self) -> int:
        return int(self.take(_INT16)[0])

    def int32(self) -> int:
        return int(self.take(_INT32)[0])

    def int64(self) -> int:
        return int(self.take(_INT64)[0])

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            if self.pos >= len(self.buf) or shift > 28:
                raise OffsetRecordError(f"{self.what}: bad varint at byte {self.pos}")
            b = self.buf[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def _raw(self, n: int, start: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise OffsetRecordError(
                f"{self.what}: length {n} at byte {start} does not fit in {len(self.buf)} bytes"
            )
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return raw

    def nullable_string(self) -> str | None:
        start = self.pos
        if self.flexible:
            n = self.uvarint() - 1
        else:
            n = self.int16()
        if n == -1:
            return None
        if n < 0 or self.pos + n > len(self.buf):
            raise OffsetRecordError(
                f"{self.what}: string length {n} at byte {start} does not fit in "
                f"{len(self.buf)} bytes"
            )
        raw = self._raw(n, start)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise OffsetRecordError(f"{self.what}: string is not UTF-8 ({exc})") from None

    def string(self) -> str:
        start = self.pos
        s = self.nullable_string()
        if s is None:
            raise OffsetRecordError(f"{self.what}: string length -1 at byte {start}")
        return s

    def bytes_(self) -> bytes:
        start = self.pos
        n = self.uvarint() - 1 if self.flexible else self.int32()
        return self._raw(n, start)

    def array_length(self) -> int:
        start = self.pos
        n = self.uvarint() - 1 if self.flexible else self.int32()
        if n < 0 or n > len(self.buf) - self.pos:
            raise OffsetRecordError(f"{self.what}: array of {n} at byte {start}")
        return n

    def tagged_fields(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                size = self.uvarint()
                self._raw(size, self.pos)

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


def encode_group_key(group: str) -> bytes:
    out = bytearray(_INT16.pack(GROUP_KEY_VERSION))
    _put_string(out, group, "group id")
    return bytes(out)


def group_value_version(inter_broker_protocol_version: str) -> int:
    """The GroupMetadataValue version Kafka 3.9 writes at this inter.broker.protocol.version
    (MetadataVersion.groupMetadataValueVersion)."""
    ibp = inter_broker_protocol_version
    if not metadata_version_at_least(ibp, "0.10.1-IV0"):
        return 0
    if not metadata_version_at_least(ibp, "2.1-IV0"):
        return 1
    if not metadata_version_at_least(ibp, "2.3-IV0"):
        return 2
    return LATEST_GROUP_VALUE_VERSION


def offset_value_version(inter_broker_protocol_version: str) -> int:
    """The OffsetCommitValue version Kafka 3.9 writes at this inter.broker.protocol.version for
    a commit without its own expiry (MetadataVersion.offsetCommitValueVersion); one with it is
    always v1."""
    ibp = inter_broker_protocol_version
    if not metadata_version_at_least(ibp, "2.1-IV0"):
        return 1
    if not metadata_version_at_least(ibp, "2.1-IV1"):
        return 2
    return LATEST_OFFSET_VALUE_VERSION


def encode_offset_value(
    value: CommittedOffset, version: int = LATEST_OFFSET_VALUE_VERSION
) -> bytes:
    """OffsetCommitValue at ``version`` (1, 2 or 3, from :func:`offset_value_version`), or v1
    when the commit has its own expire timestamp (GroupMetadataManager.offsetCommitValue).
    Versions 1 and 2 have no leader epoch."""
    if value.expire_timestamp_ms is not None:
        version = 1
    if version not in (1, 2, 3):
        raise OffsetRecordError(f"offset values are written at version 1, 2 or 3, not {version}")
    out = bytearray(_INT16.pack(version))
    out += _INT64.pack(value.offset)
    if version == 3:
        out += _INT32.pack(value.leader_epoch)
    _put_string(out, value.metadata, "offset metadata")
    out += _INT64.pack(value.commit_timestamp_ms)
    if version == 1:
        expire = value.expire_timestamp_ms
        out += _INT64.pack(NO_EXPIRE_TIMESTAMP if expire is None else expire)
    return bytes(out)


def encode_group_value(record: GroupRecord, version: int = LATEST_GROUP_VALUE_VERSION) -> bytes:
    """GroupMetadataValue at ``version`` (0-3, from :func:`group_value_version`): v0 has no
    rebalance timeout, v0-v1 no state timestamp, v0-v2 no group instance id."""
    if not 0 <= version <= LATEST_GROUP_VALUE_VERSION:
        raise OffsetRecordError(f"group values are written at version 0-3, not {version}")
    out = bytearray(_INT16.pack(version))
    _put_string(out, record.protocol_type, "protocol type")
    out += _INT32.pack(record.generation)
    _put_string(out, record.protocol, "protocol")
    _put_string(out, record.leader, "leader")
    if version >= 2:
        out += _INT64.pack(record.current_state_timestamp)
    out += _INT32.pack(len(record.members))
    for m in record.members:
        _put_string(out, m.member_id, "member id")
        if version >= 3:
            _put_string(out, m.group_instance_id, "group instance id")
        _put_string(out, m.client_id, "client id")
        _put_string(out, m.client_host, "client host")
        if version >= 1:
            out += _INT32.pack(m.rebalance_timeout)
        out += _INT32.pack(m.session_timeout)
        _put_bytes(out, m.subscription)
        _put_bytes(out, m.assignment)
    return bytes(out)


def decode_key(buf: bytes) -> OffsetKey | GroupKey:
    r = _Reader(buf, "offsets key")
    version = r.int16()
    if version in (0, 1):
        group = r.string()
        topic = r.string()
        partition = r.int32()
        r.done()
        return OffsetKey(group, topic, partition)
    if version == GROUP_KEY_VERSION:
        group = r.string()
        r.done()
        return GroupKey(group)
    raise OffsetRecordError(f"offsets key has unknown version {version}")


def decode_offset_value(buf: bytes) -> CommittedOffset:
    r = _Reader(buf, "offset value")
    version = r.int16()
    if not 0 <= version <= 4:
        raise OffsetRecordError(f"offset value has unknown version {version}")
    r.flexible = version >= 4
    offset = r.int64()
    epoch = r.int32() if version >= 3 else NO_LEADER_EPOCH
    metadata = r.string()
    commit_ts = r.int64()
    expire_ts = r.int64() if version == 1 else None
    if expire_ts == NO_EXPIRE_TIMESTAMP:
        expire_ts = None
    r.tagged_fields()
    r.done()
    return CommittedOffset(offset, metadata, commit_ts, expire_ts, epoch)


def decode_group_value(buf: bytes) -> GroupRecord:
    r = _Reader(buf, "group value")
    version = r.int16()
    if not 0 <= version <= 4:
        raise OffsetRecordError(f"group value has unknown version {version}")
    r.flexible = version >= 4
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ts = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.array_length()):
        member_id = r.string()
        instance = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance = r.int32() if version >= 1 else None
        session = r.int32()
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.tagged_fields()
        members.append(
            MemberRecord(
                member_id,
                instance,
                client_id,
                client_host,
                session if rebalance is None else rebalance,
                session,
                subscription,
                assignment,
            )
        )
    r.tagged_fields()
    r.done()
    return GroupRecord(protocol_type, generation, protocol, leader, state_ts, tuple(members))


def expire_timestamp(*, now_ms: int, retention_ms: int | None) -> int | None:
    """A commit's own expire timestamp (GroupCoordinatorAdapter.commitOffsets): now plus the
    request's retention_time_ms (OffsetCommit v2-v4), None when the request has none."""
    return None if retention_ms is None else now_ms + retention_ms


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

    def of_group(self, group: str) -> dict[tuple[str, int], CommittedOffset]:
        """(topic, partition) -> committed offset of one group (a copy)."""
        return dict(self._groups.get(group, {}))

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

    def expired(
        self,
        now_ms: int,
        retention_ms: int,
        policy: Callable[[str], tuple[int | None, frozenset[str]] | None],
    ) -> Iterator[OffsetKey]:
        """Keys whose offsets expired at ``now_ms`` (GroupMetadata.removeExpiredOffsets).
        ``policy(group)`` is None when the group's offsets must not expire now, else (base,
        topics kept): an offset expires when ``now - base >= retention_ms``, base being the
        time the group became Empty or else the commit's timestamp; one with its own expire
        timestamp when ``now >= expire``; offsets of the kept topics never."""
        for group, offsets in self._groups.items():
            rule = policy(group)
            if rule is None:
                continue
            base, keep = rule
            for (topic, partition), value in offsets.items():
                if topic in keep:
                    continue
                if value.expire_timestamp_ms is not None:
                    gone = now_ms >= value.expire_timestamp_ms
                else:
                    start = value.commit_timestamp_ms if base is None else base
                    gone = now_ms - start >= retention_ms
                if gone:
                    yield OffsetKey(group, topic, partition)
