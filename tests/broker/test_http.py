"""broker/http.py over real sockets in one trio loop: answers, refusals, and that a peer's
garbage or a failing route never ends the server."""

from __future__ import annotations

import trio

from broker import http
from broker.http import MAX_HEAD_BYTES, HttpServer

BODY = b"metric_total 1.0\n"
CONTENT_TYPE = "text/plain; version=1.0.0; charset=utf-8"


def _broken() -> tuple[bytes, str]:
    raise RuntimeError("collector bug")


async def _serving(nursery: trio.Nursery, routes=None) -> int:
    """Start an HttpServer on a free port; returns the port."""
    server = HttpServer(routes or {"/metrics": lambda: (BODY, CONTENT_TYPE), "/broken": _broken})
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    nursery.start_soon(server.serve, listeners)
    return listeners[0].socket.getsockname()[1]


async def _connect(port: int) -> trio.SocketStream:
    return await trio.open_tcp_stream("127.0.0.1", port)


async def _read_response(stream: trio.SocketStream, buffer: bytearray) -> tuple[int, dict, bytes]:
    """One response (status, headers, body) from ``stream``; what follows stays in buffer."""
    with trio.fail_after(10):
        while b"\r\n\r\n" not in buffer:
            data = await stream.receive_some(65536)
            assert data, f"connection closed mid-response: {bytes(buffer)!r}"
            buffer += data
        head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers["content-length"])
        while len(rest) < length:
            data = await stream.receive_some(65536)
            assert data, "connection closed mid-body"
            rest += data
        buffer[:] = rest[length:]
        return status, headers, rest[:length]


async def _closed(stream: trio.SocketStream, buffer: bytearray) -> bool:
    """True when the server closes the connection (EOF) with nothing more sent."""
    with trio.fail_after(10):
        while True:
            data = await stream.receive_some(65536)
            if not data:
                return not buffer
            buffer += data


async def _exchange(port: int, raw: bytes) -> tuple[int, dict, bytes, bool]:
    """Send ``raw`` on a new connection: (status, headers, body, closed after it)."""
    stream = await _connect(port)
    async with stream:
        await stream.send_all(raw)
        buffer = bytearray()
        status, headers, body = await _read_response(stream, buffer)
        return status, headers, body, await _closed(stream, buffer)


async def test_get_metrics_then_keep_alive_and_pipelining():
    async with trio.open_nursery() as nursery:
        port = await _serving(nursery)
        stream = await _connect(port)
        async with stream:
            buffer = bytearray()
            # two requests in one write: two answers, in order, on the same connection
            await stream.send_all(
                b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics?x=1 HTTP/1.1\r\n\r\n"
            )
            for _ in range(2):
                status, headers, body = await _read_response(stream, buffer)
                assert (status, headers["content-type"], body) == (200, CONTENT_TYPE, BODY)
                assert "connection" not in headers
            await stream.send_all(b"HEAD /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
            with trio.fail_after(10):
                while not bytes(buffer).endswith(b"\r\n\r\n"):
                    data = await stream.receive_some(65536)
                    assert data
                    buffer += data
            assert b"Content-Length: %d" % len(BODY) in buffer and BODY not in buffer
            buffer.clear()
            assert await _closed(stream, buffer)
        nursery.cancel_scope.cancel()


async def test_unknown_path_is_404_and_the_connection_stays_open():
    async with trio.open_nursery() as nursery:
        port = await _serving(nursery)
        stream = await _connect(port)
        async with stream:
            buffer = bytearray()
            await stream.send_all(b"GET /nope HTTP/1.1\r\n\r\n")
            status, _, body = await _read_response(stream, buffer)
            assert status == 404 and b"/metrics" in body
            await stream.send_all(b"GET /metrics HTTP/1.1\r\n\r\n")
            assert (await _read_response(stream, buffer))[0] == 200
        nursery.cancel_scope.cancel()


async def test_malformed_requests_get_400_and_are_closed():
    async with trio.open_nursery() as nursery:
        port = await _serving(nursery)
        for raw in (
            b"garbage\r\n\r\n",
            b"GET metrics HTTP/1.1\r\n\r\n",  # not a path
            b"GET /metrics HTTP/2.0\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            b"\xff\xfe /metrics HTTP/1.1\r\n\r\n",
        ):
            status, _, _, closed = await _exchange(port, raw)
            assert (status, closed) == (400, True), raw
        # the server is still there
        assert (await _exchange(port, b"GET /metrics HTTP/1.0\r\n\r\n"))[:3] == (
            200,
            {"content-type": CONTENT_TYPE, "content-length": str(len(BODY)), "connection": "close"},
            BODY,
        )
        nursery.cancel_scope.cancel()


async def test_oversized_request_head_gets_431_and_is_closed():
    async with trio.open_nursery() as nursery:
        port = await _serving(nursery)
        # one header line far beyond the limit, sent without its end: refused before the end
        raw = b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * (4 * MAX_HEAD_BYTES)
        status, _, body, closed = await _exchange(port, raw)
        assert (status, closed) == (431, True)
        assert str(MAX_HEAD_BYTES).encode() in body
        # a complete head just over the limit, too
        raw = b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * MAX_HEAD_BYTES + b"\r\n\r\n"
        assert (await _exchange(port, raw))[0] == 431
        # and one just under it is served
        pad = MAX_HEAD_BYTES - len(b"GET /metrics HTTP/1.1\r\nX: \r\n\r\n")
        raw = b"GET /metrics HTTP/1.1\r\nX: " + b"a" * pad + b"\r\n\r\n"
        assert len(raw) == MAX_HEAD_BYTES
        stream = await _connect(port)
        async with stream:
            await stream.send_all(raw)
            assert (await _read_response(stream, bytearray()))[0] == 200
        nursery.cancel_scope.cancel()


async def test_bodies_and_other_methods_are_refused():
    async with trio.open_nursery() as nursery:
        port = await _serving(nursery)
        status, _, _, closed = await _exchange(
            port, b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
        )
        assert (status, closed) == (413, True)
        status, _, _, closed = await _exchange(
            port, b"POST /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        )
        assert (status, closed) == (413, True)
        status, headers, _, closed = await _exchange(
            port, b"DELETE /metrics HTTP/1.1\r\nConnection: close\r\n\r\n"
        )
        assert (status, headers["allow"], closed) == (405, "GET, HEAD", True)
        nursery.cancel_scope.cancel()


async def test_a_failing_route_is_a_500_and_the_server_keeps_serving():
    async with trio.open_nursery() as nursery:
        port = await _serving(nursery)
        stream = await _connect(port)
        async with stream:
            buffer = bytearray()
            await stream.send_all(b"GET /broken HTTP/1.1\r\n\r\n")
            assert (await _read_response(stream, buffer))[0] == 500
            await stream.send_all(b"GET /metrics HTTP/1.1\r\n\r\n")
            assert (await _read_response(stream, buffer))[0] == 200
        nursery.cancel_scope.cancel()


async def test_incomplete_request_times_out_with_408(monkeypatch):
    monkeypatch.setattr(http, "REQUEST_TIMEOUT_S", 0.2)
    async with trio.open_nursery() as nursery:
        port = await _serving(nursery)
        status, _, _, closed = await _exchange(port, b"GET /metrics HTTP/1.1\r\nHost")
        assert (status, closed) == (408, True)
        # an idle connection is closed without an answer
        stream = await _connect(port)
        async with stream:
            assert await _closed(stream, bytearray())
        nursery.cancel_scope.cancel()


async def test_connections_beyond_the_limit_get_503(monkeypatch):
    monkeypatch.setattr(http, "MAX_CONNECTIONS", 1)
    async with trio.open_nursery() as nursery:
        port = await _serving(nursery)
        first = await _connect(port)
        async with first:
            buffer = bytearray()
            await first.send_all(b"GET /metrics HTTP/1.1\r\n\r\n")
            assert (await _read_response(first, buffer))[0] == 200  # first is being served
            status, _, _, closed = await _exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")
            assert (status, closed) == (503, True)
        # once the first has gone, a new one is served again
        with trio.fail_after(10):
            while True:
                try:
                    status = (await _exchange(port, b"GET /metrics HTTP/1.0\r\n\r\n"))[0]
                except AssertionError:
                    status = 0
                if status == 200:
                    break
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
