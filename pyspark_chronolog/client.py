"""A small blocking Kafka client over chronolog's sans-IO ClientConnection.

One client.BrokerConnection per broker address; each call sends one request and reads its
response (no pipelining: the connector's calls are sequential). Every socket is closed by
close() / the context manager. Connection failures and timeouts raise BrokerUnavailableError
naming the address; Kafka error codes are returned to the caller (fetch, produce) or raised as
typed errors (metadata, list_offsets) so each caller decides what is recoverable.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import structlog

from client import BrokerConnection, BrokerConnectionError, ConnectError, error_name
from protocol import ApiKey, ErrorCode

from .errors import BrokerResponseError, BrokerUnavailableError, UnknownTopicError
from .options import ConnectOptions, TopicPartition

logger = structlog.get_logger(__name__)

_METADATA_VERSION = 1
# v2 adds the isolation level (KIP-98: read_committed's latest is the last stable offset).
_LIST_OFFSETS_VERSION = 2
# Record batches as stored (v4+), headers (v4+ fetch / v3+ produce); the last versions before
# flexible encoding and topic ids, which this client does not need.
_FETCH_VERSION = 11
_PRODUCE_VERSION = 8
# Leader elections and topic auto-creation answer LEADER_NOT_AVAILABLE for a moment.
_METADATA_RETRIES = 10
_METADATA_BACKOFF_S = 0.2


@dataclass(frozen=True)
class FetchResult:
    error_code: int
    high_watermark: int
    record_set: bytes
    last_stable_offset: int = -1
    # read_committed: (producer id, first offset) of each aborted transaction in the fetched
    # range; None for read_uncommitted (the broker sends none).
    aborted_transactions: tuple[tuple[int, int], ...] | None = None


@dataclass(frozen=True)
class ProduceResult:
    error_code: int
    base_offset: int


def _open(address: tuple[str, int], timeout_s: float) -> BrokerConnection:
    try:
        return BrokerConnection(*address, client_id="chronolog-spark", timeout_s=timeout_s)
    except ConnectError as exc:
        raise BrokerUnavailableError(
            f"cannot connect to chronolog broker at {address[0]}:{address[1]} ({exc.reason}); "
            f"is it running (`make run`) and is bootstrap.servers right?"
        ) from None


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: dict[int, int]  # partition -> leader node id


class BrokerClient:
    """Blocking client for Metadata v1, ListOffsets v2, Fetch v11 and Produce v8.

    ``read_committed`` (KIP-98) makes ListOffsets' latest the last stable offset and Fetch stop
    there and report the aborted transactions; otherwise both go up to the high watermark.
    """

    def __init__(self, connect: ConnectOptions, *, read_committed: bool = False) -> None:
        self._connect = connect
        self._isolation_level = 1 if read_committed else 0
        self._timeout_s = connect.request_timeout_ms / 1000
        self._conns: dict[tuple[str, int], BrokerConnection] = {}
        self._nodes: dict[int, tuple[str, int]] = {}
        self._leaders: dict[TopicPartition, int] = {}
        self._bootstrap: BrokerConnection | None = None

    def __enter__(self) -> BrokerClient:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        self._bootstrap = None

    # -- connections ------------------------------------------------------------------------
    def _conn(self, address: tuple[str, int]) -> BrokerConnection:
        conn = self._conns.get(address)
        if conn is None:
            conn = self._conns[address] = _open(address, self._timeout_s)
        return conn

    def _any_conn(self) -> BrokerConnection:
        if self._bootstrap is not None:
            return self._bootstrap
        failures = []
        for address in self._connect.bootstrap:
            try:
                self._bootstrap = self._conn(address)
                return self._bootstrap
            except BrokerUnavailableError as exc:
                failures.append(str(exc))
        servers = ",".join(f"{h}:{p}" for h, p in self._connect.bootstrap)
        raise BrokerUnavailableError(
            f"no chronolog broker reachable at bootstrap.servers={servers}: " + "; ".join(failures)
        )

    def _call(self, conn: BrokerConnection, api_key: ApiKey, version: int, body: dict):
        try:
            return conn.call(api_key, version, body)
        except BrokerConnectionError as exc:
            self._conns = {a: c for a, c in self._conns.items() if c is not conn}
            if conn is self._bootstrap:
                self._bootstrap = None
            raise BrokerUnavailableError(
                f"chronolog broker at {exc.address}: {exc} ({api_key.name} v{version}, "
                f"kafka.request.timeout.ms={self._timeout_s * 1000:.0f}); check the broker "
                "log"
            ) from None

    def _leader_conn(self, tp: TopicPartition) -> BrokerConnection:
        if tp not in self._leaders:
            self.topics([tp[0]])
        node = self._leaders.get(tp)
        if node is None:
            raise UnknownTopicError(f"topic {tp[0]!r} has no partition {tp[1]}")
        return self._conn(self._nodes[node])

    # -- metadata ---------------------------------------------------------------------------
    def topics(
        self, names: list[str] | tuple[str, ...], *, allow_create: bool = False
    ) -> dict[str, TopicInfo]:
        """Partition -> leader of each named topic.

        Readers ask for all topics (a null list), because asking for a name makes a broker with
        auto.create.topics.enable create it; a missing topic raises UnknownTopicError.
        ``allow_create`` (writers) asks for the names, as Kafka producers do.
        """
        for attempt in range(_METADATA_RETRIES):
            body = self._call(
                self._any_conn(),
                ApiKey.METADATA,
                _METADATA_VERSION,
                {"topics": [{"name": n} for n in names] if allow_create else None},
            )
            self._nodes.update({b.node_id: (b.host, b.port) for b in body.brokers})
            found: dict[str, TopicInfo] = {}
            retry = []
            for t in body.topics:
                if t.name not in names:
                    continue
                if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    continue
                if t.error_code == ErrorCode.LEADER_NOT_AVAILABLE or any(
                    p.error_code == ErrorCode.LEADER_NOT_AVAILABLE or p.leader_id < 0
                    for p in t.partitions
                ):
                    retry.append(t.name)
                    continue
                if t.error_code != ErrorCode.NONE:
                    raise BrokerResponseError(
                        f"metadata for topic {t.name!r} failed: {error_name(t.error_code)}",
                        error_code=t.error_code,
                    )
                found[t.name] = TopicInfo(
                    t.name, {p.partition_index: p.leader_id for p in t.partitions}
                )
            if not retry:
                break
            time.sleep(_METADATA_BACKOFF_S)
        else:
            raise BrokerResponseError(
                f"topics {retry} have no leader after {_METADATA_RETRIES} metadata attempts; "
                f"check the broker log",
                error_code=ErrorCode.LEADER_NOT_AVAILABLE,
            )
        missing = [n for n in names if n not in found]
        if missing:
            known = sorted(t.name for t in body.topics)
            raise UnknownTopicError(
                f"unknown topic {missing[0]!r} on chronolog broker {self._any_conn().address}"
                + (
                    f" (topics there: {', '.join(known[:20])})"
                    if known and not allow_create
                    else ""
                )
                + "; check the topic/subscribe option or create the topic"
            )
        for info in found.values():
            for partition, leader in info.partitions.items():
                self._leaders[(info.name, partition)] = leader
        return found

    def partitions(self, topics: tuple[str, ...]) -> list[TopicPartition]:
        """Every (topic, partition) of ``topics``, sorted."""
        infos = self.topics(topics)
        return sorted((t, p) for t in topics for p in infos[t].partitions)

    # -- offsets ----------------------------------------------------------------------------
    def list_offsets(
        self, wanted: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int]]:
        """ListOffsets v2: tp -> (timestamp, offset) for each tp -> time (ms, -1 latest,
        -2 earliest). A time later than every message answers (-1, -1) (KIP-79); read_committed,
        so does a time first reached at or after the last stable offset (as Kafka answers)."""
        by_node: dict[int, dict[str, list[tuple[int, int]]]] = {}
        for tp, ts in wanted.items():
            self._leader_conn(tp)
            by_node.setdefault(self._leaders[tp], {}).setdefault(tp[0], []).append((tp[1], ts))
        out: dict[TopicPartition, tuple[int, int]] = {}
        for node, topics in by_node.items():
            body = self._call(
                self._conn(self._nodes[node]),
                ApiKey.LIST_OFFSETS,
                _LIST_OFFSETS_VERSION,
                {
                    "replica_id": -1,
                    "isolation_level": self._isolation_level,
                    "topics": [
                        {
                            "name": t,
                            "partitions": [
                                {"partition_index": p, "timestamp": ts} for p, ts in parts
                            ],
                        }
                        for t, parts in topics.items()
                    ],
                },
            )
            for topic in body.topics:
                for p in topic.partitions:
                    if p.error_code != ErrorCode.NONE:
                        if p.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                            raise UnknownTopicError(
                                f"topic {topic.name!r} partition {p.partition_index} does not "
                                f"exist (ListOffsets); was the topic deleted?"
                            )
                        raise BrokerResponseError(
                            f"ListOffsets for {topic.name}[{p.partition_index}] failed: "
                            f"{error_name(p.error_code)}",
                            error_code=p.error_code,
                        )
                    out[(topic.name, p.partition_index)] = (p.timestamp, p.offset)
        return out

    # -- data -------------------------------------------------------------------------------
    def fetch(
        self, tp: TopicPartition, offset: int, max_bytes: int, *, max_wait_ms: int = 0
    ) -> FetchResult:
        body = self._call(
            self._leader_conn(tp),
            ApiKey.FETCH,
            _FETCH_VERSION,
            {
                "replica_id": -1,
                "max_wait_ms": max_wait_ms,
                "min_bytes": 1,
                "max_bytes": max_bytes,
                "isolation_level": self._isolation_level,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": tp[0],
                        "partitions": [
                            {
                                "partition": tp[1],
                                "current_leader_epoch": -1,
                                "fetch_offset": offset,
                                "log_start_offset": -1,
                                "partition_max_bytes": max_bytes,
                            }
                        ],
                    }
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            },
        )
        for topic in body.responses:
            for p in topic.partitions:
                if topic.topic == tp[0] and p.partition_index == tp[1]:
                    aborted = p.aborted_transactions
                    return FetchResult(
                        p.error_code,
                        p.high_watermark,
                        bytes(p.records or b""),
                        p.last_stable_offset,
                        None
                        if not self._isolation_level
                        else tuple((a.producer_id, a.first_offset) for a in aborted or ()),
                    )
        raise BrokerResponseError(
            f"fetch response for {tp[0]}[{tp[1]}] lacks that partition",
            error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
        )

    def produce(
        self, topic: str, record_sets: dict[int, bytes], *, acks: int, timeout_ms: int
    ) -> dict[int, ProduceResult]:
        """Produce v8 of one record batch per partition; partition -> result (error code
        included: the caller decides, since a writer must check every one)."""
        by_node: dict[int, dict[int, bytes]] = {}
        for partition, record_set in record_sets.items():
            self._leader_conn((topic, partition))
            by_node.setdefault(self._leaders[(topic, partition)], {})[partition] = record_set
        out: dict[int, ProduceResult] = {}
        for node, sets in by_node.items():
            body = self._call(
                self._conn(self._nodes[node]),
                ApiKey.PRODUCE,
                _PRODUCE_VERSION,
                {
                    "transactional_id": None,
                    "acks": acks,
                    "timeout_ms": timeout_ms,
                    "topic_data": [
                        {
                            "name": topic,
                            "partition_data": [
                                {"index": p, "records": rs} for p, rs in sets.items()
                            ],
                        }
                    ],
                },
            )
            for t in body.responses:
                for p in t.partition_responses:
                    out[p.index] = ProduceResult(p.error_code, p.base_offset)
        for partition in record_sets:
            if partition not in out:
                out[partition] = ProduceResult(ErrorCode.UNKNOWN_SERVER_ERROR, -1)
        return out
