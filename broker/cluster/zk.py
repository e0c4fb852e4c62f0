"""ZooKeeper: Kafka's ZooKeeper layout (ZkUtils.scala in 0.10.1, KafkaZkClient in 3.9) and the kazoo client bridged to trio.

Layout (paths under the chroot of zookeeper.connect; JSON as Kafka writes it):

- ``/brokers/ids/<id>`` (ephemeral): ``{"version":4,"host":..,"port":..,"endpoints":
  ["PLAINTEXT://host:port","SASL_SSL://host:port2"],"listener_security_protocol_map":
  {"PLAINTEXT":"PLAINTEXT","SASL_SSL":"SASL_SSL"},"rack":..,"jmx_port":-1,"timestamp":".."}``
  (every listener, the first, which host and port name, first); its czxid is the broker epoch
  (KIP-380).
- ``/controller`` (ephemeral): ``{"version":1,"brokerid":N,"timestamp":".."}``;
  ``/controller_epoch``: the epoch as a decimal string, incremented by each new controller.
- ``/brokers/topics/<topic>``: ``{"version":3,"topic_id":..,"partitions":{"0":[1,2]},
  "adding_replicas":{},"removing_replicas":{}}`` (KIP-455's reassignment state, KIP-516's id).
- ``/brokers/topics/<topic>/partitions/<p>/state``: ``{"controller_epoch":..,"leader":..,
  "version":1,"leader_epoch":..,"isr":[..]}``; its znode version is the partition epoch.
- ``/config/topics/<topic>``: ``{"version":1,"config":{..}}``, the topic's overrides;
  ``/config/brokers/<default>`` and ``/config/brokers/<id>``: the dynamic broker configs,
  cluster-wide and per broker, in the same format.
- ``/config/changes/config_change_<seq>`` (persistent sequential): ``{"version":2,
  "entity_path":"topics/<topic>"}`` (or ``brokers/<default>``, ``brokers/<id>``), written after
  a config above changed; every broker follows them (Kafka's ZkConfigManager) and deletes those
  older than 15 minutes.
- ``/admin/delete_topics/<topic>``: a topic to delete.
- ``/isr_change_notification/isr_change_<seq>``: ``{"version":1,"partitions":[{"topic":..,
  "partition":..}]}``, written by leaders after they change an ISR.
- ``/cluster/id``: ``{"version":"1","id":".."}``.

Concurrency rule (also in broker/cluster/__init__.py): kazoo runs its own threads. Blocking
client calls are made from trio in worker threads (:meth:`ZooKeeper.call`, abandoned on
cancellation so a broker cut off from ZooKeeper can still stop); kazoo's watch and connection
callbacks never touch broker state: they only hand an event to the trio thread with
``TrioToken.run_sync_soon`` (non-blocking, thread-safe), where the function named at
registration runs.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any, Awaitable, Callable, NamedTuple, TypeVar

import structlog
import trio
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoNodeError, NodeExistsError
from kazoo.protocol.states import WatchedEvent

logger = structlog.get_logger(__name__)

NOTIFICATION_EXPIRATION_MS = 15 * 60 * 1000

T = TypeVar("T")

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
DEFAULT_BROKER_ENTITY = "<default>"  # the cluster-wide default of the dynamic broker configs
DELETE_TOPICS = "/admin/delete_topics"
ISR_CHANGES = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
CLUSTER_ID = "/cluster/id"
PERSISTENT_PATHS = (
    BROKER_IDS,
    BROKER_TOPICS,
    CONFIG_TOPICS,
    CONFIG_BROKERS,
    DELETE_TOPICS,
    ISR_CHANGES,
    CONFIG_CHANGES,
    "/cluster",
)


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


class ZkDataError(Exception):
    """Raised when a znode's contents are not what Kafka writes there (the message names the
    path); the caller logs it and treats the node as absent."""


def _load(path: str, data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError as exc:
        raise ZkDataError(f"{path} holds {data[:80]!r}, not JSON: {exc}") from None


def _dump(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _now() -> str:
    return str(int(time.time() * 1000))


SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
"""Kafka's SecurityProtocol ids, as UpdateMetadata carries a listener's protocol."""


class Endpoint(NamedTuple):
    """One listener of a broker, where clients of that listener reach it."""

    name: str
    protocol: str
    host: str
    port: int


@dataclass(frozen=True)
class BrokerInfo:
    """A registered broker: where clients and other brokers reach it (``host``/``port``, its
    first listener), its rack and epoch, and every listener's address (``listeners``, the
    first one first; empty when only the first is known)."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    epoch: int = -1  # the czxid of its registration (KIP-380's broker epoch)
    listeners: tuple[Endpoint, ...] = ()

    def address(self, listener: str) -> tuple[str, int] | None:
        """Where clients of the listener named ``listener`` reach this broker (None: it has no
        such listener, or did not say)."""
        for endpoint in self.listeners:
            if endpoint.name == listener:
                return endpoint.host, endpoint.port
        return None

    def endpoints(self) -> tuple[Endpoint, ...]:
        return self.listeners or (Endpoint("PLAINTEXT", "PLAINTEXT", self.host, self.port),)

    def to_json(self) -> bytes:
        endpoints = self.endpoints()
        doc: dict[str, Any] = {
            "version": 4,
            "host": self.host,
            "port": self.port,
            "endpoints": [f"{e.name}://{_host_text(e.host)}:{e.port}" for e in endpoints],
            "listener_security_protocol_map": {e.name: e.protocol for e in endpoints},
            "jmx_port": -1,
            "timestamp": _now(),
        }
        if self.rack is not None:
            doc["rack"] = self.rack
        return _dump(doc)

    @classmethod
    def from_json(cls, broker_id: int, data: bytes, epoch: int) -> BrokerInfo:
        path = f"{BROKER_IDS}/{broker_id}"
        doc = _load(path, data)
        try:
            protocols = doc.get("listener_security_protocol_map") or {}
            listeners = []
            for text in doc.get("endpoints") or ():
                name, _, hostport = text.partition("://")
                host, _, port_text = hostport.rpartition(":")
                name = name.upper()
                listeners.append(
                    Endpoint(name, protocols.get(name, name), host.strip("[]"), int(port_text))
                )
            host, port = doc.get("host"), doc.get("port")
            if not host or port in (None, -1):  # Kafka 0.10+ may give only endpoints
                host, port = listeners[0].host, listeners[0].port
            return cls(
                broker_id, str(host).strip("[]"), int(port), doc.get("rack"), epoch,
                tuple(listeners),
            )  # fmt: skip
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise ZkDataError(f"{path} is not a broker registration: {exc!r}") from None


def _host_text(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@dataclass(frozen=True)
class LeaderIsr:
    """A partition's state: leader (-1: none), leader epoch, in-sync replicas, the epoch of
    the controller that wrote it, and the znode version (the partition epoch)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = -1

    def to_json(self) -> bytes:
        return _dump(
            {
                "controller_epoch": self.controller_epoch,
                "leader": self.leader,
                "version": 1,
                "leader_epoch": self.leader_epoch,
                "isr": list(self.isr),
            }
        )

    @classmethod
    def from_json(cls, path: str, data: bytes, zk_version: int) -> LeaderIsr:
        doc = _load(path, data)
        try:
            return cls(
                int(doc["leader"]),
                int(doc["leader_epoch"]),
                tuple(int(b) for b in doc["isr"]),
                int(doc["controller_epoch"]),
                zk_version,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ZkDataError(f"{path} is not a partition state: {exc!r}") from None


@dataclass(frozen=True)
class TopicAssignment:
    """A topic's replica assignment (partition -> replicas, preferred leader first), its
    KIP-516 id (base64 text) and an ongoing KIP-455 reassignment's adding/removing replicas."""

    name: str
    topic_id: str | None
    partitions: dict[int, tuple[int, ...]]
    adding: dict[int, tuple[int, ...]] = field(default_factory=dict)
    removing: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def to_json(self) -> bytes:
        def ints(m: dict[int, tuple[int, ...]]) -> dict[str, list[int]]:
            return {str(p): list(r) for p, r in sorted(m.items())}

        doc: dict[str, Any] = {
            "version": 3,
            "partitions": ints(self.partitions),
            "adding_replicas": ints(self.adding),
            "removing_replicas": ints(self.removing),
        }
        if self.topic_id is not None:
            doc["topic_id"] = self.topic_id
        return _dump(doc)

    @classmethod
    def from_json(cls, name: str, data: bytes) -> TopicAssignment:
        path = topic_path(name)
        doc = _load(path, data)
        try:

            def ints(m: dict[str, list[int]] | None) -> dict[int, tuple[int, ...]]:
                return {int(p): tuple(int(b) for b in r) for p, r in (m or {}).items()}

            return cls(
                name,
                doc.get("topic_id"),
                ints(doc["partitions"]),
                ints(doc.get("adding_replicas")),
                ints(doc.get("removing_replicas")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ZkDataError(f"{path} is not a topic assignment: {exc!r}") from None


def topic_config_json(overrides: Mapping[str, str]) -> bytes:
    """A topic's overrides or a dynamic broker config layer, as /config/<type>/<name> holds."""
    return _dump({"version": 1, "config": dict(overrides)})


def parse_topic_config(name: str, data: bytes) -> dict[str, str]:
    return parse_entity_config(f"{CONFIG_TOPICS}/{name}", data)


def parse_entity_config(path: str, data: bytes) -> dict[str, str]:
    """The ``config`` map of /config/topics/<t> or /config/brokers/<b>."""
    doc = _load(path, data)
    config = doc.get("config") if isinstance(doc, dict) else None
    if not isinstance(config, dict):
        raise ZkDataError(f"{path} is not an entity config: {doc!r}")
    return {str(k): str(v) for k, v in config.items()}


def config_change_json(entity_path: str) -> bytes:
    """A config change notification (Kafka's version 2) for ``topics/<t>`` or
    ``brokers/<b>``."""
    return _dump({"version": 2, "entity_path": entity_path})


def parse_config_change(path: str, data: bytes) -> tuple[str, str]:
    """(entity type, entity name) of a config change notification: version 2's entity_path,
    or version 1's entity_type and entity_name (Kafka reads both)."""
    doc = _load(path, data)
    try:
        if doc["version"] == 1:
            return str(doc["entity_type"]), str(doc["entity_name"])
        kind, slash, name = str(doc["entity_path"]).partition("/")
        if not slash or not name:
            raise ValueError(f"entity_path {doc['entity_path']!r} is not <type>/<name>")
        return kind, name
    except (KeyError, TypeError, ValueError) as exc:
        raise ZkDataError(f"{path} is not a config change notification: {exc!r}") from None


def controller_json(broker_id: int) -> bytes:
    return _dump({"version": 1, "brokerid": broker_id, "timestamp": _now()})


def parse_controller(data: bytes) -> int:
    doc = _load(CONTROLLER, data)
    try:
        return int(doc["brokerid"] if isinstance(doc, dict) else doc)
    except (KeyError, TypeError, ValueError) as exc:
        raise ZkDataError(f"{CONTROLLER} does not name a broker: {exc!r}") from None


def isr_change_json(partitions: list[tuple[str, int]]) -> bytes:
    return _dump(
        {"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]}
    )


def parse_isr_change(path: str, data: bytes) -> list[tuple[str, int]]:
    doc = _load(path, data)
    try:
        return [(str(e["topic"]), int(e["partition"])) for e in doc["partitions"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ZkDataError(f"{path} is not an ISR change notification: {exc!r}") from None


def notification_sequence(node: str, prefix: str) -> int | None:
    """The number ZooKeeper appended to a sequential notification node named ``prefix`` +
    digits (config, ACL and token changes); None for any other child."""
    if not node.startswith(prefix):
        return None
    try:
        return int(node[len(prefix) :])
    except ValueError:
        return None


def cluster_id_json(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def split_connect(connect: str) -> tuple[str, str]:
    """``host:port,...[/chroot]`` -> (hosts, chroot or "")."""
    hosts, slash, chroot = connect.partition("/")
    return hosts, ("/" + chroot) if slash else ""


class WatchFollower:
    """Runs ``handle()`` once started and again after every :meth:`wake` (a watch ``handle`` set
    fired, a change written by this broker, a new session), so what it reads is always the
    latest. A KazooException is logged, naming ``what`` is followed, and ``handle()`` runs again
    after ``backoff_s``. Trio thread only; the task lives in the nursery given to :meth:`start`."""

    def __init__(
        self, handle: Callable[[], Awaitable[None]], what: str, backoff_s: float = 0.5
    ) -> None:
        self._handle = handle
        self._what = what
        self._backoff_s = backoff_s
        self._changed = trio.Event()

    def start(self, nursery: trio.Nursery) -> None:
        nursery.start_soon(self._run)

    def wake(self) -> None:
        self._changed.set()

    async def _run(self) -> None:
        while True:
            self._changed = trio.Event()
            try:
                await self._handle()
            except KazooException as exc:
                logger.warning(f"reading {self._what} failed; retrying", error=repr(exc))
                await trio.sleep(self._backoff_s)
                continue
            await self._changed.wait()


class ZooKeeper:
    """One kazoo session used from trio; see the module docstring for the thread rules.

    Paths given to the methods are Kafka's (``/brokers/ids``); the chroot is prepended here.
    ``on_state`` (trio thread) hears "connected", "suspended" and "lost" (session expired)."""

    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: int,
        connection_timeout_ms: int,
        on_state: Callable[[str], None],
    ) -> None:
        hosts, self.chroot = split_connect(connect)
        self._connection_timeout_s = connection_timeout_ms / 1000
        self.client = KazooClient(
            hosts=hosts,
            timeout=session_timeout_ms / 1000,
            connection_retry={"max_tries": -1, "delay": 0.2, "max_delay": 1.0},
        )
        self._token: trio.lowlevel.TrioToken | None = None
        self._on_state = on_state

    def path(self, path: str) -> str:
        return self.chroot + path

    async def start(self) -> None:
        """Connect (raises kazoo's timeout error after zookeeper.connection.timeout.ms) and
        create the chroot and Kafka's persistent paths."""
        self._token = trio.lowlevel.current_trio_token()
        self.client.add_listener(self._listener)
        await trio.to_thread.run_sync(
            lambda: self.client.start(timeout=self._connection_timeout_s), abandon_on_cancel=True
        )
        for path in PERSISTENT_PATHS:
            await self.call(self.client.ensure_path, self.path(path))

    async def stop(self) -> None:
        """Close the session (its ephemeral nodes go at once)."""
        await trio.to_thread.run_sync(self._stop, abandon_on_cancel=True)

    def _stop(self) -> None:
        try:
            self.client.stop()
            self.client.close()
        except Exception as exc:  # a dead server: the session expires on its own
            logger.warning("closing the zookeeper session failed", error=repr(exc))

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` (a blocking kazoo call) in a worker thread."""
        return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs), abandon_on_cancel=True)

    def to_trio(self, fn: Callable[..., None], *args: Any) -> None:
        """From any kazoo thread: run ``fn(*args)`` on the trio thread soon (dropped when the
        broker has stopped)."""
        token = self._token
        if token is None:
            return
        try:
            token.run_sync_soon(fn, *args)
        except trio.RunFinishedError:
            pass

    def _listener(self, state: str) -> None:
        name = {
            KazooState.CONNECTED: "connected",
            KazooState.SUSPENDED: "suspended",
            KazooState.LOST: "lost",
        }.get(state, str(state))
        self.to_trio(self._on_state, name)

    def watcher(self, fn: Callable[[], None]) -> Callable[[WatchedEvent], None]:
        """A kazoo watch callback that runs ``fn()`` on the trio thread."""

        def watch(event: WatchedEvent) -> None:
            self.to_trio(fn)

        return watch

    # -- reads and writes (trio side) --------------------------------------------------------
    async def get(self, path: str, watch: Callable[[], None] | None = None) -> tuple[bytes, Any]:
        """(data, ZnodeStat); raises NoNodeError."""
        w = self.watcher(watch) if watch else None
        return await self.call(self.client.get, self.path(path), watch=w)

    async def get_or_none(
        self, path: str, watch: Callable[[], None] | None = None
    ) -> tuple[bytes, Any] | None:
        try:
            return await self.get(path, watch)
        except NoNodeError:
            return None

    async def children(self, path: str, watch: Callable[[], None] | None = None) -> list[str]:
        w = self.watcher(watch) if watch else None
        try:
            return sorted(await self.call(self.client.get_children, self.path(path), watch=w))
        except NoNodeError:
            return []

    async def exists(self, path: str, watch: Callable[[], None] | None = None) -> Any:
        w = self.watcher(watch) if watch else None
        return await self.call(self.client.exists, self.path(path), watch=w)

    async def create(
        self,
        path: str,
        data: bytes,
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = True,
    ) -> str:
        """Create a node; raises NodeExistsError. Returns its path (without the chroot)."""
        created: str = await self.call(
            self.client.create,
            self.path(path),
            data,
            ephemeral=ephemeral,
            sequence=sequence,
            makepath=makepath,
        )
        return created[len(self.chroot) :]

    async def set(self, path: str, data: bytes, version: int = -1) -> Any:
        """Set a node's data, conditional on ``version`` (-1: any); raises BadVersionError."""
        return await self.call(self.client.set, self.path(path), data, version=version)

    async def delete(self, path: str, *, recursive: bool = False, version: int = -1) -> None:
        """Delete a node (gone already: done), conditional on ``version`` (-1: any); raises
        BadVersionError."""
        try:
            await self.call(
                self.client.delete, self.path(path), version=version, recursive=recursive
            )
        except NoNodeError:
            pass

    async def purge_notifications(self, parent: str, nodes: list[str]) -> None:
        """Delete ``parent``'s sequential notification ``nodes`` older than
        NOTIFICATION_EXPIRATION_MS (Kafka's changeExpirationMs), oldest first: sequence order is
        creation order, so the first young one ends the pass."""
        now_ms = time.time() * 1000
        for node in nodes:
            path = f"{parent}/{node}"
            stat = await self.exists(path)
            if stat is None:
                continue
            if now_ms - stat.ctime <= NOTIFICATION_EXPIRATION_MS:
                break
            await self.delete(path)

    async def create_or_set(self, path: str, data: bytes) -> None:
        try:
            await self.create(path, data)
        except NodeExistsError:
            await self.set(path, data)

    async def transaction(self, ops: list[tuple[Any, ...]]) -> list[Any]:
        """Commit ``[("check", path, version) | ("set", path, data, version) | ("create", path,
        data) | ("delete", path)]`` atomically; returns kazoo's results (an exception instance
        per failed op: the whole transaction failed)."""

        def run() -> list[Any]:
            t = self.client.transaction()
            for op in ops:
                kind, rest = op[0], op[1:]
                if kind == "check":
                    t.check(self.path(rest[0]), rest[1])
                elif kind == "set":
                    t.set_data(self.path(rest[0]), rest[1], version=rest[2])
                elif kind == "create":
                    t.create(self.path(rest[0]), rest[1])
                elif kind == "delete":
                    t.delete(self.path(rest[0]))
                else:
                    raise ValueError(f"unknown transaction op {kind!r}")
            return list(t.commit())

        return await trio.to_thread.run_sync(run, abandon_on_cancel=True)


__all__ = [
    "ZooKeeper",
    "WatchFollower",
    "BrokerInfo",
    "Endpoint",
    "SECURITY_PROTOCOL_IDS",
    "LeaderIsr",
    "TopicAssignment",
    "ZkDataError",
    "NoNodeError",
    "NodeExistsError",
]
