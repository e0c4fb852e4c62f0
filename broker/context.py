"""BrokerContext: what every request handler reaches the broker's state through.

Concurrency rules (all state lives on the trio thread):
- Every access to a partition's ``Log`` (append, read, search, flush, retention) happens while
  holding that partition's ``PartitionState.lock``, so storage never sees two threads in one
  Log. Calls that may wait on the disk (fsync, reads) run inside ``workers.run_sync``, so
  a slow disk stalls only that partition; only page-cache-bound calls that cannot fsync run on
  the trio thread (a small produce appended with ``Log.append(may_sync=False)``, a fetch answered
  by ``Log.read_cached``, attribute reads). One read skips the lock: a fetch at the log end
  answers from the log end offset, high watermark and log start offset, plain attribute reads
  that are each atomic, so the answer (no records) was true at an instant during the call; an
  append in progress wakes the fetch when it is done.
- Topic creation and deletion are serialised by ``admin_lock``.
- Appends wake long-polling fetches through ``PartitionState.notify`` (trio events, no polling).
- What depends on being a single broker or one of a cluster is asked of ``replication``
  (broker/replication.py), chosen when the context is built.
- In a cluster (``cluster``, broker/cluster/): kazoo's threads never touch this state; they hand
  ZooKeeper events to the trio thread (``TrioToken.run_sync_soon``), and ZooKeeper calls run in
  worker threads. A follower's appends and truncations take the partition lock like a produce;
  the high watermark is set on the trio thread. broker/cluster/__init__.py has the details.
"""

from __future__ import annotations

import ipaddress
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping

import structlog
import trio

from broker import workers
from broker.admin.dynamic import DynamicConfigs
from broker.config import BrokerConfig, ConfigError, topic_name_error
from broker.fetch_sessions import FetchSessionCache
from broker.features import FeatureLevels
from broker.producer_ids import ProducerIdManager
from broker.quotas import ClientQuotas
from broker.replica_moves import ReplicaMoves
from broker.security.acls import AclFile, AclStore
from broker.security.tokens import TokenFile, TokenStore
from broker.topics import Topic, TopicRegistry
from storage import Log, LogManager
from storage.errors import is_disk_failure

if TYPE_CHECKING:
    from broker.cluster import Cluster
    from broker.groups.coordinator import GroupCoordinator
    from broker.metrics import BrokerMetrics
    from broker.replication import Replication
    from broker.txn.coordinator import TransactionCoordinator

logger = structlog.get_logger(__name__)


INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
"""Topics only the broker writes (Kafka's Topic.InternalTopics): clients may not produce to
them, Metadata does not auto-create them and reports them with is_internal=true."""

client_host: ContextVar[str] = ContextVar("client_host", default="")
"""The peer address of the connection whose request is being handled, as Kafka prints it
(``InetAddress.toString()`` of an unresolved address: "/127.0.0.1"); "" outside a connection.
The server sets it once per connection task, so every handler awaited there sees it."""


def kafka_host_string(ip: str) -> str:
    """Kafka's rendering of a peer address: "/" + the address, IPv4-mapped IPv6 as IPv4 and
    IPv6 uncompressed without leading zeros (Java's Inet6Address.getHostAddress)."""
    address, sep, scope = ip.partition("%")
    try:
        addr = ipaddress.ip_address(address)
    except ValueError:
        return "/" + ip
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return f"/{addr.ipv4_mapped}"
        return "/" + ":".join(f"{int(g, 16):x}" for g in addr.exploded.split(":")) + sep + scope
    return f"/{addr}"


def wall_clock_ms() -> int:
    """Milliseconds since the epoch from the wall clock."""
    return time.time_ns() // 1_000_000


class TopicExistsError(Exception):
    """Raised by :meth:`BrokerContext.create_topic` when the topic already exists."""


class InvalidTopicNameError(Exception):
    """Raised by :meth:`BrokerContext.create_topic` for a name Kafka does not allow."""


@dataclass(eq=False)
class PartitionState:
    """Per-partition coordination: the lock around Log access, waiting fetches, and the last
    LogAppendTime handed out (so broker time never goes backwards within the partition)."""

    lock: trio.Lock = field(default_factory=trio.Lock)
    waiters: set[trio.Event] = field(default_factory=set)
    last_append_time: int = -1
    # Why appends to this partition fail (a full or failing disk), None while they succeed.
    append_failure: str | None = None

    def appends_failing(self, exc: OSError, topic: str, partition: int) -> None:
        """Record an append refused by a full disk or exhausted descriptors; logged once when
        the partition starts failing, not once per request (a full disk under load would flood
        the log)."""
        if self.append_failure is None:
            logger.error(
                "appends to the partition are failing; producers get KAFKA_STORAGE_ERROR",
                topic=topic,
                partition=partition,
                error=repr(exc),
                action="free space on the log dir's disk (or raise ulimit -n if out of file "
                "descriptors); writes resume by themselves",
            )
        self.append_failure = repr(exc)

    def appends_succeed(self, topic: str, partition: int) -> None:
        """Record a successful append; logs the recovery of a failing partition once."""
        if self.append_failure is not None:
            logger.info(
                "appends to the partition succeed again",
                topic=topic,
                partition=partition,
                after=self.append_failure,
            )
            self.append_failure = None

    def notify(self) -> None:
        """Wake every fetch waiting for data on this partition."""
        for event in self.waiters:
            event.set()
        self.waiters.clear()

    def next_append_time(self, now_ms: int) -> int:
        """LogAppendTime for the next append: max(last handed out, now)."""
        self.last_append_time = max(self.last_append_time, now_ms)
        return self.last_append_time


class BrokerContext:
    """The broker's shared state: config, storage, topics, partition coordination, coordinator."""

    def __init__(
        self,
        config: BrokerConfig,
        cluster_id: str,
        log_manager: LogManager,
        topics: TopicRegistry,
        replication: Callable[[BrokerContext], Replication],
        *,
        dynamic_configs: DynamicConfigs | None = None,
        producer_ids: ProducerIdManager | None = None,
        features: FeatureLevels | None = None,
        acls: AclStore | None = None,
        token_store: TokenStore | None = None,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        """``replication`` builds the context's Replication (broker/replication.py) from the
        context, last, once every other slot is filled: LocalReplication for a single broker,
        ``Cluster.attach`` in a cluster. ``dynamic_configs`` and ``producer_ids``: as loaded
        from their store (default: not loaded, the single broker's files); ``acls``, the ACL
        bindings' store (default: the single broker's ACL file); ``token_store``, the
        delegation tokens' (default: the single broker's token file)."""
        self.config = config
        self.cluster_id = cluster_id
        self.log_manager = log_manager
        self.topics = topics
        self.clock = clock
        self.admin_lock = trio.Lock()
        # Worker threads fetch down-conversion may hold at once (broker/handlers/fetch.py):
        # num.io.threads, at most one per core (workers.conversion_threads).
        self.io_threads = trio.CapacityLimiter(workers.conversion_threads(config.num_io_threads))
        # The dynamic broker configs (broker/admin/dynamic.py); open_context loads them.
        self.dynamic_configs = dynamic_configs or DynamicConfigs(config)
        # The group coordinator (broker.groups), or None when it is not installed.
        self.coordinator: GroupCoordinator | None = None
        # The transaction coordinator (broker/txn/), None in a cluster and until the broker
        # has started it.
        self.txn_coordinator: TransactionCoordinator | None = None
        # InitProducerId's ids (broker/producer_ids.py), loaded by open_context.
        self.producer_ids = producer_ids or ProducerIdManager(config.log_dirs[0])
        # The finalized feature levels (KIP-584, broker/features.py): UpdateFeatures changes them.
        self.features = features or FeatureLevels.unloaded(config.log_dirs[0])
        # The ACL bindings (broker/security/acls.py), the authorizer's and the ACL apis'.
        self.acls = acls or AclFile(config.log_dirs[0])
        # The delegation tokens' store (broker/security/tokens.py), the SecurityGate's.
        self.token_store = token_store or TokenFile(config.log_dirs[0])
        # Client quotas (broker/quotas/): loaded by open_context.
        self.quotas = ClientQuotas(config)
        self.fetch_sessions = FetchSessionCache(
            config.max_incremental_fetch_session_cache_slots, clock
        )
        # Prometheus metrics (broker/metrics.py), None without metrics.listener: the request path
        # then counts nothing.
        self.metrics: BrokerMetrics | None = None
        # The cluster (broker/cluster/) with zookeeper.connect, else None: a single broker.
        # Only broker/cluster/ looks at it; the request paths ask ``replication``.
        self.cluster: Cluster | None = None
        self.stopping = False
        self._partitions: dict[tuple[str, int], PartitionState] = {}
        # Moves of partitions between this broker's log dirs (AlterReplicaLogDirs).
        self.replica_moves = ReplicaMoves(self)
        self.replication: Replication = replication(self)

    def partition(self, topic: str, partition: int) -> PartitionState:
        key = (topic, partition)
        state = self._partitions.get(key)
        if state is None:
            state = self._partitions[key] = PartitionState()
        return state

    def locked_log(self, topic: str, partition: int) -> _LockedLog:
        """``async with ctx.locked_log(topic, partition) as log:`` the partition's Log while
        holding its lock, or None (and no lock held) when the partition does not exist or its
        topic was deleted while this waited for the lock. A log moved to another log dir while
        this waited is the moved one."""
        return _LockedLog(self, topic, partition)

    def partition_states(self) -> list[PartitionState]:
        return list(self._partitions.values())

    def get_log(self, topic: str, partition: int) -> Log | None:
        """The partition's Log, or None when the topic or partition does not exist."""
        return self.log_of(self.topics.get(topic), partition)

    def log_of(self, topic: Topic | None, partition: int) -> Log | None:
        """get_log for a topic already looked up (None when it does not exist)."""
        if topic is None or not 0 <= partition < topic.partitions:
            return None
        return self.log_manager.get_log(topic.name, partition)

    def is_offline(self, topic: str, partition: int) -> bool:
        """Whether an existing partition is unavailable because its log dir is offline."""
        t = self.topics.get(topic)
        return (
            t is not None
            and 0 <= partition < t.partitions
            and self.log_manager.is_offline(topic, partition)
        )

    async def storage_failed(self, topic: str, partition: int, exc: OSError) -> None:
        """After an OSError from (topic, partition)'s log, with no partition lock held: a disk
        that is not merely full (EIO, EROFS, ...) takes that log dir offline (KIP-112). Its
        partitions' locks are taken first (in one order, under the admin lock), so no worker
        thread still uses a log being abandoned; waiting fetches are woken."""
        manager = self.log_manager
        log_dir = manager.log_dir_of(topic, partition)
        if not is_disk_failure(exc) or log_dir is None or log_dir in manager.offline_dirs:
            return
        async with self.admin_lock:
            states = [self.partition(t, p) for t, p in manager.partitions_in(log_dir)]
            async with all_locks(states):
                await workers.run_sync(manager.mark_offline, log_dir, exc)
        for state in states:
            state.notify()

    def wake_all(self) -> None:
        """Wake every waiting fetch (shutdown, topic deletion)."""
        for state in self._partitions.values():
            state.notify()

    async def create_topic(
        self, name: str, partitions: int, overrides: Mapping[str, str] | None = None
    ) -> Topic:
        """Create a topic (``replication.create_topic`` once the name is checked: Metadata lists
        it only once every partition can be produced to and read).

        Raises InvalidTopicNameError, TopicExistsError, or ConfigError (bad override); storage
        errors propagate.
        """
        reason = topic_name_error(name)
        if reason:
            raise InvalidTopicNameError(reason)
        return await self.replication.create_topic(name, partitions, overrides or {})

    async def delete_topic(self, name: str) -> bool:
        """Delete a topic and its logs; False when it does not exist. Appends and reads on its
        partitions are excluded while the logs go away; waiting fetches are woken. In a
        cluster the controller deletes it everywhere, after this returns."""
        return await self.replication.delete_topic(name)

    def forget_partition(self, topic: str, partition: int) -> None:
        """Drop a deleted partition's coordination state (its lock and waiters)."""
        self._partitions.pop((topic, partition), None)


class _LockedLog:
    """:meth:`BrokerContext.locked_log`. An uncontended lock is taken without a trip through
    trio's scheduler (``Lock.acquire`` always yields once, and each yield polls epoll): a Fetch
    naming a thousand partitions paid that a thousand times (bench/NOTES.md, fetch sessions)."""

    __slots__ = ("_ctx", "_topic", "_partition", "_held")

    def __init__(self, ctx: BrokerContext, topic: str, partition: int) -> None:
        self._ctx = ctx
        self._topic = topic
        self._partition = partition
        self._held: trio.Lock | None = None

    async def __aenter__(self) -> Log | None:
        ctx, topic, partition = self._ctx, self._topic, self._partition
        log = ctx.get_log(topic, partition)
        if log is None:
            return None
        state = ctx.partition(topic, partition)
        lock = state.lock
        try:
            lock.acquire_nowait()
        except trio.WouldBlock:
            await lock.acquire()
        current = ctx.get_log(topic, partition)
        # Another log under the same lock: moved between log dirs (not deleted and created
        # again, which gives the partition a new lock).
        if current is None or (current is not log and ctx.partition(topic, partition) is not state):
            lock.release()
            return None
        self._held = lock
        return current

    async def __aexit__(self, *exc: object) -> None:
        if self._held is not None:
            self._held.release()
            self._held = None


class all_locks:
    """Acquire several trio locks in order (always the same order for one topic)."""

    def __init__(self, states: list[PartitionState]) -> None:
        self._states = states
        self._held: list[trio.Lock] = []

    async def __aenter__(self) -> None:
        for state in self._states:
            await state.lock.acquire()
            self._held.append(state.lock)

    async def __aexit__(self, *exc: object) -> None:
        for lock in reversed(self._held):
            lock.release()
        self._held.clear()


__all__ = [
    "BrokerContext",
    "PartitionState",
    "TopicExistsError",
    "InvalidTopicNameError",
    "all_locks",
    "ConfigError",
    "INTERNAL_TOPICS",
    "client_host",
    "kafka_host_string",
    "wall_clock_ms",
]
