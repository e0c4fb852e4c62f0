"""Exceptions of the broker: the ones its connection loop and start-up act on, and what handlers
catch from storage."""

from __future__ import annotations

from storage.errors import StorageError


class CloseConnectionError(Exception):
    """Raised by a request handler when the connection must be closed instead of answered
    (e.g. a failed acks=0 produce, which Kafka reports by closing the connection)."""


STORAGE_FAILURES: tuple[type[Exception], ...] = (StorageError, OSError)
"""What a log dir that fails (full, read-only, EIO) or a log storage refuses raises. Handlers
catch exactly these and answer the partition with an error; anything else is a broker bug, which
the connection loop logs as one."""


class StartupError(Exception):
    """Raised at start-up when a log directory's persisted state contradicts the configuration
    (e.g. meta.properties names another broker.id) or cannot be read."""


class ClusterStateError(Exception):
    """Raised in a cluster when ZooKeeper cannot be read or written (unreachable, session
    lost); the message says what failed. The change may be only partly written (its config but
    not the notification the other brokers follow): retrying it completes it."""
