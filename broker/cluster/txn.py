"""Transactions in a cluster: ``__transaction_state`` is a replicated topic
(transaction.state.log.replication.factor, .num.partitions, .min.isr) and each of its partitions'
leader coordinates the transactional ids hashed to it (Kafka's TransactionCoordinator.onElection /
onResignation). The coordinator itself is broker/txn/coordinator.py; this module places it and
carries what it says to other brokers.

- The topic is created through ZooKeeper by the first FindCoordinator for a transactional id
  that finds it missing (compacted, no retention); until its partition has a leader,
  FindCoordinator answers COORDINATOR_NOT_AVAILABLE, which clients retry. FindCoordinator on any
  broker names the id's partition's current leader.
- Becoming a partition's leader loads it into the coordinator; losing it drops it
  (:meth:`TxnPlacement.role_changed`, called by the replica manager).
- A coordinator write counts once the partition's ISR has it (:meth:`TxnPlacement.replicated`).
- Markers (:meth:`TxnPlacement.send_markers`): appended here for the partitions this broker
  leads, sent as one WriteTxnMarkers v1 per other leader; every marker is acknowledged only
  once that partition's ISR has it. What fails (no leader, NOT_LEADER, a dead broker, a timeout)
  is retried by the coordinator's marker task with the metadata as it is then.
- Produce verification (KIP-890) for ids coordinated elsewhere (:meth:`TxnPlacement.verify_remote`):
  batched per coordinator broker as Kafka's AddPartitionsToTxnManager does. While one
  AddPartitionsToTxn v5 is in flight to a broker, the produces' checks for it queue up and go
  together in the next one (one transaction entry per id; a check that conflicts with an entry
  already taken waits for the request after). A verification not answered in VERIFY_TIMEOUT_S,
  or lost with its connection, answers COORDINATOR_NOT_AVAILABLE, which the produce path turns
  into the retriable NOT_ENOUGH_REPLICAS.

Resources: one BrokerChannel per other broker for markers and one for verifications (so a
marker waiting on a slow ISR never holds up a produce's verification), one sender task per
broker verifications are sent to. Trio thread only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
import trio
from kazoo.exceptions import KazooException, NodeExistsError

from broker.cluster.assignment import AssignmentError, assign_replicas
from broker.cluster.channel import BrokerChannel, ChannelError
from broker.txn.coordinator import TRANSACTION_STATE_TOPIC, TransactionCoordinator, partition_for
from broker.txn.markers import MarkerOutcome, marker_outcome, skip_deleted, write_marker
from broker.txn.state import TopicPartition, TxnMetadata
from protocol import ApiKey
from protocol.api import Request
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.cluster import Cluster

logger = structlog.get_logger(__name__)

TXN_KEY_TYPE = 1  # FindCoordinator's key type of a transactional id
WRITE_TIMEOUT_S = 15.0  # how long a coordinator write waits for the ISR
MARKER_CALL_TIMEOUT_S = 20.0  # a WriteTxnMarkers round trip (the leader waits up to 15 s)
VERIFY_TIMEOUT_S = 10.0
VERIFY_VERSION = 5  # AddPartitionsToTxn v5: verify_only, and TRANSACTION_ABORTABLE known


@dataclass(eq=False)
class _Check:
    """One produce's question to a remote coordinator."""

    tid: str
    producer_id: int
    epoch: int
    partition: TopicPartition
    add: bool
    done: trio.Event = field(default_factory=trio.Event)
    error: ErrorCode = ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE

    def answer(self, error: ErrorCode) -> None:
        if not self.done.is_set():
            self.error = error
            self.done.set()


class TxnPlacement:
    """See the module docstring; ``cluster.txns``, the coordinator's TxnRouting."""

    loads_on_demand = False

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.coordinator = TransactionCoordinator(cluster.ctx, self)
        cluster.ctx.txn_coordinator = self.coordinator
        self._nursery: trio.Nursery | None = None
        self._marker_channels: dict[int, BrokerChannel] = {}
        self._verify_channels: dict[int, BrokerChannel] = {}
        self._checks: dict[int, list[_Check]] = {}
        self._check_wakeups: dict[int, trio.Event] = {}

    async def start(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        await self.coordinator.start(nursery)

    # -- leadership ----------------------------------------------------------------------
    def role_changed(self, topic: str, partition: int, leading: bool) -> None:
        """Called by the replica manager after every LeaderAndIsr / StopReplica."""
        if topic != TRANSACTION_STATE_TOPIC:
            return
        replica = self.cluster.replicas.leader(topic, partition) if leading else None
        if replica is None or self._nursery is None:
            self.coordinator.unload_partition(partition)
            return
        if self.coordinator.holds(partition):
            # Still the leader, at a newer epoch (an ISR change): as Kafka's onElection runs
            # only for new leaders, the partition stays loaded, at its coordinator epoch.
            return
        self._nursery.start_soon(self.coordinator.load_partition, partition, replica.leader_epoch)

    async def replicated(self, partition: int, last_offset: int) -> ErrorCode:
        """After the coordinator appended up to ``last_offset`` to ``partition``: NONE once
        the ISR has it, else the client's error (Kafka's TransactionStateManager mapping)."""
        error = await self.cluster.replicas.committed(
            TRANSACTION_STATE_TOPIC, partition, last_offset, WRITE_TIMEOUT_S
        )
        if error == ErrorCode.NONE:
            return error
        logger.warning(
            "transaction state write not acknowledged by the ISR",
            topic=TRANSACTION_STATE_TOPIC,
            partition=partition,
            error=error.name,
            action="none: the client retries; check the partition's followers if it repeats",
        )
        if error == ErrorCode.NOT_LEADER_FOR_PARTITION:
            return ErrorCode.NOT_COORDINATOR_FOR_GROUP
        return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE

    def _leader(self, topic: str, partition: int) -> int | None:
        info = self.cluster.metadata.partition(topic, partition)
        if info is None or info.leader < 0:
            return None
        return info.leader

    # -- FindCoordinator -------------------------------------------------------------------
    async def find_coordinator(self, request: Request) -> dict[str, Any]:
        """FindCoordinator v0-v6 for transactional ids: the leader of each id's partition."""
        body = request.body
        version = request.header.api_version
        keys = list(body.coordinator_keys) if version >= 4 else [body.key]
        cluster = self.cluster
        if TRANSACTION_STATE_TOPIC not in cluster.metadata.topics:
            await self._create_topic()
        answers = []
        for key in keys:
            node = None
            if key:
                leader = self._leader(
                    TRANSACTION_STATE_TOPIC, partition_for(key, self.coordinator.partitions)
                )
                node = cluster.metadata.brokers.get(leader) if leader is not None else None
            if not key:
                error, message = ErrorCode.INVALID_REQUEST, "an empty transactional id"
            elif node is None:
                error = ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE
                message = "the transaction coordinator is moving or starting; retry"
            else:
                error, message = ErrorCode.NONE, None
            answers.append(
                {
                    "key": key,
                    "node_id": node.broker_id if node is not None else -1,
                    "host": node.host if node is not None else "",
                    "port": node.port if node is not None else -1,
                    "error_code": int(error),
                    "error_message": message,
                }
            )
        if version >= 4:
            return {"coordinators": answers}
        one = answers[0]
        del one["key"]
        if one["error_code"] == 0:
            one["error_message"] = "NONE"
        return one

    async def _create_topic(self) -> None:
        cluster = self.cluster
        cfg = cluster.config
        factor = cfg.transaction_state_log_replication_factor
        brokers = {b: info.rack for b, info in cluster.metadata.brokers.items()}
        try:
            assignment = assign_replicas(brokers, cfg.transaction_state_log_num_partitions, factor)
        except AssignmentError as exc:
            logger.error(
                "cannot create the transaction state topic yet",
                topic=TRANSACTION_STATE_TOPIC,
                error=str(exc),
                action="start more brokers or lower transaction.state.log.replication.factor",
            )
            return
        configs = {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "segment.bytes": str(cfg.transaction_state_log_segment_bytes),
            "min.insync.replicas": str(cfg.transaction_state_log_min_isr),
            "unclean.leader.election.enable": "false",
            "retention.ms": "-1",
            "retention.bytes": "-1",
        }
        try:
            await cluster.write_topic(TRANSACTION_STATE_TOPIC, assignment, configs)
            logger.info(
                "created the transaction state topic",
                topic=TRANSACTION_STATE_TOPIC,
                partitions=len(assignment),
                replication_factor=factor,
            )
        except NodeExistsError:
            pass
        except KazooException as exc:
            logger.error("creating the transaction state topic failed", error=repr(exc))

    # -- markers -----------------------------------------------------------------------------
    async def send_markers(
        self,
        meta: TxnMetadata,
        partitions: list[TopicPartition],
        commit: bool,
        coordinator_epoch: int,
    ) -> list[TopicPartition]:
        """One round of ``meta``'s markers to the leaders of ``partitions``, at once; returns
        the partitions to retry."""
        by_leader: dict[int, list[TopicPartition]] = {}
        retry: list[TopicPartition] = []
        for tp in partitions:
            leader = self._leader(*tp)
            if leader is None:
                known = tp[0] in self.cluster.metadata.topics or self.cluster.ctx.topics.get(tp[0])
                if not known:
                    skip_deleted(meta, *tp)
                else:
                    retry.append(tp)
                continue
            by_leader.setdefault(leader, []).append(tp)

        async def to(leader: int, tps: list[TopicPartition]) -> None:
            if leader == self.cluster.broker_id:
                errors = {}
                for topic, partition in tps:
                    errors[(topic, partition)] = await write_marker(
                        self.cluster.ctx,
                        topic,
                        partition,
                        meta.producer_id,
                        meta.producer_epoch,
                        coordinator_epoch,
                        commit,
                    )
            else:
                errors = await self._remote_markers(leader, meta, tps, commit, coordinator_epoch)
            for tp in tps:
                if marker_outcome(errors[tp], meta, *tp) is MarkerOutcome.RETRY:
                    retry.append(tp)

        async with trio.open_nursery() as nursery:
            for leader, tps in by_leader.items():
                nursery.start_soon(to, leader, tps)
        return sorted(retry)

    async def _remote_markers(
        self,
        leader: int,
        meta: TxnMetadata,
        tps: list[TopicPartition],
        commit: bool,
        coordinator_epoch: int,
    ) -> dict[TopicPartition, ErrorCode]:
        channel = self._channel(self._marker_channels, leader, "markers", MARKER_CALL_TIMEOUT_S)
        if channel is None:
            return dict.fromkeys(tps, ErrorCode.LEADER_NOT_AVAILABLE)
        topics: dict[str, list[int]] = {}
        for topic, partition in tps:
            topics.setdefault(topic, []).append(partition)
        body = {
            "markers": [
                {
                    "producer_id": meta.producer_id,
                    "producer_epoch": meta.producer_epoch,
                    "transaction_result": commit,
                    "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
                    "coordinator_epoch": coordinator_epoch,
                }
            ]
        }
        errors = dict.fromkeys(tps, ErrorCode.NETWORK_EXCEPTION)
        try:
            response = await channel.call(ApiKey.WRITE_TXN_MARKERS, 1, body)
        except ChannelError as exc:
            logger.warning(
                "transaction markers not delivered; retrying",
                broker_id=leader,
                transactional_id=meta.transactional_id,
                partitions=[f"{t}-{p}" for t, p in tps],
                error=str(exc),
            )
            return errors
        for marker in response.markers:
            for t in marker.topics:
                for p in t.partitions:
                    if (t.name, p.partition_index) in errors:
                        errors[(t.name, p.partition_index)] = _error(p.error_code)
        return errors

    def _channel(
        self, channels: dict[int, BrokerChannel], broker_id: int, purpose: str, timeout_s: float
    ) -> BrokerChannel | None:
        """The channel to ``broker_id`` (made again when its address changed); None when its
        address is unknown."""
        address = self.cluster.address_of(broker_id)
        if address is None:
            return None
        channel = channels.get(broker_id)
        if channel is None or (channel.host, channel.port) != address:
            channel = channels[broker_id] = BrokerChannel(
                *address,
                client_id=f"chronolog-txn-{purpose}-{self.cluster.broker_id}",
                timeout_s=timeout_s,
            )
        return channel

    # -- produce verification ----------------------------------------------------------------
    async def verify_remote(
        self, tid: str, producer_id: int, epoch: int, partition: TopicPartition, add: bool
    ) -> ErrorCode:
        """Ask the broker coordinating ``tid`` whether ``partition`` is in its producer's
        ongoing transaction (``add``: add it, transaction version 2)."""
        leader = self._leader(
            TRANSACTION_STATE_TOPIC, partition_for(tid, self.coordinator.partitions)
        )
        if leader is None or self._nursery is None:
            return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE
        if leader == self.cluster.broker_id:  # led here but not loaded yet
            return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE
        check = _Check(tid, producer_id, epoch, partition, add)
        self._checks.setdefault(leader, []).append(check)
        wakeup = self._check_wakeups.get(leader)
        if wakeup is None:
            wakeup = self._check_wakeups[leader] = trio.Event()
            self._nursery.start_soon(self._send_checks, leader)
        wakeup.set()
        with trio.move_on_after(VERIFY_TIMEOUT_S):
            await check.done.wait()
        return check.error

    async def _send_checks(self, broker_id: int) -> None:
        """The sender of the checks queued for ``broker_id`` (runs for the broker's life)."""
        while True:
            await self._check_wakeups[broker_id].wait()
            self._check_wakeups[broker_id] = trio.Event()
            while queued := self._checks.get(broker_id):
                batch, self._checks[broker_id] = _take_batch(queued)
                try:
                    await self._verify_batch(broker_id, batch)
                except Exception:  # a bug here must not stop every later verification
                    logger.exception(
                        "produce verification failed",
                        broker_id=broker_id,
                        action="a broker bug: report this line; the producers retry",
                    )
                    for group in batch.values():
                        for c in group:
                            c.answer(ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE)

    async def _verify_batch(self, broker_id: int, batch: dict[str, list[_Check]]) -> None:
        channel = self._channel(self._verify_channels, broker_id, "verify", VERIFY_TIMEOUT_S)
        checks = [c for group in batch.values() for c in group]
        if channel is None:
            for c in checks:
                c.answer(ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE)
            return
        transactions = []
        for tid, group in batch.items():
            topics: dict[str, set[int]] = {}
            for c in group:
                topics.setdefault(c.partition[0], set()).add(c.partition[1])
            transactions.append(
                {
                    "transactional_id": tid,
                    "producer_id": group[0].producer_id,
                    "producer_epoch": group[0].epoch,
                    "verify_only": not group[0].add,
                    "topics": [{"name": t, "partitions": sorted(ps)} for t, ps in topics.items()],
                }
            )
        try:
            response = await channel.call(
                ApiKey.ADD_PARTITIONS_TO_TXN, VERIFY_VERSION, {"transactions": transactions}
            )
        except ChannelError as exc:
            logger.warning(
                "produce verification with the transaction coordinator failed",
                broker_id=broker_id,
                transactional_ids=sorted(batch),
                error=str(exc),
                action="none: the producers retry",
            )
            for c in checks:
                c.answer(ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE)
            return
        if response.error_code:
            for c in checks:
                c.answer(_error(response.error_code))
            return
        for result in response.results_by_transaction:
            group = batch.get(result.transactional_id, [])
            errors = {
                (t.name, p.partition_index): _error(p.partition_error_code)
                for t in result.topic_results
                for p in t.results_by_partition
            }
            for c in group:
                error = errors.get(c.partition, ErrorCode.NONE)
                # Kafka's AddPartitionsToTxnManager: producers expect INVALID_PRODUCER_EPOCH here.
                c.answer(
                    ErrorCode.INVALID_PRODUCER_EPOCH
                    if error is ErrorCode.PRODUCER_FENCED
                    else error
                )
        for c in checks:  # an id the answer left out
            c.answer(ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE)


def _error(code: int) -> ErrorCode:
    """A broker's error code; one this broker does not know is an unknown server error."""
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _take_batch(queued: list[_Check]) -> tuple[dict[str, list[_Check]], list[_Check]]:
    """The checks for one request (one entry per transactional id, its first check deciding the
    producer id, epoch and verify-only of the entry) and those left for the next."""
    batch: dict[str, list[_Check]] = {}
    rest: list[_Check] = []
    for c in queued:
        group = batch.get(c.tid)
        if group is None:
            batch[c.tid] = [c]
        elif (group[0].producer_id, group[0].epoch, group[0].add) == (
            c.producer_id,
            c.epoch,
            c.add,
        ):
            group.append(c)
        else:
            rest.append(c)
    return batch, rest


__all__ = ["TxnPlacement", "TXN_KEY_TYPE"]
