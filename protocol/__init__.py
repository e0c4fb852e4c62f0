"""chronolog's Kafka wire protocol, sans-IO: framing, headers, schemas, connection objects,
error codes (and message sets, once records.py lands). See docs/interfaces.md."""
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
    MalformedFrameError,
    ProtocolError,
    UnsupportedApiError,
    UnsupportedVersionError,
)
from protocol.schemas import REQUEST_SCHEMAS, RESPONSE_SCHEMAS

__all__ = [
    "SUPPORTED_VERSIONS", "ApiKey", "FileRegion", "Request", "RequestHeader", "Response",
    "api_versions_body", "DEFAULT_MAX_FRAME_BYTES", "ClientConnection", "ServerConnection",
    "BodyEncodeError", "CorruptRecordError", "ErrorCode", "FrameTooLargeError",
    "MalformedFrameError", "ProtocolError", "UnsupportedApiError", "UnsupportedVersionError",
    "REQUEST_SCHEMAS", "RESPONSE_SCHEMAS",
]
