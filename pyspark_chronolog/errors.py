"""Exceptions the chronolog Spark connector raises; each message says what to do next.

They travel from Python workers to the Spark driver as text inside a PythonException, so every
message names the topic/partition and the option or action that fixes it.
"""

from __future__ import annotations


class ChronologSourceError(Exception):
    """Base of every error the connector raises on purpose."""


class InvalidOptionError(ChronologSourceError):
    """Raised while planning when a data source option is missing, malformed or contradictory."""


class BrokerUnavailableError(ChronologSourceError):
    """Raised when no bootstrap server accepts a connection, or a connection breaks mid-request."""


class UnknownTopicError(ChronologSourceError):
    """Raised when a topic (or partition) named in the options does not exist on the broker."""


class TimestampNotFoundError(ChronologSourceError):
    """Raised when startingTimestamp is later than every message of a partition and
    startingOffsetsByTimestampStrategy is "error" (Spark's default)."""


class DataLossError(ChronologSourceError):
    """Raised when requested offsets were already deleted by retention (or the log was truncated)
    and failOnDataLoss is true."""


class BrokerResponseError(ChronologSourceError):
    """Raised when the broker answers a request with a Kafka error code the connector cannot
    recover from; ``error_code`` holds the code."""

    def __init__(self, message: str, *, error_code: int) -> None:
        super().__init__(message)
        self.error_code = error_code
