"""A small HTTP/1.1 server on trio sockets, run in the broker's own event loop (the Prometheus
endpoint, broker/metrics.py).

It answers GET and HEAD for a fixed table of paths, each a synchronous function returning
``(body, content type)``; other paths get 404, other methods 405. A request is its head only:
the request line and headers must fit in ``MAX_HEAD_BYTES`` (else 431) and arrive within
``REQUEST_TIMEOUT_S``; a request announcing a body gets 413; anything that does not parse as
HTTP/1.x gets 400. Each of these answers closes the connection. Keep-alive and pipelining work
for good requests (HTTP/1.1 unless ``Connection: close``). At most ``MAX_CONNECTIONS`` at once;
more are answered 503 and closed. Nothing a peer sends, and no failing route, can end the
broker: every connection's errors stay in its task (a route's exception is a 500 and a log line).
"""

from __future__ import annotations

import re
from typing import Callable, Mapping

import structlog
import trio

from broker.accept import serve_listeners

logger = structlog.get_logger(__name__)

MAX_HEAD_BYTES = 8192
REQUEST_TIMEOUT_S = 30.0  # for a whole request head, and for an idle keep-alive connection
MAX_CONNECTIONS = 32
RECEIVE_BYTES = 4096
DRAIN_S = 1.0
DRAIN_BYTES = 65536

Route = Callable[[], tuple[bytes, str]]
"""A path's handler: the response body and its Content-Type."""

_END_OF_HEAD = re.compile(rb"\r?\n\r?\n")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class _BadRequest(Exception):
    """A request that is answered with ``status`` and then the connection closed."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    """(method, path, version, headers by lower-case name) or _BadRequest(400/413)."""
    lines = head.decode("latin-1").split("\n")
    parts = lines[0].rstrip("\r").split(" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not parts[1].startswith("/"):
        raise _BadRequest(400, f"malformed request line {lines[0][:100]!r}")
    method, target, version = parts
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise _BadRequest(400, f"unsupported protocol {version[:20]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        line = line.rstrip("\r")
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not _TOKEN.fullmatch(name):
            raise _BadRequest(400, f"malformed header line {line[:100]!r}")
        headers[name.lower()] = value.strip()
    if "transfer-encoding" in headers:
        raise _BadRequest(413, "request bodies are not accepted")
    length = headers.get("content-length", "0")
    if not length.isdigit():
        raise _BadRequest(400, f"bad Content-Length {length[:20]!r}")
    if int(length):
        raise _BadRequest(413, "request bodies are not accepted")
    return method, target.split("?", 1)[0], version, headers


def _response(
    status: int, body: bytes, content_type: str, *, close: bool, head_only: bool = False, **extra
) -> bytes:
    lines = [
        f"HTTP/1.1 {status} {_REASONS[status]}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        *(f"{name.replace('_', '-')}: {value}" for name, value in extra.items()),
    ]
    if close:
        lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + body


def _text(status: int, message: str, *, close: bool, **extra) -> bytes:
    return _response(
        status, message.encode() + b"\n", "text/plain; charset=utf-8", close=close, **extra
    )


async def _drain(stream: trio.SocketStream) -> None:
    """After an error answer: end our side, then read what the peer still sends (bounded in
    time and bytes), so closing with unread data does not reset the connection before the
    peer has read the answer."""
    await stream.send_eof()
    with trio.move_on_after(DRAIN_S):
        received = 0
        while received < DRAIN_BYTES:
            data = await stream.receive_some(RECEIVE_BYTES)
            if not data:
                return
            received += len(data)


class HttpServer:
    """Serves ``routes`` (path -> :data:`Route`); ``name`` labels its log lines."""

    def __init__(self, routes: Mapping[str, Route], name: str = "http") -> None:
        self.routes = dict(routes)
        self.name = name
        self.active = 0

    async def serve(self, listeners: list[trio.SocketListener]) -> None:
        """Accept and serve until cancelled."""
        async with trio.open_nursery() as connections:
            await serve_listeners(listeners, self.handle_connection, connections)

    async def handle_connection(self, stream: trio.SocketStream) -> None:
        """One connection; never raises (short of cancellation)."""
        try:
            peer = "%s:%s" % stream.socket.getpeername()[:2]
        except OSError:
            peer = "?"
        self.active += 1
        try:
            if self.active > MAX_CONNECTIONS:
                logger.warning(
                    "http connection refused: too many open",
                    server=self.name,
                    peer=peer,
                    max_connections=MAX_CONNECTIONS,
                    action="scrape less often or from fewer places",
                )
                await stream.send_all(_text(503, "too many connections", close=True))
                return
            await self._serve(stream, peer)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # the peer went away
        except Exception:
            logger.exception(
                "http connection failed",
                server=self.name,
                peer=peer,
                action="this is a broker bug; report it with this log line",
            )
        finally:
            self.active -= 1
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def _serve(self, stream: trio.SocketStream, peer: str) -> None:
        buffer = b""
        while True:
            match = _END_OF_HEAD.search(buffer)
            with trio.move_on_after(REQUEST_TIMEOUT_S):
                while match is None:
                    if len(buffer) > MAX_HEAD_BYTES:
                        break
                    data = await stream.receive_some(RECEIVE_BYTES)
                    if not data:
                        return  # closed by the peer
                    buffer += data
                    match = _END_OF_HEAD.search(buffer, max(0, len(buffer) - len(data) - 3))
            try:
                if match is None:
                    if len(buffer) > MAX_HEAD_BYTES:
                        raise _BadRequest(431, f"request head exceeds {MAX_HEAD_BYTES} bytes")
                    if buffer:
                        raise _BadRequest(408, f"request incomplete after {REQUEST_TIMEOUT_S} s")
                    return  # idle keep-alive connection
                if match.end() > MAX_HEAD_BYTES:
                    raise _BadRequest(431, f"request head exceeds {MAX_HEAD_BYTES} bytes")
                method, path, version, headers = _parse_head(buffer[: match.start()])
            except _BadRequest as exc:
                logger.info(
                    "http request refused",
                    server=self.name,
                    peer=peer,
                    status=exc.status,
                    reason=str(exc),
                )
                await stream.send_all(_text(exc.status, str(exc), close=True))
                await _drain(stream)
                return
            buffer = buffer[match.end() :]
            connection = headers.get("connection", "").lower()
            close = connection == "close" or (version == "HTTP/1.0" and connection != "keep-alive")
            await stream.send_all(self._answer(method, path, peer, close=close))
            if close:
                return

    def _answer(self, method: str, path: str, peer: str, *, close: bool) -> bytes:
        route = self.routes.get(path)
        if route is None:
            logger.info("http path not found", server=self.name, peer=peer, path=path[:200])
            return _text(404, f"no such path; try {', '.join(sorted(self.routes))}", close=close)
        if method not in ("GET", "HEAD"):
            return _text(405, f"method {method} not allowed", close=close, Allow="GET, HEAD")
        try:
            body, content_type = route()
        except Exception:
            logger.exception(
                "http route failed",
                server=self.name,
                path=path,
                action="this is a broker bug; report it with this log line",
            )
            return _text(500, "internal error; see the broker's log", close=close)
        return _response(200, body, content_type, close=close, head_only=method == "HEAD")


__all__ = ["HttpServer", "Route", "MAX_HEAD_BYTES", "MAX_CONNECTIONS", "REQUEST_TIMEOUT_S"]
