"""Waiting in tests for what another process or thread does: one polling loop for every test.

Tests synchronise on an observable event (a log line, an answer, a file) through ``wait_for``
rather than sleeping for a guessed time, so they hold on a loaded machine and finish as soon as
the event happens.
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

from client import BrokerConnectionError

T = TypeVar("T")

# Errors a predicate may raise while the thing it polls is still coming up (a broker restarting,
# a leader not elected yet, an answer not as expected yet): retried until the deadline.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (BrokerConnectionError, OSError, AssertionError)


class WaitTimeoutError(AssertionError):
    """Raised by ``wait_for`` when what it waits for has not happened by its deadline."""


def wait_for(
    predicate: Callable[[], T],
    what: str,
    *,
    timeout: float = 30.0,
    interval: float = 0.05,
    transient: tuple[type[BaseException], ...] = TRANSIENT_ERRORS,
) -> T:
    """Polls ``predicate`` every ``interval`` seconds until it returns something truthy, and
    returns that value.

    Raises WaitTimeoutError (an AssertionError) naming ``what`` (and the last transient error the predicate raised)
    after ``timeout`` seconds. Errors outside ``transient`` propagate at once: pass
    ``transient=()`` when the predicate raises to fail fast (a process found dead).
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except transient as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            raise WaitTimeoutError(
                f"timed out after {timeout} s waiting for {what} (last error: {last_error!r})"
            )
        time.sleep(interval)
