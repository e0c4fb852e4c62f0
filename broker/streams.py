"""A client's TCP connection as a trio stream, one scheduler round per request cheaper.

trio's SocketStream yields to the scheduler after every successful ``send`` (and ``recv``): a
lone request (wait, read, answer) costs the event loop two rounds where one is needed, and
tries a read that fails with EAGAIN before each wait. Each round is an ``epoll_wait`` and a pass
over trio's run queue, a large share of what a one-batch Produce costs the broker
(bench/NOTES.md). :class:`PlainSocketStream` yields in ``receive_some`` only: it waits, or, when
bytes are already there, yields once.
"""

from __future__ import annotations

import errno
import socket

import trio

# What recv/send raise once the socket is closed: the stream's user closed it, not the peer.
_CLOSED_ERRNOS = (errno.EBADF, errno.ENOTSOCK)


def _stream_error(exc: OSError) -> trio.ClosedResourceError | trio.BrokenResourceError:
    if exc.errno in _CLOSED_ERRNOS:
        return trio.ClosedResourceError("this connection was already closed")
    return trio.BrokenResourceError(f"connection broken: {exc}")


class PlainSocketStream(trio.abc.HalfCloseableStream):
    """A connected, non-TLS TCP socket (owned: :meth:`aclose` closes it) as a trio stream.

    ``receive_some`` is a checkpoint: it waits for readability (a checkpoint) or, when bytes
    are already buffered, yields once. ``send_all`` takes cancellation only before it starts
    and yields only while the socket buffer is full: a server task reads before each request,
    so every request still passes a checkpoint. Errors from the socket are raised as
    ``trio.BrokenResourceError``, or ``trio.ClosedResourceError`` after :meth:`aclose`. Only
    one task may send and one receive at a time, as with any trio stream.
    """

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.socket = sock
        self._shut_wr = False
        self._drained = False

    @classmethod
    def take(cls, stream: trio.SocketStream) -> PlainSocketStream:
        """The connection ``stream`` wraps, moved into a PlainSocketStream (``stream`` is left
        closed; its socket options, such as TCP_NODELAY, stay)."""
        sock = stream.socket
        return cls(socket.socket(sock.family, sock.type, sock.proto, fileno=sock.detach()))

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if max_bytes is None:
            max_bytes = 65536
        if max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")
        # After a read that emptied the socket buffer (less than asked for), the next bytes are
        # usually not there yet: wait first rather than pay a recv that fails with EAGAIN.
        if not self._drained:
            try:
                data = self.socket.recv(max_bytes)
            except BlockingIOError:
                pass
            except OSError as exc:
                raise _stream_error(exc) from exc
            else:
                self._drained = len(data) < max_bytes
                await trio.lowlevel.checkpoint()
                return data
        while True:
            try:
                await trio.lowlevel.wait_readable(self.socket)
                data = self.socket.recv(max_bytes)
            except BlockingIOError:
                continue
            except OSError as exc:
                raise _stream_error(exc) from exc
            self._drained = len(data) < max_bytes
            return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._shut_wr:
            raise trio.ClosedResourceError("can't send data after sending EOF")
        with memoryview(data) as view:
            sent = 0
            while sent < len(view):
                try:
                    sent += self.socket.send(view[sent:])
                except BlockingIOError:
                    await self._wait_writable()
                except OSError as exc:
                    raise _stream_error(exc) from exc

    async def _wait_writable(self) -> None:
        try:
            await trio.lowlevel.wait_writable(self.socket)
        except OSError as exc:
            raise _stream_error(exc) from exc

    async def wait_send_all_might_not_block(self) -> None:
        await self._wait_writable()

    async def send_eof(self) -> None:
        await trio.lowlevel.checkpoint()
        if self._shut_wr:
            return
        self._shut_wr = True
        try:
            self.socket.shutdown(socket.SHUT_WR)
        except OSError as exc:
            raise _stream_error(exc) from exc

    async def aclose(self) -> None:
        if self.socket.fileno() != -1:
            trio.lowlevel.notify_closing(self.socket)
            self.socket.close()
        await trio.lowlevel.checkpoint()
