"""The group coordinator as the broker runs it: the pure :class:`GroupMachine` driven by trio
timers, with committed offsets and group metadata kept in the internal ``__consumer_offsets``
topic.

Resources and errors:
- At start-up the topic ``__consumer_offsets`` (1 partition, compacted-style: no time or size
  retention) is created through the broker context if missing (clients cannot create it, nor
  Metadata auto-create it), its configs repaired if something left it with retention, and it
  is replayed into memory: committed offsets, and every group's last group-metadata record
  (generation, protocol, leader, members and their assignments), so a Stable group comes back
  Stable and its static members rejoin without a rebalance.
- Every access to its Log holds the partition's lock and runs in a worker thread (the broker's
  rule). On a single broker a commit is fsynced before it is acknowledged; so is a
  generation's group record before its members get their assignments (Kafka's storeGroup). In
  a cluster a write counts once the ISR has it, as an acks=all produce does, without an fsync.
- Group records are written by whichever task holds the writer lock, in the order the state
  machine queued them (:meth:`GroupCoordinator._flush_writes`, shielded from cancellation so
  a parked SyncGroup is always answered).
- One background task runs in the broker's nursery: the timer (session, rebalance and sync
  timeouts; every offsets.retention.check.interval.ms, offset expiry). The broker calls :meth:`GroupCoordinator.shutdown` when it begins shutting down:
  every parked JoinGroup/SyncGroup gets NOT_COORDINATOR_FOR_GROUP, so no request holds shutdown
  up.
- Until :func:`setup` returns, the broker has no coordinator and the handlers answer
  GROUP_COORDINATOR_NOT_AVAILABLE (clients retry).

Tombstones mark expired or deleted offsets and deleted groups; the live set is what replay
leaves. The topic is compacted (cleanup.policy=compact) by the broker's log cleaner like any
other (broker/cleaner.py, storage/cleaner.py): it keeps the last record of every key, so replay
gives the same offsets and groups, and removes tombstones after delete.retention.ms.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import structlog
import trio

from broker import workers
from broker.context import BrokerContext, TopicExistsError
from broker.errors import STORAGE_FAILURES
from broker.groups.offsets import (
    NO_LEADER_EPOCH,
    CommittedOffset,
    GroupRecord,
    OffsetCache,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    expire_timestamp,
    group_value_version,
    offset_value_version,
)
from broker.groups.state import (
    Delivery,
    GroupMachine,
    GroupOverview,
    GroupSummary,
    GroupWrite,
    JoinResult,
    LeaveMember,
    SyncResult,
    WriteKind,
)
from broker.groups.store import OffsetStoreError, append_records, load_offsets, pending_offsets
from broker.slices import Slices
from protocol.errors import ErrorCode
from protocol.records import Message
from protocol.validator import TopicSettings
from storage.errors import LogNotFoundError
from storage.producer_state import ProducerStateError

logger = structlog.get_logger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_PARTITION = 0
# Kafka's offsets topic settings (GroupCoordinator.offsetsTopicConfigs): compacted by the log
# cleaner, 100 MiB segments. Retention is also switched off explicitly (a compact-only log gets
# none anyway): deleting segments by age or size would drop live offsets.
OFFSETS_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": "104857600",
    "retention.ms": "-1",
    "retention.bytes": "-1",
}


class PartitionOffset(NamedTuple):  # a tuple: an OffsetFetch can name 10,000 partitions
    """OffsetFetch's answer for one partition: -1 and "" when nothing is committed."""

    offset: int
    metadata: str
    error: ErrorCode
    leader_epoch: int = NO_LEADER_EPOCH


@dataclass(frozen=True)
class GroupOffsets:
    """One group's committed offsets as they stood at one moment, for OffsetFetch: answers
    built from it read no coordinator state, so a large one is built beside the event loop and
    still shows every partition as of the same moment (as Kafka's read under the group lock).
    ``unstable``: the partitions with a commit being written or waiting for its transaction's
    end (filled only for a fetch that requires stable offsets)."""

    committed: dict[tuple[str, int], CommittedOffset]
    unstable: frozenset[tuple[str, int]] = frozenset()

    def answers(
        self, partitions: Sequence[tuple[str, int]] | None
    ) -> list[tuple[str, int, PartitionOffset]]:
        """One answer per partition asked, or (None) per partition the group has committed."""
        committed, unstable = self.committed, self.unstable
        if partitions is None:
            partitions = sorted(committed)
        out = []
        for key in partitions:
            value = committed.get(key)
            if key in unstable:
                answer = PartitionOffset(-1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT)
            elif value is None:
                answer = PartitionOffset(-1, "", ErrorCode.NONE)
            else:
                answer = PartitionOffset(
                    value.offset, value.metadata, ErrorCode.NONE, value.leader_epoch
                )
            out.append((key[0], key[1], answer))
        return out


class CommitEntry(NamedTuple):  # a tuple: an OffsetCommit can name 10,000 partitions
    """One partition of an OffsetCommit: ``timestamp`` -1 means now (only v1 sends others)."""

    topic: str
    partition: int
    offset: int
    metadata: str | None = ""
    timestamp: int = -1
    leader_epoch: int = NO_LEADER_EPOCH


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


class _AppendFailedError(Exception):
    """Raised by GroupCoordinator._append when records could not be written; ``error`` is the
    code for the client (the failure is already logged)."""

    def __init__(self, error: ErrorCode) -> None:
        super().__init__(error.name)
        self.error = error


class GroupCoordinator:
    """Membership, offsets and group records for every group (this broker coordinates them all).

    Build with :func:`setup`. ``ctx`` is the broker's BrokerContext (config, clock, topics,
    per-partition locks, ``create_topic``/``get_log``).
    """

    offsets_topic = OFFSETS_TOPIC

    def __init__(self, ctx: BrokerContext) -> None:
        cfg = ctx.config
        self._ctx = ctx
        self.node = (cfg.broker_id, cfg.advertised_host, cfg.advertised_port)
        self.machine = GroupMachine(
            min_session_timeout_ms=cfg.group_min_session_timeout_ms,
            max_session_timeout_ms=cfg.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=cfg.group_initial_rebalance_delay_ms,
            max_size=cfg.group_max_size,
        )
        self.offsets = OffsetCache()
        # The last group record stored for each group (what replay gives back).
        self.group_records: dict[str, GroupRecord] = {}
        self.retention_ms = cfg.offsets_retention_minutes * 60_000
        self.retention_check_interval_ms = cfg.offsets_retention_check_interval_ms
        self.metadata_max_bytes = cfg.offset_metadata_max_bytes
        # The record versions Kafka writes at this inter.broker.protocol.version.
        self.group_value_version = group_value_version(cfg.inter_broker_protocol_version)
        self.offset_value_version = offset_value_version(cfg.inter_broker_protocol_version)
        self.active = False
        self._changed = trio.Event()
        self._write_lock = trio.Lock()
        # (group, topic, partition) of commits being written: OffsetFetch with require_stable
        # answers UNSTABLE_OFFSET_COMMIT for them rather than the offset they replace.
        self._committing: dict[tuple[str, str, int], int] = {}
        # Groups whose tombstone could not be written: retried at each expiry check, so a
        # deleted group does not come back at the next start.
        self._tombstones_due: set[str] = set()
        # Offsets of transactions not yet ended (TxnOffsetCommit, KIP-98): producer id ->
        # (group, topic, partition) -> offset; they count once the COMMIT marker is written.
        self._txn_offsets: dict[int, dict[tuple[str, str, int], CommittedOffset]] = {}

    # ---- life cycle ----------------------------------------------------------------------

    async def start(self, nursery: trio.Nursery) -> None:
        """Create and replay the offsets topic, then run the timer in
        ``nursery``. If the broker began stopping meanwhile, stay inactive."""
        ctx = self._ctx
        if ctx.topics.get(OFFSETS_TOPIC) is None:
            try:
                await ctx.create_topic(OFFSETS_TOPIC, 1, OFFSETS_TOPIC_CONFIGS)
            except TopicExistsError:
                pass  # created concurrently (no client path can, but creation is idempotent)
        await self._repair_retention()
        pending: dict[int, list[Message]] = {}
        async with ctx.locked_log(OFFSETS_TOPIC, OFFSETS_PARTITION) as log:
            if log is None:
                raise RuntimeError(f"{OFFSETS_TOPIC}-{OFFSETS_PARTITION} has no log after creation")
            count = await workers.run_sync(
                lambda: load_offsets(
                    log,
                    self.offsets,
                    groups=self.group_records,
                    pending=pending,
                    topic=OFFSETS_TOPIC,
                    partition=OFFSETS_PARTITION,
                )
            )
        for producer_id, messages in pending.items():
            self._txn_offsets[producer_id] = pending_offsets(
                messages, topic=OFFSETS_TOPIC, partition=OFFSETS_PARTITION
            )
        now = ctx.clock()
        for group_id, record in self.group_records.items():
            self.machine.load_group(group_id, record, now)
        for group_id in self.offsets.groups():
            self.machine.ensure_group(group_id)
        logger.info(
            "group coordinator loaded offsets and groups",
            records_replayed=count,
            groups=len(self.machine.groups),
            groups_with_members=sum(1 for r in self.group_records.values() if r.members),
            offsets=len(self.offsets),
        )
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
            await workers.run_sync(ctx.topics.save, ctx.topics.snapshot())
            for p in range(fixed.partitions):
                async with ctx.locked_log(OFFSETS_TOPIC, p) as log:
                    if log is not None:  # the Log was opened with the old retention
                        log.update_config(fixed.log_config)

    def shutdown(self) -> None:
        """Stop serving: parked requests get NOT_COORDINATOR_FOR_GROUP, new ones
        GROUP_COORDINATOR_NOT_AVAILABLE. Committed offsets and stored group records are
        already durable."""
        if not self.active:
            return
        self.active = False
        self._answer(self.machine.abandon_all(ErrorCode.NOT_COORDINATOR_FOR_GROUP))
        self._changed.set()
        logger.info("group coordinator stopped")

    async def _run_timers(self) -> None:
        next_check = self._ctx.clock() + self.retention_check_interval_ms
        while True:
            now = self._ctx.clock()
            if self.active:
                await self._settle(self.machine.expire(now))
            if now >= next_check:
                next_check = now + self.retention_check_interval_ms
                if self.active:
                    await self.expire_offsets(now)
                continue
            # Reset before reading the deadlines: a change after this wakes the wait below.
            self._changed = trio.Event()
            deadline = min(self.machine.next_deadline() or math.inf, next_check)
            with trio.move_on_after(max(0.0, (deadline - now) / 1000)):
                await self._changed.wait()

    # ---- writing ---------------------------------------------------------------------------

    async def _append(
        self,
        records: Iterable[tuple[bytes, bytes | None]],
        what: str,
        *,
        producer: tuple[int, int] | None = None,
        verify: Callable[[], Awaitable[ErrorCode]] | None = None,
        **log: Any,
    ) -> None:
        """Append and fsync ``records`` to the offsets log (as a transactional batch of
        ``producer`` (id, epoch) when given, once ``verify()`` answers NONE under the log's
        lock). Raises _AppendFailedError with Kafka's code for the client (GroupMetadataManager's
        mapping) after logging why."""
        ctx = self._ctx
        disk_error: OSError | None = None
        error: ErrorCode | None = None
        appended_to = -1
        async with ctx.locked_log(OFFSETS_TOPIC, OFFSETS_PARTITION) as offsets_log:
            # Asked under the lock markers are written under, as a produce's transactional
            # batch is: asked before it, the transaction could end between the answer and the
            # append, which would then open a transaction in the offsets log that no marker
            # ever ends, leaving the group's offsets unstable for good.
            refused = await verify() if verify is not None else ErrorCode.NONE
            if refused is not ErrorCode.NONE:
                logger.warning(
                    f"{what} refused by the transaction coordinator",
                    topic=OFFSETS_TOPIC,
                    partition=OFFSETS_PARTITION,
                    error=refused.name,
                    reason="the transaction coordinator did not confirm the offsets partition "
                    "in the producer's ongoing transaction (ended, or the coordinator busy)",
                    action="none: the client retries or aborts its transaction",
                    **log,
                )
                raise _AppendFailedError(refused)
            try:
                if offsets_log is None:  # clients cannot delete it; a broker bug if it is gone
                    raise LogNotFoundError(f"{OFFSETS_TOPIC}-{OFFSETS_PARTITION} has no log")
                now = ctx.clock()
                await workers.run_sync(
                    lambda: append_records(
                        offsets_log,
                        self._settings(),
                        records,
                        now,
                        producer=producer,
                        # In a cluster the ISR's copies make a commit durable, as for an acks=all
                        # produce (Kafka never fsyncs one); a single broker has only its disk.
                        fsync=not ctx.replication.durable_by_replicas,
                    )
                )
                appended_to = offsets_log.log_end_offset
            except ProducerStateError as exc:
                # A fenced transactional producer (a newer epoch wrote here already).
                error = ErrorCode[exc.error_name]
                logger.warning(
                    f"{what} refused",
                    topic=OFFSETS_TOPIC,
                    partition=OFFSETS_PARTITION,
                    error=exc.error_name,
                    reason=str(exc),
                    **log,
                )
            except OffsetStoreError as exc:
                too_large = exc.error in (
                    ErrorCode.MESSAGE_TOO_LARGE,
                    ErrorCode.RECORD_LIST_TOO_LARGE,
                )
                error = (
                    ErrorCode.INVALID_COMMIT_OFFSET_SIZE
                    if too_large and what == "offset commit"
                    else ErrorCode.UNKNOWN_SERVER_ERROR
                )
                logger.error(
                    f"{what} refused by the offsets log",
                    topic=OFFSETS_TOPIC,
                    partition=OFFSETS_PARTITION,
                    error=exc.error.name,
                    reason=str(exc),
                    action="commit fewer partitions or shorter metadata per request"
                    if what == "offset commit"
                    else "raise the offsets topic's max.message.bytes or make the group smaller",
                    **log,
                )
            except STORAGE_FAILURES as exc:
                # A log that cannot be written sends the client to find its coordinator again.
                if isinstance(exc, OSError):
                    error, disk_error = ErrorCode.NOT_COORDINATOR_FOR_GROUP, exc
                else:
                    error = ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE
                logger.error(
                    f"{what} could not be written",
                    topic=OFFSETS_TOPIC,
                    partition=OFFSETS_PARTITION,
                    error=repr(exc),
                    action="check the log directory's disk; the client will retry",
                    **log,
                )
        if error is None:
            # Wake parked fetches (followers above all) as a produce does: Kafka completes
            # delayed fetches on every append, whoever appends. Without this a commit in a
            # cluster waited replica.fetch.wait.max.ms for its followers.
            ctx.partition(OFFSETS_TOPIC, OFFSETS_PARTITION).notify()
        if error is None:
            # In a cluster a write counts once the ISR has it (broker/cluster/groups.py).
            error = await ctx.replication.offsets_committed(appended_to - 1)
        if disk_error is not None:
            await ctx.storage_failed(OFFSETS_TOPIC, OFFSETS_PARTITION, disk_error)
        if error is not None:
            raise _AppendFailedError(error)

    async def _flush_writes(self) -> None:
        """Store every group record the machine queued, in order, and report each back to it
        (which answers parked SyncGroups). Shielded: the answers must not be lost to a
        cancelled caller."""
        with trio.CancelScope(shield=True):
            async with self._write_lock:
                while writes := self.machine.take_writes():
                    await self._store_group_writes(writes)

    async def _store_group_writes(self, writes: list[GroupWrite]) -> None:
        records: list[tuple[bytes, bytes | None]] = [
            (
                encode_group_key(w.group_id),
                None
                if w.record is None
                else encode_group_value(w.record, self.group_value_version),
            )
            for w in writes
        ]
        error = ErrorCode.NONE
        try:
            await self._append(records, "group metadata", groups=[w.group_id for w in writes])
        except _AppendFailedError as exc:
            error = exc.error
        now = self._ctx.clock()
        for w in writes:
            if error is ErrorCode.NONE:
                if w.record is None:
                    self.group_records.pop(w.group_id, None)
                else:
                    self.group_records[w.group_id] = w.record
            elif w.kind is WriteKind.TOMBSTONE:
                self._tombstones_due.add(w.group_id)
            elif w.kind is WriteKind.EMPTY:
                # As Kafka: the previous generation stays in the log and will time out.
                logger.warning(
                    "could not store an emptied group's metadata",
                    group=w.group_id,
                    generation=w.generation_id,
                    error=error.name,
                )
            self._answer(self.machine.store_completed(w.seq, error, now))
            if error is ErrorCode.NONE:
                logger.info(
                    "stored group metadata",
                    group=w.group_id,
                    generation=w.generation_id,
                    reason=w.kind.value,
                    members=0 if w.record is None else len(w.record.members),
                )
        self._changed.set()

    # ---- membership ------------------------------------------------------------------------

    async def _settle(self, out: list[Delivery]) -> None:
        """Answer parked requests, wake the timer (deadlines may have moved), and store the
        group records the machine queued."""
        self._answer(out)
        self._changed.set()
        await self._flush_writes()

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
        group_instance_id: str | None = None,
        require_known_member_id: bool = False,
        support_skipping_assignment: bool = False,
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
        await self._settle(
            self.machine.join(
                group_id,
                member_id,
                group_instance_id=group_instance_id,
                require_known_member_id=require_known_member_id,
                support_skipping_assignment=support_skipping_assignment,
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
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        assignments: dict[str, bytes],
        *,
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol: str | None = None,
    ) -> SyncResult:
        if not self.active:
            return SyncResult(ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE)
        waiter = _Waiter()
        await self._settle(
            self.machine.sync(
                group_id,
                generation_id,
                member_id,
                assignments,
                group_instance_id=group_instance_id,
                protocol_type=protocol_type,
                protocol=protocol,
                now_ms=self._ctx.clock(),
                waiter=waiter,
            )
        )
        result = await waiter.wait()
        assert isinstance(result, SyncResult)
        return result

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None = None,
    ) -> ErrorCode:
        if not self.active:
            return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE
        error = self.machine.heartbeat(
            group_id,
            member_id,
            generation_id,
            group_instance_id=group_instance_id,
            now_ms=self._ctx.clock(),
        )
        self._changed.set()
        return error

    async def leave(
        self, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[LeaveMember]]:
        """LeaveGroup for (member id, group instance id) entries."""
        if not self.active:
            return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE, []
        error, answers, out = self.machine.leave(group_id, members, now_ms=self._ctx.clock())
        await self._settle(out)
        for a in answers:
            if a.error is ErrorCode.NONE:
                logger.info(
                    "member left group",
                    group=group_id,
                    member=a.member_id,
                    group_instance_id=a.group_instance_id,
                )
        return error, answers

    def describe(self, group_id: str) -> tuple[ErrorCode, GroupSummary | None]:
        if not self.active:
            return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE, None
        return ErrorCode.NONE, self.machine.describe(group_id)

    def list_groups(self) -> tuple[ErrorCode, list[tuple[str, str]]]:
        """(group id, protocol type) of every group."""
        error, overview = self.overview()
        return error, [(g.group_id, g.protocol_type) for g in overview]

    def overview(
        self, states: Iterable[str] = (), types: Iterable[str] = ()
    ) -> tuple[ErrorCode, list[GroupOverview]]:
        """ListGroups: every group, filtered by states and types (see GroupMachine.overview)."""
        if not self.active:
            return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE, []
        return ErrorCode.NONE, self.machine.overview(states, types)

    # ---- offsets ---------------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        retention_ms: int | None,
        entries: Sequence[CommitEntry | tuple[Any, ...]],
        *,
        group_instance_id: str | None = None,
    ) -> list[ErrorCode]:
        """Commit entries (CommitEntry, or tuples of its fields); one error code per entry,
        in order. ``retention_ms`` None = the group's state decides expiry (Kafka 3.9); a value
        gives these offsets their own expire timestamp (v2-v4). Durable (fsynced) before this
        returns NONE."""
        commits = [e if isinstance(e, CommitEntry) else CommitEntry(*e) for e in entries]
        if not self.active:
            return [ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE] * len(commits)
        ctx = self._ctx
        now = ctx.clock()
        group_error = self.machine.check_commit(
            group_id, member_id, generation_id, group_instance_id=group_instance_id, now_ms=now
        )
        self._changed.set()
        errors, to_store, records = await self._offset_records(
            group_id, commits, group_error, now, retention_ms
        )
        if not to_store:
            return errors
        keys = [(group_id, e.topic, e.partition) for _, e, _ in to_store]
        for k in keys:
            self._committing[k] = self._committing.get(k, 0) + 1
        try:
            await self._append(records, "offset commit", group=group_id)
        except _AppendFailedError as exc:
            for i, _, _ in to_store:
                errors[i] = exc.error
        else:
            for _, e, value in to_store:
                self.offsets.put(group_id, e.topic, e.partition, value)
        finally:
            for k in keys:
                left = self._committing[k] - 1
                if left:
                    self._committing[k] = left
                else:
                    del self._committing[k]
        return errors

    async def _offset_records(
        self,
        group_id: str,
        entries: Sequence[CommitEntry],
        group_error: ErrorCode,
        now: int,
        retention_ms: int | None,
    ) -> tuple[
        list[ErrorCode],
        list[tuple[int, CommitEntry, CommittedOffset]],
        Iterable[tuple[bytes, bytes | None]],
    ]:
        """A commit's per-entry errors (unknown partition, the group's refusal, metadata too
        large), the entries to store with their values, and their offset records (encoded as
        they are read, once). An entry's timestamp -1 means now (only OffsetCommit v1 sends
        others)."""
        ctx = self._ctx
        errors: list[ErrorCode] = []
        to_store: list[tuple[int, CommitEntry, CommittedOffset]] = []
        slices = Slices()
        for i, e in enumerate(entries):
            await slices.turn()
            t = ctx.topics.get(e.topic)
            if t is None or not 0 <= e.partition < t.partitions:
                errors.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif group_error is not ErrorCode.NONE:
                errors.append(group_error)
            elif e.metadata is not None and len(e.metadata.encode()) > self.metadata_max_bytes:
                errors.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
            else:
                errors.append(ErrorCode.NONE)
                value = CommittedOffset(
                    e.offset,
                    e.metadata or "",
                    now if e.timestamp == -1 else e.timestamp,
                    expire_timestamp(now_ms=now, retention_ms=retention_ms),
                    e.leader_epoch,
                )
                to_store.append((i, e, value))
        # Encoded as the append reads them, in its worker thread.
        value_version = self.offset_value_version
        records = (
            (
                encode_offset_key(group_id, e.topic, e.partition),
                encode_offset_value(value, value_version),
            )
            for _, e, value in to_store
        )
        return errors, to_store, records

    def partition_for(self, group_id: str) -> int:
        """The offsets topic's partition holding the group (this broker has one)."""
        return OFFSETS_PARTITION

    async def txn_commit_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        entries: Sequence[CommitEntry],
        *,
        member_id: str = "",
        generation_id: int = -1,
        group_instance_id: str | None = None,
        verify: Callable[[], Awaitable[ErrorCode]] | None = None,
    ) -> list[ErrorCode]:
        """TxnOffsetCommit: the offsets are written now, as part of the producer's transaction
        (a transactional batch of its id and epoch), and count once its COMMIT marker is
        written (:meth:`complete_transaction`). KIP-447: a member id, instance id or generation
        sent must be the group's current ones. ``verify()``, awaited under the offsets log's
        lock, is the transaction coordinator's word that the offsets partition is in the
        ongoing transaction (KIP-890); its error, if any, answers every entry. One error code
        per entry, in order."""
        if not self.active:
            return [ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE] * len(entries)
        ctx = self._ctx
        now = ctx.clock()
        group_error = self.machine.check_txn_commit(
            group_id, member_id, generation_id, group_instance_id
        )
        errors, to_store, records = await self._offset_records(
            group_id, entries, group_error, now, None
        )
        if not to_store:
            return errors
        try:
            await self._append(
                records,
                "transactional offset commit",
                producer=(producer_id, producer_epoch),
                verify=verify,
                group=group_id,
                producer_id=producer_id,
            )
        except _AppendFailedError as exc:
            for i, _, _ in to_store:
                errors[i] = exc.error
        else:
            pending = self._txn_offsets.setdefault(producer_id, {})
            for _, e, value in to_store:
                pending[(group_id, e.topic, e.partition)] = value
        return errors

    def complete_transaction(self, producer_id: int, commit: bool) -> None:
        """The producer's transaction marker is in the offsets log: its offsets count (COMMIT)
        or are dropped (ABORT)."""
        pending = self._txn_offsets.pop(producer_id, {})
        if not commit:
            return
        for (group_id, topic, partition), value in pending.items():
            self.machine.ensure_group(group_id)
            self.offsets.put(group_id, topic, partition, value)

    def fetch_offsets(
        self, group_id: str, partitions: Sequence[tuple[str, int]]
    ) -> list[PartitionOffset]:
        """The group's committed offsets of ``partitions``, in order (every answer carries
        GROUP_COORDINATOR_NOT_AVAILABLE while the coordinator is not active)."""
        error, answers = self.fetch_group_offsets(group_id, partitions)
        if error is not ErrorCode.NONE:
            return [PartitionOffset(-1, "", error) for _ in partitions]
        return [po for _, _, po in answers]

    def fetch_group_offsets(
        self,
        group_id: str,
        partitions: Sequence[tuple[str, int]] | None,
        *,
        require_stable: bool = False,
    ) -> tuple[ErrorCode, list[tuple[str, int, PartitionOffset]]]:
        """OffsetFetch for one group: the given partitions, or (None) every partition the
        group has committed. A group error (coordinator not active) or NONE and one answer
        per partition."""
        offsets = self.group_offsets(group_id, require_stable=require_stable)
        if offsets is None:
            return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE, []
        return ErrorCode.NONE, offsets.answers(partitions)

    def group_offsets(self, group_id: str, *, require_stable: bool = False) -> GroupOffsets | None:
        """The group's committed offsets as they stand now (a copy), None while the
        coordinator is not active. ``require_stable``: note the partitions whose commit is
        being written or waits for its transaction's end."""
        if not self.active:
            return None
        unstable: frozenset[tuple[str, int]] = frozenset()
        if require_stable:
            keys = set(self._committing).union(*self._txn_offsets.values())
            unstable = frozenset((t, p) for g, t, p in keys if g == group_id)
        return GroupOffsets(self.offsets.of_group(group_id), unstable)

    async def _delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> int:
        """Tombstone the group's committed offsets of ``partitions`` (those it has); returns
        how many. Raises _AppendFailedError (nothing deleted) when they cannot be written."""
        present = [(t, p) for t, p in partitions if self.offsets.get(group_id, t, p) is not None]
        if present:
            await self._append(
                [(encode_offset_key(group_id, t, p), None) for t, p in present],
                "offset deletion",
                group=group_id,
            )
            for t, p in present:
                self.offsets.delete(group_id, t, p)
        return len(present)

    async def delete_groups(self, group_ids: Sequence[str]) -> list[tuple[str, ErrorCode]]:
        """DeleteGroups: each Empty group loses its offsets and its group record (tombstones)
        and is gone; others get GROUP_ID_NOT_FOUND or NON_EMPTY_GROUP."""
        results = []
        for group_id in dict.fromkeys(group_ids):
            if not self.active:
                results.append((group_id, ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE))
                continue
            error = self.machine.check_delete(group_id)
            if error is ErrorCode.NONE:
                self.machine.remove_group(group_id)
                try:
                    removed = await self._delete_offsets(
                        group_id, list(self.offsets.of_group(group_id))
                    )
                except _AppendFailedError as exc:
                    self.machine.ensure_group(group_id)  # its offsets are still there
                    error = exc.error
                else:
                    logger.info("group deleted", group=group_id, offsets_removed=removed)
                await self._flush_writes()
            results.append((group_id, error))
        return results

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[tuple[str, int]]
    ) -> tuple[ErrorCode, list[tuple[str, int, ErrorCode]]]:
        """OffsetDelete: the group's committed offsets of ``partitions``, unless a member of
        the (non-empty) group subscribes to the topic (GROUP_SUBSCRIBED_TO_TOPIC)."""
        if not self.active:
            return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE, []
        error, subscribed = self.machine.check_offset_delete(group_id, {t for t, _ in partitions})
        if error is not ErrorCode.NONE:
            return error, []
        eligible = [(t, p) for t, p in partitions if t not in subscribed]
        answers = [
            (t, p, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if t in subscribed else ErrorCode.NONE)
            for t, p in partitions
        ]
        try:
            removed = await self._delete_offsets(group_id, eligible)
        except _AppendFailedError as exc:
            return exc.error, []
        if removed:
            logger.info("offsets deleted", group=group_id, partitions=eligible, removed=removed)
        if not self.offsets.has_group(group_id) and self.machine.remove_group(group_id):
            await self._flush_writes()
        return ErrorCode.NONE, answers

    async def expire_offsets(self, now_ms: int) -> int:
        """Write tombstones for offsets past their retention (Kafka 3.9's rules, see
        OffsetCache.expired), then drop Empty groups that have no offsets left. Returns how
        many offsets expired."""

        def policy(group: str) -> tuple[int | None, frozenset[str]] | None:
            p = self.machine.expiry_policy(group)
            return None if p is None else (p.base_ms, p.keep_topics)

        expired = list(self.offsets.expired(now_ms, self.retention_ms, policy))
        if expired:
            try:
                await self._append(
                    [(encode_offset_key(k.group, k.topic, k.partition), None) for k in expired],
                    "expired-offset tombstones",
                    count=len(expired),
                )
            except _AppendFailedError:
                return 0  # logged; retried at the next offsets.retention.check.interval.ms
            for k in expired:
                self.offsets.delete(k.group, k.topic, k.partition)
        removed = [
            g
            for g in list(self.machine.groups)
            if not self.offsets.has_group(g) and self.machine.remove_group(g)
        ]
        await self._flush_writes()
        await self._retry_tombstones()
        if expired or removed:
            logger.info("expired committed offsets", offsets=len(expired), groups_removed=removed)
        return len(expired)

    async def _retry_tombstones(self) -> None:
        """Write the group tombstones that failed before, for groups still gone."""
        async with self._write_lock:  # no record of these groups is queued meanwhile
            due = sorted(g for g in self._tombstones_due if g not in self.machine.groups)
            self._tombstones_due.clear()
            if not due:
                return
            try:
                await self._append(
                    [(encode_group_key(g), None) for g in due], "group tombstones", groups=due
                )
            except _AppendFailedError:
                self._tombstones_due.update(due)  # logged; retried at the next check
                return
            for g in due:
                self.group_records.pop(g, None)

    def _settings(self) -> TopicSettings:
        topic = self._ctx.topics.get(OFFSETS_TOPIC)
        assert topic is not None  # created at start, and clients cannot delete it
        return topic.settings


async def setup(ctx: BrokerContext, nursery: trio.Nursery) -> GroupCoordinator:
    """The broker's hook: build the coordinator, replay offsets and groups, start its timers in
    ``nursery`` (cancelled with it); the broker stores the result in ``ctx.coordinator``."""
    coordinator = GroupCoordinator(ctx)
    await coordinator.start(nursery)
    return coordinator
