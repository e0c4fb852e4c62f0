"""``chronolog cluster``: a cluster as an operator sees it, read over the Kafka protocol from any
of its brokers (like Kafka's kafka-topics.sh --describe and kafka-reassign-partitions.sh).

    chronolog cluster --bootstrap-server HOST:PORT describe [TOPIC ...]
    chronolog cluster --bootstrap-server HOST:PORT elect-leaders [TOPIC[:PARTITION] ...]

``describe`` prints the live brokers (the controller marked), then one row per partition:
leader, leader epoch, replicas, in-sync replicas, offline replicas, and the ongoing
reassignments. ``elect-leaders`` moves leadership back to each partition's preferred replica
(all partitions when none are named). Exit status 0, or 1 with a message on stderr when no broker
answers or one answers with an error.

Requests: Metadata v12, ListPartitionReassignments v0 and ElectLeaders v1 (to the controller).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from broker.health import parse_host_port
from client import BrokerConnection, BrokerConnectionError, ConnectError, error_name
from protocol.api import ApiKey
from protocol.errors import ErrorCode


class ClusterToolError(Exception):
    """Raised when a broker answers with an error; the message says which and what to do."""


def _connect(host: str, port: int, timeout: float) -> BrokerConnection:
    return BrokerConnection(host, port, client_id="chronolog-cluster", timeout_s=timeout)


def _metadata(conn: BrokerConnection, topics: Sequence[str]) -> Any:
    body = {
        "topics": [{"name": t} for t in topics] if topics else None,
        "allow_auto_topic_creation": False,
    }
    return conn.call(ApiKey.METADATA, 12, body)


def describe(host: str, port: int, topics: Sequence[str], timeout: float = 10.0) -> str:
    """The text ``describe`` prints."""
    with _connect(host, port, timeout) as conn:
        meta = _metadata(conn, topics)
    brokers = {b.node_id: b for b in meta.brokers}
    lines = [f"cluster {meta.cluster_id}: {len(brokers)} live brokers"]
    for node_id in sorted(brokers):
        b = brokers[node_id]
        mark = "  (controller)" if node_id == meta.controller_id else ""
        rack = f"  rack {b.rack}" if b.rack else ""
        lines.append(f"  broker {node_id}  {b.host}:{b.port}{rack}{mark}")
    ongoing = {}
    controller = brokers.get(meta.controller_id)
    answer = None
    if controller is not None:
        try:
            with _connect(controller.host, controller.port, timeout) as conn:
                answer = conn.call(
                    ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": int(timeout * 1000)}
                )
        except BrokerConnectionError:
            answer = None  # a single broker (no reassignments to list) or a controller moving
        if answer is not None and answer.error_code == 0:
            for t in answer.topics:
                for p in t.partitions:
                    ongoing[(t.name, p.partition_index)] = (p.adding_replicas, p.removing_replicas)
    for topic in sorted(meta.topics, key=lambda t: t.name or ""):
        if topic.error_code:
            lines.append(f"topic {topic.name}: {error_name(topic.error_code)}")
            continue
        internal = "  (internal)" if topic.is_internal else ""
        lines.append(f"topic {topic.name}: {len(topic.partitions)} partitions{internal}")
        for p in sorted(topic.partitions, key=lambda p: p.partition_index):
            row = (
                f"  partition {p.partition_index}  leader {p.leader_id}  epoch {p.leader_epoch}"
                f"  replicas {_ids(p.replica_nodes)}  isr {_ids(p.isr_nodes)}"
            )
            if p.offline_replicas:
                row += f"  offline {_ids(p.offline_replicas)}"
            moving = ongoing.get((topic.name, p.partition_index))
            if moving is not None:
                row += f"  reassigning: adding {_ids(moving[0])} removing {_ids(moving[1])}"
            if p.error_code:
                row += f"  ({error_name(p.error_code)})"
            lines.append(row)
    return "\n".join(lines)


def _ids(ids: Iterable[int]) -> str:
    return ",".join(str(i) for i in ids) or "-"


def elect_leaders(host: str, port: int, targets: Sequence[str], timeout: float = 30.0) -> str:
    with _connect(host, port, timeout) as conn:
        meta = _metadata(conn, [])
    controller = next((b for b in meta.brokers if b.node_id == meta.controller_id), None)
    if controller is None:
        raise ClusterToolError("the cluster has no controller now; try again in a moment")
    wanted = None
    if targets:
        by_topic: dict[str, list[int]] = {}
        for target in targets:
            name, _, partition = target.partition(":")
            topic = next((t for t in meta.topics if t.name == name), None)
            if topic is None:
                raise ClusterToolError(f"no topic {name!r} in the cluster")
            parts = [int(partition)] if partition else [p.partition_index for p in topic.partitions]
            by_topic.setdefault(name, []).extend(parts)
        wanted = [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]
    body = {"election_type": 0, "topic_partitions": wanted, "timeout_ms": int(timeout * 1000)}
    with _connect(controller.host, controller.port, timeout) as conn:
        answer = conn.call(ApiKey.ELECT_LEADERS, 1, body)
    if answer.error_code:
        raise ClusterToolError(f"ElectLeaders refused: {error_name(answer.error_code)}")
    lines = []
    for result in answer.replica_election_results:
        for p in result.partition_result:
            if p.error_code == 0:
                outcome = "preferred replica elected"
            elif p.error_code == ErrorCode.ELECTION_NOT_NEEDED:
                outcome = "already led by its preferred replica"
            else:
                outcome = error_name(p.error_code) + (
                    f": {p.error_message}" if p.error_message else ""
                )
            lines.append(f"{result.topic}-{p.partition_id}: {outcome}")
    return "\n".join(lines) or "every partition is led by its preferred replica"


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="chronolog cluster", description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per request")
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("describe", help="brokers, leaders, replicas, ISR, reassignments")
    d.add_argument("topics", nargs="*", metavar="TOPIC")
    e = sub.add_parser("elect-leaders", help="preferred replicas lead again")
    e.add_argument("targets", nargs="*", metavar="TOPIC[:PARTITION]")
    args = parser.parse_args(list(argv))
    try:
        host, port = parse_host_port(args.bootstrap_server)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    try:
        if args.command == "describe":
            print(describe(host, port, args.topics, args.timeout))
        else:
            print(elect_leaders(host, port, args.targets, args.timeout))
    except (BrokerConnectionError, ConnectError) as exc:
        print(f"chronolog cluster: cannot reach {args.bootstrap_server}: {exc}", file=sys.stderr)
        return 1
    except ClusterToolError as exc:
        print(f"chronolog cluster: {exc}", file=sys.stderr)
        return 1
    return 0
