"""``chronolog health --bootstrap HOST:PORT``: is a broker answering Kafka requests?

Used as the container healthcheck. It opens one TCP connection, sends ApiVersions v0 and Metadata
v1 (empty topic list: brokers and controller only) with ``protocol.ClientConnection`` and exits 0
only when both answers are valid: ApiVersions without error listing Metadata, and Metadata naming
at least one broker. Anything else -- refused or reset connection, timeout, an error code, an
undecodable frame -- exits 1 with one line on stderr saying what failed and where. Blocking
sockets with a deadline: this is a one-shot tool, no trio needed. The socket is always closed.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from collections.abc import Sequence

from protocol import ApiKey, ClientConnection, ErrorCode, ProtocolError

__all__ = ["HealthCheckError", "check", "main"]

_RECV_BYTES = 65536
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
            f"{text!r} is not HOST:PORT (expected HOST:PORT, for example 127.0.0.1:9092)")
    return host.strip("[]"), int(port)


def _exchange(sock: socket.socket, conn: ClientConnection, api_key: ApiKey, version: int,
              body: dict, deadline: float):
    _, frame = conn.request(api_key, version, body)
    sock.sendall(frame)
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise HealthCheckError(f"no {api_key.name} v{version} response before the timeout")
        sock.settimeout(remaining)
        try:
            data = sock.recv(_RECV_BYTES)
        except TimeoutError:
            raise HealthCheckError(
                f"no {api_key.name} v{version} response before the timeout") from None
        if not data:
            raise HealthCheckError(
                f"connection closed by the broker while waiting for {api_key.name} v{version}")
        try:
            responses = list(conn.receive_data(data))
        except ProtocolError as exc:
            raise HealthCheckError(f"undecodable {api_key.name} v{version} response: {exc}") from exc
        if responses:
            # ClientConnection has already matched the correlation id to this request.
            return responses[0].body


def check(host: str, port: int, timeout: float = 5.0) -> str:
    """Query the broker at host:port; return a one-line summary of a valid answer.

    Raises HealthCheckError (also for socket errors) when the broker is not healthy."""
    deadline = time.monotonic() + timeout
    conn = ClientConnection(client_id="chronolog-health", max_response_bytes=_MAX_RESPONSE_BYTES)
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise HealthCheckError(f"cannot connect: {exc.strerror or exc}") from exc
    with sock:
        try:
            versions = _exchange(sock, conn, ApiKey.API_VERSIONS, 0, {}, deadline)
            if versions.error_code != ErrorCode.NONE:
                raise HealthCheckError(
                    f"ApiVersions answered error {_error_name(versions.error_code)}")
            keys = {entry.api_key for entry in versions.api_keys}
            missing = {ApiKey.API_VERSIONS, ApiKey.METADATA} - keys
            if missing:
                raise HealthCheckError(
                    "ApiVersions does not list " + ", ".join(k.name for k in sorted(missing)))
            metadata = _exchange(sock, conn, ApiKey.METADATA, 1, {"topics": []}, deadline)
        except OSError as exc:
            raise HealthCheckError(f"connection failed: {exc.strerror or exc}") from exc
    if not metadata.brokers:
        raise HealthCheckError("Metadata lists no brokers")
    advertised = ", ".join(f"node {b.node_id} at {b.host}:{b.port}" for b in metadata.brokers)
    return f"{len(keys)} APIs, {advertised}, controller {metadata.controller_id}"


def _error_name(code: int) -> str:
    try:
        return f"{ErrorCode(code).name} ({code})"
    except ValueError:
        return str(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the check; print the summary and return 0, or print why not and return 1."""
    parser = argparse.ArgumentParser(
        prog="chronolog health",
        description="Exit 0 if the broker answers ApiVersions and Metadata correctly, else 1.")
    parser.add_argument("--bootstrap", required=True, type=parse_host_port, metavar="HOST:PORT",
                        help="broker address to check")
    parser.add_argument("--timeout", type=float, default=5.0,
                        help="seconds for the whole check (default 5)")
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
