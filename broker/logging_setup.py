"""structlog set-up for the daemon: human console lines on a terminal, JSON lines otherwise.

Every line goes to stderr and is flushed at once, so a supervisor (or the test harness reading a
log file) sees it immediately, also when the process is killed with SIGKILL right after.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog


def configure_logging(
    stream: TextIO | None = None, *, level: int = logging.INFO, json: bool | None = None
) -> None:
    """Route structlog (and stdlib logging, for libraries) to ``stream`` (default stderr).

    ``json=None`` picks the console renderer when ``stream`` is a terminal, JSON lines otherwise.
    """
    stream = stream or sys.stderr
    if json is None:
        json = not stream.isatty()
    renderer = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(colors=stream.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info
            if json
            else structlog.processors.StackInfoRenderer(),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(
        stream=stream,
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )
