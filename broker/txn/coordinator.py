"""The transaction coordinator as the broker runs it: the pure :class:`TxnMachine` driven by
trio, its state kept in the internal ``__transaction_state`` topic, and the transaction markers
written to the partitions of each transaction.

Resources and errors:
- ``__transaction_state`` (transaction.state.log.num.partitions partitions, compacted) is created
  at the first transactional FindCoordinator or InitProducerId, as Kafka creates it; when it
  exists at start-up it is loaded then. A transactional id lives in partition
  ``abs(java_hash(id)) % partitions`` (Kafka's partitionFor), so the layout is Kafka's.
- Every state change is appended and fsynced to that partition before it takes effect or is
  answered (Kafka writes it with acks=all), but for a completion, which a restart redoes from the
  PrepareCommit/PrepareAbort before it; a write that fails leaves the id's state as it was
  and answers the client with a retriable error (NOT_COORDINATOR, as Kafka maps storage errors).
- One task per completing transaction writes its markers (COMMIT or ABORT control batches) to
  each of its partitions under the partition's lock, then stores CompleteCommit/CompleteAbort.
  A marker that cannot be written (full or failing disk) is retried until it is; a partition
  deleted meanwhile is skipped, as Kafka skips it. After a restart the transactions found in
  PrepareCommit/PrepareAbort are completed the same way.
- One timer task aborts transactions open longer than their timeout (checked every
  transaction.abort.timed.out.transaction.cleanup.interval.ms) and forgets ids idle for
  transactional.id.expiration.ms.
- The coordinator epoch written into markers is the leader epoch at which this broker became the
  leader of the id's partition (0 on a single broker).

In a ZooKeeper cluster (broker/cluster/txn.py places it) the coordinator serves only the ids
whose partition this broker leads, as Kafka's TransactionStateManager does: a partition is
loaded when this broker becomes its leader (:meth:`load_partition`; its ids answer
COORDINATOR_LOAD_IN_PROGRESS meanwhile, then the transactions found completing are completed)
and dropped when it stops leading (:meth:`unload_partition`; its ids answer NOT_COORDINATOR and
its marker tasks stop, the new leader redoes them). A state change counts once the partition's
ISR has it (its high watermark passed it, as an acks=all produce), not once fsynced; markers go
to each data partition's leader (broker/cluster/txn.py), local ones appended here and also
acknowledged by the ISR.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

import structlog
import trio

from broker import workers
from broker.context import BrokerContext, TopicExistsError
from broker.errors import STORAGE_FAILURES
from broker.handlers.producer_ids import producer_id_ready
from broker.log_replay import log_entries
from broker.txn import log as txn_log
from broker.txn.markers import MarkerOutcome, marker_outcome, skip_deleted, write_marker
from broker.txn.state import (
    Answer,
    Decision,
    TopicPartition,
    Transit,
    TxnMachine,
    TxnMetadata,
    TxnState,
)
from protocol import recordbatch as rb
from protocol.errors import ErrorCode
from protocol.records import iter_deep
from protocol.validator import Rejected, TopicSettings, validate_produce
from storage.errors import LogNotFoundError
from storage.log import Log

logger = structlog.get_logger(__name__)

TRANSACTION_STATE_TOPIC = "__transaction_state"
MARKER_RETRY_S = 0.5
COORDINATOR_EPOCH = 0


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units, int32 arithmetic)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(transactional_id: str, partitions: int) -> int:
    """Kafka's TransactionStateManager.partitionFor: Utils.abs(hashCode) % partitions."""
    return (java_string_hash(transactional_id) & 0x7FFFFFFF) % partitions


class TxnRouting(Protocol):
    """Where the coordinator's partitions are served and where its writes and markers go:
    :class:`LocalTxnRouting` on a single broker, broker/cluster/txn.py's TxnPlacement in a
    cluster."""

    loads_on_demand: bool
    """True: this broker serves every partition, created and loaded by the first request that
    needs them (COORDINATOR_NOT_AVAILABLE until then). False: partitions come and go with
    their leadership (:meth:`TransactionCoordinator.load_partition`); the ids of the others
    answer NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS while loading)."""

    async def replicated(self, partition: int, last_offset: int) -> ErrorCode:
        """After a state write up to ``last_offset`` in ``partition``: NONE once it counts,
        else the client's error."""
        ...

    async def send_markers(
        self,
        meta: TxnMetadata,
        partitions: list[TopicPartition],
        commit: bool,
        coordinator_epoch: int,
    ) -> list[TopicPartition]:
        """One round of markers; returns the partitions to retry."""
        ...

    async def verify_remote(
        self, tid: str, producer_id: int, epoch: int, partition: TopicPartition, add: bool
    ) -> ErrorCode:
        """A produce's transactional check for an id this broker does not serve, asked of the
        broker that does (only when not ``loads_on_demand``)."""
        ...


class LocalTxnRouting:
    """A single broker's: every partition here, markers appended to the local logs, a write
    counts once appended (and fsynced, see :meth:`TransactionCoordinator._store`)."""

    loads_on_demand = True

    def __init__(self, ctx: BrokerContext) -> None:
        self._ctx = ctx

    async def replicated(self, partition: int, last_offset: int) -> ErrorCode:
        return ErrorCode.NONE

    async def send_markers(
        self,
        meta: TxnMetadata,
        partitions: list[TopicPartition],
        commit: bool,
        coordinator_epoch: int,
    ) -> list[TopicPartition]:
        retry = []
        for topic, partition in partitions:
            registered = self._ctx.topics.get(topic)
            if registered is None or partition >= registered.partitions:
                skip_deleted(meta, topic, partition)
                continue
            error = await write_marker(
                self._ctx,
                topic,
                partition,
                meta.producer_id,
                meta.producer_epoch,
                coordinator_epoch,
                commit,
            )
            if marker_outcome(error, meta, topic, partition) is MarkerOutcome.RETRY:
                retry.append((topic, partition))
        return retry

    async def verify_remote(
        self, tid: str, producer_id: int, epoch: int, partition: TopicPartition, add: bool
    ) -> ErrorCode:
        raise AssertionError("a single broker serves every transactional id itself")


class TransactionCoordinator:
    """Transactions for every transactional id (this broker coordinates them all).

    ``ctx`` is the broker's BrokerContext. Call :meth:`start` from the broker's background
    nursery; handlers call the ``handle_*``-shaped methods below, which answer
    COORDINATOR_NOT_AVAILABLE until the state is loaded.
    """

    def __init__(self, ctx: BrokerContext, routing: TxnRouting | None = None) -> None:
        """``routing``: a cluster's placement (broker/cluster/txn.py); by default a single
        broker's :class:`LocalTxnRouting`."""
        cfg = ctx.config
        self._ctx = ctx
        self._routing: TxnRouting = routing or LocalTxnRouting(ctx)
        self._on_demand = self._routing.loads_on_demand
        self.partitions = cfg.transaction_state_log_num_partitions
        self.machine = TxnMachine(
            max_timeout_ms=cfg.transaction_max_timeout_ms, new_producer_id=self._next_producer_id
        )
        self.active = False
        self._nursery: trio.Nursery | None = None
        self._loading = trio.Lock()
        # The partitions served, with the coordinator epoch of their markers (all of them at 0
        # on a single broker), and those being loaded (a cluster's new leader).
        self._owned: dict[int, int] = {}
        # A partition being loaded -> the token of its newest load (an older load of it that
        # finishes later must neither replay its older read nor serve).
        self._loading_partitions: dict[int, object] = {}
        # One lock per transactional id: a decision and its write happen as one step.
        self._locks: dict[str, trio.Lock] = {}
        # The marker task of each completing id (a token: a task of an unloaded partition's
        # leadership must not clear the entry of the task a new leadership started).
        self._completing: dict[str, object] = {}
        self.aborted_by_timeout = 0
        # Transactions this coordinator completed since it started (markers written), for
        # broker/metrics.py.
        self.committed = 0
        self.aborted = 0

    # ---- life cycle ----------------------------------------------------------------------

    async def start(self, nursery: trio.Nursery) -> None:
        """Remember ``nursery`` for marker tasks and the timer; load the state now when the
        topic exists (transactions a crash left completing are completed)."""
        self._nursery = nursery
        if not self._on_demand:
            self.active = True  # serving what load_partition brings in
        elif self._ctx.topics.get(TRANSACTION_STATE_TOPIC) is not None:
            await self.ensure_active()
        nursery.start_soon(self._run_timer)

    def shutdown(self) -> None:
        """Stop answering; what is stored is durable, and a restart completes the rest."""
        self.active = False

    async def ensure_active(self) -> ErrorCode:
        """Create and load ``__transaction_state`` if that has not happened: NONE, or
        COORDINATOR_NOT_AVAILABLE while it cannot be (the client retries)."""
        if self.active:
            return ErrorCode.NONE
        if self._nursery is None or self._ctx.stopping or not self._on_demand:
            return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE
        async with self._loading:
            if self.active:
                return ErrorCode.NONE
            try:
                await self._create_topic()
                count = await self._load()
            except STORAGE_FAILURES as exc:  # OSError among them
                logger.error(
                    "cannot load the transaction state",
                    topic=TRANSACTION_STATE_TOPIC,
                    error=repr(exc),
                    action="check the log directory's disk; transactional clients retry",
                )
                return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE
            self.active = True
            self._owned = dict.fromkeys(range(self.partitions), COORDINATOR_EPOCH)
            completing = self.machine.completing()
            logger.info(
                "transaction coordinator loaded",
                topic=TRANSACTION_STATE_TOPIC,
                records_replayed=count,
                transactional_ids=len(self.machine.txns),
                completing=len(completing),
            )
            for meta in completing:
                self._spawn_markers(meta)
        return ErrorCode.NONE

    async def _create_topic(self) -> None:
        ctx = self._ctx
        if ctx.topics.get(TRANSACTION_STATE_TOPIC) is not None:
            return
        cfg = ctx.config
        try:
            await ctx.create_topic(
                TRANSACTION_STATE_TOPIC,
                self.partitions,
                {
                    "cleanup.policy": "compact",
                    "compression.type": "uncompressed",
                    "segment.bytes": str(cfg.transaction_state_log_segment_bytes),
                    "min.insync.replicas": str(cfg.transaction_state_log_min_isr),
                    "unclean.leader.election.enable": "false",
                    "retention.ms": "-1",
                    "retention.bytes": "-1",
                },
            )
        except TopicExistsError:
            pass

    async def _load(self) -> int:
        count = 0
        for partition in range(self.partitions):
            count += await self._load_partition_records(partition)
        return count

    async def _load_partition_records(self, partition: int, token: object = None) -> int:
        """Replay one partition's records into the machine (nothing when ``token`` is given
        and no longer the partition's newest load); raises LogNotFoundError."""
        async with self._ctx.locked_log(TRANSACTION_STATE_TOPIC, partition) as log:
            if log is None:
                raise LogNotFoundError(f"{TRANSACTION_STATE_TOPIC}-{partition} has no log")
            records = await workers.run_sync(_read_all, log)
        if token is not None and self._loading_partitions.get(partition) is not token:
            return 0
        for offset, key, value in records:
            try:
                tid = txn_log.decode_key(key)
                self.machine.load(txn_log.decode_value(tid, value), tid)
            except txn_log.TxnRecordError as exc:
                logger.error(
                    "skipping an undecodable transaction log record",
                    topic=TRANSACTION_STATE_TOPIC,
                    partition=partition,
                    offset=offset,
                    reason=str(exc),
                    action="something other than the transaction coordinator wrote here",
                )
        return len(records)

    # ---- partitions in a cluster ---------------------------------------------------------

    async def load_partition(self, partition: int, coordinator_epoch: int) -> None:
        """This broker became the leader of ``partition`` at ``coordinator_epoch`` (its leader
        epoch): replay it, serve its ids, complete what it left completing (Kafka's
        TransactionStateManager.loadTransactionsForTxnTopicPartition). A leadership lost during
        the replay (unload_partition, or a newer load) wins: nothing is served then."""
        self._forget(partition)
        token = self._loading_partitions[partition] = object()
        try:
            count = await self._load_partition_records(partition, token)
        except _WRITE_FAILURES as exc:
            logger.error(
                "cannot load a transaction state partition",
                topic=TRANSACTION_STATE_TOPIC,
                partition=partition,
                error=repr(exc),
                action="check the log directory's disk; its transactional ids answer "
                "NOT_COORDINATOR until a broker loads it",
            )
            count = -1
        if self._loading_partitions.get(partition) is not token:
            return  # a newer load (or an unload) of the partition took over
        del self._loading_partitions[partition]
        leading = self._ctx.replication.leader_epoch(TRANSACTION_STATE_TOPIC, partition)
        if count < 0 or leading is None:
            self._forget(partition)  # failed, or moved on while loading
            return
        self._owned[partition] = coordinator_epoch
        completing = [
            m
            for m in self.machine.completing()
            if self._partition_of(m.transactional_id) == partition
        ]
        logger.info(
            "transaction coordinator loaded a partition",
            topic=TRANSACTION_STATE_TOPIC,
            partition=partition,
            coordinator_epoch=coordinator_epoch,
            records_replayed=count,
            transactional_ids=sum(
                1 for tid in self.machine.txns if self._partition_of(tid) == partition
            ),
            completing=len(completing),
        )
        for meta in completing:
            self._spawn_markers(meta)

    def unload_partition(self, partition: int) -> None:
        """This broker stopped leading ``partition``: its ids answer NOT_COORDINATOR and its
        marker tasks stop (Kafka's removeTransactionsForTxnTopicPartition)."""
        if partition in self._owned or partition in self._loading_partitions:
            logger.info(
                "transaction coordinator moved away with the partition's leadership",
                topic=TRANSACTION_STATE_TOPIC,
                partition=partition,
            )
        self._loading_partitions.pop(partition, None)
        self._forget(partition)

    def holds(self, partition: int) -> bool:
        """Whether ``partition`` is served or being loaded here."""
        return partition in self._owned or partition in self._loading_partitions

    def _forget(self, partition: int) -> None:
        self._owned.pop(partition, None)
        for tid in [t for t in self.machine.txns if self._partition_of(t) == partition]:
            del self.machine.txns[tid]
            self._completing.pop(tid, None)

    def _partition_of(self, tid: str) -> int:
        return partition_for(tid, self.partitions)

    def owns(self, tid: str) -> bool:
        """Whether this broker serves ``tid`` now (its partition loaded here)."""
        return self.active and self._partition_of(tid) in self._owned

    async def _ready(self, tid: str) -> ErrorCode:
        """NONE when ``tid`` is served here, else the error its client gets: on a single
        broker COORDINATOR_NOT_AVAILABLE until the state is loaded; in a cluster
        COORDINATOR_LOAD_IN_PROGRESS while its partition loads, NOT_COORDINATOR when another
        broker leads it."""
        if self._on_demand:
            return await self.ensure_active()
        if not self.active:
            return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE
        partition = self._partition_of(tid)
        if partition in self._owned:
            return ErrorCode.NONE
        if partition in self._loading_partitions:
            return ErrorCode.GROUP_LOAD_IN_PROGRESS
        return ErrorCode.NOT_COORDINATOR_FOR_GROUP

    # ---- producer ids --------------------------------------------------------------------

    def _next_producer_id(self) -> int:
        return self._ctx.producer_ids.next_id()

    async def _reserve_producer_ids(self) -> ErrorCode:
        """Make sure an id is ready for the machine (reserving a block is file I/O)."""
        if await producer_id_ready(self._ctx):
            return ErrorCode.NONE
        return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE

    # ---- writing state -------------------------------------------------------------------

    def _lock(self, tid: str) -> trio.Lock:
        lock = self._locks.get(tid)
        if lock is None:
            lock = self._locks[tid] = trio.Lock()
        return lock

    async def _store(self, transit: Transit) -> ErrorCode:
        """Write ``transit`` to the id's partition and apply it; NONE or the client's error."""
        meta = transit.to
        tid = meta.transactional_id
        partition = partition_for(tid, self.partitions)
        value = (
            None
            if meta.state is TxnState.DEAD
            else txn_log.encode_value(meta, 1 if meta.client_version >= 1 else 0)
        )
        replication = self._ctx.replication
        epoch = self._owned.get(partition)
        if epoch is None:  # leadership moved while the request waited for the id's lock
            return ErrorCode.NOT_COORDINATOR_FOR_GROUP
        self.machine.begin(transit)
        failure: OSError | None = None
        last_offset = -1
        try:
            async with self._ctx.locked_log(TRANSACTION_STATE_TOPIC, partition) as log:
                if log is None:
                    raise LogNotFoundError(f"{TRANSACTION_STATE_TOPIC}-{partition} has no log")
                topic = self._ctx.topics.get(TRANSACTION_STATE_TOPIC)
                assert topic is not None
                # Checked under the lock, as a produce does: only the leader appends.
                leader_epoch = replication.leader_epoch(TRANSACTION_STATE_TOPIC, partition)
                if leader_epoch is None:
                    raise _LeadershipLostError()
                last_offset = await workers.run_sync(
                    _append_record,
                    log,
                    topic.settings,
                    txn_log.encode_key(tid),
                    value,
                    self._ctx.clock(),
                    # A completion lost to a power cut is redone at the next start (the markers
                    # are written again from PrepareCommit/PrepareAbort): no fsync needed. In a
                    # cluster the ISR's copies make it durable, as for an acks=all produce.
                    not replication.durable_by_replicas
                    and meta.state not in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT),
                    leader_epoch,
                )
        except _LeadershipLostError:
            self.machine.abandon(transit)
            return ErrorCode.NOT_COORDINATOR_FOR_GROUP
        except _RECORD_FAILURES as exc:
            self.machine.abandon(transit)
            disk = isinstance(exc, OSError)
            logger.error(
                "transaction state could not be written",
                topic=TRANSACTION_STATE_TOPIC,
                partition=partition,
                transactional_id=tid,
                error=repr(exc),
                action="check the log directory's disk; the client retries"
                if disk
                else "a broker bug or a lost log: report this line; the client retries",
            )
            if not isinstance(exc, OSError):  # not disk
                return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE
            failure = exc
        if failure is not None:
            await self._ctx.storage_failed(TRANSACTION_STATE_TOPIC, partition, failure)
            return ErrorCode.NOT_COORDINATOR_FOR_GROUP
        self._ctx.partition(TRANSACTION_STATE_TOPIC, partition).notify()
        error = await self._routing.replicated(partition, last_offset)
        if error is not ErrorCode.NONE or self._owned.get(partition) != epoch:
            self.machine.abandon(transit)
            return error if error is not ErrorCode.NONE else ErrorCode.NOT_COORDINATOR_FOR_GROUP
        self.machine.complete(transit)
        if meta.state.completing:
            self._spawn_markers(meta)
        return ErrorCode.NONE

    async def _decide_and_store(
        self, tid: str, decide: Callable[[], Decision]
    ) -> tuple[ErrorCode, TxnMetadata | None]:
        """Run ``decide()`` (a machine call) under the id's lock and store its transit:
        (error for the client, the state answered from)."""
        async with self._lock(tid):
            decision: Decision = decide()
            if isinstance(decision, Answer):
                return decision.error, decision.metadata
            error = await self._store(decision)
            if error is not ErrorCode.NONE:
                return error, None
            return decision.error, decision.to

    # ---- markers -------------------------------------------------------------------------

    def _spawn_markers(self, meta: TxnMetadata) -> None:
        tid = meta.transactional_id
        if tid in self._completing or self._nursery is None:
            return
        partition = self._partition_of(tid)
        if partition not in self._owned:
            return
        token = self._completing[tid] = object()
        self._nursery.start_soon(self._complete, meta, self._owned[partition], token)

    async def _complete(self, meta: TxnMetadata, coordinator_epoch: int, token: object) -> None:
        """Write the markers of a PrepareCommit/PrepareAbort, then store its completion; stops
        when the id's partition is no longer served at ``coordinator_epoch`` (its new leader
        completes the transaction)."""
        tid = meta.transactional_id
        partition = self._partition_of(tid)
        commit = meta.state is TxnState.PREPARE_COMMIT

        def serving() -> bool:
            return self._owned.get(partition) == coordinator_epoch and not self._ctx.stopping

        try:
            pending = sorted(meta.partitions)
            rounds = 0
            while pending and serving():
                pending = await self._write_markers(meta, pending, commit, coordinator_epoch)
                rounds += 1
                if pending and rounds == 1:
                    logger.warning(
                        "transaction markers not written yet; retrying until they are",
                        transactional_id=tid,
                        partitions=[f"{t}-{p}" for t, p in pending][:20],
                        action="none if the partitions' leaders come back; the transaction "
                        "stays open for read_committed readers of them until then",
                    )
                if pending:
                    await trio.sleep(MARKER_RETRY_S)
            while serving():
                async with self._lock(tid):
                    transit = self.machine.markers_written(tid, self._ctx.clock())
                    if transit is None or await self._store(transit) is ErrorCode.NONE:
                        break
                await trio.sleep(MARKER_RETRY_S)
            else:
                logger.info(
                    "transaction left for the partition's new coordinator to complete",
                    transactional_id=tid,
                    topic=TRANSACTION_STATE_TOPIC,
                    partition=partition,
                )
                return
        finally:
            if self._completing.get(tid) is token:
                del self._completing[tid]
        if commit:
            self.committed += 1
        else:
            self.aborted += 1
        logger.info(
            "transaction committed" if commit else "transaction aborted",
            transactional_id=tid,
            producer_id=meta.producer_id,
            producer_epoch=meta.producer_epoch,
            partitions=len(meta.partitions),
        )

    async def _write_markers(
        self,
        meta: TxnMetadata,
        partitions: list[TopicPartition],
        commit: bool,
        coordinator_epoch: int,
    ) -> list[TopicPartition]:
        """One round of markers; returns the partitions to retry."""
        return await self._routing.send_markers(meta, partitions, commit, coordinator_epoch)

    # ---- timer ---------------------------------------------------------------------------

    async def _run_timer(self) -> None:
        cfg = self._ctx.config
        abort_every = cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms
        expire_every = cfg.transaction_remove_expired_transaction_cleanup_interval_ms
        next_abort = next_expiry = self._ctx.clock()
        while True:
            now = self._ctx.clock()
            # The deadlines move on while inactive too: else this loop spins at sleep(0).
            if now >= next_abort:
                next_abort = now + abort_every
                for transit in self.machine.timed_out(now) if self.active else ():
                    await self._abort_timed_out(transit)
            if now >= next_expiry:
                next_expiry = now + expire_every
                expiry = cfg.transactional_id_expiration_ms
                for transit in self.machine.expired(now, expiry) if self.active else ():
                    async with self._lock(transit.to.transactional_id):
                        await self._store(transit)
            await trio.sleep(max(0, min(next_abort, next_expiry) - now) / 1000)

    async def _abort_timed_out(self, transit: Transit) -> None:
        tid = transit.to.transactional_id
        async with self._lock(tid):
            current = self.machine.txns.get(tid)
            if current is None or current.state is not TxnState.ONGOING:
                return
            logger.warning(
                "aborting a transaction open longer than its timeout",
                transactional_id=tid,
                producer_id=current.producer_id,
                timeout_ms=current.timeout_ms,
                action="the producer is fenced (epoch bumped); it must call initTransactions again",
            )
            if await self._store(transit) is ErrorCode.NONE:
                self.aborted_by_timeout += 1

    # ---- requests ------------------------------------------------------------------------

    async def init_producer_id(
        self, tid: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch) for InitProducerId with a transactional id."""
        error = await self._ready(tid)
        if error is ErrorCode.NONE:
            error = await self._reserve_producer_ids()
        if error is not ErrorCode.NONE:
            return error, -1, -1
        now = self._ctx.clock()
        error, meta = await self._decide_and_store(
            tid, lambda: self.machine.init_producer_id(tid, timeout_ms, expected, now)
        )
        if error is not ErrorCode.NONE or meta is None:
            return error, -1, -1
        logger.info(
            "initialized transactional id",
            transactional_id=tid,
            producer_id=meta.producer_id,
            producer_epoch=meta.producer_epoch,
            partition=f"{TRANSACTION_STATE_TOPIC}-{partition_for(tid, self.partitions)}",
        )
        return error, meta.producer_id, meta.producer_epoch

    async def add_partitions(
        self,
        tid: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TopicPartition],
        *,
        client_version: int | None = None,
    ) -> ErrorCode:
        error = await self._ready(tid)
        if error is not ErrorCode.NONE:
            return error
        wanted = list(partitions)
        now = self._ctx.clock()
        error, _ = await self._decide_and_store(
            tid,
            lambda: self.machine.add_partitions(
                tid, producer_id, epoch, wanted, now, client_version=client_version
            ),
        )
        return error

    def verify_partitions(
        self, tid: str, producer_id: int, epoch: int, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        wanted = list(partitions)
        if not self.owns(tid):
            error = (
                ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE
                if self._on_demand
                else ErrorCode.NOT_COORDINATOR_FOR_GROUP
            )
            return dict.fromkeys(wanted, error)
        return self.machine.verify_partitions(tid, producer_id, epoch, wanted)

    async def check_produce(
        self, tid: str, producer_id: int, epoch: int, partition: TopicPartition, add: bool
    ) -> ErrorCode:
        """A produce's transactional batch: with ``add`` (Produce v12+, transaction version 2)
        the partition joins the transaction, else it is only verified (KIP-890 part 1). Asked
        of this coordinator when it serves ``tid``, else of the broker that does (AddPartitionsToTxn
        v5, batched: broker/cluster/txn.py)."""
        if not self._on_demand and not self.owns(tid):
            return await self._routing.verify_remote(tid, producer_id, epoch, partition, add)
        if add:
            return await self.add_partitions(tid, producer_id, epoch, [partition], client_version=2)
        return self.verify_partitions(tid, producer_id, epoch, [partition])[partition]

    async def end_txn(
        self, tid: str, producer_id: int, epoch: int, commit: bool, client_version: int
    ) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch after the end) for EndTxn."""
        error = await self._ready(tid)
        if error is not ErrorCode.NONE:
            return error, -1, -1
        if client_version >= 2:
            error = await self._reserve_producer_ids()
            if error is not ErrorCode.NONE:
                return error, -1, -1
        now = self._ctx.clock()
        error, meta = await self._decide_and_store(
            tid,
            lambda: self.machine.end_txn(
                tid, producer_id, epoch, commit, now, client_version=client_version
            ),
        )
        if error is not ErrorCode.NONE or meta is None:
            return error, -1, -1
        return error, meta.producer_id, meta.producer_epoch

    async def abort(self, tid: str) -> ErrorCode:
        """An operator's abort of the id's ongoing transaction."""
        error = await self._ready(tid)
        if error is not ErrorCode.NONE:
            return error
        now = self._ctx.clock()
        error, _ = await self._decide_and_store(tid, lambda: self.machine.abort(tid, now))
        return error

    def describe(self, tid: str) -> tuple[ErrorCode, TxnMetadata | None]:
        if not self.active:
            return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE, None
        if not tid:
            return ErrorCode.INVALID_REQUEST, None
        if not self._on_demand and not self.owns(tid):
            if self._partition_of(tid) in self._loading_partitions:
                return ErrorCode.GROUP_LOAD_IN_PROGRESS, None
            return ErrorCode.NOT_COORDINATOR_FOR_GROUP, None
        meta = self.machine.txns.get(tid)
        if meta is None:
            return ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None
        return ErrorCode.NONE, meta


class _RecordRefusedError(Exception):
    """Raised by :func:`_append_record` when the validator refuses the record (a broker bug)."""


# What a write to __transaction_state raises when it fails: its log dir, or the partition gone.
_WRITE_FAILURES: tuple[type[Exception], ...] = (*STORAGE_FAILURES, LogNotFoundError)
# What appending one record raises: its log dir, or the validator refusing it.
_RECORD_FAILURES: tuple[type[Exception], ...] = (*STORAGE_FAILURES, _RecordRefusedError)


class _LeadershipLostError(Exception):
    """Raised inside :meth:`TransactionCoordinator._store` when this broker no longer leads the
    id's partition (nothing written)."""


def _append_record(
    log: Log,
    settings: TopicSettings,
    key: bytes,
    value: bytes | None,
    now_ms: int,
    fsync: bool,
    leader_epoch: int = 0,
) -> int:
    """Append one record as a v2 batch stamped with ``leader_epoch``, and fsync it when asked;
    returns its offset (blocking; the caller holds the lock)."""
    batch = rb.build_batch(rb.BatchSpec(), [(0, now_ms, key, value, ())])
    result = validate_produce(
        batch,
        settings,
        next_offset=log.log_end_offset,
        now_ms=now_ms,
        partition_leader_epoch=leader_epoch,
    )
    if isinstance(result, Rejected):
        raise _RecordRefusedError(f"{result.error.name}: {result.reason}")
    assert result is not None  # None only with native_only
    log.append(result)
    if fsync:
        log.flush()
    return result.last_offset


def _read_all(log: Log) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every keyed record of ``log`` in offset order (blocking)."""
    return [
        (m.offset, m.key, m.value)
        for buf, entry, skip_below in log_entries(log)
        for m in iter_deep(buf[entry.position : entry.next_position])
        if m.offset >= skip_below and m.key is not None
    ]


__all__ = [
    "TransactionCoordinator",
    "TRANSACTION_STATE_TOPIC",
    "partition_for",
    "java_string_hash",
]
