"""What the console pages show, read from the broker's state. Partition data is read under the
partition lock in a worker thread (as the request handlers do); storage answers every question
(``Log.offset_for_timestamp``, ``Log.read``), this module only decodes and arranges."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone

import trio

from broker.admin.configs import ConfigSource, broker_entries
from broker.context import BrokerContext
from protocol.records import Message, TimestampType, iter_deep
from storage import Log

PAGE_MESSAGES = 20
READ_BYTES = 1 << 20  # per Log.read while filling a page
MAX_READS = 16  # a page reads at most this many chunks (then it links on from where it got)
SECRET_WORDS = ("password", "secret")


def is_secret(name: str) -> bool:
    return any(word in name.lower() for word in SECRET_WORDS)


def format_ms(ms: int) -> str:
    """``2026-11-25 12:08:01.123 UTC``, or "none" for a negative timestamp."""
    if ms < 0:
        return "none"
    moment = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d} UTC"


@dataclass(frozen=True)
class Shown:
    """A key, value or header value as the page shows it: ``kind`` text, json, hex or null."""

    kind: str
    text: str


def show_bytes(data: bytes | None) -> Shown:
    if data is None:
        return Shown("null", "null")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return Shown("hex", data.hex(" "))
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        try:
            return Shown("json", json.dumps(json.loads(text), indent=2, ensure_ascii=False))
        except ValueError:
            pass
    return Shown("text", text)


@dataclass(frozen=True)
class ShownMessage:
    offset: int
    timestamp: int
    timestamp_text: str
    timestamp_type: str
    key: Shown
    value: Shown
    headers: list[tuple[str, Shown]]


def show_message(m: Message) -> ShownMessage:
    return ShownMessage(
        offset=m.offset,
        timestamp=m.timestamp,
        timestamp_text=format_ms(m.timestamp),
        timestamp_type="LogAppendTime"
        if m.timestamp_type == TimestampType.LOG_APPEND_TIME
        else "CreateTime",
        key=show_bytes(m.key),
        value=show_bytes(m.value),
        headers=[(k if isinstance(k, str) else repr(k), show_bytes(v)) for k, v in m.headers],
    )


# -- partitions --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SegmentInfo:
    base_offset: int
    last_offset: int  # the next segment's base - 1, or the log end - 1 (below base: empty)
    size: int
    first_timestamp: int  # the first message's, -1 when empty
    largest_timestamp: int


def _segments(log: Log) -> list[SegmentInfo]:
    """Every segment with its first message's timestamp (one Log.read of its first entry)."""
    segments = list(log.segments)
    result = []
    for i, segment in enumerate(segments):
        end = segments[i + 1].base_offset if i + 1 < len(segments) else log.log_end_offset
        first = -1
        if segment.size and segment.base_offset < log.log_end_offset:
            start = max(segment.base_offset, log.log_start_offset)
            data = log.read(start, 0, min_one_message=True)
            for m in iter_deep(data.read_bytes()):
                if m.offset >= start:
                    first = m.timestamp
                    break
        result.append(
            SegmentInfo(
                segment.base_offset, end - 1, segment.size, first, segment.largest_timestamp
            )
        )
    return result


async def segments(ctx: BrokerContext, topic: str, partition: int) -> list[SegmentInfo] | None:
    """The partition's segments, None when it does not exist."""
    async with ctx.locked_log(topic, partition) as log:
        if log is None:
            return None
        return await trio.to_thread.run_sync(_segments, log)


@dataclass(frozen=True)
class Found:
    """Where a message page starts and what it holds."""

    start: int | None  # the offset looked up (None: no message at or after the time)
    found_timestamp: int  # ListOffsets' timestamp for a time lookup, -1 otherwise
    messages: list[ShownMessage]
    next_offset: int | None  # where the next page starts, None at the log end
    log_start: int
    log_end: int


def _read_page(log: Log, offset: int, count: int) -> tuple[list[Message], int | None]:
    """Up to ``count`` messages from ``offset`` (Log.read, decoded by iter_deep) and the offset
    the next page starts at (None at the log end)."""
    messages: list[Message] = []
    position = max(offset, log.log_start_offset)
    for _ in range(MAX_READS):
        if position >= log.log_end_offset:
            return messages, None
        data = log.read(position, READ_BYTES, min_one_message=True)
        if data.length == 0:
            return messages, None
        last = position - 1
        for m in iter_deep(data.read_bytes()):
            last = max(last, m.offset)
            if m.offset < position:
                continue
            messages.append(m)
            if len(messages) == count:
                return messages, m.offset + 1
        # Past whatever this chunk held (control batches yield no messages but take offsets).
        position = last + 1 if last >= position else position + 1
    return messages, position


async def page(
    ctx: BrokerContext,
    topic: str,
    partition: int,
    *,
    offset: int | None = None,
    timestamp: int | None = None,
    count: int = PAGE_MESSAGES,
) -> Found | None:
    """A page of messages from ``offset``, or from the first message with a timestamp at or
    after ``timestamp`` (Log.offset_for_timestamp: ListOffsets v1's answer); None when the
    partition does not exist."""
    async with ctx.locked_log(topic, partition) as log:
        if log is None:
            return None

        def work() -> Found:
            found_ts = -1
            start = offset
            if timestamp is not None:
                hit = log.offset_for_timestamp(timestamp)
                if hit is None:
                    return Found(None, -1, [], None, log.log_start_offset, log.log_end_offset)
                start, found_ts = hit.offset, hit.timestamp
            assert start is not None
            messages, next_offset = _read_page(log, start, count)
            return Found(
                start,
                found_ts,
                [show_message(m) for m in messages],
                next_offset,
                log.log_start_offset,
                log.log_end_offset,
            )

        return await trio.to_thread.run_sync(work)


async def offsets_for_time(
    ctx: BrokerContext, topic: str, partitions: int, timestamp: int
) -> dict[int, int]:
    """Per partition: the first offset with a timestamp >= ``timestamp`` (the log end when
    there is none), for a group offset reset."""
    result = {}
    for p in range(partitions):
        async with ctx.locked_log(topic, p) as log:
            if log is None:
                continue
            hit = await trio.to_thread.run_sync(log.offset_for_timestamp, timestamp)
            result[p] = log.log_end_offset if hit is None else hit.offset
    return result


# -- broker --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigRow:
    """A broker property as the Broker page shows it."""

    name: str
    value: str  # "" when it has none; HIDDEN for a set password
    source: str  # Kafka's ConfigSource name: STATIC_BROKER_CONFIG, DEFAULT_CONFIG, ...
    dynamic: bool  # AlterConfigs may change it while the broker runs


HIDDEN = "******"


def broker_configs(ctx: BrokerContext) -> list[ConfigRow]:
    """Every broker property with its current value and source, as DescribeConfigs reports them
    for this broker (the dynamic layers over the static properties). Sensitive ones (passwords)
    come without a value: shown as HIDDEN when set."""
    rows = []
    for entry in broker_entries(ctx.dynamic_configs.layers(), per_broker=True):
        if entry.sensitive:
            value = HIDDEN if entry.source != ConfigSource.DEFAULT_CONFIG else ""
        else:
            value = "" if entry.value is None else entry.value
        rows.append(ConfigRow(entry.name, value, entry.source.name, not entry.read_only))
    return rows


@dataclass(frozen=True)
class LogDirInfo:
    path: str
    total: int
    used: int
    free: int
    partitions: int
    offline: str | None  # why, when offline


def log_dirs(ctx: BrokerContext) -> list[LogDirInfo]:
    manager = ctx.log_manager
    counts: dict[str, int] = {}
    for log in manager.all_logs():
        parent = os.path.dirname(os.path.normpath(log.directory))
        counts[parent] = counts.get(parent, 0) + 1
    result = []
    for path in ctx.config.log_dirs:
        offline = manager.offline_dirs.get(path)
        try:
            st = os.statvfs(path)
            total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
            used = total - st.f_bfree * st.f_frsize
        except OSError as exc:
            total = used = free = 0
            offline = offline or f"statvfs failed: {exc!r}"
        result.append(
            LogDirInfo(path, total, used, free, counts.get(os.path.normpath(path), 0), offline)
        )
    return result
