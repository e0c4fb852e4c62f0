"""The broker's view of the cluster (Kafka's MetadataCache) and the cluster's Metadata answers.

The cache is what the controller's last UpdateMetadata said: the live brokers, the controller,
and every partition's leader, leader epoch, replicas, ISR and offline replicas. Each
UpdateMetadata from this controller carries the whole cluster, so it replaces the cache (a
deliberate simplification of Kafka's incremental updates: a small cluster's full state is a few
kilobytes).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from broker.cluster.zk import SECURITY_PROTOCOL_IDS, BrokerInfo, Endpoint
from broker.config import topic_name_error
from broker.context import INTERNAL_TOPICS
from broker.handlers.metadata import describe_topic_partitions_answer
from protocol.api import Request
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.context import BrokerContext

logger = structlog.get_logger(__name__)

NO_AUTHORIZED_OPERATIONS = -2147483648


@dataclass(frozen=True)
class PartitionInfo:
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]
    zk_version: int = -1


_PROTOCOLS = {number: name for name, number in SECURITY_PROTOCOL_IDS.items()}


class MetadataCache:
    """See the module docstring. Trio thread only."""

    def __init__(self) -> None:
        self.controller_id = -1
        self.controller_epoch = -1
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, dict[int, PartitionInfo]] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}

    def update(self, body: Any) -> None:
        """Replace the cache with an UpdateMetadata request's contents."""
        self.controller_id = body.controller_id
        self.controller_epoch = body.controller_epoch
        self.brokers = {
            b.id: BrokerInfo(
                b.id,
                b.endpoints[0].host,
                b.endpoints[0].port,
                b.rack,
                listeners=tuple(
                    Endpoint(e.listener, _PROTOCOLS.get(e.security_protocol, ""), e.host, e.port)
                    for e in b.endpoints
                ),
            )
            for b in body.live_brokers
            if b.endpoints
        }
        topics: dict[str, dict[int, PartitionInfo]] = {}
        ids: dict[str, uuid.UUID] = {}
        for t in body.topic_states:
            parts = topics.setdefault(t.topic_name, {})
            if t.topic_id is not None and t.topic_id.int:
                ids[t.topic_name] = t.topic_id
            for p in t.partition_states:
                parts[p.partition_index] = PartitionInfo(
                    p.leader,
                    p.leader_epoch,
                    tuple(p.replicas),
                    tuple(p.isr),
                    tuple(p.offline_replicas),
                    p.zk_version,
                )
        self.topics = topics
        self.topic_ids = ids

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        parts = self.topics.get(topic)
        return None if parts is None else parts.get(partition)

    def leader_epoch(self, topic: str, partition: int) -> int:
        info = self.partition(topic, partition)
        return -1 if info is None else info.leader_epoch


def _partitions(cache: MetadataCache, name: str) -> list[dict[str, Any]]:
    out = []
    for index, info in sorted(cache.topics.get(name, {}).items()):
        error = ErrorCode.NONE if info.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE
        out.append(
            {
                "error_code": int(error),
                "partition_index": index,
                "leader_id": info.leader,
                "leader_epoch": info.leader_epoch,
                "replica_nodes": list(info.replicas),
                "isr_nodes": list(info.isr),
                "offline_replicas": list(info.offline),
            }
        )
    return out


async def handle_cluster_metadata(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    """Metadata v0-v12 from the cache: every live broker, the controller, each partition's
    leader, leader epoch, replicas, ISR and offline replicas. Unknown topics are auto-created
    through ZooKeeper (auto.create.topics.enable, default.replication.factor) and answer
    LEADER_NOT_AVAILABLE until the controller has elected their leaders."""
    cluster = ctx.cluster
    assert cluster is not None
    cache = cluster.metadata
    version = request.header.api_version
    requested = request.body.topics
    allow_create = request.body.allow_auto_topic_creation if version >= 4 else True
    if requested is None or (version == 0 and len(requested) == 0):
        wanted = [(name, None) for name in sorted(cache.topics)]
    else:
        wanted = list(
            dict.fromkeys((t.name, t.topic_id if t.name is None else None) for t in requested)
        )
    by_id = {v: k for k, v in cache.topic_ids.items()}
    topics = []
    for name, topic_id in wanted:
        error, partitions = ErrorCode.NONE, []
        if name is None:
            name = by_id.get(topic_id)
            if name is None:
                error = ErrorCode.UNKNOWN_TOPIC_ID
        if name is not None and name in cache.topics:
            partitions = _partitions(cache, name)
        elif name is not None and error == ErrorCode.NONE:
            if topic_name_error(name):
                error = ErrorCode.INVALID_TOPIC_EXCEPTION
            elif name in INTERNAL_TOPICS:
                error = ErrorCode.LEADER_NOT_AVAILABLE
            elif ctx.config.auto_create_topics_enable and allow_create and not ctx.stopping:
                error = await cluster.auto_create(name)
            else:
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        topics.append(
            {
                "error_code": int(error),
                "name": name,
                "topic_id": cache.topic_ids.get(name) if name is not None else None,
                "is_internal": name in INTERNAL_TOPICS,
                "partitions": partitions,
                "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
            }
        )
    brokers = cache.brokers or {cluster.broker_id: cluster.me}
    return {
        "throttle_time_ms": 0,
        "brokers": [
            {"node_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack}
            for b in sorted(brokers.values(), key=lambda b: b.broker_id)
        ],
        "cluster_id": ctx.cluster_id,
        "controller_id": cache.controller_id,
        "topics": topics,
        "cluster_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }


async def handle_cluster_describe_topic_partitions(
    ctx: BrokerContext, request: Request
) -> dict[str, Any]:
    """DescribeTopicPartitions from the cache (broker/handlers/metadata.py pages it)."""
    cluster = ctx.cluster
    assert cluster is not None
    cache = cluster.metadata

    def partitions_of(name: str) -> list[dict[str, Any]] | None:
        return _partitions(cache, name) if name in cache.topics else None

    return describe_topic_partitions_answer(
        request, list(cache.topics), partitions_of, cache.topic_ids.get
    )
