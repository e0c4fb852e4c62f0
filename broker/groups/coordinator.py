"""The group coordinator as the broker runs it: the pure :class:`GroupMachine` driven by trio
timers, plus committed offsets kept in the internal ``__consumer_offsets`` topic.

Resources and errors:
- At start-up the topic ``__consumer_offsets`` (1 partition, compacted-style: no time or size
  retention) is created through the broker context if missing (clients cannot create it, nor
  Metadata auto-create it), its configs repaired if something left it with retention, and it
  is replayed into memory.
- Every access to its Log holds the partition's lock and runs in a worker thread (the broker's
  rule). A commit is fsynced before it is acknowledged.
- One background task runs in the broker's nursery: the timer (session and rebalance timeouts;
  every offsets.retention.check.interval.ms, offsets.retention.minutes expiry and the
  compaction check). The broker calls :meth:`GroupCoordinator.shutdown` when it begins
  shutting down: every parked JoinGroup/SyncGroup gets NOT_COORDINATOR_FOR_GROUP, so no request
  holds shutdown up.
- Until :func:`setup` returns, the broker has no coordinator and the handlers answer
  GROUP_COORDINATOR_NOT_AVAILABLE (clients retry).

Tombstones mark expired offsets; the live set is what replay leaves. When the log holds more
than COMPACT_MIN_BYTES and COMPACT_RATIO records per live offset (checked at start-up and on the
timer), it is compacted: the live offsets are written again as a snapshot and the segments
before it deleted (store.compact; crash-safe at every step).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import structlog
import trio

from broker.context import BrokerContext, TopicExistsError
from broker.errors import STORAGE_FAILURES
from broker.groups.offsets import (
    CommittedOffset,
    OffsetCache,
    encode_offset_key,
    encode_offset_value,
    expire_timestamp,
)
from broker.groups.state import Delivery, GroupMachine, GroupSummary, JoinResult, SyncResult
from broker.groups.store import (
    OffsetStoreError,
    append_records,
    compact,
    load_offsets,
    needs_compaction,
)
from protocol.errors import ErrorCode
from storage.errors import LogNotFoundError

logger = structlog.get_logger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_PARTITION = 0
# Kafka's offsets topic settings (GroupCoordinator.offsetsTopicConfigs): compacted, 100 MiB
# segments. Retention is switched off explicitly: it deletes segments by age or size, which
# would drop live offsets; the coordinator's own compaction bounds the log instead.
OFFSETS_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": "104857600",
    "retention.ms": "-1",
    "retention.bytes": "-1",
}
# Compact when the log exceeds this size and holds more than COMPACT_RATIO records per live
# offset: replay at start-up then stays within a few times the live set.
COMPACT_MIN_BYTES = 16 * 1024 * 1024
COMPACT_RATIO = 4


@dataclass(frozen=True)
class PartitionOffset:
    """OffsetFetch's answer for one partition: -1 and "" when nothing is committed."""

    offset: int
    metadata: str
    error: ErrorCode


class _Waiter:
    """A parked JoinGroup/SyncGroup: the handler sleeps on ``event`` until ``result`` is set."""

    __slots__ = ("event", "result")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.result: JoinResult | SyncResult | None = None

    async def wait(self) -> JoinResult | SyncResult:
        await self.event.wait()
        assert self.result is not None
        return self.result


class GroupCoordinator:
    """Membership and offsets for every group (this broker coordinates them all).

    Build with :func:`setup`. ``ctx`` is the broker's BrokerContext (config, clock, topics,
    per-partition locks, ``create_topic``/``get_log``).
    """

    def __init__(self, ctx: BrokerContext) -> None:
        cfg = ctx.config
        self._ctx = ctx
        self.node = (cfg.broker_id, cfg.advertised_host, cfg.advertised_port)
        self.machine = GroupMachine(
            min_session_timeout_ms=cfg.group_min_session_timeout_ms,
            max_session_timeout_ms=cfg.group_max_session_timeout_ms,
        )
        self.offsets = OffsetCache()
        self.retention_ms = cfg.offsets_retention_minutes * 60_000
        self.retention_check_interval_ms = cfg.offsets_retention_check_interval_ms
        self.metadata_max_bytes = cfg.offset_metadata_max_bytes
        self.compact_min_bytes = COMPACT_MIN_BYTES
        self.compact_ratio = COMPACT_RATIO
        self.active = False
        self._changed = trio.Event()

    # ---- life cycle ----------------------------------------------------------------------

    async def start(self, nursery: trio.Nursery) -> None:
        """Create/replay (and compact if due) the offsets topic, then run the timer in
        ``nursery``. If the broker began stopping meanwhile, stay inactive."""
        ctx = self._ctx
        if ctx.topics.get(OFFSETS_TOPIC) is None:
            try:
                await ctx.create_topic(OFFSETS_TOPIC, 1, OFFSETS_TOPIC_CONFIGS)
            except TopicExistsError:
                pass  # created concurrently (no client path can, but creation is idempotent)
        await self._repair_retention()
        async with ctx.locked_log(OFFSETS_TOPIC, OFFSETS_PARTITION) as log:
            if log is None:
                raise RuntimeError(f"{OFFSETS_TOPIC}-{OFFSETS_PARTITION} has no log after creation")
            count = await trio.to_thread.run_sync(
                lambda: load_offsets(
                    log,
                    self.offsets,
                    default_retention_ms=self.retention_ms,
                    topic=OFFSETS_TOPIC,
                    partition=OFFSETS_PARTITION,
                )
            )
        for group in self.offsets.groups():
            self.machine.ensure_group(group)
        logger.info(
            "group coordinator loaded offsets",
            records_replayed=count,
            groups=len(self.offsets.groups()),
            offsets=len(self.offsets),
        )
        await self.compact_offsets(ctx.clock())
        if ctx.stopping:  # shutdown began during start-up: Server.begin_shutdown saw no coordinator
            return
        self.active = True
        logger.info("group coordinator started")
        nursery.start_soon(self._run_timers)

    async def _repair_retention(self) -> None:
        """Give the offsets topic the coordinator's configs if it has time or size retention
        (a registry entry lost and rebuilt with broker defaults, or a topic made by an older
        version): retention would delete live offsets with their segments."""
        ctx = self._ctx
        topic = ctx.topics.get(OFFSETS_TOPIC)
        if topic is None:
            raise RuntimeError(f"{OFFSETS_TOPIC} is not registered after creation")
        if topic.config.retention_ms < 0 and topic.config.retention_bytes < 0:
            return
        logger.warning(
            "the offsets topic had time or size retention, which can delete committed "
            "offsets; switching it off",
            topic=OFFSETS_TOPIC,
            retention_ms=topic.config.retention_ms,
            retention_bytes=topic.config.retention_bytes,
            action="none: the registry entry is rewritten with retention.ms=-1 and "
            "retention.bytes=-1",
        )
        async with ctx.admin_lock:
            fixed = ctx.topics.make_topic(
                OFFSETS_TOPIC,
                topic.partitions,
                {**topic.overrides, **OFFSETS_TOPIC_CONFIGS},
                topic_id=topic.topic_id,
            )
            ctx.topics.put(fixed)
            await trio.to_thread.run_sync(ctx.topics.save, ctx.topics.snapshot())
            for p in range(fixed.partitions):
                async with ctx.locked_log(OFFSETS_TOPIC, p) as log:
                    if log is not None:  # the Log was opened with the old retention
                        log.update_config(fixed.log_config)

    def shutdown(self) -> None:
        """Stop serving: parked requests get NOT_COORDINATOR_FOR_GROUP, new ones
        GROUP_COORDINATOR_NOT_AVAILABLE. Committed offsets are already durable."""
        if not self.active:
            return
        self.active = False
        self._deliver(self.machine.abandon_all(ErrorCode.NOT_COORDINATOR_FOR_GROUP))
        logger.info("group coordinator stopped")

    async def _run_timers(self) -> None:
        next_check = self._ctx.clock() + self.retention_check_interval_ms
        while True:
            self._changed = trio.Event()
            now = self._ctx.clock()
            if self.active:
                self._answer(self.machine.expire(now))
            if now >= next_check:
                next_check = now + self.retention_check_interval_ms
                if self.active:
                    await self.expire_offsets(now)
                    await self.compact_offsets(now)
                continue
            deadline = min(self.machine.next_deadline() or math.inf, next_check)
            with trio.move_on_after(max(0.0, (deadline - now) / 1000)):
                await self._changed.wait()

    # ---- membership ------------------------------------------------------------------------

    def _deliver(self, out: list[Delivery]) -> None:
        """Answer parked requests, and wake the timer: deadlines may have moved."""
        self._answer(out)
        self._changed.set()

    @staticmethod
    def _answer(out: list[Delivery]) -> None:
        for waiter, result in out:
            assert isinstance(waiter, _Waiter)
            waiter.result = result
            waiter.event.set()

    async def join(
        self,
        group_id: str,
        member_id: str,
        *,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
    ) -> JoinResult:
        if not self.active:
            return JoinResult(ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE, member_id)
        waiter = _Waiter()
        self._deliver(
            self.machine.join(
                group_id,
                member_id,
                client_id=client_id,
                client_host=client_host,
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                protocol_type=protocol_type,
                protocols=protocols,
                now_ms=self._ctx.clock(),
                waiter=waiter,
            )
        )
        result = await waiter.wait()
        assert isinstance(result, JoinResult)
        return result

    async def sync(
        self, group_id: str, generation_id: int, member_id: str, assignments: dict[str, bytes]
    ) -> SyncResult:
        if not self.active:
            return SyncResult(ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE)
        waiter = _Waiter()
        self._deliver(
            self.machine.sync(
                group_id,
                generation_id,
                member_id,
                assignments,
                now_ms=self._ctx.clock(),
                waiter=waiter,
            )
        )
        result = await waiter.wait()
        assert isinstance(result, SyncResult)
        return result

    def heartbeat(self, group_id: str, member_id: str, generation_id: int) -> ErrorCode:
        if not self.active:
            return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE
        error = self.machine.heartbeat(group_id, member_id, generation_id, now_ms=self._ctx.clock())
        self._changed.set()
        return error

    def leave(self, group_id: str, member_id: str) -> ErrorCode:
        if not self.active:
            return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE
        error, out = self.machine.leave(group_id, member_id, now_ms=self._ctx.clock())
        self._deliver(out)
        if error is ErrorCode.NONE:
            logger.info("member left group", group=group_id, member=member_id)
        return error

    def describe(self, group_id: str) -> tuple[ErrorCode, GroupSummary | None]:
        if not self.active:
            return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE, None
        return ErrorCode.NONE, self.machine.describe(group_id)

    def list_groups(self) -> tuple[ErrorCode, list[tuple[str, str]]]:
        if not self.active:
            return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE, []
        return ErrorCode.NONE, self.machine.overview()

    # ---- offsets ---------------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        retention_ms: int | None,
        entries: Sequence[tuple[str, int, int, str | None, int]],
    ) -> list[ErrorCode]:
        """Commit (topic, partition, offset, metadata, timestamp) entries; one error code per
        entry, in order. ``retention_ms`` None = offsets.retention.minutes; ``timestamp`` -1
        = now (only v1 sends others). Durable (fsynced) before this returns NONE."""
        if not self.active:
            return [ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE] * len(entries)
        ctx = self._ctx
        now = ctx.clock()
        group_error = self.machine.check_commit(group_id, member_id, generation_id, now_ms=now)
        self._changed.set()
        errors: list[ErrorCode] = []
        to_store: list[tuple[int, str, int, CommittedOffset]] = []
        retention = self.retention_ms if retention_ms is None else retention_ms
        for i, (topic, partition, offset, metadata, timestamp) in enumerate(entries):
            t = ctx.topics.get(topic)
            if t is None or not 0 <= partition < t.partitions:
                errors.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif group_error is not ErrorCode.NONE:
                errors.append(group_error)
            elif metadata is not None and len(metadata.encode()) > self.metadata_max_bytes:
                errors.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
            else:
                errors.append(ErrorCode.NONE)
                to_store.append(
                    (
                        i,
                        topic,
                        partition,
                        CommittedOffset(
                            offset,
                            metadata or "",
                            now,
                            expire_timestamp(
                                now_ms=now, retention_ms=retention, commit_timestamp=timestamp
                            ),
                        ),
                    )
                )
        if not to_store:
            return errors
        records = [
            (encode_offset_key(group_id, topic, partition), encode_offset_value(value))
            for _, topic, partition, value in to_store
        ]
        failure: ErrorCode | None = None
        disk_error: OSError | None = None
        async with ctx.locked_log(OFFSETS_TOPIC, OFFSETS_PARTITION) as log:
            try:
                if log is None:  # clients cannot delete it; a broker bug if it is gone
                    raise LogNotFoundError(f"{OFFSETS_TOPIC}-{OFFSETS_PARTITION} has no log")
                await trio.to_thread.run_sync(append_records, log, self._settings(), records, now)
            except OffsetStoreError as exc:
                failure = (
                    ErrorCode.INVALID_COMMIT_OFFSET_SIZE
                    if exc.error in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE)
                    else ErrorCode.UNKNOWN_SERVER_ERROR
                )
                logger.error(
                    "offset commit refused by the offsets log",
                    group=group_id,
                    topic=OFFSETS_TOPIC,
                    partition=OFFSETS_PARTITION,
                    error=exc.error.name,
                    reason=str(exc),
                    action="commit fewer partitions or shorter metadata per request",
                )
            except STORAGE_FAILURES as exc:
                # Kafka's mapping (GroupMetadataManager.storeOffsets): a log that cannot be
                # written sends the client to find its coordinator again and retry.
                if isinstance(exc, OSError):
                    failure, disk_error = ErrorCode.NOT_COORDINATOR_FOR_GROUP, exc
                else:
                    failure = ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE
                logger.error(
                    "offset commit could not be written",
                    group=group_id,
                    topic=OFFSETS_TOPIC,
                    partition=OFFSETS_PARTITION,
                    error=repr(exc),
                    action="check the log directory's disk; the client will retry",
                )
            else:
                # Still under the lock, so the cache follows the log's order.
                for _, topic, partition, value in to_store:
                    self.offsets.put(group_id, topic, partition, value)
                appended_to = log.log_end_offset
        if failure is None and ctx.cluster is not None:
            # In a cluster the commit is acknowledged once the ISR has it (broker/cluster/groups).
            failure = await ctx.cluster.groups.committed(appended_to - 1)
        if disk_error is not None:
            await ctx.storage_failed(OFFSETS_TOPIC, OFFSETS_PARTITION, disk_error)
        if failure is not None:
            for i, *_ in to_store:
                errors[i] = failure
        return errors

    def fetch_offsets(
        self, group_id: str, partitions: Sequence[tuple[str, int]]
    ) -> list[PartitionOffset]:
        if not self.active:
            return [
                PartitionOffset(-1, "", ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE)
                for _ in partitions
            ]
        out = []
        for topic, partition in partitions:
            value = self.offsets.get(group_id, topic, partition)
            out.append(
                PartitionOffset(-1, "", ErrorCode.NONE)
                if value is None
                else PartitionOffset(value.offset, value.metadata, ErrorCode.NONE)
            )
        return out

    async def expire_offsets(self, now_ms: int) -> int:
        """Write tombstones for offsets past their expire timestamp, then drop Empty groups
        that have no offsets left. Returns how many offsets expired."""
        ctx = self._ctx
        async with ctx.locked_log(OFFSETS_TOPIC, OFFSETS_PARTITION) as log:
            expired = list(self.offsets.expired(now_ms)) if log is not None else []
            if expired:
                records = [
                    (encode_offset_key(k.group, k.topic, k.partition), None) for k in expired
                ]
                try:
                    await trio.to_thread.run_sync(
                        append_records, log, self._settings(), records, now_ms
                    )
                except STORAGE_FAILURES as exc:
                    logger.error(
                        "could not write expired-offset tombstones",
                        topic=OFFSETS_TOPIC,
                        partition=OFFSETS_PARTITION,
                        count=len(expired),
                        error=repr(exc),
                        action="check the log directory's disk; expiry is retried at "
                        "the next offsets.retention.check.interval.ms",
                    )
                    return 0
                for k in expired:
                    self.offsets.delete(k.group, k.topic, k.partition)
        removed = [
            g
            for g in list(self.machine.groups)
            if not self.offsets.has_group(g) and self.machine.remove_group(g)
        ]
        if expired or removed:
            logger.info("expired committed offsets", offsets=len(expired), groups_removed=removed)
        return len(expired)

    async def compact_offsets(self, now_ms: int) -> int:
        """Compact the offsets log if it holds far more than the live offsets (see the module
        docstring); returns how many segments were deleted (0 when not due or on failure,
        which is logged and retried at the next check)."""
        ctx = self._ctx
        async with ctx.locked_log(OFFSETS_TOPIC, OFFSETS_PARTITION) as log:
            if log is None or not needs_compaction(
                log, len(self.offsets), min_bytes=self.compact_min_bytes, ratio=self.compact_ratio
            ):
                return 0
            before = (log.size, log.log_end_offset - log.log_start_offset)
            live = list(self.offsets.items())  # under the lock: commits cannot interleave
            try:
                start, deleted = await trio.to_thread.run_sync(
                    compact, log, self._settings(), live, now_ms
                )
            except STORAGE_FAILURES as exc:
                logger.error(
                    "compacting the offsets log failed; committed offsets are intact",
                    topic=OFFSETS_TOPIC,
                    partition=OFFSETS_PARTITION,
                    error=repr(exc),
                    action="check the log directory's disk; retried at the next "
                    "offsets.retention.check.interval.ms",
                )
                return 0
            after = (log.size, log.log_end_offset - log.log_start_offset)
        logger.info(
            "compacted the offsets log",
            topic=OFFSETS_TOPIC,
            partition=OFFSETS_PARTITION,
            live_offsets=len(live),
            snapshot_offset=start,
            segments_deleted=deleted,
            bytes_before=before[0],
            records_before=before[1],
            bytes_after=after[0],
            records_after=after[1],
        )
        return deleted

    def _settings(self):
        return self._ctx.topics.get(OFFSETS_TOPIC).settings


async def setup(ctx, nursery: trio.Nursery) -> GroupCoordinator:
    """The broker's hook: build the coordinator, replay offsets, start its timers in
    ``nursery`` (cancelled with it); the broker stores the result in ``ctx.coordinator``."""
    coordinator = GroupCoordinator(ctx)
    await coordinator.start(nursery)
    return coordinator
