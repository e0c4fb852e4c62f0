"""Accept loops for the Kafka listeners that survive running out of file descriptors and keep
accepting under load.

``trio.serve_listeners`` retries a failing accept every 100 ms and logs a traceback each time
through the standard library's logging; a broker at its descriptor limit would flood its log
with them. These loops log one line when accepting starts failing and one when it works again.

Each trio accept yields to the scheduler once, so a loop of them accepts one connection per
scheduler pass; under load a pass lasts as long as every busy connection's requests (half a
second with 300 busy producers), and the 100th queued connection waited 100 passes, its
requests unread in the kernel. After each accept the loop therefore takes every connection
already queued (up to ACCEPT_BURST) without yielding, as Kafka's acceptor thread does.
"""

from __future__ import annotations

import errno
import resource
import socket
from collections.abc import Awaitable, Callable, Iterator

import structlog
import trio

logger = structlog.get_logger(__name__)

# Out of descriptors or buffers: accept() fails until connections close; pause this long between
# tries (connections wait in the listen backlog meanwhile).
ACCEPT_PAUSE_S = 0.5
_ACCEPT_CAPACITY_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS)
# Connections taken from the backlog per accept without yielding: about 10 µs each, so a pass
# of the loop stays a few milliseconds however many clients connect at once.
ACCEPT_BURST = 512

Handler = Callable[[trio.SocketStream], Awaitable[object]]


async def serve_listeners(
    listeners: list[trio.SocketListener], handler: Handler, nursery: trio.Nursery
) -> None:
    """Accept on every listener until cancelled; each connection runs ``handler`` in
    ``nursery``. Any accept error other than exhaustion propagates."""
    async with trio.open_nursery() as acceptors:
        for listener in listeners:
            acceptors.start_soon(_accept_loop, listener, handler, nursery)


async def _accept_loop(
    listener: trio.SocketListener, handler: Handler, nursery: trio.Nursery
) -> None:
    """Accept connections into ``nursery`` until cancelled. When the process runs out of file
    descriptors (or the kernel of buffers) accept fails; the loop then pauses and tries again,
    logging once when it starts and once when it can accept again, instead of failing or
    printing a traceback every try as trio.serve_listeners does."""
    failing: OSError | None = None
    while True:
        try:
            stream = await listener.accept()
        except OSError as exc:
            if exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                raise
            if failing is None:
                logger.error(
                    "cannot accept connections; new ones wait until descriptors are free",
                    error=repr(exc),
                    action="raise the broker's file descriptor limit (ulimit -n) or lower "
                    "max.connections; connections are accepted again by themselves",
                )
            failing = exc
            await trio.sleep(ACCEPT_PAUSE_S)
            continue
        if failing is not None:
            logger.info("accepting connections again", after=repr(failing))
            failing = None
        nursery.start_soon(handler, stream)
        for queued in _queued(listener, ACCEPT_BURST):
            nursery.start_soon(handler, queued)


def _queued(listener: trio.SocketListener, limit: int) -> Iterator[trio.SocketStream]:
    """Up to ``limit`` connections already waiting in ``listener``'s backlog, accepted without
    blocking or yielding. Stops at the first that is not there, and near the descriptor limit:
    there connections are taken one a pass as before, so that the handlers of those the
    clients already closed free their descriptors in between (a burst would use them all up
    and fail again at once). Any accept error also stops it: the loop's next (awaited) accept
    meets it again, where trio skips the ones to ignore and the loop handles exhaustion."""
    # The kernel hands out the lowest free descriptor, so an accepted one numbered n means n
    # are open. Read per burst: an operator may change the limit of a running broker.
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    last_roomy = soft - max(16, soft // 8) if soft != resource.RLIM_INFINITY else None
    # A socket object over the listener's descriptor, detached again after: the listener keeps
    # sole ownership, so closing it at shutdown still refuses new connections at once.
    raw = socket.socket(fileno=listener.socket.fileno())
    try:
        raw.setblocking(False)  # as the descriptor already is (trio's): accept() never waits
        for _ in range(limit):
            try:
                sock, _addr = raw.accept()
            except OSError:  # BlockingIOError: none left
                return
            near_the_limit = last_roomy is not None and sock.fileno() >= last_roomy
            yield trio.SocketStream(trio.socket.from_stdlib_socket(sock))
            if near_the_limit:
                return
    finally:
        raw.detach()
