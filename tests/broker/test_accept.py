"""broker/accept.py: connections queued in the backlog are all accepted in one scheduler pass,
however busy the loop is, and closing the listener still refuses new ones."""

from __future__ import annotations

import socket

import pytest
import trio

from broker.accept import serve_listeners

QUEUED = 60


async def test_a_busy_loop_takes_every_queued_connection_in_a_few_passes() -> None:
    """Under load each scheduler pass lasts as long as every busy connection's requests: a
    connection accepted one per pass waited seconds with its requests unread (bench_scale's
    last-connected producers got their first answer at the end of the run)."""
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listener.socket.getsockname()[1]
    # The kernel completes each handshake on its own: all of them wait in the backlog.
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(QUEUED)]
    accepted: list[trio.SocketStream] = []
    passes = 0

    async def handler(stream: trio.SocketStream) -> None:
        accepted.append(stream)

    async def busy() -> None:  # one step a scheduler pass, as a busy connection's task
        nonlocal passes
        while True:
            passes += 1
            await trio.lowlevel.checkpoint()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(busy)
            nursery.start_soon(serve_listeners, [listener], handler, nursery)
            with trio.fail_after(10):
                while len(accepted) < QUEUED:
                    await trio.lowlevel.checkpoint()
            nursery.cancel_scope.cancel()
        # One accept a pass would have taken QUEUED passes.
        assert passes < 10, f"{QUEUED} queued connections took {passes} scheduler passes"
        peers = {s.socket.getpeername() for s in accepted}
        assert peers == {c.getsockname() for c in clients}
    finally:
        for c in clients:
            c.close()
        for s in accepted:
            await s.aclose()
        await listener.aclose()


async def test_closing_the_listener_refuses_new_connections() -> None:
    """The burst accepts through a second socket object over the listener's descriptor; it
    must not keep the port open once the broker closes its listener at shutdown."""
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listener.socket.getsockname()[1]
    accepted: list[trio.SocketStream] = []

    async def handler(stream: trio.SocketStream) -> None:
        accepted.append(stream)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_listeners, [listener], handler, nursery)
        first = socket.create_connection(("127.0.0.1", port))
        with trio.fail_after(10):
            while not accepted:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    await listener.aclose()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5)
    first.close()
    for s in accepted:
        await s.aclose()
