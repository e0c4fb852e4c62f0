"""The trio server: start-up, the per-connection request loop, background work, shutdown.

Each connection reads requests and answers them one at a time, in order (as Kafka does by
muting a channel while its request is in flight); pipelined requests wait in the connection's
buffer. Limits: ``max.connections`` (new connections beyond it are closed at once),
``socket.request.max.bytes`` (a larger frame closes the connection), ``connections.max.idle.ms``.

Shutdown (SIGTERM/SIGINT): stop accepting, close idle connections, let in-flight requests finish
(waiting fetches are woken and answer with what they have; the group coordinator is stopped, so
parked JoinGroup/SyncGroup answer NOT_COORDINATOR_FOR_GROUP) for up to ``SHUTDOWN_GRACE_S``, then
flush, checkpoint and write the clean-shutdown marker through ``LogManager.shutdown``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import signal
import socket
from functools import partial
from itertools import count
from time import perf_counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog
import trio

from broker import background, collector, http, workers
from broker.accept import serve_listeners
from broker.admin.dynamic import DynamicConfigs
from broker.cluster import Cluster
from broker.cluster.producer_ids import ZkProducerIdManager
from broker.cluster_meta import load_or_create_meta
from broker.loop_delay import LoopDelay
from broker.config import BrokerConfig
from broker.console import build_app
from broker.context import BrokerContext, client_host, kafka_host_string, wall_clock_ms
from broker.errors import CloseConnectionError
from broker.features import FeatureLevels
from broker.replication import LocalReplication
from broker.handlers import HANDLERS, Handler, release_fetch_body
from broker.handlers.fetch import ConvertingSource
from broker.metrics import BrokerMetrics
from broker.quotas.store import ZkQuotaStore
from broker.quotas.throttle import Throttler
from broker.security.gate import SecurityGate
from broker.security.session import Session, current_session
from broker.security.settings import Listener
from broker.slices import Slices
from broker.streams import PlainSocketStream
from broker.topics import TopicRegistry
from protocol import (
    SUPPORTED_VERSIONS,
    ApiKey,
    FileRegion,
    ProtocolError,
    RawFrame,
    Request,
    ServerConnection,
    UndecodedRequest,
    native,
)
from storage import InconsistentTopicIdError, LogConfig, LogManager

logger = structlog.get_logger(__name__)

RECEIVE_BYTES = 262144  # a 1 MB produce request arrives in a few reads, not sixteen
INLINE_REGION_BYTES = 65536  # see send_response
TLS_REGION_PIECE_BYTES = 1 << 20  # a FileRegion on a TLS stream is read and sent in such pieces
# An answer listing this many partitions or more (Metadata, DescribeLogDirs, Fetch,
# OffsetFetch, OffsetCommit: _TOPIC_LISTS) is encoded in a worker thread: at 10,000 partitions
# encoding took about 10 ms (Metadata), 5 ms (DescribeLogDirs) and 18 ms (Fetch) of the loop's
# thread. Building the answer stays on the loop, in slices: it reads the broker's state. Beside
# the loop the encoding still holds the GIL, but gives it up every switch interval (5 ms) to
# the loop.
ENCODED_BESIDE_PARTITIONS = 1000
# A request frame this large or larger, Produce aside, is decoded in a worker thread: a Fetch
# naming 10,000 partitions (330 KB) took about 12 ms to decode, an OffsetCommit of as many
# (180 KB) about 8 ms.
DECODED_BESIDE_BYTES = 65536
SHUTDOWN_GRACE_S = 10.0
CONTROLLED_SHUTDOWN_LIMIT_S = 60.0  # a cluster's controlled shutdown, at most
_conn_ids = count(1)


class SendfileError(Exception):
    """Raised when a segment file ends before a FileRegion's length was sent (the file shrank
    under us); the response frame is then unfinished and the connection must be closed."""


async def open_context(config: BrokerConfig) -> BrokerContext:
    """Load meta.properties, the topic registry and every log (recovering if needed).

    Raises broker.errors.StartupError or storage errors; nothing is served yet then.
    """
    if config.zookeeper_connect is not None:
        return await open_cluster_context(config)
    cluster_id = await workers.run_sync(load_or_create_meta, config)
    dynamic = DynamicConfigs(config)
    await workers.run_sync(dynamic.load)
    config = dynamic.effective(config)  # the dynamic broker configs set before the restart
    registry = TopicRegistry(config)
    await workers.run_sync(registry.load)

    def config_for_topic(name: str) -> LogConfig:
        topic = registry.get(name)
        return (topic or registry.default_topic(name, 1)).log_config

    manager = LogManager(list(config.log_dirs), config_for_topic, wall_clock_ms)
    await workers.run_sync(manager.startup)
    ctx = BrokerContext(
        config,
        cluster_id,
        manager,
        registry,
        LocalReplication,
        dynamic_configs=dynamic,
        features=await workers.run_sync(FeatureLevels.in_log_dir, config.log_dirs[0]),
    )
    await workers.run_sync(ctx.producer_ids.load)
    await workers.run_sync(ctx.quotas.load_file)

    # Reconcile: logs on disk without a registry entry keep the broker defaults; registry
    # entries whose logs are missing (crash during creation) get them now.
    on_disk = manager.topics()
    changed = registry.ids_assigned
    for name, partitions in on_disk.items():
        topic = registry.get(name)
        if topic is None:
            logger.warning(
                "topic found on disk without registered configs; using broker defaults",
                topic=name,
                partitions=partitions,
            )
            registry.put(registry.default_topic(name, partitions))
            changed = True
        elif partitions > topic.partitions:
            registry.put(
                registry.make_topic(name, partitions, topic.overrides, topic_id=topic.topic_id)
            )
            changed = True
    for topic in registry.all():
        name = topic.name
        for p in range(topic.partitions):
            partition_log = manager.get_log(name, p)
            if partition_log is None and manager.is_offline(name, p):
                continue  # perhaps in the offline log dir: an empty copy elsewhere would fork it
            if partition_log is None:
                logger.warning("creating missing partition log", topic=name, partition=p)
                partition_log = await workers.run_sync(
                    manager.create_log, name, p, topic.log_config
                )
            try:
                await workers.run_sync(partition_log.assign_topic_id, topic.topic_id)
            except InconsistentTopicIdError as exc:
                logger.error(
                    "partition directory belongs to another topic id",
                    topic=name,
                    partition=p,
                    reason=str(exc),
                    action="move the directory away if the topic was deleted and "
                    "created again; chronolog keeps serving it as it is",
                )
    if changed:
        await workers.run_sync(registry.save, registry.snapshot())
    logger.info(
        "logs loaded",
        topics=len(registry.names()),
        partitions=sum(topic.partitions for topic in registry.all()),
    )
    return ctx


async def open_cluster_context(config: BrokerConfig) -> BrokerContext:
    """open_context for a broker in a cluster (zookeeper.connect): the cluster id, the dynamic
    broker configs and the topics come from ZooKeeper (broker/cluster/), before the logs load so
    each gets its topic's configs; logs are not created here (the controller's LeaderAndIsr does that)."""
    cluster = Cluster(config)
    cluster_id = await cluster.connect()
    await workers.run_sync(load_or_create_meta, config, cluster_id)
    dynamic = DynamicConfigs(config)
    cluster_default, own = await cluster.config_changes.read_broker_configs()
    config = dynamic.adopt_stored(cluster_default, own, "ZooKeeper /config/brokers")
    registry = TopicRegistry(config)  # in memory: ZooKeeper holds the topics
    await cluster.load_topics(registry)
    await cluster.features.load()
    await cluster.acls.load()  # every broker enforces the cluster's ACLs from its first request
    if config.delegation_token_secret_key is not None:  # (Kafka: only with tokens enabled)
        await cluster.tokens.load()

    def config_for_topic(name: str) -> LogConfig:
        topic = registry.get(name)
        return (topic or registry.default_topic(name, 1)).log_config

    manager = LogManager(list(config.log_dirs), config_for_topic, wall_clock_ms)
    await workers.run_sync(manager.startup)
    ctx = BrokerContext(
        config,
        cluster_id,
        manager,
        registry,
        cluster.attach,
        dynamic_configs=dynamic,
        producer_ids=ZkProducerIdManager(cluster.zk, config.broker_id),
        features=cluster.features,
        acls=cluster.acls,
        token_store=cluster.tokens,
    )
    await ctx.quotas.use_zookeeper(ZkQuotaStore(cluster.zk))
    for log in manager.all_logs():
        topic = registry.get(log.topic)
        if topic is None:
            logger.warning(
                "log of a topic the cluster does not have; left as it is",
                topic=log.topic,
                partition=log.partition,
                action="remove the directory if the topic was deleted while this broker was down",
            )
    logger.info("logs loaded", topics=len(registry.names()), logs=len(manager.all_logs()))
    return ctx


class Server:
    """Accepts connections and runs each one's request loop; see the module docstring."""

    def __init__(
        self, ctx: BrokerContext, handlers: Mapping[ApiKey, Handler] | None = None
    ) -> None:
        self.ctx = ctx
        if handlers is None:
            handlers = ctx.replication.handlers(HANDLERS)
        self.handlers = handlers
        self.versions = ctx.replication.api_versions(SUPPORTED_VERSIONS)
        # TLS contexts, credentials, ACLs (broker/security); StartupError for unreadable stores
        self.security = SecurityGate(ctx)
        self.active = 0
        self.active_by_listener = {listener.name: 0 for listener in ctx.config.listeners}
        self.loop_delay = LoopDelay()  # what the loop makes ready tasks wait (run() measures)
        # Each connection waiting for bytes: its idle scope, and since when (trio's clock). A
        # wait re-enters at the end, so the oldest waits come first (close_idle_connections).
        # Whoever cancels a scope removes it: a missing entry tells its task it was cancelled,
        # cheaper than CancelScope.cancel_called (which reads the clock).
        self._waiting: dict[trio.CancelScope, float] = {}
        self._busy = 0
        self._all_done = trio.Event()
        self.throttler = Throttler(ctx.quotas, ctx.clock)

    async def handle_connection(
        self, accepted: trio.SocketStream, listener: Listener | None = None
    ) -> None:
        """Serve one connection accepted on ``listener`` (default: the first one)."""
        plain = PlainSocketStream.take(accepted)
        stream: trio.abc.Stream = plain  # TLS-wrapped by security.open on a TLS listener
        config = self.ctx.config
        listener = listener or config.listeners[0]
        try:
            peer_ip, peer_port = plain.socket.getpeername()[:2]
        except OSError:
            peer_ip, peer_port = "?", "?"
        peer = f"{peer_ip}:{peer_port}"
        # This task serves only this connection, so the handlers it awaits see this value.
        client_host.set(kafka_host_string(peer_ip) if peer_ip != "?" else "")
        if self.ctx.stopping:
            await stream.aclose()
            return
        if self.active >= config.max_connections:
            logger.warning(
                "refusing connection: limit reached",
                peer=peer,
                max_connections=config.max_connections,
                action="raise max.connections or reduce the clients' connections",
            )
            await stream.aclose()
            return
        self.active += 1
        self.active_by_listener[listener.name] = self.active_by_listener.get(listener.name, 0) + 1
        conn_id = next(_conn_ids)
        logger.info(
            "connection opened",
            conn=conn_id,
            peer=peer,
            listener=listener.name,
            active=self.active,
        )
        reason = "closed by client"
        versions: dict[ApiKey, set[int]] = {}
        clients: set[str] = set()
        session: Session | None = None
        try:
            # ACLs name hosts as Kafka prints addresses (IPv4-mapped IPv6 as IPv4), no "/"
            host = kafka_host_string(peer_ip)[1:] if peer_ip != "?" else ""
            stream, session = await self.security.open(plain, listener, peer, host)
            current_session.set(session)
            reason = await self._serve(stream, versions, clients, session)
        except ProtocolError as exc:
            reason = f"bad request: {exc}"
            logger.warning(
                "closing connection after a bad request",
                conn=conn_id,
                peer=peer,
                error=type(exc).__name__,
                reason=str(exc),
                api_key=exc.api_key,
                api_version=exc.api_version,
            )
        except CloseConnectionError as exc:
            reason = str(exc)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError) as exc:
            reason = f"connection lost: {exc!r}"
        except SendfileError as exc:
            reason = str(exc)
            logger.error("closing connection mid-response", conn=conn_id, peer=peer, reason=reason)
        except Exception as exc:  # LocalProtocolError (a response we built wrong) included
            reason = f"internal error: {exc!r}"
            logger.exception(
                "closing connection after an internal error",
                conn=conn_id,
                peer=peer,
                action="this is a broker bug; report it with this log line",
            )
        finally:
            self.active -= 1
            self.active_by_listener[listener.name] -= 1
            with trio.CancelScope(shield=True):
                await stream.aclose()
            logger.info(
                "connection closed",
                conn=conn_id,
                peer=peer,
                principal=session.principal if session is not None else None,
                reason=reason,
                active=self.active,
                client_id=", ".join(sorted(clients)),
                api_versions=_versions_used(versions),
            )

    async def _serve(
        self,
        stream: trio.abc.Stream,
        versions: dict[ApiKey, set[int]],
        clients: set[str],
        session: Session,
    ) -> str:
        """Serve requests until the peer or the broker ends the connection; ``versions`` and
        ``clients`` collect every (api, version) served and client id seen, for the
        connection-closed log line."""
        ctx = self.ctx
        conn = ServerConnection(
            max_request_bytes=ctx.config.socket_request_max_bytes,
            versions=self.versions,
            decode_beside_bytes=DECODED_BESIDE_BYTES,
        )
        outbox = bytearray()  # produce answers held back for the next one's send (_dispatch)
        waiting = self._waiting
        clock = trio.lowlevel.current_clock()  # trio.current_time() is two calls more
        # One scope for the connection, cancelled only while it waits for bytes: by
        # close_idle_connections or begin_shutdown, which both look only at _waiting. A scope
        # stays cancelled, so one cancelled as bytes arrived ends the loop before they are
        # served. A deadline set and cleared per request cost the event loop about 13 µs a
        # request (bench/NOTES.md).
        with trio.CancelScope() as idle:
            while not ctx.stopping:
                waiting[idle] = clock.current_time()
                try:
                    data = await stream.receive_some(RECEIVE_BYTES)
                finally:
                    cancelled = waiting.pop(idle, None) is None
                if cancelled:  # the limit or the shutdown came with these bytes:
                    break  # close without serving them, as a cancel takes no half-served request
                if not data:
                    return "closed by client"
                await self._answer(stream, conn, data, versions, clients, session, outbox)
        if ctx.stopping:
            return "broker shutting down"
        return f"idle for {ctx.config.connections_max_idle_ms} ms"

    async def _answer(
        self,
        stream: trio.abc.Stream,
        conn: ServerConnection,
        data: bytes | bytearray,
        versions: dict[ApiKey, set[int]],
        clients: set[str],
        session: Session,
        outbox: bytearray,
    ) -> None:
        """Serve every request ``data`` completes, in order, and flush their answers; after
        each slice of serving (broker/slices.py: a read can hold a thousand small pipelined
        requests, a small produce is about 60 µs of the loop), other connections get their
        turn."""
        ctx = self.ctx
        received = perf_counter() if ctx.metrics is not None else 0.0
        slices = Slices()
        try:
            for request in conn.receive_data(data):
                if slices.due():
                    if outbox:  # answers held for one send go out before the pause
                        await send_response(stream, _take(outbox))
                    await slices.turn()
                if isinstance(request, UndecodedRequest):
                    request = await workers.run_sync(request.decode)
                if isinstance(request, RawFrame):  # a SASL token after a SaslHandshake v0
                    answer = await self.security.raw_token(session, request.payload)
                    await stream.send_all(conn.send_raw(answer))
                    conn.raw_frames = session.sasl is not None and session.sasl.raw_tokens
                    continue
                header = request.header
                versions.setdefault(header.api_key, set()).add(header.api_version)
                clients.add(header.client_id or "")
                self.security.admit(session, request)
                self._busy += 1
                try:
                    throttle_ms = await self._dispatch(
                        stream, conn, request, received, session, outbox
                    )
                finally:
                    self._busy -= 1
                if throttle_ms:
                    await send_response(stream, _take(outbox))
                    await self._mute(throttle_ms)
                if ctx.stopping and self._busy == 0:
                    self._all_done.set()
                if session.close_reason is not None:  # a failed authentication, answered
                    raise CloseConnectionError(session.close_reason)
                conn.raw_frames = session.sasl is not None and session.sasl.raw_tokens
        except Exception:
            # The requests before the one that ends the connection were served: answer
            # them (if the stream still takes bytes) before it closes.
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                await send_response(stream, _take(outbox))
            raise
        if outbox:
            await send_response(stream, _take(outbox))

    async def _dispatch(
        self,
        stream: trio.abc.Stream,
        conn: ServerConnection,
        request: Request,
        received: float,
        session: Session,
        outbox: bytearray,
    ) -> int:
        """Handle one request and write its answer; ``received``: perf_counter() when its frame
        was complete (for the metrics' queue time). Returns the client quotas' throttle time
        (ms) the answer carried: the caller mutes the connection for it (broker/quotas/).

        A single broker's Produce answer is held back in ``outbox`` when the next request is a
        Produce already received whole: it is answered at once (no replica to wait for), and
        both answers go out in one send. librdkafka sends one partition per Produce request
        and pipelines them, so under load this saves a send per request (bench/NOTES.md).
        Every other answer is sent with whatever ``outbox`` holds before it; the caller
        flushes ``outbox`` when the buffered requests run out."""
        header = request.header
        handler = self.handlers.get(header.api_key)
        if handler is None:
            raise CloseConnectionError(
                f"{header.api_key.name} (api key {int(header.api_key)}) is not served by this "
                "broker"
            )
        metrics = self.ctx.metrics
        started = perf_counter() if metrics is not None else 0.0
        quotas = self.throttler.begin()
        body = await self.security.call(session, handler, request)
        throttle_ms = (
            self.throttler.finish(session.principal, request, body, conn.request_size)
            if quotas
            else 0
        )
        handled = perf_counter() if metrics is not None else 0.0
        if body is not None:
            if header.api_key == ApiKey.FETCH:
                try:
                    if _listed_partitions(header.api_key, body) >= ENCODED_BESIDE_PARTITIONS:
                        chunks = await workers.run_sync(conn.send_chunks, request, body)
                    else:
                        chunks = conn.send_chunks(request, body)
                    await send_response(stream, [*_take(outbox), *chunks], self.ctx.io_threads)
                finally:
                    release_fetch_body(body)
            elif (
                header.api_key == ApiKey.PRODUCE
                and self.ctx.replication.batch_produce_answers
                and not throttle_ms
                and conn.buffered_request_api_key() == ApiKey.PRODUCE
            ):
                outbox += conn.send(request, body)
            elif (
                header.api_key in _TOPIC_LISTS
                and _listed_partitions(header.api_key, body) >= ENCODED_BESIDE_PARTITIONS
            ):
                encoded = await workers.run_sync(conn.send, request, body)
                await send_response(stream, [*_take(outbox), encoded])
            elif outbox:
                await send_response(stream, [*_take(outbox), conn.send(request, body)])
            else:  # one answer in one piece: what send_response would send, as it is
                await stream.send_all(conn.send(request, body))
        if metrics is not None:
            metrics.request_done(
                header.api_key,
                header.api_version,
                body,
                received,
                started,
                handled,
                perf_counter() if body is not None else handled,
            )
        return throttle_ms

    async def _mute(self, throttle_ms: int) -> None:
        """Read nothing more from the connection for ``throttle_ms`` (KIP-219: the client backs
        off for the throttle time its answer carried, the broker holds it to that). Counted as
        waiting, so the shutdown and the idle limit end it early."""
        with trio.CancelScope() as scope:
            self._waiting[scope] = trio.current_time()
            try:
                await trio.sleep(throttle_ms / 1000)
            finally:
                self._waiting.pop(scope, None)

    def begin_shutdown(self) -> None:
        """Stop reading new requests; wake waiting fetches and stop the group coordinator
        (parked JoinGroup/SyncGroup answer NOT_COORDINATOR_FOR_GROUP) so in-flight requests
        finish."""
        self.ctx.stopping = True
        self.ctx.wake_all()
        if self.ctx.coordinator is not None:
            self.ctx.coordinator.shutdown()
        if self.ctx.txn_coordinator is not None:
            self.ctx.txn_coordinator.shutdown()
        for scope in list(self._waiting):
            scope.cancel()
        self._waiting.clear()
        if self._busy == 0:
            self._all_done.set()

    async def wait_idle(self) -> None:
        await self._all_done.wait()

    async def close_idle_connections(self) -> None:
        """Run until cancelled: close each connection that has waited for a request for
        connections.max.idle.ms, checking every tenth of that but at most every 10 ms (so it
        closes within 10 % or 10 ms after the limit). Time spent serving a request, however
        long (a fetch long poll), is not idle time."""
        limit_s = self.ctx.config.connections_max_idle_ms / 1000
        while True:
            await trio.sleep(max(limit_s / 10, 0.01))
            expired = trio.current_time() - limit_s
            for scope, since in list(self._waiting.items()):
                if since > expired:
                    break
                scope.cancel()
                del self._waiting[scope]


def _versions_used(versions: dict[ApiKey, set[int]]) -> str:
    """``"API_VERSIONS v3, METADATA v12, PRODUCE v9"``: what a client negotiated, in one field of
    the connection-closed line (tests assert on it; operators see which clients are old)."""
    return ", ".join(
        f"{api.name} v{'/'.join(map(str, sorted(vs)))}" for api, vs in sorted(versions.items())
    )


# The answers that can list every partition the broker has, and their topics.
_TOPIC_LISTS: dict[ApiKey, Callable[[Mapping[str, Any]], Iterable[Mapping[str, Any]]]] = {
    ApiKey.METADATA: lambda body: body.get("topics") or (),
    ApiKey.DESCRIBE_LOG_DIRS: lambda body: (
        topic for result in body.get("results") or () for topic in result.get("topics") or ()
    ),
    ApiKey.FETCH: lambda body: body.get("responses") or (),
    ApiKey.OFFSET_COMMIT: lambda body: body.get("topics") or (),
    # v8+ answer per group, v0-v7 for the one group
    ApiKey.OFFSET_FETCH: lambda body: (
        [topic for group in body["groups"] for topic in group.get("topics") or ()]
        if "groups" in body
        else body.get("topics") or ()
    ),
}


def _listed_partitions(api_key: ApiKey, body: Mapping[str, Any] | None) -> int:
    """How many partitions ``body`` lists, 0 for an answer that lists none."""
    topics_of = _TOPIC_LISTS.get(api_key)
    if topics_of is None or body is None:
        return 0
    return sum(len(topic.get("partitions") or ()) for topic in topics_of(body))


def _take(outbox: bytearray) -> list[bytes]:
    """What ``outbox`` holds, as a chunk list, leaving it empty."""
    if not outbox:
        return []
    held = bytes(outbox)
    outbox.clear()
    return [held]


async def send_response(
    stream: trio.abc.Stream, chunks: list[Any], io_threads: trio.CapacityLimiter | None = None
) -> None:
    """Write response chunks in order. A FileRegion of records down-converted as they are sent
    (a ConvertingSource, KIP-283) is converted a chunk at a time in ``io_threads``' pool, each
    chunk sent before the next is made. FileRegions up to INLINE_REGION_BYTES are read (pread)
    into the buffer, so a small fetch answer is one send rather than three syscalls and three
    TCP segments (header, sendfile, the tagged fields after the records); larger ones go by
    os.sendfile, and larger bytes (records a v4-v9 answer checked for zstd) are sent as they are. (TCP_CORK around the pieces was tried: reads that needed the disk then stalled
    200 ms, the kernel's cork timeout.) On a TLS stream, which sendfile cannot write to, larger
    regions are read in TLS_REGION_PIECE_BYTES pieces in a worker thread and sent as bytes."""
    pending = bytearray()
    plain = isinstance(stream, PlainSocketStream)
    for chunk in chunks:
        if isinstance(chunk, FileRegion) and isinstance(chunk.source, ConvertingSource):
            if pending:
                await stream.send_all(pending)
                pending = bytearray()
            await _send_converting(stream, chunk.source, io_threads)
        elif not isinstance(chunk, FileRegion):
            if len(chunk) > INLINE_REGION_BYTES:  # large records: sent, not copied on the loop
                if pending:
                    await stream.send_all(pending)
                    pending = bytearray()
                await stream.send_all(chunk)
                continue
            pending += chunk
        elif chunk.length <= INLINE_REGION_BYTES:
            pending += _pread(chunk.source, chunk.position, chunk.length, chunk.length)
        elif not plain:
            position, remaining = chunk.position, chunk.length
            while remaining:
                size = min(remaining, TLS_REGION_PIECE_BYTES)
                pending += await workers.run_sync(_pread, chunk.source, position, size, remaining)
                position += size
                remaining -= size
                await stream.send_all(pending)
                pending = bytearray()
        else:
            if pending:
                await stream.send_all(pending)
                pending = bytearray()
            assert isinstance(stream, PlainSocketStream)  # plain
            await _sendfile(stream.socket, chunk)
    if pending:
        await stream.send_all(pending)


async def _send_converting(
    stream: trio.abc.Stream, source: ConvertingSource, io_threads: trio.CapacityLimiter | None
) -> None:
    """Send a lazily down-converted region whole: its pieces add up to the size announced."""
    while True:
        piece = await workers.run_sync(source.next_piece, limiter=io_threads)
        if not piece:
            return
        await stream.send_all(piece)


def _pread(source: int, position: int, size: int, remaining: int) -> bytes:
    """``size`` bytes of a segment file; SendfileError when it ends sooner (``remaining``: the
    bytes of the region still unsent, for the message)."""
    data = os.pread(source, size, position)
    if len(data) != size:
        raise SendfileError(
            f"segment file ended {remaining - len(data)} bytes "
            f"before the fetch response was complete"
        )
    return data


async def _sendfile(sock: socket.socket, region: FileRegion) -> None:
    out_fd = sock.fileno()
    position, remaining = region.position, region.length
    while remaining:
        try:
            sent = os.sendfile(out_fd, region.source, position, remaining)
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)
            continue
        except OSError as exc:
            if exc.errno in (errno.EPIPE, errno.ECONNRESET):
                raise trio.BrokenResourceError(repr(exc)) from exc
            raise
        if sent == 0:
            raise SendfileError(
                f"segment file ended {remaining} bytes before the fetch response was complete"
            )
        position += sent
        remaining -= sent
        await trio.lowlevel.checkpoint_if_cancelled()


async def run(
    config: BrokerConfig, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
) -> int:
    """Serve until SIGTERM/SIGINT; returns the exit status. ``task_status`` gets the bound port."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        ctx = await open_context(config)
        collector.settle()  # the loaded logs frozen before the first client, not in its way
        server = Server(ctx)
        bound = await _open_listeners(config.listeners)
        listeners = [sock for _, sockets in bound for sock in sockets]
        first = bound[0][0]
        # ctx.config, not config: it carries the dynamic broker configs (broker/admin)
        config = ctx.config = dataclasses.replace(
            ctx.config,
            port=first.port,
            advertised_port=first.advertised_port,
            listeners=tuple(listener for listener, _ in bound),
        )
        http_sockets = await _open_metrics(ctx, server)
        for listener, _ in bound:
            logger.info(
                "listening",
                listener=listener.name,
                security_protocol=listener.protocol,
                host=listener.host or "0.0.0.0",
                port=listener.port,
                advertised=f"{listener.advertised_host}:{listener.advertised_port}",
                broker_id=config.broker_id,
                cluster_id=ctx.cluster_id,
                record_scans=native.DESCRIPTION,
            )
        async with trio.open_nursery() as outer:
            async with trio.open_nursery() as connections:
                bg_scope = trio.CancelScope()

                async def run_background() -> None:
                    with bg_scope:
                        async with trio.open_nursery() as bg:
                            await ctx.replication.start(bg, ctx.config.advertised_port)
                            background.start(ctx, bg)
                            bg.start_soon(server.loop_delay.run)
                            bg.start_soon(server.security.maintain_tokens)

                outer.start_soon(run_background)
                http_scope = trio.CancelScope()
                http_stop = trio.Event()
                if http_sockets:
                    app = build_app(ctx)

                    async def serve_http() -> None:
                        with http_scope:
                            try:
                                await http.serve(app, http_sockets, http_stop)
                            except Exception:  # the endpoint must not take the broker down
                                logger.exception(
                                    "http listener stopped; the broker goes on without it",
                                    action="restart the broker to get /metrics and the console "
                                    "back; report this log line as a broker bug",
                                )

                    outer.start_soon(serve_http)
                accept_scope = trio.CancelScope()

                async def accept() -> None:
                    with accept_scope:
                        async with trio.open_nursery() as acceptors:
                            for listener, sockets in bound:
                                handler = partial(server.handle_connection, listener=listener)
                                acceptors.start_soon(serve_listeners, sockets, handler, connections)
                            acceptors.start_soon(server.close_idle_connections)

                connections.start_soon(accept)
                task_status.started(first.port)
                async for signum in signals:
                    logger.info(
                        "shutting down",
                        signal=signal.Signals(signum).name,
                        open_connections=server.active,
                    )
                    break
                with trio.move_on_after(CONTROLLED_SHUTDOWN_LIMIT_S):
                    await ctx.replication.controlled_shutdown()
                accept_scope.cancel()
                for sock in listeners:  # refuse new connections instead of queueing them
                    await sock.aclose()
                server.begin_shutdown()
                with trio.move_on_after(SHUTDOWN_GRACE_S) as grace:
                    await server.wait_idle()
                if grace.cancelled_caught:
                    logger.warning(
                        "in-flight requests did not finish in time; cancelling them",
                        grace_s=SHUTDOWN_GRACE_S,
                    )
                connections.cancel_scope.cancel()
            bg_scope.cancel()
            with trio.CancelScope(shield=True):
                await ctx.replication.leave()
            http_stop.set()
            http_scope.deadline = trio.current_time() + http.GRACEFUL_S + 1
        unflushed = await _shutdown_storage(ctx)
    if unflushed:
        logger.error(
            "shutdown complete, but some logs could not be fsynced",
            logs=unflushed,
            action="check the disk; the next start recovers what reached it",
        )
        return 1
    logger.info("shutdown complete")
    return 0


async def _open_listeners(
    configured: tuple[Listener, ...],
) -> list[tuple[Listener, list[trio.SocketListener]]]:
    """Bind every listener: each with its sockets, and with the bound port in place of port 0
    (advertised too, unless advertised.listeners gave one)."""
    bound = []
    for listener in configured:
        sockets = await trio.open_tcp_listeners(listener.port, host=listener.host or None)
        port = sockets[0].socket.getsockname()[1]
        bound.append(
            (
                dataclasses.replace(
                    listener, port=port, advertised_port=listener.advertised_port or port
                ),
                sockets,
            )
        )
    return bound


async def _open_metrics(ctx: BrokerContext, server: Server) -> list[socket.socket]:
    """With ``metrics.listener``: install ``ctx.metrics`` and bind its sockets (an OSError,
    e.g. the port in use, stops the start-up like the Kafka listener's would)."""
    if ctx.config.metrics_listener is None:
        return []
    host, port = ctx.config.metrics_listener
    sockets = await workers.run_sync(http.open_sockets, host, port)
    ctx.metrics = BrokerMetrics(ctx, lambda: server.active)
    ctx.metrics.listener_connections = lambda: dict(server.active_by_listener)
    ctx.metrics.loop_delay = server.loop_delay
    bound = sockets[0].getsockname()[1]
    shown = host or "0.0.0.0"
    base = f"http://{f'[{shown}]' if ':' in shown else shown}:{bound}"
    logger.info("metrics listening", host=shown, port=bound, url=f"{base}/metrics")
    logger.info(
        "console listening",
        url=f"{base}/",
        read_only=ctx.config.console_read_only,
    )
    return sockets


async def _shutdown_storage(ctx: BrokerContext) -> list[str]:
    """Flush and close the logs (storage.LogManager.shutdown); the logs whose data could not be
    fsynced."""
    # Wait for every partition lock so no worker thread is still appending.
    await ctx.admin_lock.acquire()
    for state in ctx.partition_states():
        await state.lock.acquire()
    return await workers.run_sync(ctx.log_manager.shutdown)
