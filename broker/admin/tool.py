"""What ``chronolog topics`` and ``chronolog configs`` share: the connection to the broker, the
errors a person reads (naming the broker, what failed and what to do), ``k=v,k2=[a,b]`` lists
as kafka-configs.sh writes them, and the exit statuses (0 done, 1 the broker refused or could
not be reached, 2 bad usage: argparse's)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from broker.health import parse_host_port
from client import BrokerConnection, BrokerConnectionError, ConnectError, error_name
from protocol.errors import ErrorCode

# What to do about each error a broker may answer an admin request with.
HINTS: dict[int, str] = {
    ErrorCode.TOPIC_ALREADY_EXISTS: "pick another name (or pass --if-not-exists)",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "check the name with `chronolog topics list`",
    ErrorCode.UNKNOWN_TOPIC_ID: "check the topic with `chronolog topics describe`",
    ErrorCode.INVALID_TOPIC_EXCEPTION: "topic names use ASCII letters, digits, '.', '_' and '-' "
    "(at most 249) and must not collide with another topic's when '.' and '_' are confused",
    ErrorCode.INVALID_PARTITIONS: "give a partition count above the current one (partitions "
    "can only be added)",
    ErrorCode.INVALID_REPLICATION_FACTOR: "this is a single broker: use --replication-factor 1",
    ErrorCode.INVALID_REPLICA_ASSIGNMENT: "assign every partition to this broker",
    ErrorCode.INVALID_CONFIG: "fix the value or the name (`chronolog configs describe --all` "
    "lists every config with its current value)",
    ErrorCode.INVALID_REQUEST: "check the command's arguments against the message",
    ErrorCode.POLICY_VIOLATION: "the topic's configs forbid this; see `chronolog configs describe`",
    ErrorCode.KAFKA_STORAGE_ERROR: "check the broker's log dirs (disk full or failing?) and its "
    "log",
    ErrorCode.UNKNOWN_SERVER_ERROR: "check the broker's log for the cause",
    ErrorCode.UNSUPPORTED_VERSION: "the broker is too old for this command; upgrade it",
}


class ToolError(Exception):
    """Raised when the broker answers with an error (or an answer the tool cannot use); the
    message names the broker, what failed and what to do."""


def broker_error(address: str, what: str, code: int, message: str | None = None) -> ToolError:
    """A ToolError for error ``code`` answered by the broker at ``address`` to ``what``."""
    detail = f": {message}" if message else ""
    hint = HINTS.get(code, "check the broker's log")
    return ToolError(f"broker {address} refused to {what}: {error_name(code)}{detail}; {hint}")


def key_values(text: str) -> list[tuple[str, str]]:
    """``k1=v1,k2=[a,b]`` as kafka-configs.sh reads it (brackets hold a list value's commas).
    Raises argparse.ArgumentTypeError naming what is wrong."""
    items, depth, current = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    items.append(current)
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(
                f"{item!r} is not key=value (expected for example retention.ms=86400000,"
                "cleanup.policy=[delete,compact])"
            )
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        pairs.append((key.strip(), value))
    return pairs


def names(text: str) -> list[str]:
    """``a,b,c``: config names for --delete-config."""
    result = [n.strip() for n in text.split(",") if n.strip()]
    if not result:
        raise argparse.ArgumentTypeError("no config name given")
    return result


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        required=True,
        type=parse_host_port,
        metavar="HOST:PORT",
        help="the broker's address",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds allowed for each network operation (default 30)",
    )


def run(tool: str, args: argparse.Namespace, command: Callable[[BrokerConnection], None]) -> int:
    """Connect, run ``command`` and turn failures into one line on stderr and exit status 1."""
    host, port = args.bootstrap_server
    try:
        with BrokerConnection(
            host, port, client_id=f"chronolog-{tool}", timeout_s=args.timeout
        ) as c:
            command(c)
        return 0
    except ToolError as exc:
        print(f"chronolog {tool}: {exc}", file=sys.stderr)
    except ConnectError as exc:
        print(
            f"chronolog {tool}: cannot connect to broker {exc.address}: {exc.reason}; is the "
            "broker running and is --bootstrap-server right?",
            file=sys.stderr,
        )
    except BrokerConnectionError as exc:
        print(
            f"chronolog {tool}: broker {exc.address}: {exc}; check that it is a chronolog or "
            "Kafka 2.4+ broker and read its log",
            file=sys.stderr,
        )
    except BrokenPipeError:  # the reader (head, less) went away: nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 1
