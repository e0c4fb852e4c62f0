"""The cluster: brokers coordinated by ZooKeeper as in Kafka 0.10.1 (zookeeper.connect set).

- :mod:`.zk`: the ZooKeeper layout and the kazoo client bridged to trio.
- :mod:`.controller`: the controller (one broker at a time): leaders, ISRs, LeaderAndIsr /
  UpdateMetadata / StopReplica to the brokers.
- :mod:`.replicas`: this broker's replicas: leader or follower, high watermark, ISR changes,
  acks=all waits.
- :mod:`.fetcher`: followers' fetchers, with leader-epoch truncation (KIP-101/279).
- :mod:`.txn`: the transaction coordinator's placement, markers and produce verification.
- :mod:`.metadata`: the metadata cache and the cluster's Metadata answers.
- :mod:`.handlers`: the inter-broker apis and the cluster's CreateTopics / DeleteTopics /
  CreatePartitions.
- :mod:`.assignment`: replica assignment for new topics and partitions (rack-aware).
- :mod:`.config_changes`: topic and dynamic broker configs in ZooKeeper, and the change
  notifications every broker follows.
- :mod:`.acls`: the ACL bindings in ZooKeeper (Kafka's AclAuthorizer layout) and their change
  notifications, so every broker enforces the same ones.
- :mod:`.tokens`: the delegation tokens in ZooKeeper (Kafka's DelegationTokenManagerZk layout)
  and their change notifications, so a token made through one broker works on all.

:class:`Cluster` ties them together as ``ctx.cluster`` (None for a single broker: then nothing
here runs). The request paths reach it only through ``ctx.replication``
(:mod:`.replication`'s ZkReplication; broker/replication.py has the single broker's).

Concurrency rules (next to broker/context.py's):
- All cluster state (metadata cache, replicas, the controller's state) lives on the trio thread.
- kazoo runs its own threads. Blocking ZooKeeper calls are made from trio in worker threads
  (``ZooKeeper.call``; abandoned on cancellation, so a broker cut off from ZooKeeper still
  stops). kazoo's watch and connection-state callbacks touch nothing: they hand the event to
  the trio thread with ``TrioToken.run_sync_soon`` (broker/cluster/zk.py).
- The controller handles its events one at a time in one task; LeaderAndIsr and StopReplica are
  applied one at a time on a broker (``ReplicaManager.state_lock``).
- Log calls take the partition lock like every handler's; a follower's append or truncation
  also checks, under that lock, that its fetcher still owns the partition at that leader epoch.

Start-up order (Kafka's KafkaServer.startup): connect to ZooKeeper and read the cluster id, the
dynamic broker configs and the topics (:meth:`Cluster.connect`, before the logs are loaded, so
they get their topics' configs), load the logs, open the listener, then follow config changes,
register ``/brokers/ids/<id>`` and take part in the controller election (:meth:`Cluster.start`).
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import structlog
import trio
from kazoo.exceptions import KazooException, NodeExistsError

from broker import workers
from broker.admin.changes import apply_topic_settings
from broker.cluster.acls import ZkAclStore
from broker.cluster.assignment import AssignmentError, assign_replicas
from broker.cluster.channel import BrokerChannel, ChannelError
from broker.cluster.config_changes import ConfigChanges
from broker.cluster.features import ZkFeatureLevels
from broker.cluster.controller import Controller
from broker.cluster.events import ControlledShutdown
from broker.cluster.fetcher import FetcherManager
from broker.cluster.groups import CoordinatorPlacement
from broker.cluster.metadata import MetadataCache
from broker.cluster.replicas import ReplicaManager
from broker.cluster.replication import ZkReplication
from broker.cluster.tokens import ZkTokenStore
from broker.cluster.txn import TxnPlacement
from broker.cluster.zk import (
    BROKER_IDS,
    CLUSTER_ID,
    CONFIG_TOPICS,
    CONTROLLER,
    CONTROLLER_EPOCH,
    BrokerInfo,
    Endpoint,
    TopicAssignment,
    ZkDataError,
    ZooKeeper,
    cluster_id_json,
    controller_json,
    parse_controller,
    parse_topic_config,
    topic_config_json,
    topic_path,
)
from broker.config import BrokerConfig, ConfigError, parse_topic_configs
from broker.errors import StartupError
from broker.topics import Topic, TopicRegistry, topic_id_from_string
from protocol import ApiKey
from protocol.errors import ErrorCode

if TYPE_CHECKING:  # broker.context imports this package
    from broker.context import BrokerContext

logger = structlog.get_logger(__name__)


class Cluster:
    """This broker's part in the cluster; see the module docstring."""

    def __init__(self, config: BrokerConfig) -> None:
        assert config.zookeeper_connect is not None
        self.config = config
        self.broker_id = config.broker_id
        self.zk = ZooKeeper(
            config.zookeeper_connect,
            session_timeout_ms=config.zookeeper_session_timeout_ms,
            connection_timeout_ms=config.zookeeper_connection_timeout_ms,
            on_state=self._on_zk_state,
        )
        # Set by attach(), which the BrokerContext's construction calls; None only before it
        # (only _on_zk_state can run that early, and it checks), so typed as always set.
        self.ctx: BrokerContext = None  # type: ignore[assignment]
        self.metadata = MetadataCache()
        self.me = BrokerInfo(self.broker_id, config.advertised_host, config.advertised_port)
        self.broker_epoch = -1
        self.controller_epoch_seen = -1
        self.controller: Controller | None = None
        self.addresses: dict[int, tuple[str, int]] = {}
        self._connected = trio.Event()
        self._metadata_event = trio.Event()
        self._controller_changed = trio.Event()
        self._session_lost = False
        self._controller_scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        self.replicas: ReplicaManager = None  # type: ignore[assignment]
        self.fetchers: FetcherManager = None  # type: ignore[assignment]
        self.config_changes = ConfigChanges(self)
        self.features = ZkFeatureLevels(self.zk)
        self.acls = ZkAclStore(self.zk)
        self.tokens = ZkTokenStore(self.zk)

    # -- start-up ----------------------------------------------------------------------------
    async def connect(self) -> str:
        """Connect to ZooKeeper; returns the cluster id (``/cluster/id``, created by the first
        broker). Raises StartupError when ZooKeeper cannot be reached in time."""
        try:
            await self.zk.start()
        except Exception as exc:  # kazoo's timeout and connection errors
            raise StartupError(
                f"cannot connect to ZooKeeper at {self.config.zookeeper_connect}: {exc!r}; "
                "check zookeeper.connect and that ZooKeeper is running"
            ) from exc
        self._connected.set()
        found = await self.zk.get_or_none(CLUSTER_ID)
        if found is None:
            new_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
            try:
                await self.zk.create(CLUSTER_ID, cluster_id_json(new_id))
                logger.info("generated cluster id in ZooKeeper", cluster_id=new_id)
            except NodeExistsError:
                pass
            found = await self.zk.get(CLUSTER_ID)
        try:
            return str(json.loads(found[0])["id"])
        except (ValueError, KeyError, TypeError) as exc:
            raise StartupError(f"{CLUSTER_ID} in ZooKeeper is unreadable: {exc!r}") from exc

    async def load_topics(self, registry: TopicRegistry) -> None:
        """Put every topic of the cluster in ``registry`` (in memory: in a cluster, topics
        live in ZooKeeper) with its configs and id."""
        for name in await self.zk.children("/brokers/topics"):
            await self._register_topic(registry, name)

    async def _register_topic(self, registry: TopicRegistry, name: str) -> Topic | None:
        found = await self.zk.get_or_none(topic_path(name))
        if found is None:
            return None
        try:
            assignment = TopicAssignment.from_json(name, found[0])
        except ZkDataError as exc:
            logger.warning("ignoring a topic", topic=name, error=str(exc))
            return None
        overrides: dict[str, str] = {}
        config = await self.zk.get_or_none(f"{CONFIG_TOPICS}/{name}")
        if config is not None:
            try:
                overrides = parse_topic_configs(parse_topic_config(name, config[0]))
            except (ZkDataError, ConfigError) as exc:
                logger.warning("ignoring a topic's configs", topic=name, error=str(exc))
        topic_id = topic_id_from_string(assignment.topic_id) if assignment.topic_id else None
        topic = registry.make_topic(name, len(assignment.partitions), overrides, topic_id=topic_id)
        registry.put(topic)
        return topic

    async def refresh_topic(self, name: str) -> bool:
        """Read ``name`` from ZooKeeper into ``ctx.topics`` again (False when it is gone); its
        running logs get its configs as read."""
        old = self.ctx.topics.get(name)
        topic = await self._register_topic(self.ctx.topics, name)
        if topic is None:
            return False
        if old is not None and old.config != topic.config:
            await apply_topic_settings(self.ctx, [topic])
        return True

    async def ensure_topic(self, name: str, partition: int) -> bool:
        """Make sure ``ctx.topics`` knows ``name`` with ``partition`` (read from ZooKeeper
        again when not: a new topic, or partitions added)."""
        known = self.ctx.topics.get(name)
        if known is not None and partition < known.partitions:
            return True
        await self.refresh_topic(name)
        known = self.ctx.topics.get(name)
        return known is not None and partition < known.partitions

    def attach(self, ctx: BrokerContext) -> ZkReplication:
        """BrokerContext's ``replication`` factory: this broker's replicas, fetchers and
        coordinator placements over ``ctx``, and the Replication its request paths use."""
        self.ctx = ctx
        ctx.cluster = self
        self.replicas = ReplicaManager(self)
        self.fetchers = FetcherManager(self)
        self.groups = CoordinatorPlacement(self)
        self.txns = TxnPlacement(self)
        return ZkReplication(self, ctx)

    async def start(self, nursery: trio.Nursery, port: int) -> None:
        """After the listener is open: register this broker (at its advertised host and
        ``port``, the advertised port once the listener is bound) and join the election."""
        self._nursery = nursery
        self.me = BrokerInfo(
            self.broker_id,
            self.config.advertised_host,
            port,
            self.config.broker_rack,
            listeners=tuple(
                Endpoint(li.name, li.protocol, li.advertised_host, li.advertised_port)
                for li in self.ctx.config.listeners  # bound by now: their ports are known
            ),
        )
        self.addresses[self.broker_id] = (self.me.host, self.me.port)
        await workers.run_sync(self.replicas.load_checkpoints)
        self.fetchers.start(nursery)
        self.replicas.start(nursery)
        self.groups.start(nursery)
        await self.txns.start(nursery)
        self.config_changes.start(nursery)
        self.features.start(nursery)
        self.acls.start(nursery)
        await self._register()
        nursery.start_soon(self._elect)

    async def _register(self) -> None:
        """Create ``/brokers/ids/<id>`` (ephemeral). A node left by this id's previous
        process (killed: its session has not expired yet) is waited out."""
        path = f"{BROKER_IDS}/{self.broker_id}"
        deadline = trio.current_time() + 3 * self.config.zookeeper_session_timeout_ms / 1000
        while True:
            try:
                created = await self.zk.call(
                    self.zk.client.create,
                    self.zk.path(path),
                    self.me.to_json(),
                    ephemeral=True,
                    include_data=True,
                )
                break
            except NodeExistsError:
                if trio.current_time() > deadline:
                    raise StartupError(
                        f"broker.id {self.broker_id} is registered in ZooKeeper by another "
                        "broker; give each broker its own broker.id"
                    ) from None
                logger.info(
                    "waiting for this broker id's old ZooKeeper registration to expire",
                    broker_id=self.broker_id,
                )
                await trio.sleep(0.5)
        self.broker_epoch = created[1].czxid
        logger.info(
            "registered in ZooKeeper",
            broker_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            endpoint=f"{self.me.host}:{self.me.port}",
            rack=self.me.rack,
        )

    # -- ZooKeeper session -------------------------------------------------------------------
    def _on_zk_state(self, state: str) -> None:
        if state == "connected":
            self._connected.set()
            if self._session_lost and self._nursery is not None:
                self._session_lost = False
                self._nursery.start_soon(self._new_session)
            return
        if self.ctx is not None and self.ctx.stopping:
            return  # our own close at shutdown
        logger.warning(
            "ZooKeeper connection lost" if state == "suspended" else "ZooKeeper session expired",
            broker_id=self.broker_id,
            action="none if it comes back within zookeeper.session.timeout.ms; else this "
            "broker's partitions move to other brokers until it reconnects",
        )
        if self._connected.is_set():  # (one unset event: the election loop may wait on it)
            self._connected = trio.Event()
        if state == "lost":
            self._session_lost = True
            # The ephemeral /controller went with the session: another broker takes over.
            if self._controller_scope is not None:
                self._controller_scope.cancel()
        self._controller_changed.set()

    async def _new_session(self) -> None:
        """After an expired session: register again (the election loop retries by itself)."""
        try:
            await self._register()
        except (KazooException, StartupError) as exc:
            logger.error("cannot register again after the session expired", error=repr(exc))
        self._controller_changed.set()
        self.config_changes.wake()  # its watch went with the old session
        self.features.wake()  # so did this one
        self.acls.wake()  # and the ACL changes' ones
        self.tokens.wake()  # and the delegation token changes' one

    # -- controller election -----------------------------------------------------------------
    async def _elect(self) -> None:
        """Kafka's ZookeeperLeaderElector: whoever creates ``/controller`` first is the
        controller until its session ends; the others watch the node."""
        while not self.ctx.stopping:
            await self._connected.wait()
            self._controller_changed = trio.Event()
            try:
                if await self._try_create_controller():
                    await self._control()
                    continue
                stat = await self.zk.exists(CONTROLLER, watch=self._controller_changed.set)
                if stat is None:
                    continue
            except KazooException as exc:
                logger.warning("controller election interrupted", error=repr(exc))
                await trio.sleep(0.5)
                continue
            await self._controller_changed.wait()

    async def _control(self) -> None:
        """Be the controller until deposed, the session ends or it fails; then resign (delete
        ``/controller`` if it is still this broker's), so another broker takes over."""
        try:
            epoch, version = await self._bump_controller_epoch()
            self.controller = Controller(self, epoch, version)
            with trio.CancelScope() as scope:
                self._controller_scope = scope
                await self.controller.run()
        except KazooException as exc:
            logger.warning("controller stopped: ZooKeeper failed", error=repr(exc))
        except Exception:  # a bug must not leave the cluster with a controller that does nothing
            logger.exception(
                "controller failed; resigning so another broker takes over",
                action="this is a broker bug; report it with this log line",
            )
        finally:
            self._controller_scope = None
            self.controller = None
        if self._session_lost:
            return
        with trio.move_on_after(10):
            try:
                if await self.controller_id() == self.broker_id:
                    await self.zk.delete(CONTROLLER)
            except KazooException as exc:
                logger.warning("could not resign as controller", error=repr(exc))
        await trio.sleep(0.2)  # let another broker win the next election if it can

    async def _try_create_controller(self) -> bool:
        try:
            await self.zk.create(CONTROLLER, controller_json(self.broker_id), ephemeral=True)
            return True
        except NodeExistsError:
            return False

    async def controller_id(self) -> int:
        """The controller's broker id as ZooKeeper says now (-1: none)."""
        found = await self.zk.get_or_none(CONTROLLER)
        try:
            return parse_controller(found[0]) if found is not None else -1
        except ZkDataError:
            return -1

    async def _bump_controller_epoch(self) -> tuple[int, int]:
        while True:
            found = await self.zk.get_or_none(CONTROLLER_EPOCH)
            if found is None:
                try:
                    await self.zk.create(CONTROLLER_EPOCH, b"1")
                    return 1, 0
                except NodeExistsError:
                    continue
            epoch = int(found[0] or b"0") + 1
            try:
                stat = await self.zk.set(CONTROLLER_EPOCH, str(epoch).encode(), found[1].version)
            except KazooException:
                continue
            return epoch, stat.version

    # -- helpers for handlers ----------------------------------------------------------------
    def address_of(self, broker_id: int) -> tuple[str, int] | None:
        info = self.metadata.brokers.get(broker_id)
        if info is not None:
            return info.host, info.port
        return self.addresses.get(broker_id)

    def metadata_changed(self) -> None:
        """Wake what waits for the metadata cache (CreateTopics, DeleteTopics)."""
        self._metadata_event.set()
        self._metadata_event = trio.Event()

    async def wait_for_metadata(
        self, predicate: Callable[[MetadataCache], bool], timeout_ms: int
    ) -> bool:
        """Until ``predicate(self.metadata)`` holds (True) or ``timeout_ms`` passes (False)."""
        with trio.move_on_after(max(timeout_ms, 0) / 1000):
            while not predicate(self.metadata):
                await self._metadata_event.wait()
            return True
        return bool(predicate(self.metadata))

    async def auto_create(self, name: str) -> ErrorCode:
        """Create a topic a Metadata request named (num.partitions,
        default.replication.factor over the live brokers); LEADER_NOT_AVAILABLE until its
        leaders are elected, as Kafka answers."""
        brokers = {b: info.rack for b, info in self.metadata.brokers.items()}
        try:
            assignment = assign_replicas(
                brokers, self.config.num_partitions, self.config.default_replication_factor
            )
        except AssignmentError as exc:
            logger.warning("auto-creating topic failed", topic=name, error=str(exc))
            return ErrorCode.INVALID_REPLICATION_FACTOR
        try:
            await self.write_topic(name, assignment, {})
            logger.info("auto-created topic", topic=name, partitions=len(assignment))
        except NodeExistsError:
            pass
        except KazooException as exc:
            logger.error("auto-creating topic failed", topic=name, error=repr(exc))
        return ErrorCode.LEADER_NOT_AVAILABLE

    async def create_topic(self, name: str, partitions: int, overrides: Mapping[str, str]) -> Topic:
        """BrokerContext.create_topic in a cluster: assigned over the live brokers with
        default.replication.factor and written to ZooKeeper (the controller does the rest).
        Raises TopicExistsError, ConfigError, AssignmentError."""
        from broker.context import TopicExistsError

        normalised = parse_topic_configs(overrides)
        topic = self.ctx.topics.make_topic(name, partitions, normalised)
        brokers = {b: info.rack for b, info in self.metadata.brokers.items()}
        assignment = assign_replicas(brokers, partitions, self.config.default_replication_factor)
        try:
            await self.write_topic(name, assignment, normalised)
        except NodeExistsError:
            raise TopicExistsError(f"topic {name!r} already exists") from None
        return topic

    async def delete_topic(self, name: str) -> bool:
        """BrokerContext.delete_topic in a cluster: marked for the controller to delete."""
        if name not in self.metadata.topics:
            return False
        try:
            await self.zk.create(f"/admin/delete_topics/{name}", b"")
        except NodeExistsError:
            pass
        return True

    async def write_topic(
        self,
        name: str,
        assignment: dict[int, tuple[int, ...]],
        overrides: dict[str, str],
        topic_id: uuid.UUID | None = None,
    ) -> uuid.UUID:
        """Create a topic in ZooKeeper (configs first, as Kafka's AdminUtils does); the
        controller sees it and elects its leaders. Returns its topic id (a new one unless
        given). Raises NodeExistsError."""
        from broker.topics import new_topic_id, topic_id_string

        if await self.zk.exists(topic_path(name)) is not None:
            raise NodeExistsError()
        await self.zk.create_or_set(f"{CONFIG_TOPICS}/{name}", topic_config_json(overrides))
        topic_id = topic_id or new_topic_id()
        topic = TopicAssignment(name, topic_id_string(topic_id), dict(assignment))
        await self.zk.create(topic_path(name), topic.to_json())
        return topic_id

    async def controlled_shutdown(self) -> None:
        """Kafka's KafkaServer.controlledShutdown, before anything stops: ask the controller
        to move this broker's leaderships away (ControlledShutdown), retried up to
        controlled.shutdown.max.retries while some remain. The listener keeps serving
        meanwhile (the controller's LeaderAndIsr and StopReplica must reach this broker)."""
        config = self.config
        if not config.controlled_shutdown_enable or self.broker_epoch < 0:
            return
        for attempt in range(1, config.controlled_shutdown_max_retries + 1):
            error, remaining = await self._ask_controlled_shutdown()
            if error == ErrorCode.NONE and not remaining:
                logger.info("controlled shutdown complete: no partition left to lead")
                return
            logger.warning(
                "controlled shutdown incomplete",
                attempt=attempt,
                error=error.name,
                still_leading=[f"{t}-{p}" for t, p in remaining][:20],
            )
            await trio.sleep(config.controlled_shutdown_retry_backoff_ms / 1000)
        logger.warning(
            "controlled shutdown gave up; the rest moves when this broker's session ends",
            action="none; check the other brokers are alive and in sync if it keeps happening",
        )

    async def _ask_controlled_shutdown(self) -> tuple[ErrorCode, list[tuple[str, int]]]:
        body = {"broker_id": self.broker_id, "broker_epoch": self.broker_epoch}
        if self.controller is not None:  # this broker is the controller: ask it directly
            answer: tuple[ErrorCode, list[tuple[str, int]]] | None = await self.controller.call(
                ControlledShutdown(self.broker_id, self.broker_epoch)
            )
            return answer if answer is not None else (ErrorCode.UNKNOWN_SERVER_ERROR, [])
        address = self.address_of(self.metadata.controller_id)
        if address is None:
            return ErrorCode.NOT_CONTROLLER, []
        channel = BrokerChannel(
            *address,
            client_id=f"chronolog-shutdown-{self.broker_id}",
            timeout_s=self.config.controller_socket_timeout_ms / 1000,
        )
        try:
            response = await channel.call(ApiKey.CONTROLLED_SHUTDOWN, 3, body)
        except ChannelError as exc:
            logger.warning("controlled shutdown request failed", error=str(exc))
            return ErrorCode.NETWORK_EXCEPTION, []
        finally:
            await channel.close()
        remaining = [(r.topic_name, r.partition_index) for r in response.remaining_partitions]
        return ErrorCode(response.error_code), remaining

    async def stop(self) -> None:
        await self.zk.stop()
