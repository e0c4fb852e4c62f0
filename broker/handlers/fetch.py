"""Fetch v0-v18 with long polling and zero-copy sends (v18's high watermark, KIP-1166, is a
follower's: a consumer's is ignored).

A fetch that finds fewer than ``min_bytes`` waits until ``max_wait_ms`` for an append to any of
its partitions (trio events, registered after the read with a check that no high watermark moved
meanwhile, so no append is missed), then reads again. Data that needs no conversion is returned as FileRegions over a duplicated file
descriptor, which the connection loop sends with os.sendfile and then closes (:func:`release`):
the duplicate keeps the bytes readable even if retention deletes the segment meanwhile.

Logs may hold magic 0/1 sets and v2 record batches side by side. Fetch v4+ readers take both as
stored (sendfile). Older readers get what their version can parse (v0/v1 magic 0, v2/v3 magic
1), converted lazily as Kafka does (KIP-283, protocol.conversion.LazyDownConversion): the first
chunk when the partition is read, outside its lock, the rest a chunk at a time while the answer
is sent (broker/server.py), each in a pool of ``num.io.threads`` worker threads, by the C
extension without the GIL where it is built, so the event loop keeps serving and a connection
holds one chunk rather than the whole answer converted. zstd data below v10 is refused with
UNSUPPORTED_COMPRESSION_TYPE, as Kafka does (after the first chunk the answer ends there
instead, and the reader is refused when it fetches from it). Fetch sessions (KIP-227, v7+) are kept by broker/fetch_sessions.py: an incremental
request reads every partition of its session and answers only those with news. With no
transactions (KIP-98), read_committed (v4+) reads up to the last stable offset and is told the
aborted transactions whose records the answer may hold, which the client drops; every v4+
answer carries the partition's last stable offset. Control batches (transaction markers) go to
v4+ readers as stored and never to older ones (conversion drops them). Topic ids (v13+) are resolved through the topic registry; an unknown one
answers UNKNOWN_TOPIC_ID.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import structlog
import trio

from broker import workers
from broker.context import BrokerContext
from broker.errors import STORAGE_FAILURES
from broker.fetch_sessions import Answer, Wanted
from broker.slices import Slices
from protocol.api import FileRegion, Request
from protocol.errors import CorruptRecordError, ErrorCode, UnsupportedCompressionError
from protocol.conversion import LazyDownConversion
from protocol.records import Codec, iter_shallow
from storage import OffsetOutOfRangeError

if TYPE_CHECKING:
    from broker.metrics import BrokerMetrics
    from storage import Log
    from storage.log import FetchData

RecordSet: TypeAlias = "bytes | FileRegion"
# (error, high watermark, log start offset, records, last stable offset, aborted transactions
# or None) of one partition: :func:`_read_partition`'s answer.
PartitionRead: TypeAlias = "tuple[ErrorCode, int, int, RecordSet, int, list[dict[str, int]] | None]"
# A corrupt stored batch or a failing disk: what a read of a partition may hit.
_READ_FAILURES: tuple[type[Exception], ...] = (*STORAGE_FAILURES, CorruptRecordError)

logger = structlog.get_logger(__name__)

INT_MAX = 2**31 - 1


@dataclass(eq=False)
class ConvertingSource:
    """The ``source`` of a FileRegion whose records are down-converted as they are sent: the
    conversion, and the dup()ed segment descriptor it reads, closed by :meth:`close`."""

    conversion: LazyDownConversion
    fd: int

    def next_piece(self) -> bytes:
        """Worker thread: the next converted bytes of the answer; b"" when all were given."""
        return self.conversion.next_piece()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _lazily_converted(region: FileRegion, to_magic: int) -> FileRegion:
    """An io thread, outside the partition lock: ``region`` (owning its descriptor) as records
    a reader below Fetch v4 parses, its first chunk converted (which raises
    UnsupportedCompressionError or CorruptRecordError, the descriptor then closed)."""
    fd, start = region.source, region.position

    def read(position: int, size: int) -> bytes:
        return os.pread(fd, size, start + position)

    try:
        conversion = LazyDownConversion(read, region.length, to_magic)
    except BaseException:
        os.close(fd)
        raise
    return FileRegion(ConvertingSource(conversion, fd), 0, conversion.size)


def readable_magic(version: int) -> int | None:
    """The highest message format a Fetch version can parse; None: any (v4+)."""
    if version <= 1:
        return 0
    return 1 if version <= 3 else None


def _read(
    log: Log,
    offset: int,
    max_bytes: int,
    min_one: bool,
    to_magic: int | None,
    zstd_ok: bool,
    max_offset: int | None = None,
) -> tuple[int, RecordSet, int]:
    """Worker thread, under the partition lock: (high_watermark, record_set, upper bound) where
    record_set is bytes or a FileRegion owning a dup()ed descriptor (still to convert with
    :func:`_lazily_converted` for a reader below v4), and no record of it is at or past the
    upper bound offset."""
    data = log.read(offset, max_bytes, min_one_message=min_one, max_offset=max_offset)
    return _records(data, to_magic, zstd_ok)


def _records(data: FetchData, to_magic: int | None, zstd_ok: bool) -> tuple[int, RecordSet, int]:
    """:func:`_read`'s answer for FetchData already found; raises UnsupportedCompressionError
    for zstd data a v4-v9 reader cannot take."""
    if data.length == 0:
        return data.high_watermark, b"", data.upper_bound
    if to_magic is None and not zstd_ok:  # checked here: no second thread hop
        return data.high_watermark, _refuse_zstd(data.read_bytes()), data.upper_bound
    region = FileRegion(os.dup(data.fileno), data.position, data.length)
    return data.high_watermark, region, data.upper_bound


def _refuse_zstd(raw: bytes) -> bytes:
    """``raw`` for a Fetch v4-v9 reader; raises UnsupportedCompressionError when it holds zstd
    data, which such a reader cannot take."""
    if any(e.magic == 2 and e.codec == Codec.ZSTD for e in iter_shallow(raw)):
        raise UnsupportedCompressionError("zstd data needs Fetch v10 or later (KIP-110)")
    return raw


def release(body: dict[str, Any]) -> None:
    """Close the descriptors of every FileRegion in a fetch response body (idempotent)."""
    for topic in body["responses"]:
        _release_parts(topic["partitions"])


def _wanted(ctx: BrokerContext, request: Request) -> tuple[list[Wanted], list[Wanted]]:
    """(partitions the request names, partitions it asks a session to forget), topic ids
    (v13+) resolved to names through the topic registry (None: unknown)."""
    body = request.body
    by_id = request.header.api_version >= 13

    def name_of(topic: Any) -> str | None:
        if not by_id:
            name: str = topic.topic
            return name
        known = ctx.topics.by_id(topic.topic_id)
        return known.name if known is not None else None

    wanted = []
    for topic in body.topics:
        name = name_of(topic)
        topic_id = topic.topic_id
        wanted += [
            Wanted(
                name,
                topic_id,
                p["partition"],
                p["fetch_offset"],
                p["partition_max_bytes"],
                p["current_leader_epoch"],
            )
            for p in topic.partitions
        ]
    forgotten = []
    for topic in body.forgotten_topics_data:
        name = name_of(topic)
        forgotten += [Wanted(name, topic.topic_id, p, 0, 0) for p in topic.partitions]
    return wanted, forgotten


async def _read_all(
    ctx: BrokerContext, request: Request, wanted: list[Wanted], replica_id: int = -1
) -> tuple[list[dict[str, Any]], list[Answer], int, bool]:
    """One pass over ``wanted``: (per-partition response dicts, answers for the session cache,
    bytes found, any partition error). ``replica_id``: the follower fetching (cluster only)."""
    body = request.body
    replication = ctx.replication
    version = request.header.api_version
    # KIP-541: the broker's fetch.max.bytes bounds every response, so many partitions times a
    # large partition max (Fetch v0-v2 have no total) cannot make the broker hold gigabytes.
    remaining = min(body.max_bytes if version >= 3 else INT_MAX, ctx.config.fetch_max_bytes)
    min_one = version >= 3  # KIP-74: the first message is returned even if over the limits
    to_magic = readable_magic(version)
    read_committed = version >= 4 and body.isolation_level == 1
    total, errored = 0, False
    parts, answers = [], []
    slices = Slices()  # a fetch can name every partition the broker has
    try:
        for w in wanted:
            await slices.turn()
            at_end = ctx.get_log(w.topic, w.partition) if w.topic is not None else None
            max_offset = None
            if w.topic is not None:
                error, max_offset = replication.fetch_check(
                    w.topic, w.partition, w.leader_epoch, w.fetch_offset, replica_id, at_end
                )
            else:
                error = ErrorCode.NONE
            lso, aborted = -1, None
            records: RecordSet
            if w.topic is None:
                error, hw, start, records = ErrorCode.UNKNOWN_TOPIC_ID, -1, -1, b""
            elif error != ErrorCode.NONE:
                hw, start, records = -1, -1, b""
            elif (
                at_end is not None and w.fetch_offset == at_end.log_end_offset and w.max_bytes >= 0
            ):
                # Nothing to read: answered without the lock (broker/context.py's rules).
                error, hw, start, records = (
                    ErrorCode.NONE,
                    at_end.high_watermark,
                    at_end.log_start_offset,
                    b"",
                )
                lso = at_end.last_stable_offset
            else:
                error, hw, start, records, lso, aborted = await _read_partition(
                    ctx,
                    w.topic,
                    w.partition,
                    w.fetch_offset,
                    min(w.max_bytes, remaining),
                    min_one,
                    to_magic,
                    version >= 10,
                    max_offset,
                    read_committed,
                )
                if error == ErrorCode.KAFKA_STORAGE_ERROR and version <= 5:
                    # As Kafka: Fetch v0-v5 clients may not retry 56; they do retry this.
                    error = ErrorCode.NOT_LEADER_FOR_PARTITION
            size = records.length if isinstance(records, FileRegion) else len(records)
            if size:
                min_one = False
                total += size
                remaining = max(0, remaining - size)
            errored = errored or error != ErrorCode.NONE
            parts.append(
                {
                    "partition_index": w.partition,
                    "error_code": int(error),
                    "high_watermark": hw,
                    "last_stable_offset": lso,
                    "log_start_offset": start,
                    "aborted_transactions": _aborted_field(error, read_committed, aborted),
                    "preferred_read_replica": -1,
                    "records": records,
                }
            )
            answers.append(Answer(error, hw, start, size))
    except BaseException:
        _release_parts(parts)
        raise
    return parts, answers, total, errored


# Refused before any read: Kafka 4.1 answers these with FetchResponse.partitionResponse, whose
# aborted transactions are an empty list; errors of the read itself leave them null.
_UNREAD = frozenset({ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})


def _aborted_field(
    error: ErrorCode, read_committed: bool, aborted: list[dict[str, int]] | None
) -> list[dict[str, int]] | None:
    """A partition answer's aborted transactions, null or empty as Kafka 4.1 sends them."""
    if error in _UNREAD:
        return []
    if error != ErrorCode.NONE:
        return None
    return (aborted or []) if read_committed else None


def _body(
    wanted: list[Wanted],
    parts: list[dict[str, Any]],
    chosen: Iterable[int],
    session_id: int,
    error: ErrorCode = ErrorCode.NONE,
) -> dict[str, Any]:
    """The response body: the ``chosen`` partitions grouped by topic in request order."""
    responses: list[dict[str, Any]] = []
    last = None
    for index in chosen:
        w = wanted[index]
        if last is None or (w.topic_id, w.topic) != last:
            last = (w.topic_id, w.topic)
            responses.append({"topic": w.topic or "", "topic_id": w.topic_id, "partitions": []})
        responses[-1]["partitions"].append(parts[index])
    return {
        "throttle_time_ms": 0,
        "error_code": int(error),
        "session_id": session_id,
        "responses": responses,
    }


def _release_parts(parts: Iterable[dict[str, Any]]) -> None:
    """Close the FileRegion descriptors of these partition answers (idempotent)."""
    for part in parts:
        region = part["records"]
        if isinstance(region, FileRegion):
            part["records"] = b""
            if isinstance(region.source, ConvertingSource):
                region.source.close()
            else:
                os.close(region.source)


async def _read_partition(
    ctx: BrokerContext,
    topic: str,
    partition: int,
    offset: int,
    max_bytes: int,
    min_one: bool,
    to_magic: int | None,
    zstd_ok: bool,
    max_offset: int | None = None,
    read_committed: bool = False,
) -> PartitionRead:
    """(error, high watermark, log start offset, records, last stable offset, aborted
    transactions or None) of one partition, up to ``max_offset`` when given (a consumer's high
    watermark in a cluster), and for ``read_committed`` up to the last stable offset, with the
    aborted transactions the records overlap: collected from ``offset`` only up to the end of
    what is sent (Kafka's fetch upper bound), so a consumer far behind does not scan every later
    transaction index on each fetch. A disk error is handed to ``ctx.storage_failed`` once the
    partition lock is released."""
    failure: OSError | None = None
    async with ctx.locked_log(topic, partition) as log:
        if log is None:
            if ctx.is_offline(topic, partition):
                return ErrorCode.KAFKA_STORAGE_ERROR, -1, -1, b"", -1, None
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, b"", -1, None
        if max_bytes < 0:
            return ErrorCode.INVALID_FETCH_SIZE, -1, -1, b"", -1, None
        start = log.log_start_offset
        lso = log.last_stable_offset
        aborted = None
        if read_committed:
            max_offset = lso if max_offset is None else min(max_offset, lso)
        try:
            if max_bytes == 0 and not min_one:
                return ErrorCode.NONE, log.high_watermark, start, b"", lso, None
            # A consumer at the tail (or at the log end) is answered from memory: no thread.
            data = log.read_cached(
                offset, max_bytes, min_one_message=min_one, max_offset=max_offset
            )
            if data is not None and (data.length == 0 or (to_magic is None and zstd_ok)):
                hw, records, upper = _records(data, to_magic, zstd_ok)
            else:
                hw, records, upper = await workers.run_sync(
                    _read, log, offset, max_bytes, min_one, to_magic, zstd_ok, max_offset
                )
            if read_committed and records:
                aborted = [
                    {"producer_id": txn.producer_id, "first_offset": txn.first_offset}
                    for txn in log.aborted_transactions(offset, upper)
                ]
        except OffsetOutOfRangeError as exc:
            logger.info(
                "fetch offset out of range",
                topic=topic,
                partition=partition,
                offset=offset,
                reason=str(exc),
            )
            return ErrorCode.OFFSET_OUT_OF_RANGE, log.high_watermark, start, b"", lso, None
        except UnsupportedCompressionError as exc:
            return _unsupported(topic, partition, offset, exc, log.high_watermark, start, lso)
        except _READ_FAILURES as exc:
            if not isinstance(exc, OSError):
                return _corrupt(ctx, log, topic, partition, offset, exc)
            _read_failed(ctx, log, topic, partition, offset, exc)
            failure = exc
    if failure is not None:
        await ctx.storage_failed(topic, partition, failure)
        return ErrorCode.KAFKA_STORAGE_ERROR, -1, -1, b"", -1, None
    if records and to_magic is not None:
        # Converted outside the partition lock (appends go on), in the conversion pool.
        assert isinstance(records, FileRegion)  # _records reads what is to convert
        try:
            records = await workers.run_sync(
                _lazily_converted, records, to_magic, limiter=_io_threads(ctx)
            )
        except UnsupportedCompressionError as exc:
            return _unsupported(topic, partition, offset, exc, hw, start, lso)
        except CorruptRecordError as exc:
            return _corrupt(ctx, log, topic, partition, offset, exc)
    return ErrorCode.NONE, hw, start, records, lso, aborted


def _unsupported(
    topic: str, partition: int, offset: int, exc: Exception, hw: int, start: int, lso: int
) -> PartitionRead:
    """The answer to a reader below Fetch v10 whose data holds zstd (logged)."""
    logger.warning(
        "fetch rejected",
        topic=topic,
        partition=partition,
        offset=offset,
        error="UNSUPPORTED_COMPRESSION_TYPE",
        reason=str(exc),
        action="upgrade the consumer (zstd needs Fetch v10)",
    )
    return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, hw, start, b"", lso, None


def _io_threads(ctx: BrokerContext) -> trio.CapacityLimiter:
    """The conversion pool, resized when AlterConfigs changed num.io.threads (KIP-226: Kafka
    resizes its request handler pool at run time too); a shrink lets running work finish."""
    limiter = ctx.io_threads
    size = workers.conversion_threads(ctx.config.num_io_threads)
    if limiter.total_tokens != size:
        limiter.total_tokens = size
    return limiter


def _read_failed(
    ctx: BrokerContext, log: Log, topic: str, partition: int, offset: int, exc: Exception
) -> None:
    """Count and log a read that failed on the disk or on bad stored bytes."""
    if ctx.metrics is not None:
        ctx.metrics.storage_error(log)
    logger.error(
        "fetch read failed",
        topic=topic,
        partition=partition,
        offset=offset,
        error=repr(exc),
        action="check the log dir's disk and dump-log --verify",
    )


def _corrupt(
    ctx: BrokerContext, log: Log, topic: str, partition: int, offset: int, exc: Exception
) -> PartitionRead:
    """The answer to a read that found bad stored bytes (logged and counted)."""
    _read_failed(ctx, log, topic, partition, offset, exc)
    return ErrorCode.UNKNOWN_SERVER_ERROR, -1, -1, b"", -1, None


async def handle_fetch(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    version = request.header.api_version
    deadline = trio.current_time() + max(0, body.max_wait_ms) / 1000
    requested, forgotten = _wanted(ctx, request)
    context = ctx.fetch_sessions.context(
        version, body.session_id, body.session_epoch, requested, forgotten
    )
    if context.error != ErrorCode.NONE:
        logger.info(
            "fetch session refused",
            session_id=body.session_id,
            epoch=body.session_epoch,
            error=context.error.name,
            action="none: the client starts a new session",
        )
        return _body([], [], [], context.respond([])[0], context.error)
    wanted = context.wanted
    replica_id = ctx.replication.follower_id(
        body.replica_state.replica_id if version >= 15 else body.replica_id
    )
    while True:
        parts, answers, total, errored = await _read_all(ctx, request, wanted, replica_id)
        if total >= body.min_bytes or errored or ctx.stopping or trio.current_time() >= deadline:
            session_id, chosen = context.respond(answers)
            if context.create_session and session_id:
                logger.info(
                    "fetch session created",
                    session_id=session_id,
                    partitions=len(wanted),
                    sessions=len(ctx.fetch_sessions),
                )
            unsent = set(range(len(parts))).difference(chosen)
            _release_parts([parts[i] for i in unsent])
            if ctx.metrics is not None and total:
                _count_bytes_out(ctx.metrics, wanted, answers, chosen)
            return _body(wanted, parts, chosen, session_id)
        _release_parts(parts)
        await _wait_for_append(ctx, wanted, answers, deadline, follower=replica_id >= 0)


def _count_bytes_out(
    metrics: BrokerMetrics, wanted: list[Wanted], answers: list[Answer], chosen: Iterable[int]
) -> None:
    """Bytes out per topic of the partitions answered (one addition per partition with data)."""
    for index in chosen:
        size, topic = answers[index].records_size, wanted[index].topic
        if size and topic is not None:
            metrics.fetched(topic, size)


async def _wait_for_append(
    ctx: BrokerContext,
    wanted: list[Wanted],
    answers: list[Answer],
    deadline: float,
    follower: bool = False,
) -> None:
    """Until an append to one of ``wanted`` or ``deadline``. The events are registered after
    the read, which a fetch that returns at once never pays for; an append between that read
    and the registration shows as a moved high watermark, and then this returns at once. A
    follower (in a cluster) reads to the log end, not the high watermark: for it an append
    shows as a log end offset past its fetch offset."""
    event = trio.Event()
    watched = []
    slices = Slices()
    try:
        for w, answer in zip(wanted, answers):
            await slices.turn()
            if w.topic is None:
                continue
            log = ctx.get_log(w.topic, w.partition)
            if log is not None:
                state = ctx.partition(w.topic, w.partition)
                state.waiters.add(event)
                watched.append((state, log, answer.high_watermark))
                if follower and log.log_end_offset > w.fetch_offset:
                    event.set()
        if not event.is_set() and all(log.high_watermark == seen for _, log, seen in watched):
            with trio.move_on_at(deadline):
                await event.wait()
    finally:
        for state, _, _ in watched:
            state.waiters.discard(event)
