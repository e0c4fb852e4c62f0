"""The broker's HTTP listener (``metrics.listener``): an ASGI app (broker/console: ``/metrics``
and the web console) served by hypercorn's trio worker inside the broker's own event loop.

The broker binds the sockets itself (:func:`open_sockets`) before it serves anything, so a port
in use stops the start-up like the Kafka listener's would; hypercorn receives them as ``fd://``
binds. Hypercorn parses HTTP, limits request sizes and answers malformed requests with 400: no
peer can end the broker. Its access log is off and its error log goes through structlog (JSON
lines like every other broker line).
"""

from __future__ import annotations

import logging
import socket
from typing import Any, Awaitable, Callable

import structlog
import trio
from hypercorn.config import Config
from hypercorn.logging import Logger
from hypercorn.trio import serve as hypercorn_serve

logger = structlog.get_logger(__name__)

GRACEFUL_S = 2.0  # at shutdown: how long open requests may still finish
KEEP_ALIVE_S = 30


def open_sockets(host: str, port: int) -> list[socket.socket]:
    """Listening TCP sockets for ``host:port`` (empty host: every interface, IPv4 and IPv6 when
    available; port 0 picks a free port, the same one for each). Raises OSError (port in use)."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, type_, proto, _, address in infos:
            sock = socket.socket(family, type_, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(sockets) > 1:
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock.bind(address)
            sock.listen(128)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class _StructlogLogger(Logger):
    """Hypercorn's logger, routed to structlog; access lines are not logged."""

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.access_logger = None
        self.error_logger = None

    async def access(self, request: Any, response: Any, request_time: float) -> None:
        return None

    async def log(self, level: int, message: str, *args: Any, **kwargs: Any) -> None:
        text = message % args if args else message
        if kwargs.get("exc_info"):
            logger.exception("http server: " + text, level=logging.getLevelName(level))
        else:
            logger.log(level, "http server: " + text)

    async def critical(self, message: str, *args: Any, **kwargs: Any) -> None:
        await self.log(logging.CRITICAL, message, *args, **kwargs)

    async def error(self, message: str, *args: Any, **kwargs: Any) -> None:
        await self.log(logging.ERROR, message, *args, **kwargs)

    async def warning(self, message: str, *args: Any, **kwargs: Any) -> None:
        await self.log(logging.WARNING, message, *args, **kwargs)

    async def info(self, message: str, *args: Any, **kwargs: Any) -> None:
        await self.log(logging.DEBUG, message, *args, **kwargs)  # "Running on ...": ours says it

    async def debug(self, message: str, *args: Any, **kwargs: Any) -> None:
        await self.log(logging.DEBUG, message, *args, **kwargs)

    async def exception(self, message: str, *args: Any, **kwargs: Any) -> None:
        await self.log(logging.ERROR, message, *args, exc_info=True, **kwargs)


async def serve(
    app: Callable[..., Awaitable[None]],
    sockets: list[socket.socket],
    shutdown: trio.Event,
) -> None:
    """Serve ``app`` on ``sockets`` (handed over to hypercorn) until ``shutdown`` is set; open
    requests then get GRACEFUL_S to finish."""
    config = Config()
    config.bind = [f"fd://{sock.detach()}" for sock in sockets]
    config.logger_class = _StructlogLogger
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = GRACEFUL_S
    config.keep_alive_timeout = KEEP_ALIVE_S
    config.h2_max_concurrent_streams = 16
    await hypercorn_serve(app, config, shutdown_trigger=shutdown.wait)


__all__ = ["open_sockets", "serve"]
