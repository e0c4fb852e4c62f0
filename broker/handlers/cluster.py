"""DescribeCluster v0-v2, DescribeLogDirs v0-v4 and AlterReplicaLogDirs v1-v2, as Kafka 4.1's
broker answers them.

DescribeCluster: this broker is the whole cluster and its controller. Asked for the cluster's
authorized operations, it reports every operation Kafka supports on the CLUSTER resource (what
Kafka reports without an authorizer). An endpoint type other than "broker" answers
MISMATCHED_ENDPOINT_TYPE or UNSUPPORTED_ENDPOINT_TYPE (v0: INVALID_REQUEST), as Kafka does. v2
(KIP-1073) may ask for fenced brokers too: no broker here is ever fenced, so the answer is the
same and says so (is_fenced false).

DescribeLogDirs: every log dir with its partitions (those asked for, or all when the topic list
is null): size in bytes, offset lag 0 (the only replica is the leader); a partition being moved
here (AlterReplicaLogDirs) is listed as a future replica too (is_future_key true), with the bytes
copied so far and, while it is behind, an offset lag counted from the first segment not yet
wholly copied (the copy is of files, so it knows no finer end offset); v4 adds the file
system's total and usable bytes. An offline log dir (KIP-112) answers
KAFKA_STORAGE_ERROR and no partitions. Partitions the request names that are not here are left
out, as Kafka leaves them out.

AlterReplicaLogDirs: each partition's answer at once (broker/replica_moves.py): NONE when its
move is under way or it is already in that dir, LOG_DIR_NOT_FOUND for a path that is not one of
log.dirs as configured (absolute, as Kafka compares it), KAFKA_STORAGE_ERROR for an offline dir
or partition, REPLICA_NOT_AVAILABLE when this broker has no replica of a partition the cluster
has, UNKNOWN_TOPIC_OR_PARTITION for one it does not (either is created in that dir if it comes). A partition named twice takes its last dir, as Kafka's map does.
"""

from __future__ import annotations

import os
from typing import Any


from broker import workers
from broker.context import BrokerContext
from broker.slices import Slices
from protocol.api import Request
from storage import Log
from storage.replica_move import FutureLog
from protocol.errors import ErrorCode

BROKER_ENDPOINT, CONTROLLER_ENDPOINT = 1, 2
_ENDPOINT_NAMES = {BROKER_ENDPOINT: "BROKER", CONTROLLER_ENDPOINT: "CONTROLLER"}
NOT_REQUESTED = -(2**31)  # the schema's default: operations not asked for
# AclEntry.supportedOperations(CLUSTER): CREATE, ALTER, DESCRIBE, CLUSTER_ACTION,
# DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE (AclOperation codes 5, 7-12).
CLUSTER_OPERATIONS = sum(1 << code for code in (5, 7, 8, 9, 10, 11, 12))


async def handle_describe_cluster(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    version = request.header.api_version
    body = request.body
    wanted = body.endpoint_type
    config = ctx.config
    answer = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "endpoint_type": BROKER_ENDPOINT,
        "cluster_id": ctx.cluster_id,
        "controller_id": config.broker_id,
        "brokers": [
            {
                "broker_id": config.broker_id,
                "host": config.advertised_host,
                "port": config.advertised_port,
                "rack": None,
                "is_fenced": False,
            }
        ],
        "cluster_authorized_operations": (
            CLUSTER_OPERATIONS if body.include_cluster_authorized_operations else NOT_REQUESTED
        ),
    }
    if wanted not in _ENDPOINT_NAMES:
        code = ErrorCode.INVALID_REQUEST if version == 0 else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
        message = f"Unsupported endpoint type {wanted}"
    elif wanted != BROKER_ENDPOINT:
        code = ErrorCode.INVALID_REQUEST if version == 0 else ErrorCode.MISMATCHED_ENDPOINT_TYPE
        message = (
            "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of "
            f"type {_ENDPOINT_NAMES[wanted]}"
        )
    else:
        return answer
    return {
        **answer,
        "error_code": int(code),
        "error_message": message,
        "cluster_id": "",
        "controller_id": -1,
        "brokers": [],
        "cluster_authorized_operations": NOT_REQUESTED,
    }


def _space(path: str) -> tuple[int, int]:
    """(total, usable) bytes of the file system holding ``path``; (-1, -1) when unknown."""
    try:
        st = os.statvfs(path)
    except OSError:
        return -1, -1
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


async def handle_describe_log_dirs(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    manager = ctx.log_manager
    asked = request.body.topics
    wanted = None if asked is None else {(t.topic, p) for t in asked for p in t.partitions}
    results = []
    for log_dir in manager.log_dirs:
        if log_dir in manager.offline_dirs:
            results.append(
                {
                    "error_code": int(ErrorCode.KAFKA_STORAGE_ERROR),
                    "log_dir": log_dir,
                    "topics": [],
                    "total_bytes": -1,
                    "usable_bytes": -1,
                }
            )
            continue
        topics: dict[str, list[dict[str, Any]]] = {}
        slices = Slices()
        for topic, partition in manager.partitions_in(log_dir):
            if wanted is not None and (topic, partition) not in wanted:
                continue
            await slices.turn()
            async with ctx.locked_log(topic, partition) as log:
                if log is None:
                    continue
                size = log.size
            topics.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "partition_size": size,
                    "offset_lag": 0,
                    "is_future_key": False,
                }
            )
        for future in manager.futures_in(log_dir):
            key = (future.topic, future.partition)
            current = manager.get_log(*key)
            if current is None or (wanted is not None and key not in wanted):
                continue
            topics.setdefault(future.topic, []).append(
                {
                    "partition_index": future.partition,
                    "partition_size": future.size,
                    "offset_lag": _future_lag(current, future),
                    "is_future_key": True,
                }
            )
        total, usable = await workers.run_sync(_space, log_dir)
        results.append(
            {
                "error_code": 0,
                "log_dir": log_dir,
                "topics": [{"name": t, "partitions": ps} for t, ps in sorted(topics.items())],
                "total_bytes": total,
                "usable_bytes": usable,
            }
        )
    return {"throttle_time_ms": 0, "error_code": 0, "results": results}


def _future_lag(current: Log, future: FutureLog) -> int:
    """How many offsets the future log may still lack (see the module docstring)."""
    if future.first_incomplete_base is None and future.remaining == 0:
        return 0
    base = future.first_incomplete_base
    start = current.active_segment.base_offset if base is None else base
    return max(0, current.log_end_offset - start)


async def handle_alter_replica_log_dirs(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    asked: dict[tuple[str, int], str] = {}
    for d in request.body.dirs:
        for t in d.topics:
            for p in t.partitions:
                asked[(t.name, p)] = d.path
    results: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), path in asked.items():
        code = await ctx.replica_moves.alter(topic, partition, path)
        results.setdefault(topic, []).append(
            {"partition_index": partition, "error_code": int(code)}
        )
    return {
        "throttle_time_ms": 0,
        "results": [{"topic_name": t, "partitions": ps} for t, ps in results.items()],
    }
