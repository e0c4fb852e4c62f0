"""One blocking TCP connection to a Kafka broker, speaking through protocol.ClientConnection.

Every socket operation is bounded by the connection's timeout, and a call by its deadline when
one is given. Any failure (connect, send, receive, timeout, a response that does not decode)
raises :class:`BrokerConnectionError` and closes the socket, since its stream position is then
unknown. Kafka error codes inside responses are the caller's to judge.
"""

from __future__ import annotations

import socket
import time
from typing import Any, NoReturn

from protocol.api import ApiKey, Response
from protocol.connection import DEFAULT_MAX_FRAME_BYTES, ClientConnection
from protocol.errors import ErrorCode, ProtocolError

_RECV_BYTES = 1 << 20


class BrokerConnectionError(ConnectionError):
    """Raised by :class:`BrokerConnection` when the broker cannot be reached, closes the
    connection, does not answer in time or answers with bytes that do not decode. ``str(exc)``
    says which, ``address`` names the broker (host:port); the connection is closed. A
    ConnectionError, so code that handles a dead peer as an OSError keeps doing so."""

    def __init__(self, address: str, message: str) -> None:
        super().__init__(message)
        self.address = address


class ConnectError(BrokerConnectionError):
    """Raised by :class:`BrokerConnection` when the TCP connection cannot be made; ``reason`` is
    the operating system's (e.g. "Connection refused")."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(address, f"cannot connect: {reason}")
        self.reason = reason


def error_name(code: int) -> str:
    """A Kafka error code as a person reads it: ``NOT_COORDINATOR (16)``."""
    try:
        return f"{ErrorCode(code).name} ({code})"
    except ValueError:
        return f"error code {code}"


class BrokerConnection:
    """A blocking connection to ``host:port``; close() (or the context manager) releases it."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str,
        timeout_s: float,
        max_response_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        self.address = f"{host}:{port}"
        self.timeout_s = timeout_s
        self.codec = ClientConnection(client_id=client_id, max_response_bytes=max_response_bytes)
        try:
            self.socket = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as exc:
            raise ConnectError(self.address, exc.strerror or str(exc)) from None
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def __enter__(self) -> BrokerConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self.socket.close()

    def call(
        self, api_key: ApiKey, version: int, body: Any, *, deadline: float | None = None
    ) -> Any:
        """Send one request and return its decoded response body. ``deadline`` is a
        time.monotonic() value bounding the whole call."""
        self.send(api_key, version, body)
        return self.receive(f"{api_key.name} v{version}", deadline=deadline).body

    def send(self, api_key: ApiKey, version: int, body: Any) -> int:
        """Send one request; returns its correlation id."""
        correlation_id, frame = self.codec.request(api_key, version, body)
        try:
            self.socket.sendall(frame)
        except OSError as exc:
            self._fail(f"connection failed: {exc.strerror or exc}")
        return correlation_id

    def receive(self, what: str = "a", *, deadline: float | None = None) -> Response:
        """The next response (responses arrive in request order); ``what`` names the request
        in errors."""
        try:
            for response in self.codec.receive_data(b""):
                return response
            while True:
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        self._fail(f"no {what} response before the timeout")
                    self.socket.settimeout(min(remaining, self.timeout_s))
                try:
                    data = self.socket.recv(_RECV_BYTES)
                except TimeoutError:
                    self._fail(f"no {what} response before the timeout")
                if not data:
                    self._fail(f"connection closed by the broker while waiting for {what}")
                for response in self.codec.receive_data(data):
                    return response
        except ProtocolError as exc:
            self._fail(f"undecodable {what} response: {exc}")
        except OSError as exc:
            self._fail(f"connection failed: {exc.strerror or exc}")

    def _fail(self, reason: str) -> NoReturn:
        self.close()
        raise BrokerConnectionError(self.address, reason) from None
