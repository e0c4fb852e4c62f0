"""The controller (Kafka 0.10.1's KafkaController, with the single event queue of later Kafkas).

One broker at a time is the controller: the one whose ephemeral ``/controller`` node exists
(broker/cluster/__init__.py elects it). It runs one trio task that handles events in order:
ZooKeeper watches (brokers joining and leaving, topics created, partitions added to a topic,
topics to delete, ISR changes reported by leaders), config changes this broker applied, and
requests forwarded by the broker (ControlledShutdown, ElectLeaders, partition reassignments). It
decides leaders and ISRs, writes them to ZooKeeper and tells the brokers with LeaderAndIsr,
UpdateMetadata and StopReplica.

Fencing: every partition-state write is a ZooKeeper transaction that also checks the version
of ``/controller_epoch`` as this controller set it, so a controller that lost its place cannot
write; the state's own znode version (the partition epoch) must match what was read, so a
leader's concurrent ISR change is never overwritten (the controller reads it again and
decides anew). Brokers refuse requests from an older controller epoch.

Events are the frozen dataclasses of broker/cluster/events.py. What to decide for a partition
(leader elections, ISR shrinks, controlled shutdown, reassignment steps) is pure code in
broker/cluster/election.py; this module does the I/O around it: ZooKeeper reads and fenced
writes, requests to brokers, log lines.

Requests to brokers go through one queue per broker, in order, retried after a connection
failure until the broker leaves the cluster.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field, replace
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, assert_never

import structlog
import trio
from kazoo.exceptions import BadVersionError, NoNodeError, NodeExistsError

from broker.cluster import election
from broker.cluster.channel import BrokerChannel, ChannelError
from broker.cluster.election import Election, Key, Outcome, ShutdownStep
from broker.cluster.events import (
    BrokersChanged,
    ConfigsChanged,
    ControlledShutdown,
    ElectLeaders,
    IsrChangesReported,
    ListReassignments,
    PartitionsChanged,
    Reassign,
    ReassignmentsStarted,
    Request,
    TopicDeletionsQueued,
    TopicsChanged,
    Event,
)
from broker.cluster.zk import (
    BROKER_IDS,
    BROKER_TOPICS,
    CONTROLLER_EPOCH,
    DELETE_TOPICS,
    ISR_CHANGES,
    SECURITY_PROTOCOL_IDS,
    BrokerInfo,
    LeaderIsr,
    TopicAssignment,
    ZkDataError,
    parse_isr_change,
    parse_topic_config,
    partition_state_path,
    topic_path,
)
from broker.config import ConfigError, parse_topic_configs
from broker.topics import topic_id_from_string
from protocol import ApiKey
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.cluster import Cluster

logger = structlog.get_logger(__name__)

LEADER_AND_ISR_VERSION = 6
UPDATE_METADATA_VERSION = 7
STOP_REPLICA_VERSION = 3
RETRY_BACKOFF_S = 0.5


class ControllerMovedError(Exception):
    """Raised inside the controller when a ZooKeeper write finds ``/controller_epoch`` changed:
    another broker is the controller now, and this one stops."""


@dataclass
class _Request:
    """A controller request to one broker, and an event set once it was answered (or the
    broker left)."""

    api_key: ApiKey
    version: int
    body: dict[str, Any]
    done: trio.Event = field(default_factory=trio.Event)
    response: Any = None


class _BrokerQueue:
    """The ordered requests to one broker and the task sending them."""

    def __init__(self, info: BrokerInfo, timeout_s: float, client_id: str) -> None:
        self.info = info
        self.channel = BrokerChannel(info.host, info.port, client_id=client_id, timeout_s=timeout_s)
        self.send, self.receive = trio.open_memory_channel[_Request](math.inf)
        self.scope = trio.CancelScope()

    async def run(self) -> None:
        with self.scope:
            async for request in self.receive:
                while True:
                    try:
                        request.response = await self.channel.call(
                            request.api_key, request.version, request.body
                        )
                        break
                    except ChannelError as exc:
                        logger.warning(
                            "controller request failed; retrying",
                            broker=self.info.broker_id,
                            api=request.api_key.name,
                            error=str(exc),
                        )
                        await trio.sleep(RETRY_BACKOFF_S)
                request.done.set()
                _log_errors(self.info.broker_id, request)

    async def close(self) -> None:
        self.scope.cancel()
        await self.channel.close()


@dataclass
class _Call:
    """A request event and where its answer goes (None when handling it failed)."""

    request: Request
    answer: Any = None
    done: trio.Event = field(default_factory=trio.Event)


def _log_errors(broker_id: int, request: _Request) -> None:
    """Log a broker's refusal of a controller request (per partition where it says so)."""
    body = request.response
    if body is None:
        return
    if body.error_code:
        logger.warning(
            "broker refused a controller request",
            broker=broker_id,
            api=request.api_key.name,
            error=ErrorCode(body.error_code).name,
        )
        return
    for topic in getattr(body, "topics", None) or []:
        for p in getattr(topic, "partition_errors", None) or []:
            if p.error_code:
                logger.warning(
                    "broker refused a partition of a controller request",
                    broker=broker_id,
                    api=request.api_key.name,
                    topic=getattr(topic, "topic_name", None),
                    partition=p.partition_index,
                    error=ErrorCode(p.error_code).name,
                )


def _log_election(key: Key, old: LeaderIsr, new: LeaderIsr, how: Election) -> None:
    """Say when an election loses messages or leaves a partition offline."""
    if how == Election.UNCLEAN:
        logger.warning(
            "unclean leader election: no in-sync replica is alive; messages not yet "
            "copied to the new leader are lost",
            topic=key[0],
            partition=key[1],
            leader=new.leader,
            isr=list(old.isr),
        )
    elif how == Election.OFFLINE:
        logger.error(
            "partition offline: no in-sync replica is alive",
            topic=key[0],
            partition=key[1],
            isr=list(old.isr),
            action="restart one of the ISR's brokers, or set unclean.leader.election.enable "
            "(losing the messages only the ISR had)",
        )


class Controller:
    """The active controller; see the module docstring. Trio thread only."""

    def __init__(self, cluster: Cluster, epoch: int, epoch_zk_version: int) -> None:
        self.cluster = cluster
        self.zk = cluster.zk
        self.epoch = epoch
        self.epoch_zk_version = epoch_zk_version
        self.live: dict[int, BrokerInfo] = {}
        self.assignments: dict[str, TopicAssignment] = {}
        self.states: dict[Key, LeaderIsr] = {}
        self.unclean: dict[str, bool] = {}
        self.queues: dict[int, _BrokerQueue] = {}
        self.shutting_down: set[int] = set()
        self._events_send, self._events = trio.open_memory_channel[Event | _Call](math.inf)
        self._nursery: trio.Nursery | None = None

    # -- events ------------------------------------------------------------------------------
    def post(self, event: Event) -> None:
        """Queue an event (from the trio thread: watches arrive through zk.to_trio)."""
        self._queue(event)

    def _queue(self, item: Event | _Call) -> None:
        try:
            self._events_send.send_nowait(item)
        except trio.ClosedResourceError:
            if isinstance(item, _Call):
                item.done.set()  # stopped: answered None

    async def call(self, request: Request) -> Any:
        """Queue a request event and wait for its answer (ControlledShutdown, ElectLeaders,
        reassignments); None when handling it failed (logged) or the controller stopped."""
        pending = _Call(request)
        self._queue(pending)
        await pending.done.wait()
        return pending.answer

    async def run(self) -> None:
        """Take over (read the cluster, elect what needs a leader, tell every broker), then
        handle events until cancelled or deposed."""
        logger.info("became the controller", epoch=self.epoch)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                try:  # caught in the body: the nursery would wrap it in an exception group
                    await self._failover()
                    async for event in self._events:
                        await self._handle(event)
                except ControllerMovedError as exc:
                    logger.warning("no longer the controller", epoch=self.epoch, reason=str(exc))
                nursery.cancel_scope.cancel()  # the per-broker request queues
        finally:
            self._events_send.close()
            with trio.CancelScope(shield=True):
                for queue in self.queues.values():
                    await queue.close()

    async def _handle(self, item: Event | _Call) -> None:
        """One event; a ZooKeeper error retries a watch event and answers a request None."""
        try:
            if isinstance(item, _Call):
                try:
                    item.answer = await self._answer(item.request)
                finally:
                    item.done.set()
            else:
                await self._on_event(item)
        except ControllerMovedError:
            raise
        except (ZkDataError, NoNodeError, BadVersionError) as exc:
            event = item.request if isinstance(item, _Call) else item
            retry = not isinstance(item, _Call)
            logger.warning(
                "controller event failed",
                event=type(event).__name__,
                error=repr(exc),
                action="retrying" if retry else "answered as failed; the broker asks again",
            )
            await trio.sleep(RETRY_BACKOFF_S)
            if not isinstance(item, _Call):
                self.post(item)

    async def _on_event(self, event: Event) -> None:
        if isinstance(event, BrokersChanged):
            await self._on_brokers()
        elif isinstance(event, TopicsChanged):
            await self._on_topics()
        elif isinstance(event, PartitionsChanged):
            await self._on_partitions(event.topic)
        elif isinstance(event, ConfigsChanged):
            await self._on_configs_changed(event.topic)
        elif isinstance(event, IsrChangesReported):
            await self._on_isr_changes()
        elif isinstance(event, TopicDeletionsQueued):
            await self._on_delete_topics()
        elif isinstance(event, ReassignmentsStarted):
            for key in event.keys:
                await self._complete_reassignment(key)
        else:
            assert_never(event)

    async def _answer(self, request: Request) -> Any:
        if isinstance(request, ControlledShutdown):
            return await self._on_controlled_shutdown(request.broker_id, request.broker_epoch)
        if isinstance(request, ElectLeaders):
            return await self._on_elect_leaders(request.election_type, request.keys)
        if isinstance(request, Reassign):
            return await self._on_reassign(request.targets, request.allow_rf_change)
        if isinstance(request, ListReassignments):
            return election.ongoing_reassignments(self.assignments, request.keys)
        assert_never(request)

    # -- failover ----------------------------------------------------------------------------
    async def _failover(self) -> None:
        await self._read_brokers()
        for broker_id in self.live:
            self._open_queue(broker_id)
        names = await self.zk.children(BROKER_TOPICS, watch=lambda: self.post(TopicsChanged()))
        for name in names:
            await self._load_topic(name)
        changed = []
        for name in list(self.assignments):
            changed += await self._start_partitions(name)
        changed += await self._elect_offline(list(self.states))
        # Brokers that died while there was no controller leave the ISRs now.
        gone = {r for a in self.assignments.values() for rs in a.partitions.values() for r in rs}
        changed += await self._remove_from_isr(list(self.states), gone - set(self.live))
        self._send_all_leader_and_isr()
        self.send_update_metadata()
        for name, assignment in list(self.assignments.items()):
            for p in set(assignment.adding) | set(assignment.removing):
                await self._complete_reassignment((name, p))
        await self.zk.children(ISR_CHANGES, watch=lambda: self.post(IsrChangesReported()))
        await self.zk.children(DELETE_TOPICS, watch=lambda: self.post(TopicDeletionsQueued()))
        self.post(IsrChangesReported())
        self.post(TopicDeletionsQueued())
        logger.info(
            "controller ready",
            epoch=self.epoch,
            brokers=sorted(self.live),
            topics=len(self.assignments),
            partitions=len(self.states),
            elected=len(changed),
        )

    async def _read_brokers(self) -> dict[int, BrokerInfo]:
        ids = await self.zk.children(BROKER_IDS, watch=lambda: self.post(BrokersChanged()))
        live = {}
        for text in ids:
            try:
                broker_id = int(text)
                data, stat = await self.zk.get(f"{BROKER_IDS}/{text}")
                live[broker_id] = BrokerInfo.from_json(broker_id, data, stat.czxid)
            except (ValueError, ZkDataError) as exc:
                logger.warning("ignoring a broker registration", node=text, error=str(exc))
            except NoNodeError:
                continue  # left meanwhile
        previous, self.live = self.live, live
        return previous

    async def _load_topic(self, name: str) -> bool:
        """Read a topic's assignment, config and partition states, and watch its assignment
        for added partitions; False if it is gone."""
        found = await self.zk.get_or_none(
            topic_path(name), watch=lambda: self.post(PartitionsChanged(name))
        )
        if found is None:
            return False
        assignment = TopicAssignment.from_json(name, found[0])
        if assignment.topic_id is None:
            # A topic created by an older tool: it gets an id now (KIP-516).
            from broker.topics import new_topic_id, topic_id_string

            assignment = replace(assignment, topic_id=topic_id_string(new_topic_id()))
            await self.zk.set(topic_path(name), assignment.to_json(), found[1].version)
        self.assignments[name] = assignment
        self.unclean[name] = await self._unclean_enabled(name)
        for p in assignment.partitions:
            state = await self._read_state(name, p)
            if state is not None:
                self.states[(name, p)] = state
        return True

    async def _unclean_enabled(self, name: str) -> bool:
        found = await self.zk.get_or_none(f"/config/topics/{name}")
        overrides: dict[str, str] = {}
        if found is not None:
            try:
                overrides = parse_topic_configs(parse_topic_config(name, found[0]))
            except (ZkDataError, ConfigError) as exc:
                logger.warning("ignoring a topic's configs", topic=name, error=str(exc))
        return self.cluster.ctx.config.topic_config(overrides).unclean_leader_election_enable

    async def _read_state(self, topic: str, partition: int) -> LeaderIsr | None:
        path = partition_state_path(topic, partition)
        found = await self.zk.get_or_none(path)
        if found is None:
            return None
        return LeaderIsr.from_json(path, found[0], found[1].version)

    # -- ZooKeeper writes --------------------------------------------------------------------
    async def _write_state(self, key: Key, state: LeaderIsr, *, create: bool = False) -> bool:
        """Write a partition state (fenced by the controller epoch's version, conditional on
        the partition epoch read); True when written, False when the state changed meanwhile
        (it is read again into self.states)."""
        topic, partition = key
        path = partition_state_path(topic, partition)
        data = replace(state, controller_epoch=self.epoch).to_json()
        if create:
            await self.zk.call(self.zk.client.ensure_path, self.zk.path(path.rsplit("/", 1)[0]))
            op: tuple[Any, ...] = ("create", path, data)
        else:
            op = ("set", path, data, state.zk_version)
        results = await self.zk.transaction(
            [("check", CONTROLLER_EPOCH, self.epoch_zk_version), op]
        )
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            if isinstance(results[0], BadVersionError):
                raise ControllerMovedError(f"/controller_epoch moved on from {self.epoch}")
            if isinstance(results[1], (BadVersionError, NodeExistsError, NoNodeError)):
                fresh = await self._read_state(topic, partition)
                if fresh is not None:
                    self.states[key] = fresh
                return False
            raise failed[0]
        if create:
            stat = await self.zk.exists(path)
            version = stat.version
        else:
            version = results[1].version
        self.states[key] = replace(state, controller_epoch=self.epoch, zk_version=version)
        return True

    # -- partition state machine -------------------------------------------------------------
    async def _start_partitions(self, name: str) -> list[Key]:
        """Partitions of ``name`` without a state yet get their first one (election.start)."""
        changed = []
        for p, replicas in sorted(self.assignments[name].partitions.items()):
            key = (name, p)
            if key in self.states:
                continue
            state = election.start(replicas, self.live, self.shutting_down, self.epoch)
            if state is None:
                logger.warning(
                    "new partition has no live replica; waiting for one",
                    topic=name,
                    partition=p,
                    replicas=list(replicas),
                )
                continue
            if await self._write_state(key, state, create=True):
                changed.append(key)
        return changed

    async def _elect_offline(self, keys: list[Key]) -> list[Key]:
        """A leader for each partition of ``keys`` whose leader is gone or shutting down."""
        changed = []
        for key in keys:
            if key[0] not in self.assignments:
                continue
            replicas = self.assignments[key[0]].partitions[key[1]]

            def elected(state: LeaderIsr, key: Key = key) -> LeaderIsr | None:
                if not election.needs_leader(state, self.live, self.shutting_down):
                    return None
                new, how = election.elect(
                    replicas, state, self.live, self.shutting_down, self.unclean.get(key[0], False)
                )
                if how == Election.UNCHANGED:
                    return None
                _log_election(key, state, new, how)
                return new

            if await self._write_decided(key, elected):
                changed.append(key)
        return changed

    async def _remove_from_isr(self, keys: list[Key], brokers: set[int]) -> list[Key]:
        """Followers gone (or shutting down): out of the ISR, as long as one member stays."""
        changed = []
        for key in keys:
            if await self._write_decided(key, lambda s: election.without_followers(s, brokers)):
                changed.append(key)
        return changed

    async def _write_decided(
        self, key: Key, decide: Callable[[LeaderIsr], LeaderIsr | None]
    ) -> bool:
        """Write ``decide(state)`` of the partition's state (None: nothing to write); True when
        written. When the state changed meanwhile, as the leader's last ISR update does before
        the controller reads its notification, decide again from the state read back, as
        Kafka's controller retries such partitions: dropped, a partition whose leader died
        stayed without one until the next event."""
        while True:
            state = self.states.get(key)
            new = None if state is None else decide(state)
            if new is None:
                return False
            if await self._write_state(key, new):
                return True
            if self.states.get(key) is state:  # not read back: the partition is gone
                return False

    # -- requests to brokers -----------------------------------------------------------------
    def _open_queue(self, broker_id: int) -> None:
        info = self.live[broker_id]
        queue = _BrokerQueue(
            info,
            self.cluster.ctx.config.controller_socket_timeout_ms / 1000,
            f"chronolog-controller-{self.cluster.broker_id}",
        )
        self.queues[broker_id] = queue
        assert self._nursery is not None
        self._nursery.start_soon(queue.run)

    def _send(
        self, broker_id: int, api_key: ApiKey, version: int, body: dict[str, Any]
    ) -> _Request | None:
        queue = self.queues.get(broker_id)
        if queue is None:
            return None
        request = _Request(api_key, version, body)
        queue.send.send_nowait(request)
        return request

    def _partition_state_body(self, key: Key) -> dict[str, Any]:
        state = self.states[key]
        assignment = self.assignments[key[0]]
        return {
            "partition_index": key[1],
            "controller_epoch": state.controller_epoch,
            "leader": state.leader,
            "leader_epoch": state.leader_epoch,
            "isr": list(state.isr),
            "partition_epoch": state.zk_version,
            "replicas": list(assignment.partitions[key[1]]),
            "adding_replicas": list(assignment.adding.get(key[1], ())),
            "removing_replicas": list(assignment.removing.get(key[1], ())),
        }

    def send_leader_and_isr(self, broker_id: int, keys: list[Key]) -> _Request | None:
        """Tell ``broker_id`` the state of ``keys`` (those it holds a replica of)."""
        if broker_id not in self.live:
            return None
        topics: dict[str, list[dict[str, Any]]] = {}
        leaders = set()
        for key in keys:
            if key not in self.states or key[0] not in self.assignments:
                continue
            if broker_id not in self.assignments[key[0]].partitions.get(key[1], ()):
                continue
            topics.setdefault(key[0], []).append(self._partition_state_body(key))
            leaders.add(self.states[key].leader)
        if not topics:
            return None
        body = {
            "controller_id": self.cluster.broker_id,
            "controller_epoch": self.epoch,
            "broker_epoch": self.live[broker_id].epoch,
            "type": 0,
            "topic_states": [
                {
                    "topic_name": name,
                    "topic_id": self._topic_uuid(name),
                    "partition_states": parts,
                }
                for name, parts in topics.items()
            ],
            "live_leaders": [
                {"broker_id": b, "host_name": self.live[b].host, "port": self.live[b].port}
                for b in sorted(leaders)
                if b in self.live
            ],
        }
        return self._send(broker_id, ApiKey.LEADER_AND_ISR, LEADER_AND_ISR_VERSION, body)

    def _topic_uuid(self, name: str) -> uuid.UUID:
        text = self.assignments[name].topic_id
        return topic_id_from_string(text) if text else uuid.UUID(int=0)

    def send_leader_and_isr_for(self, keys: list[Key]) -> None:
        """LeaderAndIsr about ``keys`` to every live replica of them."""
        brokers = {
            r
            for key in keys
            if key[0] in self.assignments
            for r in self.assignments[key[0]].partitions.get(key[1], ())
        }
        for broker_id in sorted(brokers):
            self.send_leader_and_isr(broker_id, keys)

    def _send_all_leader_and_isr(self) -> None:
        keys = list(self.states)
        for broker_id in list(self.live):
            self.send_leader_and_isr(broker_id, keys)

    def _update_metadata_body(self, broker_id: int) -> dict[str, Any]:
        topics: dict[str, list[dict[str, Any]]] = {}
        for (name, p), state in sorted(self.states.items()):
            assignment = self.assignments.get(name)
            if assignment is None or p not in assignment.partitions:
                continue
            replicas = assignment.partitions[p]
            topics.setdefault(name, []).append(
                {
                    "partition_index": p,
                    "controller_epoch": state.controller_epoch,
                    "leader": state.leader,
                    "leader_epoch": state.leader_epoch,
                    "isr": list(state.isr),
                    "zk_version": state.zk_version,
                    "replicas": list(replicas),
                    "offline_replicas": [r for r in replicas if r not in self.live],
                }
            )
        return {
            "controller_id": self.cluster.broker_id,
            "controller_epoch": self.epoch,
            "broker_epoch": self.live[broker_id].epoch,
            "topic_states": [
                {"topic_name": n, "topic_id": self._topic_uuid(n), "partition_states": parts}
                for n, parts in topics.items()
            ],
            "live_brokers": [
                {
                    "id": b.broker_id,
                    "endpoints": [
                        {
                            "port": e.port,
                            "host": e.host,
                            "listener": e.name,
                            "security_protocol": SECURITY_PROTOCOL_IDS.get(e.protocol, 0),
                        }
                        for e in b.endpoints()
                    ],
                    "rack": b.rack,
                }
                for b in sorted(self.live.values(), key=lambda b: b.broker_id)
            ],
        }

    def send_update_metadata(self) -> list[_Request]:
        """The whole cluster's metadata to every live broker."""
        sent = []
        for broker_id in sorted(self.live):
            request = self._send(
                broker_id,
                ApiKey.UPDATE_METADATA,
                UPDATE_METADATA_VERSION,
                self._update_metadata_body(broker_id),
            )
            if request is not None:
                sent.append(request)
        return sent

    def send_stop_replica(self, broker_id: int, keys: list[Key], delete: bool) -> _Request | None:
        if broker_id not in self.live or not keys:
            return None
        topics: dict[str, list[dict[str, Any]]] = {}
        for name, p in keys:
            epoch = self.states[(name, p)].leader_epoch if (name, p) in self.states else -1
            topics.setdefault(name, []).append(
                {
                    "partition_index": p,
                    "leader_epoch": -2 if delete else epoch,
                    "delete_partition": delete,
                }
            )
        body = {
            "controller_id": self.cluster.broker_id,
            "controller_epoch": self.epoch,
            "broker_epoch": self.live[broker_id].epoch,
            "topic_states": [
                {"topic_name": name, "partition_states": parts} for name, parts in topics.items()
            ],
        }
        return self._send(broker_id, ApiKey.STOP_REPLICA, STOP_REPLICA_VERSION, body)

    # -- event handlers ----------------------------------------------------------------------
    async def _on_brokers(self) -> None:
        previous = await self._read_brokers()
        bounced = {
            b for b in previous if b in self.live and previous[b].epoch != self.live[b].epoch
        }
        dead = (set(previous) - set(self.live)) | bounced
        started = (set(self.live) - set(previous)) | bounced
        if not dead and not started:
            return
        logger.info(
            "brokers changed",
            live=sorted(self.live),
            started=sorted(started),
            failed=sorted(dead),
        )
        for broker_id in dead:
            queue = self.queues.pop(broker_id, None)
            if queue is not None:
                await queue.close()
            self.shutting_down.discard(broker_id)
        for broker_id in started:
            self._open_queue(broker_id)
        changed: list[Key] = []
        if dead:
            keys = list(self.states)
            changed += await self._elect_offline(keys)
            changed += await self._remove_from_isr(keys, dead)
        if started:
            for name in list(self.assignments):
                changed += await self._start_partitions(name)
            changed += await self._elect_offline(list(self.states))
        # LeaderAndIsr before UpdateMetadata on every broker's queue: a broker that Metadata
        # names leader already acts as one.
        self.send_leader_and_isr_for(sorted(set(changed)))
        for broker_id in sorted(started):
            self.send_leader_and_isr(broker_id, list(self.states))
        self.send_update_metadata()

    async def _on_topics(self) -> None:
        names = set(await self.zk.children(BROKER_TOPICS, watch=lambda: self.post(TopicsChanged())))
        for gone in set(self.assignments) - names:
            self._forget_topic(gone)
        changed: list[Key] = []
        for name in sorted(names - set(self.assignments)):
            if await self._load_topic(name):
                logger.info(
                    "new topic",
                    topic=name,
                    partitions=len(self.assignments[name].partitions),
                )
                changed += await self._start_partitions(name)
        if changed:
            self.send_leader_and_isr_for(changed)
            self.send_update_metadata()

    async def _on_partitions(self, name: str) -> None:
        """A topic's assignment changed (Kafka's PartitionModificationsHandler): partitions
        it did not have (CreatePartitions) are added and started. Other changes are the
        controller's own (reassignments) and already known."""
        if name not in self.assignments:
            return  # deleted
        found = await self.zk.get_or_none(
            topic_path(name), watch=lambda: self.post(PartitionsChanged(name))
        )
        if found is None:
            return
        stored = TopicAssignment.from_json(name, found[0])
        current = self.assignments[name]
        added = {p: r for p, r in stored.partitions.items() if p not in current.partitions}
        if added:
            self.assignments[name] = replace(current, partitions={**current.partitions, **added})
            logger.info(
                "partitions added",
                topic=name,
                partitions=len(self.assignments[name].partitions),
                assignment={p: list(r) for p, r in sorted(added.items())},
            )
        changed = await self._start_partitions(name)
        if changed:
            self.send_leader_and_isr_for(changed)
            self.send_update_metadata()

    async def _on_configs_changed(self, name: str | None) -> None:
        """A topic's configs (``name``) or the dynamic broker configs (None: every topic)
        changed: unclean.leader.election.enable is read again, and partitions without a
        leader get one where it is now allowed (Kafka's enableTopicUncleanLeaderElection)."""
        names = [name] if name is not None else list(self.assignments)
        allowed = []
        for topic in names:
            if topic not in self.assignments:
                continue
            was = self.unclean.get(topic, False)
            self.unclean[topic] = await self._unclean_enabled(topic)
            if self.unclean[topic] and not was:
                allowed.append(topic)
        if not allowed:
            return
        changed = await self._elect_offline([k for k in self.states if k[0] in allowed])
        if changed:
            self.send_leader_and_isr_for(changed)
            self.send_update_metadata()

    def _forget_topic(self, name: str) -> None:
        self.assignments.pop(name, None)
        self.unclean.pop(name, None)
        for key in [k for k in self.states if k[0] == name]:
            del self.states[key]

    async def _on_isr_changes(self) -> None:
        nodes = await self.zk.children(ISR_CHANGES, watch=lambda: self.post(IsrChangesReported()))
        keys: set[Key] = set()
        for node in nodes:
            path = f"{ISR_CHANGES}/{node}"
            found = await self.zk.get_or_none(path)
            if found is not None:
                try:
                    keys.update(parse_isr_change(path, found[0]))
                except ZkDataError as exc:
                    logger.warning("ignoring an ISR change notification", error=str(exc))
            await self.zk.delete(path)
        if not keys:
            return
        for key in sorted(keys):
            if key[0] in self.assignments:
                state = await self._read_state(*key)
                if state is not None:
                    self.states[key] = state
        self.send_update_metadata()
        for key in sorted(keys):
            await self._complete_reassignment(key)

    async def _on_delete_topics(self) -> None:
        names = await self.zk.children(
            DELETE_TOPICS, watch=lambda: self.post(TopicDeletionsQueued())
        )
        for name in names:
            assignment = self.assignments.get(name)
            if assignment is not None:
                per_broker: dict[int, list[Key]] = {}
                for p, replicas in assignment.partitions.items():
                    for r in replicas:
                        per_broker.setdefault(r, []).append((name, p))
                requests = [
                    self.send_stop_replica(b, keys, delete=True)
                    for b, keys in sorted(per_broker.items())
                ]
                with trio.move_on_after(10):
                    for request in requests:
                        if request is not None:
                            await request.done.wait()
                self._forget_topic(name)
                await self.zk.delete(topic_path(name), recursive=True)
                await self.zk.delete(f"/config/topics/{name}")
                logger.info("deleted topic", topic=name, partitions=len(assignment.partitions))
            await self.zk.delete(f"{DELETE_TOPICS}/{name}")
        if names:
            self.send_update_metadata()

    # -- requests forwarded by brokers -------------------------------------------------------
    async def _on_controlled_shutdown(
        self, broker_id: int, broker_epoch: int
    ) -> tuple[ErrorCode, list[Key]]:
        """Kafka's KafkaController.shutdownBroker: lead elsewhere what ``broker_id`` leads
        (another live ISR member), take it out of the ISRs it follows in and stop those
        replicas; answer (error, partitions it still leads)."""
        info = self.live.get(broker_id)
        if info is None:
            return ErrorCode.BROKER_NOT_AVAILABLE, []
        if broker_epoch >= 0 and broker_epoch != info.epoch:
            return ErrorCode.STALE_BROKER_EPOCH, []
        self.shutting_down.add(broker_id)
        changed: list[Key] = []
        stopped: list[Key] = []
        alone: set[Key] = set()
        moved = 0
        for key, state in sorted(self.states.items()):
            replicas = self.assignments[key[0]].partitions.get(key[1], ())
            if broker_id not in replicas:
                continue
            step, new = election.controlled_shutdown(
                replicas, state, broker_id, self.live, self.shutting_down
            )
            if step == ShutdownStep.LEAD_ALONE:
                # Nobody in sync to take over: it leads until it goes, and waiting for that
                # would not help (not counted as remaining, unlike Kafka).
                alone.add(key)
                continue
            if step == ShutdownStep.LEAVE_ISR:
                stopped.append(key)
            if new is not None and await self._write_state(key, new):
                changed.append(key)
                moved += step == ShutdownStep.MOVE_LEADER
        self.send_leader_and_isr_for(changed)
        self.send_stop_replica(broker_id, stopped, delete=False)
        self.send_update_metadata()
        remaining = sorted(
            k for k, s in self.states.items() if s.leader == broker_id and k not in alone
        )
        logger.info(
            "controlled shutdown of a broker",
            broker=broker_id,
            leaderships_moved=moved,
            still_leading=len(remaining),
            without_another_in_sync_replica=len(alone),
        )
        return ErrorCode.NONE, remaining

    async def _on_elect_leaders(
        self, election_type: int, keys: tuple[Key, ...] | None
    ) -> dict[Key, Outcome]:
        """ElectLeaders (KIP-460), each partition as election.elect_on_request decides. Answer
        {key: (error, message)}; with ``keys`` None every partition is tried and those needing
        nothing are left out."""
        results: dict[Key, Outcome] = {}
        changed = []
        for key in sorted(self.states) if keys is None else keys:
            state = self.states.get(key)
            if state is None or key[0] not in self.assignments:
                results[key] = self._no_such(key)
                continue
            replicas = self.assignments[key[0]].partitions[key[1]]
            decided = election.elect_on_request(election_type, replicas, state, self.live)
            if isinstance(decided, tuple):
                results[key] = decided
            elif await self._write_state(key, decided):
                changed.append(key)
                results[key] = (ErrorCode.NONE, None)
            else:
                results[key] = (ErrorCode.UNKNOWN_SERVER_ERROR, "state changed meanwhile; retry")
        self.send_leader_and_isr_for(changed)
        self.send_update_metadata()
        if changed:
            logger.info(
                "leaders elected on request",
                election="preferred" if election_type == election.PREFERRED_ELECTION else "unclean",
                partitions=[f"{t}-{p}" for t, p in changed][:50],
            )
        if keys is None:
            results = {k: v for k, v in results.items() if v[0] != ErrorCode.ELECTION_NOT_NEEDED}
        return results

    def _no_such(self, key: Key) -> Outcome:
        """The answer for a partition this controller does not know, in Kafka's words."""
        name, partition = key
        if name not in self.assignments:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {name}"
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {name}-{partition}"

    async def _write_assignment(self, name: str, assignment: TopicAssignment) -> None:
        """Write a topic's assignment, keeping partitions a broker added (CreatePartitions)
        that this controller has not read yet (its watch event, queued, starts them)."""
        while True:
            data, stat = await self.zk.get(topic_path(name))
            stored = TopicAssignment.from_json(name, data)
            added = {p: r for p, r in stored.partitions.items() if p not in assignment.partitions}
            merged = replace(assignment, partitions={**assignment.partitions, **added})
            try:
                await self.zk.set(topic_path(name), merged.to_json(), stat.version)
            except BadVersionError:
                continue  # changed meanwhile: merge again
            self.assignments[name] = merged
            return

    async def _on_reassign(
        self, targets: Mapping[Key, tuple[int, ...] | None], allow_rf_change: bool
    ) -> dict[Key, Outcome]:
        """AlterPartitionReassignments (KIP-455): start moving each partition to its target
        replicas (election.start_reassignment); once every target replica is in the ISR,
        :meth:`_complete_reassignment` drops the others."""
        results: dict[Key, Outcome] = {}
        started = []
        for key, target in targets.items():
            name, p = key
            assignment = self.assignments.get(name)
            if assignment is None or p not in assignment.partitions or key not in self.states:
                results[key] = self._no_such(key)
                continue
            move = election.start_reassignment(assignment, p, target, self.live, allow_rf_change)
            if isinstance(move, tuple):
                results[key] = move
                continue
            await self._write_assignment(name, move.assignment)
            state = self.states[key]
            if await self._write_state(key, replace(state, leader_epoch=state.leader_epoch + 1)):
                started.append(key)
            results[key] = (ErrorCode.NONE, None)
            logger.info(
                "reassignment started",
                topic=name,
                partition=p,
                replicas=list(move.replicas),
                adding=list(move.adding),
                removing=list(move.removing),
            )
        self.send_leader_and_isr_for(started)
        self.send_update_metadata()
        if started:
            self.post(ReassignmentsStarted(tuple(started)))
        return results

    async def _complete_reassignment(self, key: Key) -> None:
        """When every target replica of a reassigned partition is in the ISR: lead from the
        target, drop the removed replicas from the ISR and assignment, delete them
        (StopReplica), clear the reassignment state (election.complete_reassignment)."""
        name, p = key
        assignment = self.assignments.get(name)
        state = self.states.get(key)
        if assignment is None or state is None:
            return
        done = election.complete_reassignment(assignment, p, state, self.live)
        if done is None:
            return
        new, finished, removed = done
        if not await self._write_state(key, new):
            return
        await self._write_assignment(name, finished)
        self.send_leader_and_isr_for([key])
        for broker_id in removed:
            self.send_stop_replica(broker_id, [key], delete=True)
        self.send_update_metadata()
        logger.info(
            "reassignment complete",
            topic=name,
            partition=p,
            replicas=list(finished.partitions[p]),
            leader=new.leader,
        )
