"""``chronolog health --bootstrap HOST:PORT``: is a broker answering Kafka requests?

Used as the container healthcheck. It opens one TCP connection, sends ApiVersions v0 and Metadata
v1 (empty topic list: brokers and controller only) with ``client.BrokerConnection`` and exits 0
only when both answers are valid: ApiVersions without error listing Metadata, and Metadata naming
at least one broker. Anything else -- refused or reset connection, timeout, an error code, an
undecodable frame -- exits 1 with one line on stderr saying what failed and where. A
blocking connection with a deadline: this is a one-shot tool, no trio needed. The socket is always
closed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from client import BrokerConnection, BrokerConnectionError, error_name
from protocol import ApiKey, ErrorCode

__all__ = ["HealthCheckError", "check", "main"]

# Far above any ApiVersions/Metadata answer; a non-Kafka peer's bytes fail fast as a huge frame.
_MAX_RESPONSE_BYTES = 1 << 20


class HealthCheckError(Exception):
    """Raised by :func:`check` when the broker is unreachable or answers wrongly; the message says
    which request failed and why."""


def parse_host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (IPv6 hosts in brackets) for the tools' bootstrap options; raises
    argparse.ArgumentTypeError with a message naming the bad value."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not HOST:PORT (expected HOST:PORT, for example 127.0.0.1:9092)"
        )
    return host.strip("[]"), int(port)


def check(host: str, port: int, timeout: float = 5.0) -> str:
    """Query the broker at host:port; return a one-line summary of a valid answer.

    Raises HealthCheckError (also for socket errors) when the broker is not healthy."""
    deadline = time.monotonic() + timeout
    try:
        with BrokerConnection(
            host,
            port,
            client_id="chronolog-health",
            timeout_s=timeout,
            max_response_bytes=_MAX_RESPONSE_BYTES,
        ) as conn:
            versions = conn.call(ApiKey.API_VERSIONS, 0, {}, deadline=deadline)
            if versions.error_code != ErrorCode.NONE:
                raise HealthCheckError(
                    f"ApiVersions answered error {error_name(versions.error_code)}"
                )
            keys = {entry.api_key for entry in versions.api_keys}
            missing = {ApiKey.API_VERSIONS, ApiKey.METADATA} - keys
            if missing:
                raise HealthCheckError(
                    "ApiVersions does not list " + ", ".join(k.name for k in sorted(missing))
                )
            metadata = conn.call(ApiKey.METADATA, 1, {"topics": []}, deadline=deadline)
    except BrokerConnectionError as exc:
        raise HealthCheckError(str(exc)) from exc
    if not metadata.brokers:
        raise HealthCheckError("Metadata lists no brokers")
    advertised = ", ".join(f"node {b.node_id} at {b.host}:{b.port}" for b in metadata.brokers)
    return f"{len(keys)} APIs, {advertised}, controller {metadata.controller_id}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the check; print the summary and return 0, or print why not and return 1."""
    parser = argparse.ArgumentParser(
        prog="chronolog health",
        description="Exit 0 if the broker answers ApiVersions and Metadata correctly, else 1.",
    )
    parser.add_argument(
        "--bootstrap",
        required=True,
        type=parse_host_port,
        metavar="HOST:PORT",
        help="broker address to check",
    )
    parser.add_argument(
        "--timeout", type=float, default=5.0, help="seconds for the whole check (default 5)"
    )
    args = parser.parse_args(argv)
    host, port = args.bootstrap
    try:
        summary = check(host, port, args.timeout)
    except HealthCheckError as exc:
        print(f"chronolog health: broker at {host}:{port} is not healthy: {exc}", file=sys.stderr)
        return 1
    print(f"chronolog health: broker at {host}:{port} is healthy: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
