"""What the console pages show, read from the broker's state. Partition data is read under the
partition lock in a worker thread (as the request handlers do); storage answers every question
(``Log.offset_for_timestamp``, ``Log.read``, ``Log.aborted_transactions``, the producer state),
this module only decodes and arranges.

Transactions: a page of messages shows control batches (COMMIT/ABORT markers) as rows of their
own, and marks each record of a transactional batch with what a read_committed consumer sees of
it: "aborted" when the aborted-transaction index holds its producer's transaction at that
offset, "open" while its producer's transaction has no marker yet, else "committed"."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone


from broker import workers
from broker.admin.configs import ConfigSource, broker_entries
from broker.context import BrokerContext
from broker.txn.state import TxnMetadata
from protocol import recordbatch as rb
from protocol.errors import CorruptRecordError
from protocol.records import Message, ShallowEntry, TimestampType, iter_deep, iter_shallow
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
    producer_id: int = -1  # the batch's (v2 batches only), -1 without one
    txn: str = ""  # "", or for a transactional batch's record: committed, aborted or open
    control = False


def _timestamp_type(timestamp_type: TimestampType) -> str:
    return "LogAppendTime" if timestamp_type == TimestampType.LOG_APPEND_TIME else "CreateTime"


def show_message(m: Message, producer_id: int = -1, txn: str = "") -> ShownMessage:
    return ShownMessage(
        offset=m.offset,
        timestamp=m.timestamp,
        timestamp_text=format_ms(m.timestamp),
        timestamp_type=_timestamp_type(m.timestamp_type),
        key=show_bytes(m.key),
        value=show_bytes(m.value),
        headers=[(k if isinstance(k, str) else repr(k), show_bytes(v)) for k, v in m.headers],
        producer_id=producer_id,
        txn=txn,
    )


@dataclass(frozen=True)
class ShownControl:
    """A control batch: a transaction marker (``kind`` COMMIT or ABORT, with the coordinator
    epoch that wrote it), another control record type, one the cleaner emptied, or one whose
    record does not parse (shown, not raised: the rest of the page is still readable)."""

    offset: int
    timestamp: int
    timestamp_text: str
    kind: str  # COMMIT, ABORT, "control type N", "empty" (no record left) or "unreadable: ..."
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int  # -1 unless a transaction marker
    control = True


def _show_control(buf: memoryview, entry: ShallowEntry, header: rb.BatchHeader) -> ShownControl:
    kind, coordinator_epoch = "empty", -1
    try:
        records = rb.iter_records(buf, entry.position, header)
        marker = rb.read_end_txn_marker(records[0]) if records else None
    except CorruptRecordError as exc:
        records, marker, kind = [], None, f"unreadable: {exc}"
    if records:
        if marker is None:
            key = records[0].key or b""
            kind = f"control type {int.from_bytes(key[2:4], 'big', signed=True)}"
        else:
            kind = "COMMIT" if marker.commit else "ABORT"
            coordinator_epoch = marker.coordinator_epoch
    timestamp = header.max_timestamp
    return ShownControl(
        header.base_offset,
        timestamp,
        format_ms(timestamp),
        kind,
        header.producer_id,
        header.producer_epoch,
        coordinator_epoch,
    )


Row = ShownMessage | ShownControl


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
        return await workers.run_sync(_segments, log)


@dataclass(frozen=True)
class Found:
    """Where a message page starts and what it holds."""

    start: int | None  # the offset looked up (None: no message at or after the time)
    found_timestamp: int  # ListOffsets' timestamp for a time lookup, -1 otherwise
    messages: list[Row]  # records and control batches, by offset
    next_offset: int | None  # where the next page starts, None at the log end
    log_start: int
    log_end: int
    high_watermark: int = 0
    last_stable_offset: int = 0


# A record read, before its transaction is known: (message, producer id, transactional).
_Read = tuple[Message, int, bool] | ShownControl


def _entry_rows(buf: memoryview, entry: ShallowEntry) -> list[_Read]:
    """The records of one top-level entry, or its control batch."""
    one = buf[entry.position : entry.next_position]
    if entry.magic != rb.MAGIC:
        return [(m, -1, False) for m in iter_deep(one)]
    header = rb.read_header(buf, entry.position)
    if header.is_control:
        return [_show_control(buf, entry, header)]
    return [(m, header.producer_id, header.is_transactional) for m in iter_deep(one)]


def _read_page(log: Log, offset: int, count: int) -> tuple[list[_Read], int | None]:
    """Up to ``count`` records and control batches from ``offset`` (Log.read, decoded entry by
    entry) and the offset the next page starts at (None at the log end)."""
    rows: list[_Read] = []
    position = max(offset, log.log_start_offset)
    for _ in range(MAX_READS):
        if position >= log.log_end_offset:
            return rows, None
        data = log.read(position, READ_BYTES, min_one_message=True)
        if data.length == 0:
            return rows, None
        buf = memoryview(data.read_bytes())
        last = position - 1
        for entry in iter_shallow(buf):
            last = max(last, entry.offset)
            if entry.offset < position:
                continue
            for row in _entry_rows(buf, entry):
                row_offset = row.offset if isinstance(row, ShownControl) else row[0].offset
                if row_offset < position:
                    continue
                rows.append(row)
                if len(rows) == count:
                    following = row_offset + 1
                    return rows, following if following < log.log_end_offset else None
        # Past whatever this chunk held (a batch the cleaner emptied takes offsets, no rows).
        position = last + 1 if last >= position else position + 1
    return rows, position


def _with_transactions(log: Log, rows: list[_Read]) -> list[Row]:
    """Each record of a transactional batch marked aborted (the .txnindex holds its producer's
    aborted transaction over its offset), open (its producer's transaction has no marker yet
    and began at or before it) or committed."""
    offsets = [r.offset if isinstance(r, ShownControl) else r[0].offset for r in rows]
    aborted = log.aborted_transactions(offsets[0], offsets[-1] + 1) if rows else []
    ongoing = {pid: first for first, pid in log.producer_state().ongoing_transactions()}
    shown: list[Row] = []
    for row in rows:
        if isinstance(row, ShownControl):
            shown.append(row)
            continue
        m, pid, transactional = row
        txn = ""
        if transactional:
            if any(
                a.producer_id == pid and a.first_offset <= m.offset <= a.last_offset
                for a in aborted
            ):
                txn = "aborted"
            elif pid in ongoing and ongoing[pid] <= m.offset:
                txn = "open"
            else:
                txn = "committed"
        shown.append(show_message(m, pid, txn))
    return shown


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
                    return Found(
                        None,
                        -1,
                        [],
                        None,
                        log.log_start_offset,
                        log.log_end_offset,
                        log.high_watermark,
                        log.last_stable_offset,
                    )
                start, found_ts = hit.offset, hit.timestamp
            assert start is not None
            rows, next_offset = _read_page(log, start, count)
            return Found(
                start,
                found_ts,
                _with_transactions(log, rows),
                next_offset,
                log.log_start_offset,
                log.log_end_offset,
                log.high_watermark,
                log.last_stable_offset,
            )

        return await workers.run_sync(work)


@dataclass(frozen=True)
class OpenTxn:
    """A transaction with data in a partition and no marker yet."""

    producer_id: int
    producer_epoch: int
    first_offset: int
    transactional_id: str | None  # from the coordinator; None when it does not know the id
    state: str  # the coordinator's state for it (Ongoing, PrepareCommit...), "?" if unknown
    started_ms: int  # when the coordinator saw it begin, -1 if unknown


@dataclass(frozen=True)
class PartitionTxns:
    """What read_committed consumers see of a partition: they read below the last stable
    offset; the open transactions hold it back."""

    high_watermark: int
    last_stable_offset: int
    log_end: int
    open: list[OpenTxn]


def _ids_by_producer(ctx: BrokerContext) -> dict[int, TxnMetadata]:
    coordinator = ctx.txn_coordinator
    if coordinator is None:
        return {}
    return {m.producer_id: m for m in coordinator.machine.txns.values()}


async def partition_txns(ctx: BrokerContext, topic: str, partition: int) -> PartitionTxns | None:
    """The partition's LSO and open transactions (in-memory producer state, read under the
    partition lock); None when it does not exist."""
    async with ctx.locked_log(topic, partition) as log:
        if log is None:
            return None
        epochs = {p.producer_id: p.producer_epoch for p in log.producer_state().active_producers()}
        ongoing = log.producer_state().ongoing_transactions()
        hw, lso, end = log.high_watermark, log.last_stable_offset, log.log_end_offset
    by_pid = _ids_by_producer(ctx)
    open_txns = []
    for first, pid in ongoing:
        meta = by_pid.get(pid)
        open_txns.append(
            OpenTxn(
                pid,
                epochs.get(pid, -1),
                first,
                meta.transactional_id if meta else None,
                meta.state.label if meta else "?",
                meta.start_ms if meta else -1,
            )
        )
    return PartitionTxns(hw, lso, end, open_txns)


@dataclass(frozen=True)
class TxnRow:
    """A transactional id as the Transactions page lists it (DescribeTransactions' fields)."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    partitions: list[tuple[str, int]]
    start_ms: int  # when its current or last transaction began, -1 if none has
    last_update_ms: int
    pending: bool  # a state change is being written to __transaction_state


@dataclass(frozen=True)
class TxnOverview:
    active: bool  # the coordinator has loaded __transaction_state
    rows: list[TxnRow]
    committed: int  # since the broker started
    aborted: int
    aborted_by_timeout: int


def transactions(ctx: BrokerContext) -> TxnOverview:
    """Every transactional id the coordinator holds, open and completing transactions first,
    then by id."""
    coordinator = ctx.txn_coordinator
    if coordinator is None:
        return TxnOverview(False, [], 0, 0, 0)
    machine = coordinator.machine
    rows = [
        TxnRow(
            m.transactional_id,
            m.state.label,
            m.producer_id,
            m.producer_epoch,
            m.timeout_ms,
            sorted(m.partitions),
            m.start_ms,
            m.last_update_ms,
            tid in machine.pending,
        )
        for tid, m in machine.txns.items()
    ]
    rows.sort(key=lambda r: (r.state not in _OPEN_STATES, r.transactional_id))
    return TxnOverview(
        coordinator.active,
        rows,
        coordinator.committed,
        coordinator.aborted,
        coordinator.aborted_by_timeout,
    )


_OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")


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
            hit = await workers.run_sync(log.offset_for_timestamp, timestamp)
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
