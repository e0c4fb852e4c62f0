"""Accept loops for the Kafka listeners that survive running out of file descriptors.

``trio.serve_listeners`` retries a failing accept every 100 ms and logs a traceback each time
through the standard library's logging; a broker at its descriptor limit would flood its log
with them. These loops log one line when accepting starts failing and one when it works again.
"""

from __future__ import annotations

import errno
from collections.abc import Awaitable, Callable

import structlog
import trio

logger = structlog.get_logger(__name__)

# Out of descriptors or buffers: accept() fails until connections close; pause this long between
# tries (connections wait in the listen backlog meanwhile).
ACCEPT_PAUSE_S = 0.5
_ACCEPT_CAPACITY_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS)

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
