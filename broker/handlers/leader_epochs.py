"""OffsetForLeaderEpoch v0-v4 on a single broker, as Kafka 4.1's only broker answers it.

Java clients (and librdkafka) ask it after a leader epoch change to check their position was not
truncated away (KIP-101, KIP-320); Kafka serves it on a single broker too. This broker has led
every partition at epoch 0 since its creation (Metadata says so), so a request naming another
current epoch is refused as a leader refuses it (FENCED_LEADER_EPOCH below, UNKNOWN_LEADER_EPOCH
above), and the end offset of the requested epoch comes from the log's leader epoch cache. A
partition with no batch yet has an empty cache where Kafka's has epoch 0 from the log end offset
(written when it became leader): epoch 0 then ends at the log end offset, as there. In a cluster
broker/cluster/handlers.py serves the api instead.
"""

from __future__ import annotations

from typing import Any

from broker.context import BrokerContext
from broker.handlers.list_offsets import LEADER_EPOCH
from protocol.api import Request
from protocol.errors import ErrorCode
from storage.leader_epoch import UNDEFINED_EPOCH, EpochEndOffset


def _epoch_error(current_leader_epoch: int) -> ErrorCode:
    """KIP-320: -1 asks for no check; any other epoch must be this leader's."""
    if current_leader_epoch == -1 or current_leader_epoch == LEADER_EPOCH:
        return ErrorCode.NONE
    if current_leader_epoch < LEADER_EPOCH:
        return ErrorCode.FENCED_LEADER_EPOCH
    return ErrorCode.UNKNOWN_LEADER_EPOCH


async def handle_offset_for_leader_epoch(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    topics = []
    for topic in request.body.topics:
        parts = []
        for p in topic.partitions:
            error = _epoch_error(p.current_leader_epoch)
            found = EpochEndOffset(UNDEFINED_EPOCH, -1)
            if error == ErrorCode.NONE:
                async with ctx.locked_log(topic.topic, p.partition) as log:
                    if log is None:
                        error = (
                            ErrorCode.KAFKA_STORAGE_ERROR
                            if ctx.is_offline(topic.topic, p.partition)
                            else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                        )
                    elif log.leader_epochs.latest_epoch == UNDEFINED_EPOCH:
                        if p.leader_epoch == LEADER_EPOCH:
                            found = EpochEndOffset(LEADER_EPOCH, log.log_end_offset)
                    else:
                        found = log.leader_epochs.end_offset_for(p.leader_epoch, log.log_end_offset)
            parts.append(
                {
                    "error_code": int(error),
                    "partition": p.partition,
                    "leader_epoch": found.epoch,
                    "end_offset": found.end_offset,
                }
            )
        topics.append({"topic": topic.topic, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
