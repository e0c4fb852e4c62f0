"""PlainSocketStream over real loopback TCP: bytes, EOF, closing, broken peers, cancellation,
and the one scheduler round a lone request costs."""

from __future__ import annotations

import os
import socket

import pytest
import trio
import trio.testing
from trio.testing import assert_checkpoints, wait_all_tasks_blocked

from broker.streams import PlainSocketStream


def tcp_pair() -> tuple[PlainSocketStream, socket.socket]:
    """(the served side as a PlainSocketStream, the peer as a blocking stdlib socket)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        peer = socket.create_connection(listener.getsockname())
        served, _ = listener.accept()
    return PlainSocketStream(served), peer


async def test_bytes_arrive_whole_and_in_order_both_ways():
    stream, peer = tcp_pair()
    with peer:
        peer.sendall(b"hello")
        assert await stream.receive_some(100) == b"hello"
        payload = os.urandom(8 << 20)  # far beyond the socket buffers: send_all must wait
        received = bytearray()

        def read_all():
            while len(received) < len(payload):
                received.extend(peer.recv(1 << 20))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, read_all)
            await stream.send_all(payload)
        assert received == payload
        # A read that fills max_bytes leaves bytes behind: the next read takes them at once.
        peer.sendall(b"abcdef")
        assert await stream.receive_some(3) == b"abc"
        assert await stream.receive_some(3) == b"def"
        await stream.aclose()


async def test_peer_closing_reads_as_end_of_stream():
    stream, peer = tcp_pair()
    peer.sendall(b"last")
    peer.close()
    assert await stream.receive_some(100) == b"last"
    assert await stream.receive_some(100) == b""
    await stream.aclose()


async def test_a_receive_waiting_when_the_stream_closes_gets_closed_resource_error():
    stream, peer = tcp_pair()
    with peer:
        outcome: list[BaseException] = []

        async def reader():
            try:
                await stream.receive_some(100)
            except trio.ClosedResourceError as exc:
                outcome.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            await wait_all_tasks_blocked()
            await stream.aclose()
        assert len(outcome) == 1
        with pytest.raises(trio.ClosedResourceError):
            await stream.receive_some(100)
        with pytest.raises(trio.ClosedResourceError):
            await stream.send_all(b"x")
        await stream.aclose()  # closing twice is allowed, as for every trio stream


async def test_sending_to_a_reset_peer_raises_broken_resource_error():
    stream, peer = tcp_pair()
    # SO_LINGER 0: the peer's close resets the connection instead of a graceful FIN.
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    peer.close()
    with pytest.raises(trio.BrokenResourceError) as caught:
        for _ in range(100):  # the reset may be seen only by a later send
            await stream.send_all(b"x" * 65536)
    assert isinstance(caught.value.__cause__, OSError)
    await stream.aclose()


async def test_send_eof_ends_the_peer_read_and_refuses_further_sends():
    stream, peer = tcp_pair()
    with peer:
        await stream.send_all(b"bye")
        await stream.send_eof()
        await stream.send_eof()  # idempotent
        assert peer.recv(100) == b"bye"
        assert peer.recv(100) == b""
        with pytest.raises(trio.ClosedResourceError):
            await stream.send_all(b"more")
        peer.sendall(b"still readable")
        assert await stream.receive_some(100) == b"still readable"
        await stream.aclose()


async def test_receive_is_a_checkpoint_whether_or_not_bytes_were_waiting():
    stream, peer = tcp_pair()
    with peer:
        peer.sendall(b"ready")
        await wait_all_tasks_blocked()
        with assert_checkpoints():
            assert await stream.receive_some(100) == b"ready"  # drained now: waits first
        peer.sendall(b"x" * 10)
        with assert_checkpoints():
            await stream.receive_some(4)  # bytes already there
        with assert_checkpoints():
            await stream.receive_some(100)  # recv first (the last read filled max_bytes)
        with trio.CancelScope() as scope:
            scope.cancel()
            with pytest.raises(trio.Cancelled):
                await stream.send_all(b"never sent")
            with pytest.raises(trio.Cancelled):
                await stream.receive_some(100)
        peer.setblocking(False)
        with pytest.raises(BlockingIOError):
            peer.recv(100)  # the cancelled send_all sent nothing
        await stream.aclose()


class _Steps(trio.abc.Instrument):
    """Counts the scheduler's steps of one task."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.steps += 1


async def test_a_lone_request_costs_the_serving_task_one_scheduler_step():
    """Wait for a request, read it, answer it, wait again: one step of the task (over trio's
    SocketStream, two: it yields again after a send)."""
    stream, peer = tcp_pair()
    with peer:
        served = 0

        async def echo(task_status=trio.TASK_STATUS_IGNORED):
            nonlocal served
            task_status.started(trio.lowlevel.current_task())
            while data := await stream.receive_some(65536):
                await stream.send_all(data)
                served += 1

        async with trio.open_nursery() as nursery:
            task = await nursery.start(echo)
            await wait_all_tasks_blocked()
            steps = _Steps(task)
            trio.lowlevel.add_instrument(steps)
            for i in range(5):
                peer.sendall(b"request %d" % i)
                await wait_all_tasks_blocked()  # epoll polled: the request served
                assert served == i + 1
                assert peer.recv(100) == b"request %d" % i
            trio.lowlevel.remove_instrument(steps)
            peer.shutdown(socket.SHUT_WR)
        assert steps.steps == 5
        await stream.aclose()
