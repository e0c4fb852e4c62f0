"""Exceptions the broker's connection loop acts on."""
from __future__ import annotations


class CloseConnectionError(Exception):
    """Raised by a request handler when the connection must be closed instead of answered
    (e.g. a failed acks=0 produce, which Kafka reports by closing the connection)."""
