"""Prometheus metrics of one broker, named after Kafka's JMX metrics as the JMX exporter shows
them (``kafka.network:type=RequestMetrics,name=RequestsPerSec`` ->
``kafka_network_requestmetrics_requests_total``).

Two kinds, exposed through one custom collector on a :class:`BrokerMetrics`' own
``CollectorRegistry`` (never the global one, so several brokers in one process do not collide),
except the request-time histograms, the per-partition gauges and the consumer-group gauges,
which the scrape writes itself (:func:`_times_text`, :func:`_partitions_text`,
:func:`_group_offsets_text`):

- Counters and latency histograms fed by the request path. They are plain dict entries
  incremented once per request or per partition of a request, never per message; the
  scrape turns them into metric families.
- Gauges read from the broker's state at scrape time: per partition from ``ctx.log_manager``
  (in-memory attributes; a segment's first time-index entry is read once and cached), consumer
  group lag from the coordinator's committed offsets, waiting fetches from the partitions'
  waiter sets, open connections from the server; waiting acks=all produces are counted by the
  produce handler. Transactions: the coordinator's ids by state (one pass over its table), the
  transactions it completed (counted where it writes their markers), and per partition the
  LSO lag and open transactions from the log's producer state.

Everything reads and counts on the trio thread (handlers count after their worker-thread calls
returned, and the HTTP endpoint awaits :meth:`BrokerMetrics.scrape` there), so nothing needs a
lock; only the per-partition and per-group text is written in a worker thread, from rows read
beforehand.
Without ``metrics.listener`` there is no BrokerMetrics (``ctx.metrics`` is None) and the request
path skips all of this.

Authentications are counted per listener as Kafka's socket-server-metrics
``successful-authentication-total`` / ``failed-authentication-total``. Not measured: RemoteTimeMs (a
Fetch's long-poll wait, and an acks=all produce's wait for the ISR, are part of local time).
"""

from __future__ import annotations

import os
from bisect import bisect_left
from functools import lru_cache
from itertools import accumulate
from typing import TYPE_CHECKING, Any, Callable, Iterator, NamedTuple

import structlog
from prometheus_client import (
    CollectorRegistry,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from broker import workers
from broker.groups.lag import committed_and_ends
from broker.quotas.metrics import quota_metrics
from broker.slices import Slices
from broker.txn.state import TxnState
from protocol import ApiKey, ErrorCode
from protocol.schemas import RESPONSE_SCHEMAS
from storage.errors import LogClosedError

if TYPE_CHECKING:
    from broker.context import BrokerContext
    from broker.loop_delay import LoopDelay
    from protocol.schemas.codec import _Field
    from storage import Log

logger = structlog.get_logger(__name__)

REQUEST_NAMES: dict[int, str] = {
    api: "".join(word.capitalize() for word in api.name.split("_")) for api in ApiKey
}
"""Kafka's request names (``ApiKeys.name``): LIST_OFFSETS -> "ListOffsets"."""

LATENCY_BUCKETS_MS: tuple[float, ...] = (
    0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000,
)  # fmt: skip


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


# A request's four times share one row of counts per api key: _SLOTS bucket counts for each
# (the last one +Inf) in _TIMES' order, then the four sums in seconds. Bounds are in seconds so
# the request path does no unit conversion; the families are in ms, as Kafka's.
_BOUNDS_S: tuple[float, ...] = tuple(b / 1000 for b in LATENCY_BUCKETS_MS)
_SLOTS = len(LATENCY_BUCKETS_MS) + 1
_SUMS = 4 * _SLOTS
_TIMES: tuple[tuple[str, str], ...] = (
    (
        "kafka_network_requestmetrics_requestqueuetimems",
        "Time a request waited behind earlier requests of its connection, ms",
    ),
    (
        "kafka_network_requestmetrics_localtimems",
        "Time in the request handler, ms (a Fetch's long-poll wait included)",
    ),
    (
        "kafka_network_requestmetrics_responsesendtimems",
        "Time writing the response to the socket, ms",
    ),
    (
        "kafka_network_requestmetrics_totaltimems",
        "Request time from the complete frame to the response written, ms",
    ),
)

# Where a response's error codes are, from its schema: (has "error_code" here, ((array field,
# its element's tree), ...)) with only the arrays of structs that hold an error code somewhere.
_ErrorTree = tuple[bool, tuple[tuple[str, "_ErrorTree"], ...]]

# prometheus_client's formatting of a sample value, which it leaves unannotated.
_go_float: Callable[[float], str] = floatToGoString


def _error_tree(fields: list[_Field]) -> _ErrorTree | None:
    """The tree of a response struct's fields (protocol.schemas' field descriptions, only those
    present at its version); None when it holds no error code."""
    here = any(f.name == "error_code" and f.present for f in fields)
    arrays = []
    for f in fields:
        if f.present and f.type == "[]" and f.element == "struct":
            assert f.struct is not None  # an array of structs has its struct
            sub = _error_tree(f.struct.fields)
            if sub is not None:
                arrays.append((f.name, sub))
    return (here, tuple(arrays)) if here or arrays else None


def _count_errors(body: dict[str, Any], tree: _ErrorTree, counts: dict[int, int]) -> None:
    """Every ``error_code`` the response carries (top level and in nested entries) into
    ``counts``, as Kafka's ``AbstractResponse.errorCounts`` does (NONE included)."""
    here, arrays = tree
    if here:
        code = body.get("error_code")
        if code is not None:
            counts[code] = counts.get(code, 0) + 1
    for name, sub in arrays:
        items = body.get(name)
        if not items:
            continue
        if sub[1]:
            for item in items:
                _count_errors(item, sub, counts)
        else:  # entries that hold only an error code (a Produce's partitions): no call each
            for item in items:
                code = item.get("error_code")
                if code is not None:
                    counts[code] = counts.get(code, 0) + 1


def response_error_tree(api_key: int, version: int) -> _ErrorTree:
    """Where the errors of an (api, version) response are; an ApiVersions request of a version
    the broker does not serve is answered in v0's layout."""
    api = ApiKey(api_key)
    codec = RESPONSE_SCHEMAS.get((api, version)) or RESPONSE_SCHEMAS[(api, 0)]
    return _error_tree(codec.schema.fields) or (False, ())


class BrokerMetrics:
    """One broker's metrics: what the request path counts, and the registry scraped by the HTTP
    endpoint. ``connections`` answers the number of open Kafka connections."""

    def __init__(self, ctx: BrokerContext, connections: Callable[[], int]) -> None:
        self.ctx = ctx
        self.connections = connections
        # Open connections per listener name (set by the server); None: all are PLAINTEXT's.
        self.listener_connections: Callable[[], dict[str, int]] | None = None
        # The event loop's delay histogram (broker/loop_delay.py, set by the server).
        self.loop_delay: LoopDelay | None = None
        self.authentications: dict[tuple[str, bool], int] = {}  # (listener, succeeded)
        # acks=all produce requests waiting for the ISR (a cluster's produce purgatory)
        self.produces_waiting = 0
        self.messages_in: dict[str, int] = {}
        self.bytes_in: dict[str, int] = {}
        self.bytes_out: dict[str, int] = {}
        self.errors: dict[int, dict[int, int]] = {}  # api key -> error code -> count
        self.times: dict[int, list[float]] = {}  # api key -> the row of its four times (_TIMES)
        # (api key, version) -> [requests, its response's error tree, the api's entries of
        # errors and times]: what a request touches, found with one lookup
        self.requests: dict[tuple[int, int], list[Any]] = {}
        self._log_dirs = {_dir_key(d): d for d in ctx.config.log_dirs}
        self.storage_errors: dict[str, int] = {d: 0 for d in ctx.config.log_dirs}
        self._first_timestamps: dict[tuple[str, int], int] = {}
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.registry.register(_StateCollector(self))

    # -- the request path ------------------------------------------------------------------
    def produced(self, topic: str, messages: int, size: int) -> None:
        """A produce appended ``messages`` messages from a record set of ``size`` bytes."""
        self.messages_in[topic] = self.messages_in.get(topic, 0) + messages
        self.bytes_in[topic] = self.bytes_in.get(topic, 0) + size

    def fetched(self, topic: str, size: int) -> None:
        """A fetch response carries ``size`` bytes of ``topic``'s records."""
        self.bytes_out[topic] = self.bytes_out.get(topic, 0) + size

    def request_done(
        self,
        api_key: int,
        version: int,
        body: dict[str, Any] | None,
        received: float,
        started: float,
        handled: float,
        sent: float,
    ) -> None:
        """A request answered (``body`` None: no response, acks=0). Times are perf_counter()
        seconds: the frame complete, the handler called, the handler returned, the response
        written. Per request: a counter, a walk of the response's error codes along its schema,
        one bisect and two additions for each of the four times."""
        entry = self.requests.get((api_key, version))
        if entry is None:
            entry = self._first_request(api_key, version)
        entry[0] += 1
        if body is not None:
            _count_errors(body, entry[1], entry[2])
        row = entry[3]
        queue, local, send = started - received, handled - started, sent - handled
        total = sent - received
        row[bisect_left(_BOUNDS_S, queue)] += 1
        row[_SLOTS + bisect_left(_BOUNDS_S, local)] += 1
        row[2 * _SLOTS + bisect_left(_BOUNDS_S, send)] += 1
        row[3 * _SLOTS + bisect_left(_BOUNDS_S, total)] += 1
        row[_SUMS] += queue
        row[_SUMS + 1] += local
        row[_SUMS + 2] += send
        row[_SUMS + 3] += total

    def _first_request(self, api_key: int, version: int) -> list[Any]:
        counts = self.errors.setdefault(api_key, {})
        row = self.times.setdefault(api_key, [0] * _SUMS + [0.0] * 4)
        entry = [0, response_error_tree(api_key, version), counts, row]
        self.requests[(api_key, version)] = entry
        return entry

    def authentication(self, listener: str, ok: bool) -> None:
        """A SASL authentication on ``listener`` succeeded or failed."""
        self.authentications[(listener, ok)] = self.authentications.get((listener, ok), 0) + 1

    def storage_error(self, log: Log) -> None:
        """A storage call on ``log`` failed (counted per log dir)."""
        key = _dir_key(os.path.dirname(os.path.normpath(log.directory)))
        name = self._log_dirs.get(key, key)
        self.storage_errors[name] = self.storage_errors.get(name, 0) + 1

    # -- scraping ----------------------------------------------------------------------------
    async def scrape(self) -> bytes:
        """The text exposition of every metric: the request-time histograms by
        :func:`_times_text`, the per-partition gauges and the groups' offsets by
        :func:`_partitions_text` and :func:`_group_offsets_text` in a worker thread from rows
        read on the loop in slices (:meth:`partition_rows`, :meth:`group_offset_rows`), the
        rest by prometheus_client's ``generate_latest``. At 10,000 partitions a scrape held
        the event loop about 740 ms in one piece, most of it writing eight lines per
        partition; a group committed on all of them held it another 250-400 ms."""
        rows = await self.partition_rows()
        offsets = await self.group_offset_rows()
        head = generate_latest(self.registry) + _times_text(self.times)
        return head + await workers.run_sync(_rows_text, rows, offsets)

    async def partition_rows(self) -> list[PartitionRow]:
        """Every partition's gauges, sorted by topic and partition: from its log's in-memory
        state (a segment's first time-index entry read once and cached), the LSO lag (the high
        watermark minus the last stable offset, UnifiedLog's lastStableOffsetLag) and the
        producer state's ongoing transactions. Read in slices (broker/slices.py); a log
        deleted or rolled meanwhile is left out until the next scrape."""
        rows = []
        seen: set[tuple[str, int]] = set()
        slices = Slices()
        for log in sorted(self.ctx.log_manager.all_logs(), key=lambda lg: (lg.topic, lg.partition)):
            await slices.turn()
            try:
                log_segments = log.segments
                row = PartitionRow(
                    log.topic,
                    log.partition,
                    sum(s.size for s in log_segments),
                    len(log_segments),
                    log_segments[0].base_offset,
                    log.log_end_offset,
                    self.first_timestamp(log),
                    log.latest_timestamp(),
                    log.high_watermark - log.last_stable_offset,
                    len(log.producer_state().ongoing_transactions()),
                )
            except (OSError, ValueError, IndexError, LogClosedError) as exc:
                # Files gone, an index closed: next scrape.
                logger.debug("partition skipped in metrics", partition=log.name, error=repr(exc))
                continue
            seen.update((log.directory, s.base_offset) for s in log_segments)
            rows.append(row)
        for key in list(self._first_timestamps):
            if key not in seen:
                del self._first_timestamps[key]
        return rows

    def first_timestamp(self, log: Log) -> int:
        """The oldest non-empty segment's first time-index entry (cached: it never changes),
        or that segment's largest timestamp while its time index is empty; -1 without one."""
        for segment in log.segments:
            if segment.size == 0:
                continue
            key = (log.directory, segment.base_offset)
            cached = self._first_timestamps.get(key)
            if cached is not None:
                return cached
            index = segment.time_index
            if index.entries:
                timestamp = index.entry(0)[0]
                self._first_timestamps[key] = timestamp
                return timestamp
            return segment.max_timestamp
        return -1

    async def group_offset_rows(self) -> list[GroupOffsetRow]:
        """Every group's committed offsets (a negative one left out) with their partition's
        log end, unsorted; a partition this broker does not have is left out. Each group's
        offsets are copied at once, so a commit landing meanwhile shows whole or not at all;
        the log ends are read in slices."""
        coordinator = self.ctx.coordinator
        if coordinator is None:
            return []
        rows = []
        slices = Slices()
        for group in coordinator.offsets.groups():
            for row in await committed_and_ends(
                coordinator.offsets, group, self.ctx.get_log, slices
            ):
                if row.log_end is not None:
                    rows.append(
                        GroupOffsetRow(group, row.topic, row.partition, row.log_end, row.committed)
                    )
        return rows


def _dir_key(path: str) -> str:
    return os.path.normpath(os.path.abspath(path))


_LE = [*(repr(float(b)) for b in LATENCY_BUCKETS_MS), "+Inf"]


@lru_cache(maxsize=None)
def _histogram_prefixes(name: str, request: str) -> tuple[str, ...]:
    """The start of each line of one request's histogram, up to its value: the buckets, then
    ``_count`` and ``_sum``, labels sorted as prometheus_client writes them (request names
    are Kafka's, identifiers that need no escaping)."""
    return (
        *(f'{name}_bucket{{le="{le}",request="{request}"}} ' for le in _LE),
        f'{name}_count{{request="{request}"}} ',
        f'{name}_sum{{request="{request}"}} ',
    )


def _times_text(times: dict[int, list[float]]) -> bytes:
    """The four request-time histograms (rows as :meth:`BrokerMetrics.request_done` fills
    them) in the text format, byte for byte what ``generate_latest`` writes for them.

    Written here because they are most of a scrape's lines, and prometheus_client spends
    about 4 µs on each one (label validation and escaping, a float conversion per value) on
    the event loop; a bucket count here is one string join, and each distinct count is
    formatted once per scrape."""
    rows = sorted((REQUEST_NAMES[api], row) for api, row in times.items())
    formatted: dict[float, str] = {}

    def value(v: float) -> str:
        text = formatted.get(v)
        if text is None:
            text = formatted[v] = _go_float(v)
        return text

    out: list[str] = []
    for i, (name, documentation) in enumerate(_TIMES):
        out.append(f"# HELP {name} {documentation}\n# TYPE {name} histogram\n")
        for request, row in rows:
            counts = list(accumulate(row[i * _SLOTS : (i + 1) * _SLOTS]))
            prefixes = _histogram_prefixes(name, request)
            for prefix, v in zip(prefixes, [*counts, counts[-1], row[_SUMS + i] * 1000]):
                out.append(f"{prefix}{value(v)}\n")
    return "".join(out).encode()


class PartitionRow(NamedTuple):
    """One partition's gauges, as :meth:`BrokerMetrics.partition_rows` reads them; a
    timestamp of -1 (none yet) is left out of its family."""

    topic: str
    partition: int
    size: int
    segments: int
    start_offset: int
    end_offset: int
    first_timestamp: int
    last_timestamp: int
    lso_lag: int
    open_transactions: int


# (name, documentation, the row's field) of each per-partition gauge, in scrape order.
_PARTITION_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("kafka_log_log_size", "Partition size in bytes", "size"),
    ("kafka_log_log_numlogsegments", "Segments of the partition", "segments"),
    ("kafka_log_log_logstartoffset", "First offset of the partition", "start_offset"),
    ("kafka_log_log_logendoffset", "Offset the next message gets", "end_offset"),
    (
        "chronolog_log_first_timestamp_ms",
        "The oldest segment's first time-index entry, ms since the epoch (the index is "
        "sparse: the largest timestamp up to that entry's offset)",
        "first_timestamp",
    ),
    (
        "chronolog_log_last_timestamp_ms",
        "Largest message timestamp of the newest non-empty segment, ms since the epoch",
        "last_timestamp",
    ),
    (
        "kafka_cluster_partition_laststableoffsetlag",
        "High watermark minus last stable offset: offsets read_committed consumers cannot read "
        "yet, held back by open transactions (kafka.cluster:type=Partition,"
        "name=LastStableOffsetLag)",
        "lso_lag",
    ),
    (
        "chronolog_log_open_transactions",
        "Transactions with data in the partition and no marker yet",
        "open_transactions",
    ),
)
_TIMESTAMP_FIELDS = ("first_timestamp", "last_timestamp")


def _partitions_text(rows: list[PartitionRow]) -> bytes:
    """The per-partition gauges in the text format, byte for byte what ``generate_latest``
    writes for them. Pure, so it runs in a worker thread.

    Written here for the reason :func:`_times_text` is: eight lines for every partition cost
    prometheus_client about 5 µs each (label validation and escaping, a float conversion).
    Topic names are Kafka's legal characters ([a-zA-Z0-9._-]), which need no escaping."""
    formatted: dict[int, str] = {}
    out: list[str] = []
    for name, documentation, field in _PARTITION_GAUGES:
        out.append(f"# HELP {name} {documentation}\n# TYPE {name} gauge\n")
        optional = field in _TIMESTAMP_FIELDS
        for row in rows:
            v = getattr(row, field)
            if optional and v < 0:
                continue
            text = formatted.get(v)
            if text is None:
                text = formatted[v] = _go_float(v)
            out.append(f'{name}{{partition="{row[1]}",topic="{row[0]}"}} {text}\n')
    return "".join(out).encode()


class GroupOffsetRow(NamedTuple):
    """One group's committed offset of a partition and the partition's log end, as
    :meth:`BrokerMetrics.group_offset_rows` reads them."""

    group: str
    topic: str
    partition: int
    end_offset: int
    committed: int


# (name, documentation) of the two per-group gauges, in scrape order.
_GROUP_GAUGES = (
    ("kafka_consumergroup_lag", "Log end offset minus the group's committed offset"),
    ("kafka_consumergroup_current_offset", "The group's committed offset"),
)


def _label_value(text: str) -> str:
    """A label value escaped as the text format wants it (and prometheus_client writes it)."""
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _group_offsets_text(rows: list[GroupOffsetRow]) -> bytes:
    """The consumer-group gauges in the text format, sorted by group, topic and partition,
    byte for byte what ``generate_latest`` writes for them. Pure, so it runs in a worker
    thread. A group id is any string, so it is escaped; topic names need no escaping."""
    rows = sorted(rows)
    labels = [
        f'group="{_label_value(r.group)}",partition="{r.partition}",topic="{r.topic}"' for r in rows
    ]
    out: list[str] = []
    for (name, documentation), values in zip(
        _GROUP_GAUGES,
        ([r.end_offset - r.committed for r in rows], [r.committed for r in rows]),
    ):
        out.append(f"# HELP {name} {documentation}\n# TYPE {name} gauge\n")
        out.extend(f"{name}{{{label}}} {_go_float(v)}\n" for label, v in zip(labels, values))
    return "".join(out).encode()


def _rows_text(partitions: list[PartitionRow], offsets: list[GroupOffsetRow]) -> bytes:
    """Worker thread: the per-partition and the consumer-group gauges, for one hop."""
    return _partitions_text(partitions) + _group_offsets_text(offsets)


class _StateCollector(Collector):
    """Builds every broker metric family but the request times at scrape time, from
    :class:`BrokerMetrics`' counters and the broker's state."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        yield from self._counters(m)
        yield from self._state(m)
        yield from quota_metrics(m.ctx.quotas, m.ctx.clock())
        if m.loop_delay is not None:
            yield HistogramMetricFamily(
                "chronolog_event_loop_delay_seconds",
                "How late the event loop woke a task asking to wake every 100 ms: the wait "
                "anything on the loop adds to every connection's requests",
                buckets=m.loop_delay.cumulative(),
                sum_value=m.loop_delay.sum_s,
            )

    @staticmethod
    def _counters(m: BrokerMetrics) -> Iterator[Metric]:
        for name, doc, values in (
            ("messagesin", "Messages appended by produce requests", m.messages_in),
            ("bytesin", "Bytes of record sets appended by produce requests", m.bytes_in),
            ("bytesout", "Bytes of records in fetch responses", m.bytes_out),
        ):
            family = CounterMetricFamily(
                f"kafka_server_brokertopicmetrics_{name}", doc, labels=["topic"]
            )
            for topic, value in sorted(values.items()):
                family.add_metric([topic], value)
            yield family
        requests = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "Requests answered, by api and version",
            labels=["request", "version"],
        )
        for (api, version), entry in sorted(m.requests.items()):
            requests.add_metric([REQUEST_NAMES[api], str(version)], entry[0])
        yield requests
        errors = CounterMetricFamily(
            "kafka_network_requestmetrics_errors",
            "Error codes in responses (one per partition or entry that carries one; NONE too)",
            labels=["request", "error"],
        )
        for api, counts in sorted(m.errors.items()):
            for code, value in sorted(counts.items()):
                errors.add_metric([REQUEST_NAMES[api], _error_name(code)], value)
        yield errors
        storage = CounterMetricFamily(
            "chronolog_log_storage_errors",
            "Failed storage calls (append, read, retention, flush) per log dir",
            labels=["log_dir"],
        )
        for log_dir, value in sorted(m.storage_errors.items()):
            storage.add_metric([log_dir], value)
        yield storage

    @staticmethod
    def _state(m: BrokerMetrics) -> Iterator[Metric]:
        ctx = m.ctx
        connections = GaugeMetricFamily(
            "kafka_server_socketservermetrics_connection_count",
            "Open Kafka client connections",
            labels=["listener"],
        )
        per_listener = (
            {"PLAINTEXT": m.connections()}
            if m.listener_connections is None
            else m.listener_connections()
        )
        for listener, count in sorted(per_listener.items()):
            connections.add_metric([listener], count)
        yield connections
        for ok, name, help_text in (
            (True, "successful", "Successful SASL authentications"),
            (False, "failed", "Failed SASL authentications"),
        ):
            family = CounterMetricFamily(
                f"kafka_server_socket_server_metrics_{name}_authentication",
                help_text,
                labels=["listener"],
            )
            for (listener, succeeded), value in sorted(m.authentications.items()):
                if succeeded is ok:
                    family.add_metric([listener], value)
            yield family
        waiting = {event for state in ctx.partition_states() for event in state.waiters}
        purgatory = GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            "Requests waiting: Fetch long polls, acks=all produces waiting for the ISR",
            labels=["delayedOperation"],
        )
        purgatory.add_metric(["Fetch"], len(waiting))
        purgatory.add_metric(["Produce"], m.produces_waiting)
        yield purgatory
        # Kafka's UnderReplicatedPartitions: partitions this broker leads whose ISR is smaller
        # than their replica set (always 0 for a single broker).
        under = GaugeMetricFamily(
            "kafka_server_replicamanager_underreplicatedpartitions",
            "Partitions led by this broker whose in-sync replicas are fewer than their replicas",
        )
        cluster = ctx.cluster
        replicas = cluster.replicas.replicas.values() if cluster and cluster.replicas else ()
        led = [r for r in replicas if r.is_leader]
        under.add_metric([], sum(1 for r in led if len(r.isr) < len(r.replicas)))
        yield under
        # Kafka's UnderMinIsrPartitionCount: of those, the ones whose ISR is below
        # min.insync.replicas, where acks=all produces are refused.
        below_min = GaugeMetricFamily(
            "kafka_server_replicamanager_underminisrpartitioncount",
            "Partitions led by this broker whose in-sync replicas are fewer than "
            "min.insync.replicas (acks=all produces to them are refused)",
        )
        topics = [(r, ctx.topics.get(r.topic)) for r in led]
        below_min.add_metric(
            [],
            sum(
                1 for r, t in topics if t is not None and len(r.isr) < t.config.min_insync_replicas
            ),
        )
        yield below_min

        yield from _StateCollector._transactions(ctx)

    @staticmethod
    def _transactions(ctx: BrokerContext) -> Iterator[Metric]:
        # Kafka's coordinator has no JMX metric for these (kafka.coordinator.transaction has
        # only its marker queues): chronolog's own names.
        states = GaugeMetricFamily(
            "chronolog_transactions",
            "Transactional ids the coordinator holds, by state (Kafka's TransactionState: "
            "Ongoing is open, PrepareCommit/PrepareAbort are completing, markers being written)",
            labels=["state"],
        )
        completed = CounterMetricFamily(
            "chronolog_transactions_completed",
            "Transactions completed (every marker written) since the broker started, by result",
            labels=["result"],
        )
        timed_out = CounterMetricFamily(
            "chronolog_transactions_aborted_by_timeout",
            "Transactions aborted by the coordinator because they stayed open longer than "
            "their transaction.timeout.ms (their producer is fenced); also counted in "
            'chronolog_transactions_completed_total{result="abort"}',
        )
        coordinator = ctx.txn_coordinator
        counts: dict[TxnState, int] = dict.fromkeys(
            (s for s in TxnState if s is not TxnState.DEAD), 0
        )
        if coordinator is not None:
            for meta in list(coordinator.machine.txns.values()):
                counts[meta.state] = counts.get(meta.state, 0) + 1
        for state, count in counts.items():
            states.add_metric([state.label], count)
        completed.add_metric(["commit"], coordinator.committed if coordinator else 0)
        completed.add_metric(["abort"], coordinator.aborted if coordinator else 0)
        timed_out.add_metric([], coordinator.aborted_by_timeout if coordinator else 0)
        yield from (states, completed, timed_out)


__all__ = ["BrokerMetrics", "LATENCY_BUCKETS_MS", "REQUEST_NAMES"]
