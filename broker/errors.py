"""Exceptions the broker's connection loop acts on."""
from __future__ import annotations

from storage.errors import StorageError


class CloseConnectionError(Exception):
    """Raised by a request handler when the connection must be closed instead of answered
    (e.g. a failed acks=0 produce, which Kafka reports by closing the connection)."""


STORAGE_FAILURES: tuple[type[Exception], ...] = (StorageError, OSError)
"""What a log dir that fails (full, read-only, EIO) or a log storage refuses raises. Handlers
catch exactly these and answer the partition with an error; anything else is a broker bug, which
the connection loop logs as one."""
