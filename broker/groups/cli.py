"""``chronolog groups``: consumer groups as a person sees them, read from a running broker over
the Kafka protocol (like Kafka's kafka-consumer-groups.sh).

    chronolog groups --bootstrap-server HOST:PORT list
    chronolog groups --bootstrap-server HOST:PORT describe GROUP [GROUP ...]

``describe`` prints the group's state and members, then one row per partition the group has
committed offsets for or has assigned: committed offset, log end offset, lag, and the member
that owns it. Exit status 0, or 1 with a message on stderr when the broker cannot be reached
or answers with an error.

Requests: FindCoordinator v0, DescribeGroups v0, ListGroups v0, Metadata v1 (all topics),
OffsetFetch v1 (every partition of every non-internal topic: v1 cannot ask for "all"),
ListOffsets v1 (latest).
"""

from __future__ import annotations

import argparse
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from broker.health import parse_host_port
from client import BrokerConnection, BrokerConnectionError, ConnectError, error_name
from protocol.api import ApiKey

LATEST = -1


class GroupsToolError(Exception):
    """Raised when the broker answers a request with an error; the message says which request
    and what to do. (A broker that cannot be reached raises client.BrokerConnectionError.)"""


def _connect(host: str, port: int, timeout: float) -> BrokerConnection:
    return BrokerConnection(host, port, client_id="chronolog-groups", timeout_s=timeout)


def decode_assignment(buf: bytes) -> list[tuple[str, int]]:
    """Kafka's ConsumerProtocol assignment: int16 version, [STRING topic, [int32 partition]],
    BYTES user_data. Raises ValueError when ``buf`` is not one."""
    try:
        pos = 2
        (n_topics,) = struct.unpack_from(">i", buf, pos)
        pos += 4
        out = []
        for _ in range(max(n_topics, 0)):
            (n,) = struct.unpack_from(">h", buf, pos)
            if n < 0 or pos + 2 + n > len(buf):
                raise struct.error(f"topic name of {n} bytes at byte {pos} overruns the buffer")
            topic = bytes(buf[pos + 2 : pos + 2 + n]).decode()
            pos += 2 + n
            (n_parts,) = struct.unpack_from(">i", buf, pos)
            pos += 4
            parts = struct.unpack_from(f">{max(n_parts, 0)}i", buf, pos)
            pos += 4 * len(parts)
            out.extend((topic, p) for p in parts)
        return out
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"not a consumer assignment: {exc}") from None


@dataclass
class PartitionRow:
    topic: str
    partition: int
    committed: int
    log_end: int | None
    member: str
    host: str
    client: str

    @property
    def lag(self) -> str:
        if self.committed < 0 or self.log_end is None:
            return "-"
        return str(max(self.log_end - self.committed, 0))


def _coordinator(bootstrap: BrokerConnection, group: str, timeout: float) -> BrokerConnection:
    r = bootstrap.call(ApiKey.FIND_COORDINATOR, 0, {"key": group})
    if r.error_code != 0:
        raise GroupsToolError(
            f"no coordinator for group {group!r}: {error_name(r.error_code)}; retry in a moment"
        )
    if f"{r.host}:{r.port}" == bootstrap.address:
        return bootstrap
    return _connect(r.host, r.port, timeout)


def list_groups(client: BrokerConnection) -> list[tuple[str, str]]:
    r = client.call(ApiKey.LIST_GROUPS, 0, {})
    if r.error_code != 0:
        raise GroupsToolError(
            f"ListGroups to {client.address} failed: "
            f"{error_name(r.error_code)}; check the broker log and retry"
        )
    return sorted((g.group_id, g.protocol_type) for g in r.groups)


def describe_group(bootstrap: BrokerConnection, group: str, timeout: float):
    """(DescribeGroups entry, partition rows) for one group."""
    coordinator = _coordinator(bootstrap, group, timeout)
    try:
        (g,) = coordinator.call(ApiKey.DESCRIBE_GROUPS, 0, {"groups": [group]}).groups
        if g.error_code != 0:
            raise GroupsToolError(
                f"DescribeGroups for {group!r} to {coordinator.address} "
                f"failed: {error_name(g.error_code)}; check the broker log "
                "and retry"
            )
        owners: dict[tuple[str, int], tuple[str, str, str]] = {}
        if g.protocol_type == "consumer":
            for m in g.members:
                try:
                    for tp in decode_assignment(m.member_assignment):
                        owners[tp] = (m.member_id, m.client_host, m.client_id)
                except ValueError:
                    pass  # still rebalancing (empty assignment) or another client's format
        meta = bootstrap.call(ApiKey.METADATA, 1, {"topics": None})
        topics = {
            t.name: [p.partition_index for p in t.partitions]
            for t in meta.topics
            if not t.is_internal and t.error_code == 0
        }
        request = [
            {"name": t, "partition_indexes": sorted(parts)} for t, parts in sorted(topics.items())
        ]
        committed: dict[tuple[str, int], int] = {}
        if request:
            r = coordinator.call(ApiKey.OFFSET_FETCH, 1, {"group_id": group, "topics": request})
            for t in r.topics:
                for p in t.partitions:
                    if p.error_code != 0:
                        raise GroupsToolError(
                            f"OffsetFetch for {group!r} {t.name}-{p.partition_index} to "
                            f"{coordinator.address} failed: {error_name(p.error_code)}; "
                            "check the broker log and retry"
                        )
                    if p.committed_offset >= 0:
                        committed[(t.name, p.partition_index)] = p.committed_offset
        wanted = sorted(set(committed) | set(owners))
        log_end: dict[tuple[str, int], int] = {}
        if wanted:
            by_topic: dict[str, list[int]] = {}
            for t, p in wanted:
                by_topic.setdefault(t, []).append(p)
            r = bootstrap.call(
                ApiKey.LIST_OFFSETS,
                1,
                {
                    "replica_id": -1,
                    "topics": [
                        {
                            "name": t,
                            "partitions": [{"partition_index": p, "timestamp": LATEST} for p in ps],
                        }
                        for t, ps in by_topic.items()
                    ],
                },
            )
            for t in r.topics:
                for p in t.partitions:
                    if p.error_code == 0:
                        log_end[(t.name, p.partition_index)] = p.offset
        rows = [
            PartitionRow(
                t,
                p,
                committed.get((t, p), -1),
                log_end.get((t, p)),
                *owners.get((t, p), ("-", "-", "-")),
            )
            for t, p in wanted
        ]
        return g, rows
    finally:
        if coordinator is not bootstrap:
            coordinator.close()


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="chronolog groups",
        description="List consumer groups, or describe them with members, committed offsets "
        "and lag, from a running broker.",
    )
    parser.add_argument(
        "--bootstrap-server",
        required=True,
        type=parse_host_port,
        metavar="HOST:PORT",
        help="any broker address",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        help="seconds allowed for each network operation (default 10)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every group the broker knows, with its protocol type")
    describe = sub.add_parser("describe", help="state, members, offsets and lag")
    describe.add_argument("groups", nargs="+", metavar="GROUP")
    args = parser.parse_args(argv)

    host, port = args.bootstrap_server
    try:
        client = _connect(host, port, args.timeout)
        try:
            if args.command == "list":
                groups = list_groups(client)
                if groups:
                    print(
                        _table([["GROUP", "PROTOCOL-TYPE"]] + [[g, pt or "-"] for g, pt in groups])
                    )
                return 0
            for i, group in enumerate(args.groups):
                g, rows = describe_group(client, group, args.timeout)
                if i:
                    print()
                print(
                    f"GROUP {group}  STATE {g.group_state}  PROTOCOL-TYPE "
                    f"{g.protocol_type or '-'}  PROTOCOL {g.protocol_data or '-'}  MEMBERS "
                    f"{len(g.members)}"
                )
                if g.members:
                    print(
                        _table(
                            [["MEMBER-ID", "CLIENT-ID", "HOST"]]
                            + [[m.member_id, m.client_id, m.client_host or "-"] for m in g.members]
                        )
                    )
                if rows:
                    print(
                        _table(
                            [
                                [
                                    "TOPIC",
                                    "PARTITION",
                                    "CURRENT-OFFSET",
                                    "LOG-END-OFFSET",
                                    "LAG",
                                    "CONSUMER-ID",
                                    "HOST",
                                    "CLIENT-ID",
                                ]
                            ]
                            + [
                                [
                                    r.topic,
                                    str(r.partition),
                                    str(r.committed) if r.committed >= 0 else "-",
                                    str(r.log_end) if r.log_end is not None else "-",
                                    r.lag,
                                    r.member,
                                    r.host or "-",
                                    r.client,
                                ]
                                for r in rows
                            ]
                        )
                    )
            return 0
        finally:
            client.close()
    except GroupsToolError as exc:
        print(f"chronolog groups: {exc}", file=sys.stderr)
        return 1
    except ConnectError as exc:
        print(
            f"chronolog groups: cannot connect to {exc.address}: {exc.reason}; is the broker "
            "running and is --bootstrap-server right?",
            file=sys.stderr,
        )
        return 1
    except BrokerConnectionError as exc:
        print(
            f"chronolog groups: broker at {exc.address}: {exc}; check the broker log and retry",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
