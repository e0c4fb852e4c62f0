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
- The coordinator epoch written into markers is the leader epoch of the id's partition (0 on a
  single broker).
"""

from __future__ import annotations

from collections.abc import Iterable

import structlog
import trio

from broker.context import BrokerContext, TopicExistsError
from broker.errors import STORAGE_FAILURES
from broker.handlers.producer_ids import producer_id_ready
from broker.log_replay import log_entries
from broker.txn import log as txn_log
from broker.txn.markers import write_marker
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
from protocol.validator import Rejected, validate_produce
from storage.errors import LogNotFoundError

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


class TransactionCoordinator:
    """Transactions for every transactional id (this broker coordinates them all).

    ``ctx`` is the broker's BrokerContext. Call :meth:`start` from the broker's background
    nursery; handlers call the ``handle_*``-shaped methods below, which answer
    COORDINATOR_NOT_AVAILABLE until the state is loaded.
    """

    def __init__(self, ctx: BrokerContext) -> None:
        cfg = ctx.config
        self._ctx = ctx
        self.partitions = cfg.transaction_state_log_num_partitions
        self.machine = TxnMachine(
            max_timeout_ms=cfg.transaction_max_timeout_ms, new_producer_id=self._next_producer_id
        )
        self.active = False
        self._nursery: trio.Nursery | None = None
        self._loading = trio.Lock()
        # One lock per transactional id: a decision and its write happen as one step.
        self._locks: dict[str, trio.Lock] = {}
        self._completing: set[str] = set()
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
        if self._ctx.topics.get(TRANSACTION_STATE_TOPIC) is not None:
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
        if self._nursery is None or self._ctx.stopping:
            return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE
        async with self._loading:
            if self.active:
                return ErrorCode.NONE
            try:
                await self._create_topic()
                count = await self._load()
            except (OSError, *STORAGE_FAILURES) as exc:
                logger.error(
                    "cannot load the transaction state",
                    topic=TRANSACTION_STATE_TOPIC,
                    error=repr(exc),
                    action="check the log directory's disk; transactional clients retry",
                )
                return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE
            self.active = True
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
            async with self._ctx.locked_log(TRANSACTION_STATE_TOPIC, partition) as log:
                if log is None:
                    raise LogNotFoundError(f"{TRANSACTION_STATE_TOPIC}-{partition} has no log")
                records = await trio.to_thread.run_sync(_read_all, log)
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
                count += 1
        return count

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
        self.machine.begin(transit)
        failure: OSError | None = None
        try:
            async with self._ctx.locked_log(TRANSACTION_STATE_TOPIC, partition) as log:
                if log is None:
                    raise LogNotFoundError(f"{TRANSACTION_STATE_TOPIC}-{partition} has no log")
                topic = self._ctx.topics.get(TRANSACTION_STATE_TOPIC)
                assert topic is not None
                await trio.to_thread.run_sync(
                    _append_record,
                    log,
                    topic.settings,
                    txn_log.encode_key(tid),
                    value,
                    self._ctx.clock(),
                    # A completion lost to a power cut is redone at the next start (the markers
                    # are written again from PrepareCommit/PrepareAbort): no fsync needed.
                    meta.state not in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT),
                )
        except (*STORAGE_FAILURES, _RecordRefusedError) as exc:
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
            if not disk:
                return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE
            failure = exc
        if failure is not None:
            await self._ctx.storage_failed(TRANSACTION_STATE_TOPIC, partition, failure)
            return ErrorCode.NOT_COORDINATOR_FOR_GROUP
        self._ctx.partition(TRANSACTION_STATE_TOPIC, partition).notify()
        self.machine.complete(transit)
        if meta.state.completing:
            self._spawn_markers(meta)
        return ErrorCode.NONE

    async def _decide_and_store(self, tid: str, decide) -> tuple[ErrorCode, TxnMetadata | None]:
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
        self._completing.add(tid)
        self._nursery.start_soon(self._complete, meta)

    async def _complete(self, meta: TxnMetadata) -> None:
        """Write the markers of a PrepareCommit/PrepareAbort, then store its completion."""
        tid = meta.transactional_id
        commit = meta.state is TxnState.PREPARE_COMMIT
        try:
            for topic, partition in sorted(meta.partitions):
                while not await self._write_marker(meta, topic, partition, commit):
                    await trio.sleep(MARKER_RETRY_S)
            while True:
                async with self._lock(tid):
                    transit = self.machine.markers_written(tid, self._ctx.clock())
                    if transit is None or await self._store(transit) is ErrorCode.NONE:
                        break
                await trio.sleep(MARKER_RETRY_S)
        finally:
            self._completing.discard(tid)
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

    async def _write_marker(
        self, meta: TxnMetadata, topic: str, partition: int, commit: bool
    ) -> bool:
        """One marker; False when it must be retried (the disk refused it)."""
        error = await write_marker(
            self._ctx,
            topic,
            partition,
            meta.producer_id,
            meta.producer_epoch,
            COORDINATOR_EPOCH,
            commit,
        )
        if error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            logger.warning(
                "transaction marker skipped: the partition no longer exists",
                topic=topic,
                partition=partition,
                transactional_id=meta.transactional_id,
            )
        return error is not ErrorCode.KAFKA_STORAGE_ERROR

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
        error = await self.ensure_active()
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
        if not self.active:
            return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE
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
        if not self.active:
            return {tp: ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE for tp in wanted}
        return self.machine.verify_partitions(tid, producer_id, epoch, wanted)

    async def end_txn(
        self, tid: str, producer_id: int, epoch: int, commit: bool, client_version: int
    ) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch after the end) for EndTxn."""
        if not self.active:
            return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE, -1, -1
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
        error = await self.ensure_active()
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
        meta = self.machine.txns.get(tid)
        if meta is None:
            return ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None
        return ErrorCode.NONE, meta


class _RecordRefusedError(Exception):
    """Raised by :func:`_append_record` when the validator refuses the record (a broker bug)."""


def _append_record(
    log, settings, key: bytes, value: bytes | None, now_ms: int, fsync: bool
) -> None:
    """Append one record as a v2 batch, and fsync it when asked (blocking; the caller holds
    the lock)."""
    batch = rb.build_batch(rb.BatchSpec(), [(0, now_ms, key, value, ())])
    result = validate_produce(batch, settings, next_offset=log.log_end_offset, now_ms=now_ms)
    if isinstance(result, Rejected):
        raise _RecordRefusedError(f"{result.error.name}: {result.reason}")
    log.append(result)
    if fsync:
        log.flush()


def _read_all(log) -> list[tuple[int, bytes, bytes | None]]:
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
