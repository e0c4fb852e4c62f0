"""Replica fetchers (Kafka's ReplicaFetcherThread): one trio task per leader broker, fetching
every partition this broker follows there.

A partition starts in the truncating state (after every LeaderAndIsr making this broker its
follower): the fetcher asks the leader, with OffsetForLeaderEpoch, where this replica's latest
epoch ends on the leader, and truncates its log there (KIP-101, with KIP-279's extra rounds when
the leader answers an older epoch). A replica without any epoch truncates to its high watermark.
Then it fetches from its log end offset (Fetch v11 with its replica id and the leader epoch it
knows, KIP-320) and appends what comes as it is (storage's Log.append_replica: the leader's
batches, offsets, timestamps and epochs; its own indexes), and takes the leader's high
watermark up to its own log end offset.

Errors: a fenced or unknown leader epoch, or a leader that is not (yet) one, pause the partition
for replica.fetch.backoff.ms (the controller's next LeaderAndIsr moves it); a fetch offset out of
the leader's range truncates (the leader has less: an unclean election) or restarts the log at
the leader's log start (this replica is below it); a broken connection pauses the fetcher for
replica.fetch.backoff.ms and reconnects. Appends and truncations happen under the partition lock
in worker threads, after checking that this fetcher still owns the partition at that epoch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
import trio

from broker import workers
from broker.cluster.channel import BrokerChannel, ChannelError
from broker.errors import STORAGE_FAILURES
from protocol import ApiKey
from protocol.errors import CorruptRecordError, ErrorCode
from storage import InvalidAppendError
from storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache

if TYPE_CHECKING:
    from broker.cluster import Cluster

logger = structlog.get_logger(__name__)

# What applying a fetched batch to this broker's logs raises: its log dir, or a corrupt batch.
_LOG_FAILURES: tuple[type[Exception], ...] = (*STORAGE_FAILURES, CorruptRecordError)

FETCH_VERSION = 11
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
LIST_OFFSETS_VERSION = 4
Key = tuple[str, int]


@dataclass(eq=False)
class FetchState:
    """One followed partition: the leader epoch it follows and whether it must truncate first."""

    leader_epoch: int
    truncating: bool = True
    paused_until: float = 0.0


def truncation_target(
    mine: LeaderEpochCache, log_end_offset: int, leader_epoch: int, leader_end: int
) -> tuple[int | None, bool, str]:
    """Kafka's AbstractFetcherThread.getOffsetTruncationState: where a follower whose epochs
    are ``mine`` cuts its log, given the leader's answer (``leader_epoch``, ``leader_end``) to
    OffsetForLeaderEpoch for its latest epoch: (offset, None for its high watermark; whether
    that ends the truncation, or it must ask again with its new latest epoch (KIP-279); why)."""
    leo = log_end_offset
    if leader_end == UNDEFINED_EPOCH_OFFSET:
        return None, True, "leader has no such epoch: to the high watermark"
    if leader_epoch == UNDEFINED_EPOCH:
        return min(leader_end, leo), True, "leader without epochs"
    found = mine.end_offset_for(leader_epoch, leo)
    if found.end_offset == UNDEFINED_EPOCH_OFFSET:
        return min(leader_end, leo), True, "epoch unknown here"
    if found.epoch != leader_epoch:
        # No data of the leader's epoch here: cut at the end of this replica's older epoch and
        # ask again with that one.
        return min(found.end_offset, leo), False, "diverged epochs"
    return min(leader_end, found.end_offset, leo), True, f"epoch {leader_epoch} end"


class FetcherManager:
    """The fetchers, one per leader; trio thread only."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.fetchers: dict[int, Fetcher] = {}
        self._nursery: trio.Nursery | None = None

    def start(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery

    def add(self, key: Key, leader: int, leader_epoch: int) -> None:
        """Follow ``key`` at ``leader`` from now on (truncating first)."""
        self.remove(key)
        fetcher = self.fetchers.get(leader)
        if fetcher is None:
            fetcher = self.fetchers[leader] = Fetcher(self.cluster, leader)
            assert self._nursery is not None
            self._nursery.start_soon(fetcher.run)
        fetcher.partitions[key] = FetchState(leader_epoch)
        fetcher.changed.set()

    def remove(self, key: Key) -> None:
        for fetcher in self.fetchers.values():
            if fetcher.partitions.pop(key, None) is not None:
                fetcher.changed.set()

    def owns(self, key: Key, state: FetchState) -> bool:
        return any(f.partitions.get(key) is state for f in self.fetchers.values())


class Fetcher:
    """The partitions followed at one leader and the task fetching them."""

    def __init__(self, cluster: Cluster, leader: int) -> None:
        self.cluster = cluster
        self.ctx = cluster.ctx
        self.leader = leader
        self.partitions: dict[Key, FetchState] = {}
        self.changed = trio.Event()
        self._channel: BrokerChannel | None = None

    def _connect(self) -> BrokerChannel | None:
        """The channel to the leader at its current address (from the controller's requests)."""
        info = self.cluster.address_of(self.leader)
        if info is None:
            return None
        if self._channel is None or (self._channel.host, self._channel.port) != info:
            self._channel = BrokerChannel(
                info[0],
                info[1],
                client_id=f"chronolog-replica-{self.cluster.broker_id}",
                timeout_s=self.ctx.config.replica_socket_timeout_ms / 1000
                + self.ctx.config.replica_fetch_wait_max_ms / 1000,
            )
        return self._channel

    async def run(self) -> None:
        backoff = self.ctx.config.replica_fetch_backoff_ms / 1000
        try:
            while not self.ctx.stopping:
                now = trio.current_time()
                ready = {k: s for k, s in self.partitions.items() if s.paused_until <= now}
                if not ready:
                    self.changed = trio.Event()
                    wake = min((s.paused_until for s in self.partitions.values()), default=None)
                    with trio.move_on_at(wake if wake is not None else float("inf")):
                        await self.changed.wait()
                    continue
                channel = self._connect()
                if channel is None:
                    await trio.sleep(backoff)
                    continue
                try:
                    truncating = {k: s for k, s in ready.items() if s.truncating}
                    if truncating:
                        await self._truncate(channel, truncating)
                    fetching = {k: s for k, s in ready.items() if not s.truncating}
                    if fetching:
                        await self._fetch(channel, fetching)
                except ChannelError as exc:
                    logger.warning(
                        "replica fetcher cannot reach the leader; retrying",
                        leader=self.leader,
                        error=str(exc),
                        partitions=len(self.partitions),
                    )
                    await trio.sleep(backoff)
                except _LOG_FAILURES as exc:
                    logger.error(
                        "replica fetcher failed on this broker's logs; retrying",
                        leader=self.leader,
                        error=repr(exc),
                        action="check the log dirs' disk",
                    )
                    await trio.sleep(backoff)
                except Exception:  # a bug must not stop replication of every other partition
                    logger.exception(
                        "replica fetcher failed; retrying",
                        leader=self.leader,
                        action="this is a broker bug; report it with this log line",
                    )
                    await trio.sleep(backoff)
        finally:
            if self._channel is not None:
                await self._channel.close()

    def _pause(self, key: Key, state: FetchState, error: ErrorCode) -> None:
        state.paused_until = trio.current_time() + self.ctx.config.replica_fetch_backoff_ms / 1000
        logger.info(
            "replica fetch paused",
            topic=key[0],
            partition=key[1],
            leader=self.leader,
            leader_epoch=state.leader_epoch,
            error=error.name,
        )

    # -- truncation (KIP-101 / KIP-279) ------------------------------------------------------
    async def _truncate(self, channel: BrokerChannel, partitions: dict[Key, FetchState]) -> None:
        asks: dict[Key, int] = {}
        state: FetchState | None
        for key, state in partitions.items():
            log = self.ctx.log_manager.get_log(*key)
            if log is None:
                continue
            latest = log.leader_epochs.latest_epoch
            if latest == UNDEFINED_EPOCH:
                await self._truncate_to(key, state, None, "no leader epoch: to the high watermark")
            else:
                asks[key] = latest
        if not asks:
            return
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, p), epoch in asks.items():
            topics.setdefault(topic, []).append(
                {
                    "partition": p,
                    "current_leader_epoch": partitions[(topic, p)].leader_epoch,
                    "leader_epoch": epoch,
                }
            )
        body = await channel.call(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            OFFSET_FOR_LEADER_EPOCH_VERSION,
            {
                "replica_id": self.cluster.broker_id,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            },
        )
        for topic in body.topics:
            for p in topic.partitions:
                key = (topic.topic, p.partition)
                state = partitions.get(key)
                if state is None or key not in asks:
                    continue
                error = ErrorCode(p.error_code)
                if error != ErrorCode.NONE:
                    self._pause(key, state, error)
                    continue
                await self._apply_epoch_answer(key, state, p.leader_epoch, p.end_offset)

    async def _apply_epoch_answer(
        self, key: Key, state: FetchState, leader_epoch: int, leader_end: int
    ) -> None:
        log = self.ctx.log_manager.get_log(*key)
        if log is None:
            return
        offset, complete, why = truncation_target(
            log.leader_epochs, log.log_end_offset, leader_epoch, leader_end
        )
        await self._truncate_to(key, state, offset, why, complete)

    async def _truncate_to(
        self, key: Key, state: FetchState, offset: int | None, why: str, complete: bool = True
    ) -> None:
        """Truncate (``offset`` None: to the high watermark) and start fetching, under the
        partition lock, if this fetcher still owns the partition at that epoch."""
        async with self.ctx.locked_log(*key) as log:
            if log is None or not self.cluster.fetchers.owns(key, state):
                return
            target = log.high_watermark if offset is None else offset
            before = log.log_end_offset
            if target < before:
                try:
                    await workers.run_sync(log.truncate_to, target)
                except STORAGE_FAILURES as exc:
                    logger.error(
                        "follower truncation failed",
                        topic=key[0],
                        partition=key[1],
                        error=repr(exc),
                        action="check the log dir's disk",
                    )
                    self._pause(key, state, ErrorCode.KAFKA_STORAGE_ERROR)
                    return
                logger.info(
                    "follower truncated its log",
                    topic=key[0],
                    partition=key[1],
                    leader=self.leader,
                    leader_epoch=state.leader_epoch,
                    from_offset=before,
                    to_offset=log.log_end_offset,
                    reason=why,
                )
            state.truncating = not complete

    # -- fetching ----------------------------------------------------------------------------
    async def _fetch(self, channel: BrokerChannel, partitions: dict[Key, FetchState]) -> None:
        state: FetchState | None
        config = self.ctx.config
        topics: dict[str, list[dict[str, Any]]] = {}
        for key, state in partitions.items():
            log = self.ctx.log_manager.get_log(*key)
            if log is None:
                continue
            topics.setdefault(key[0], []).append(
                {
                    "partition": key[1],
                    "current_leader_epoch": state.leader_epoch,
                    "fetch_offset": log.log_end_offset,
                    "log_start_offset": log.log_start_offset,
                    "partition_max_bytes": config.replica_fetch_max_bytes,
                }
            )
        if not topics:
            await trio.sleep(config.replica_fetch_backoff_ms / 1000)
            return
        body = await channel.call(
            ApiKey.FETCH,
            FETCH_VERSION,
            {
                "replica_id": self.cluster.broker_id,
                "max_wait_ms": config.replica_fetch_wait_max_ms,
                "min_bytes": config.replica_fetch_min_bytes,
                "max_bytes": config.replica_fetch_response_max_bytes,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
                "forgotten_topics_data": [],
                "rack_id": config.broker_rack or "",
            },
        )
        for topic in body.responses:
            for p in topic.partitions:
                key = (topic.topic, p.partition_index)
                state = partitions.get(key)
                if state is None:
                    continue
                error = ErrorCode(p.error_code)
                if error == ErrorCode.NONE:
                    await self._append(key, state, p.records or b"", p.high_watermark)
                elif error == ErrorCode.OFFSET_OUT_OF_RANGE:
                    await self._out_of_range(channel, key, state)
                else:
                    self._pause(key, state, error)

    async def _append(self, key: Key, state: FetchState, records: bytes, leader_hw: int) -> None:
        async with self.ctx.locked_log(*key) as log:
            if log is None or not self.cluster.fetchers.owns(key, state):
                return
            try:
                if records:
                    await workers.run_sync(log.append_replica, records)
            except (CorruptRecordError, InvalidAppendError) as exc:
                logger.error(
                    "follower refused the leader's records",
                    topic=key[0],
                    partition=key[1],
                    leader=self.leader,
                    error=str(exc),
                    action="a broker bug or corruption on the leader: check its log with "
                    "dump-log --verify",
                )
                self._pause(key, state, ErrorCode.CORRUPT_MESSAGE)
                return
            except STORAGE_FAILURES as exc:
                logger.error(
                    "follower append failed",
                    topic=key[0],
                    partition=key[1],
                    error=repr(exc),
                    action="check the log dir's disk",
                )
                self._pause(key, state, ErrorCode.KAFKA_STORAGE_ERROR)
                return
            if leader_hw >= 0:
                log.update_high_watermark(min(leader_hw, log.log_end_offset))
        if records:
            self.ctx.partition(*key).notify()

    async def _out_of_range(self, channel: BrokerChannel, key: Key, state: FetchState) -> None:
        """Kafka's handleOutOfRangeError: the leader's log end is below ours (truncate to it) or
        its log start above our end (start over there)."""
        answers = {}
        for timestamp in (-1, -2):
            body = await channel.call(
                ApiKey.LIST_OFFSETS,
                LIST_OFFSETS_VERSION,
                {
                    "replica_id": self.cluster.broker_id,
                    "isolation_level": 0,
                    "topics": [
                        {
                            "name": key[0],
                            "partitions": [
                                {
                                    "partition_index": key[1],
                                    "current_leader_epoch": state.leader_epoch,
                                    "timestamp": timestamp,
                                }
                            ],
                        }
                    ],
                },
            )
            part = body.topics[0].partitions[0]
            if part.error_code:
                self._pause(key, state, ErrorCode(part.error_code))
                return
            answers[timestamp] = part.offset
        leader_end, leader_start = answers[-1], answers[-2]
        async with self.ctx.locked_log(*key) as log:
            if log is None or not self.cluster.fetchers.owns(key, state):
                return
            if leader_end < log.log_end_offset:
                await workers.run_sync(log.truncate_to, leader_end)
                where = leader_end
            else:
                await workers.run_sync(log.truncate_fully_and_start_at, leader_start)
                where = leader_start
        logger.warning(
            "follower's fetch offset was out of the leader's range",
            topic=key[0],
            partition=key[1],
            leader=self.leader,
            leader_log_start=leader_start,
            leader_log_end=leader_end,
            restarted_at=where,
        )
