"""chronolog's Kafka wire protocol, sans-IO: framing, headers, schemas, connection objects,
error codes and message sets (magic 0 and 1). See docs/interfaces.md."""
from protocol.api import (
    SUPPORTED_VERSIONS,
    ApiKey,
    FileRegion,
    Request,
    RequestHeader,
    Response,
    api_versions_body,
)
from protocol.connection import DEFAULT_MAX_FRAME_BYTES, ClientConnection, ServerConnection
from protocol.errors import (
    BodyEncodeError,
    CorruptRecordError,
    ErrorCode,
    FrameTooLargeError,
    LocalProtocolError,
    MalformedFrameError,
    ProtocolError,
    UnsupportedApiError,
    UnsupportedVersionError,
)
from protocol.records import (
    LOG_OVERHEAD,
    MIN_MESSAGE_SIZE,
    NO_TIMESTAMP,
    Codec,
    Message,
    MessageSetBuilder,
    ShallowEntry,
    TimestampType,
    check_entry,
    convert,
    iter_deep,
    iter_shallow,
)
from protocol.schemas import REQUEST_SCHEMAS, RESPONSE_SCHEMAS
from protocol.validator import Rejected, TopicSettings, ValidatedRecords, validate_produce

__all__ = [
    "SUPPORTED_VERSIONS", "ApiKey", "FileRegion", "Request", "RequestHeader", "Response",
    "api_versions_body", "DEFAULT_MAX_FRAME_BYTES", "ClientConnection", "ServerConnection",
    "BodyEncodeError", "CorruptRecordError", "ErrorCode", "FrameTooLargeError", "LocalProtocolError",
    "MalformedFrameError", "ProtocolError", "UnsupportedApiError", "UnsupportedVersionError",
    "REQUEST_SCHEMAS", "RESPONSE_SCHEMAS",
    "LOG_OVERHEAD", "MIN_MESSAGE_SIZE", "NO_TIMESTAMP", "Codec", "Message", "MessageSetBuilder",
    "ShallowEntry", "TimestampType", "check_entry", "convert", "iter_deep", "iter_shallow",
    "Rejected", "TopicSettings", "ValidatedRecords", "validate_produce",
]
