"""``chronolog groups``: consumer groups as a person sees them, read and changed on a running
broker over the Kafka protocol (like Kafka's kafka-consumer-groups.sh).

    chronolog groups --bootstrap-server HOST:PORT list [--state STATE ...]
    chronolog groups --bootstrap-server HOST:PORT describe GROUP [GROUP ...]
    chronolog groups --bootstrap-server HOST:PORT reset-offsets --group G --topic T
        (--to-earliest | --to-latest | --to-datetime ISO-8601) [--dry-run]
    chronolog groups --bootstrap-server HOST:PORT delete --group G [--group G ...]

``describe`` prints the group's state, generation (from its last group-metadata record in
``__consumer_offsets``) and members, then one row per partition the group has committed
offsets for or has assigned: committed offset, log end offset, lag, and the member that owns
it. ``reset-offsets`` commits, for every partition of the topic, the earliest or latest offset
or the first offset whose timestamp is at or after the given time (the latest when none is,
as Kafka); like Kafka it refuses while the group has members. A date and time without a zone
is local time, as kafka-consumer-groups.sh reads it. ``delete`` removes groups that have no
members, with their committed offsets.

Exit status 0, or 1 with a message on stderr naming the broker and what to do when the broker
cannot be reached or refuses.

Requests: FindCoordinator v0, ListGroups v4, DescribeGroups v4, Metadata v1, OffsetFetch v2
(every committed partition), ListOffsets v1, Fetch v4 (``__consumer_offsets``, for the
generation), OffsetCommit v2, DeleteGroups v1.
"""

from __future__ import annotations

import argparse
import struct
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from broker.groups.offsets import (
    GroupKey,
    GroupRecord,
    OffsetRecordError,
    decode_group_value,
    decode_key,
)
from broker.health import parse_host_port
from client import BrokerConnection, BrokerConnectionError, ConnectError, error_name
from protocol.api import ApiKey
from protocol.errors import ErrorCode, ProtocolError
from protocol.records import iter_deep
from protocol.schemas import Body

LATEST = -1
EARLIEST = -2
OFFSETS_TOPIC = "__consumer_offsets"
_FETCH_BYTES = 4 << 20


class GroupsToolError(Exception):
    """Raised when the broker answers a request with an error, or a request cannot be made
    as asked; the message names the broker and what to do. (A broker that cannot be reached
    raises client.BrokerConnectionError.)"""


def _connect(host: str, port: int, timeout: float) -> BrokerConnection:
    return BrokerConnection(host, port, client_id="chronolog-groups", timeout_s=timeout)


def decode_assignment(buf: bytes) -> list[tuple[str, int]]:
    """Kafka's ConsumerProtocol assignment: int16 version, [STRING topic, [int32 partition]],
    BYTES user_data. Raises ValueError when ``buf`` is not one."""
    try:
        pos = 2
        (n_topics,) = struct.unpack_from(">i", buf, pos)
        pos += 4
        out: list[tuple[str, int]] = []
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
            f"broker {bootstrap.address} found no coordinator for group {group!r}: "
            f"{error_name(r.error_code)}; retry in a moment"
        )
    if f"{r.host}:{r.port}" == bootstrap.address:
        return bootstrap
    return _connect(r.host, r.port, timeout)


def list_groups(client: BrokerConnection, states: Sequence[str] = ()) -> list[tuple[str, str, str]]:
    """(group id, protocol type, state) of every group, sorted."""
    r = client.call(ApiKey.LIST_GROUPS, 4, {"states_filter": list(states)})
    if r.error_code != 0:
        raise GroupsToolError(
            f"ListGroups to {client.address} failed: "
            f"{error_name(r.error_code)}; check the broker log and retry"
        )
    return sorted((g.group_id, g.protocol_type, g.group_state) for g in r.groups)


def _describe(coordinator: BrokerConnection, group: str) -> Body:
    g: Body
    (g,) = coordinator.call(ApiKey.DESCRIBE_GROUPS, 4, {"groups": [group]}).groups
    if g.error_code != 0:
        raise GroupsToolError(
            f"DescribeGroups for {group!r} to {coordinator.address} "
            f"failed: {error_name(g.error_code)}; check the broker log and retry"
        )
    return g


def stored_group_record(client: BrokerConnection, group: str) -> GroupRecord | None:
    """The group's last group-metadata record in ``__consumer_offsets`` (None when it has
    none, or it was deleted), read from the log start to its end."""
    wanted = [(OFFSETS_TOPIC, 0)]
    start = _list_offsets(client, wanted, EARLIEST).get(wanted[0])
    end = _list_offsets(client, wanted, LATEST).get(wanted[0])
    if start is None or end is None:
        return None
    position = start
    record: GroupRecord | None = None
    while position < end:
        f = client.call(
            ApiKey.FETCH,
            4,
            {
                "replica_id": -1,
                "max_wait_ms": 0,
                "min_bytes": 0,
                "max_bytes": _FETCH_BYTES,
                "isolation_level": 0,
                "topics": [
                    {
                        "topic": OFFSETS_TOPIC,
                        "partitions": [
                            {
                                "partition": 0,
                                "fetch_offset": position,
                                "partition_max_bytes": _FETCH_BYTES,
                            }
                        ],
                    }
                ],
            },
        )
        (p,) = f.responses[0].partitions
        if p.error_code != 0:
            raise GroupsToolError(
                f"reading {OFFSETS_TOPIC} from {client.address} failed at offset {position}: "
                f"{error_name(p.error_code)}; retry, or check the broker log"
            )
        last = position - 1
        try:
            for m in iter_deep(p.records or b""):
                last = max(last, m.offset)
                if m.offset < position or m.key is None:
                    continue
                try:
                    key = decode_key(m.key)
                    if isinstance(key, GroupKey) and key.group == group:
                        record = None if m.value is None else decode_group_value(m.value)
                except OffsetRecordError:
                    continue  # not a record of this format: skip it, as the broker does
        except ProtocolError as exc:
            raise GroupsToolError(
                f"{OFFSETS_TOPIC} from {client.address} does not decode at offset {position}: "
                f"{exc}; check the broker log"
            ) from None
        if last < position:
            break  # nothing more readable
        position = last + 1
    return record


def describe_group(
    bootstrap: BrokerConnection, group: str, timeout: float
) -> tuple[Body, int | None, list[PartitionRow]]:
    """(DescribeGroups entry, generation or None, partition rows) for one group."""
    coordinator = _coordinator(bootstrap, group, timeout)
    try:
        g = _describe(coordinator, group)
        owners: dict[tuple[str, int], tuple[str, str, str]] = {}
        if g.protocol_type == "consumer":
            for m in g.members:
                try:
                    for tp in decode_assignment(m.member_assignment):
                        owners[tp] = (m.member_id, m.client_host, m.client_id)
                except ValueError:
                    pass  # still rebalancing (empty assignment) or another client's format
        r = coordinator.call(ApiKey.OFFSET_FETCH, 2, {"group_id": group, "topics": None})
        if r.error_code != 0:
            raise GroupsToolError(
                f"OffsetFetch for {group!r} to {coordinator.address} failed: "
                f"{error_name(r.error_code)}; check the broker log and retry"
            )
        committed: dict[tuple[str, int], int] = {}
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
        log_end = _list_offsets(bootstrap, wanted, LATEST) if wanted else {}
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
        record = stored_group_record(coordinator, group)
        return g, None if record is None else record.generation, rows
    finally:
        if coordinator is not bootstrap:
            coordinator.close()


def _list_offsets(
    client: BrokerConnection, partitions: Sequence[tuple[str, int]], timestamp: int
) -> dict[tuple[str, int], int]:
    """ListOffsets v1 of ``partitions`` at ``timestamp`` (EARLIEST, LATEST or ms): -1 where
    no message has a timestamp at or after it; partitions in error are left out."""
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    r = client.call(
        ApiKey.LIST_OFFSETS,
        1,
        {
            "replica_id": -1,
            "topics": [
                {
                    "name": t,
                    "partitions": [{"partition_index": p, "timestamp": timestamp} for p in ps],
                }
                for t, ps in by_topic.items()
            ],
        },
    )
    return {
        (t.name, p.partition_index): p.offset
        for t in r.topics
        for p in t.partitions
        if p.error_code == 0
    }


def parse_datetime(value: str) -> int:
    """An ISO-8601 date and time as epoch milliseconds (no zone: local time). Raises
    ValueError saying what format is expected."""
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{value!r} is not an ISO-8601 date and time; use e.g. 2024-05-01T12:00:00Z or "
            "2024-05-01T14:00:00.000+02:00"
        ) from None
    return int(moment.timestamp() * 1000)


def reset_offsets(
    bootstrap: BrokerConnection,
    group: str,
    topic: str,
    target: int,
    timeout: float,
    *,
    execute: bool = True,
) -> list[tuple[int, int]]:
    """Commit for every partition of ``topic`` the offset ``target`` names (EARLIEST, LATEST,
    or a timestamp in ms: the first offset at or after it, the log end when none is). Refused
    while the group has members. Returns (partition, new offset), sorted; with ``execute``
    False nothing is committed."""
    coordinator = _coordinator(bootstrap, group, timeout)
    try:
        g = _describe(coordinator, group)
        if g.group_state not in ("Empty", "Dead"):
            raise GroupsToolError(
                f"group {group!r} on {coordinator.address} is {g.group_state} with "
                f"{len(g.members)} member(s): offsets can only be reset while the group is "
                "inactive; stop its consumers and retry"
            )
        # v4+: a tool must not create the topic it was given by mistake (v1 auto-creates)
        meta = bootstrap.call(
            ApiKey.METADATA,
            12,
            {"topics": [{"name": topic}], "allow_auto_topic_creation": False},
        )
        (t,) = meta.topics
        if t.error_code != 0:
            raise GroupsToolError(
                f"topic {topic!r} on {bootstrap.address}: {error_name(t.error_code)}; check "
                "the topic name"
            )
        parts = sorted(p.partition_index for p in t.partitions)
        if not parts:
            raise GroupsToolError(f"topic {topic!r} on {bootstrap.address} has no partitions")
        wanted = [(topic, p) for p in parts]
        found = _list_offsets(bootstrap, wanted, target)
        if target >= 0:  # by time: no message at or after it means the log end
            ends = _list_offsets(bootstrap, wanted, LATEST)
            found = {k: ends.get(k, -1) if v < 0 else v for k, v in found.items()}
        missing = [p for p in parts if found.get((topic, p), -1) < 0]
        if missing:
            raise GroupsToolError(
                f"broker {bootstrap.address} could not list offsets of {topic} partitions "
                f"{missing}; check the broker log (a log dir offline?) and retry"
            )
        new = [(p, found[(topic, p)]) for p in parts]
        if not execute:
            return new
        r = coordinator.call(
            ApiKey.OFFSET_COMMIT,
            2,
            {
                "group_id": group,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "retention_time_ms": -1,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {"partition_index": p, "committed_offset": o, "committed_metadata": ""}
                            for p, o in new
                        ],
                    }
                ],
            },
        )
        failed = {
            p.partition_index: p.error_code
            for t in r.topics
            for p in t.partitions
            if p.error_code != 0
        }
        if failed:
            codes = set(failed.values())
            hint = (
                "members joined meanwhile: stop the group's consumers and retry"
                if codes & {ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION}
                else "check the broker log and retry"
            )
            raise GroupsToolError(
                f"OffsetCommit for {group!r} to {coordinator.address} failed for {topic} "
                + ", ".join(f"{p}: {error_name(c)}" for p, c in sorted(failed.items()))
                + f"; {hint}"
            )
        return new
    finally:
        if coordinator is not bootstrap:
            coordinator.close()


def delete_groups(
    bootstrap: BrokerConnection, groups: Sequence[str], timeout: float
) -> dict[str, int]:
    """DeleteGroups for each group at its coordinator; group -> error code."""
    results = {}
    for group in dict.fromkeys(groups):
        coordinator = _coordinator(bootstrap, group, timeout)
        try:
            r = coordinator.call(ApiKey.DELETE_GROUPS, 1, {"groups_names": [group]})
            for x in r.results:
                results[x.group_id] = x.error_code
        finally:
            if coordinator is not bootstrap:
                coordinator.close()
    return results


_DELETE_HINTS: dict[int, str] = {
    ErrorCode.NON_EMPTY_GROUP: "it has active members; stop its consumers and retry",
    ErrorCode.GROUP_ID_NOT_FOUND: "no such group; see `chronolog groups list`",
}


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _print_description(
    group: str, g: Body, generation: int | None, rows: list[PartitionRow]
) -> None:
    print(
        f"GROUP {group}  STATE {g.group_state}  GENERATION "
        f"{generation if generation is not None else '-'}  PROTOCOL-TYPE "
        f"{g.protocol_type or '-'}  PROTOCOL {g.protocol_data or '-'}  MEMBERS "
        f"{len(g.members)}"
    )
    if g.members:
        print(
            _table(
                [["MEMBER-ID", "GROUP-INSTANCE-ID", "CLIENT-ID", "HOST"]]
                + [
                    [m.member_id, m.group_instance_id or "-", m.client_id, m.client_host or "-"]
                    for m in g.members
                ]
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chronolog groups",
        description="List, describe, reset or delete consumer groups on a running broker.",
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
    listing = sub.add_parser("list", help="every group the broker knows, its type and state")
    listing.add_argument(
        "--state", action="append", default=[], help="only groups in this state (repeatable)"
    )
    describe = sub.add_parser("describe", help="state, generation, members, offsets and lag")
    describe.add_argument("groups", nargs="+", metavar="GROUP")
    reset = sub.add_parser(
        "reset-offsets", help="commit new offsets for every partition of a topic"
    )
    reset.add_argument("--group", required=True)
    reset.add_argument("--topic", required=True)
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the log end offset")
    to.add_argument(
        "--to-datetime",
        metavar="ISO-8601",
        help="the first offset at or after this time (e.g. 2024-05-01T12:00:00Z; no zone: "
        "local time)",
    )
    reset.add_argument(
        "--dry-run", action="store_true", help="print the new offsets without committing them"
    )
    delete = sub.add_parser("delete", help="delete groups without members, with their offsets")
    delete.add_argument("--group", action="append", required=True, help="repeatable")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    host, port = args.bootstrap_server
    try:
        target = LATEST
        if args.command == "reset-offsets":
            if args.to_earliest:
                target = EARLIEST
            elif args.to_datetime is not None:
                target = parse_datetime(args.to_datetime)
        client = _connect(host, port, args.timeout)
        try:
            return _run(client, args, target)
        finally:
            client.close()
    except ValueError as exc:
        print(f"chronolog groups: {exc}", file=sys.stderr)
        return 1
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


def _run(client: BrokerConnection, args: argparse.Namespace, target: int) -> int:
    if args.command == "list":
        groups = list_groups(client, args.state)
        if groups:
            print(
                _table(
                    [["GROUP", "PROTOCOL-TYPE", "STATE"]]
                    + [[g, pt or "-", state] for g, pt, state in groups]
                )
            )
        return 0
    if args.command == "describe":
        for i, group in enumerate(args.groups):
            g, generation, rows = describe_group(client, group, args.timeout)
            if i:
                print()
            _print_description(group, g, generation, rows)
        return 0
    if args.command == "reset-offsets":
        started = time.monotonic()
        new = reset_offsets(
            client, args.group, args.topic, target, args.timeout, execute=not args.dry_run
        )
        print(
            _table(
                [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]]
                + [[args.group, args.topic, str(p), str(o)] for p, o in new]
            )
        )
        if args.dry_run:
            print("(dry run: nothing committed)")
        else:
            print(f"committed in {time.monotonic() - started:.2f} s")
        return 0
    # delete
    results = delete_groups(client, args.group, args.timeout)
    failed = False
    for group, code in results.items():
        if code == 0:
            print(f"deleted group {group!r}")
        else:
            failed = True
            hint = _DELETE_HINTS.get(code)
            print(
                f"chronolog groups: group {group!r} not deleted by {client.address}: "
                f"{error_name(code)}; {hint or 'check the broker log and retry'}",
                file=sys.stderr,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
