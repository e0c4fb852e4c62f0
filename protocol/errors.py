"""Kafka error codes and the exceptions protocol/ raises on malformed input.

Every exception here derives from :class:`ProtocolError`, so a caller that feeds untrusted bytes
needs one ``except`` clause; nothing else (IndexError, struct.error, construct errors) escapes.
"""
from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    """Kafka's error codes with their names from Errors.java (0.10.x)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_FOR_PARTITION = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    GROUP_LOAD_IN_PROGRESS = 14
    GROUP_COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR_FOR_GROUP = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44


class ProtocolError(Exception):
    """Base of every error raised for bytes that do not follow the Kafka protocol.

    ``api_key``, ``api_version`` and ``offset`` (byte offset within the frame or message set) say
    where the problem is, when known; ``str(exc)`` is a sentence for a person.
    """

    def __init__(self, message: str, *, api_key: int | None = None,
                 api_version: int | None = None, offset: int | None = None) -> None:
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version
        self.offset = offset


class FrameTooLargeError(ProtocolError):
    """Raised when a frame's size prefix exceeds the configured maximum; nothing is buffered."""


class MalformedFrameError(ProtocolError):
    """Raised when a frame (header or body) does not parse: truncated fields, bad lengths,
    negative sizes, or bytes left over after the last field."""


class UnsupportedApiError(ProtocolError):
    """Raised when a request names an api key this broker does not implement."""


class UnsupportedVersionError(ProtocolError):
    """Raised when a request names a known api at a version this broker does not implement
    (except ApiVersions, which is answered with error 35 instead)."""


class CorruptRecordError(ProtocolError):
    """Raised when a message set entry is invalid: bad size, CRC mismatch, unknown magic,
    undecodable compression, or an illegal nesting of compressed messages."""


class BodyEncodeError(ProtocolError):
    """Raised when a body given to encode does not fit its schema (missing field, value out of
    range, wrong type): a bug in the caller, reported before any byte is produced."""
