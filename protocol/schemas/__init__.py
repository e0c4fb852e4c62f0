"""The schema table: one construct schema per (api key, version) and direction, and the codec
functions that apply them with typed errors.

Schemas are named kio style (``ProduceRequestV2``, ``FetchResponseV3``) and declared in the
modules of this package with Protocol.java's field names. ``REQUEST_SCHEMAS`` and
``RESPONSE_SCHEMAS`` are keyed by ``(ApiKey, version)`` and cover exactly
:data:`protocol.api.SUPPORTED_VERSIONS` (checked when this module is imported).

At run time bodies go through codecs compiled from these schemas (:mod:`.compiled`, about ten
times faster than construct, same results), and Fetch responses through
:func:`.fetch.encode_fetch_response`, which can emit FileRegions.

Decoding takes a buffer (bytes or memoryview) and a body range, so the connection layer can parse
in place; offsets in the errors raised are indices into that buffer.
"""
from __future__ import annotations

import struct

from construct import Construct, ConstructError

from protocol.api import SUPPORTED_VERSIONS, ApiKey
from protocol.errors import BodyEncodeError, MalformedFrameError
from protocol.primitives import FieldError
from protocol.schemas.api_versions import ApiVersionsRequestV0, ApiVersionsResponseV0
from protocol.schemas.compiled import decoder, encoder
from protocol.schemas.fetch import (
    FetchRequestV0, FetchRequestV1, FetchRequestV2, FetchRequestV3,
    FetchResponseV0, FetchResponseV1, FetchResponseV2, FetchResponseV3,
    encode_fetch_response,
)
from protocol.schemas.groups import (
    DescribeGroupsRequestV0, DescribeGroupsResponseV0,
    FindCoordinatorRequestV0, FindCoordinatorResponseV0,
    HeartbeatRequestV0, HeartbeatResponseV0,
    JoinGroupRequestV0, JoinGroupRequestV1, JoinGroupResponseV0, JoinGroupResponseV1,
    LeaveGroupRequestV0, LeaveGroupResponseV0,
    ListGroupsRequestV0, ListGroupsResponseV0,
    OffsetCommitRequestV0, OffsetCommitRequestV1, OffsetCommitRequestV2,
    OffsetCommitResponseV0, OffsetCommitResponseV1, OffsetCommitResponseV2,
    OffsetFetchRequestV0, OffsetFetchRequestV1, OffsetFetchResponseV0, OffsetFetchResponseV1,
    SyncGroupRequestV0, SyncGroupResponseV0,
)
from protocol.schemas.list_offsets import (
    ListOffsetsRequestV0, ListOffsetsRequestV1, ListOffsetsResponseV0, ListOffsetsResponseV1,
)
from protocol.schemas.metadata import (
    MetadataRequestV0, MetadataRequestV1, MetadataRequestV2,
    MetadataResponseV0, MetadataResponseV1, MetadataResponseV2,
)
from protocol.schemas.produce import (
    ProduceRequestV0, ProduceRequestV1, ProduceRequestV2,
    ProduceResponseV0, ProduceResponseV1, ProduceResponseV2,
)
from protocol.schemas.topics import (
    CreateTopicsRequestV0, CreateTopicsResponseV0, DeleteTopicsRequestV0, DeleteTopicsResponseV0,
)

__all__ = [
    "REQUEST_SCHEMAS", "RESPONSE_SCHEMAS", "decode_request_body", "decode_response_body",
    "encode_request_body", "encode_response_body", "encode_response_chunks",
]

REQUEST_SCHEMAS: dict[tuple[ApiKey, int], Construct] = {
    (ApiKey.PRODUCE, 0): ProduceRequestV0,
    (ApiKey.PRODUCE, 1): ProduceRequestV1,
    (ApiKey.PRODUCE, 2): ProduceRequestV2,
    (ApiKey.FETCH, 0): FetchRequestV0,
    (ApiKey.FETCH, 1): FetchRequestV1,
    (ApiKey.FETCH, 2): FetchRequestV2,
    (ApiKey.FETCH, 3): FetchRequestV3,
    (ApiKey.LIST_OFFSETS, 0): ListOffsetsRequestV0,
    (ApiKey.LIST_OFFSETS, 1): ListOffsetsRequestV1,
    (ApiKey.METADATA, 0): MetadataRequestV0,
    (ApiKey.METADATA, 1): MetadataRequestV1,
    (ApiKey.METADATA, 2): MetadataRequestV2,
    (ApiKey.OFFSET_COMMIT, 0): OffsetCommitRequestV0,
    (ApiKey.OFFSET_COMMIT, 1): OffsetCommitRequestV1,
    (ApiKey.OFFSET_COMMIT, 2): OffsetCommitRequestV2,
    (ApiKey.OFFSET_FETCH, 0): OffsetFetchRequestV0,
    (ApiKey.OFFSET_FETCH, 1): OffsetFetchRequestV1,
    (ApiKey.FIND_COORDINATOR, 0): FindCoordinatorRequestV0,
    (ApiKey.JOIN_GROUP, 0): JoinGroupRequestV0,
    (ApiKey.JOIN_GROUP, 1): JoinGroupRequestV1,
    (ApiKey.HEARTBEAT, 0): HeartbeatRequestV0,
    (ApiKey.LEAVE_GROUP, 0): LeaveGroupRequestV0,
    (ApiKey.SYNC_GROUP, 0): SyncGroupRequestV0,
    (ApiKey.DESCRIBE_GROUPS, 0): DescribeGroupsRequestV0,
    (ApiKey.LIST_GROUPS, 0): ListGroupsRequestV0,
    (ApiKey.API_VERSIONS, 0): ApiVersionsRequestV0,
    (ApiKey.CREATE_TOPICS, 0): CreateTopicsRequestV0,
    (ApiKey.DELETE_TOPICS, 0): DeleteTopicsRequestV0,
}

RESPONSE_SCHEMAS: dict[tuple[ApiKey, int], Construct] = {
    (ApiKey.PRODUCE, 0): ProduceResponseV0,
    (ApiKey.PRODUCE, 1): ProduceResponseV1,
    (ApiKey.PRODUCE, 2): ProduceResponseV2,
    (ApiKey.FETCH, 0): FetchResponseV0,
    (ApiKey.FETCH, 1): FetchResponseV1,
    (ApiKey.FETCH, 2): FetchResponseV2,
    (ApiKey.FETCH, 3): FetchResponseV3,
    (ApiKey.LIST_OFFSETS, 0): ListOffsetsResponseV0,
    (ApiKey.LIST_OFFSETS, 1): ListOffsetsResponseV1,
    (ApiKey.METADATA, 0): MetadataResponseV0,
    (ApiKey.METADATA, 1): MetadataResponseV1,
    (ApiKey.METADATA, 2): MetadataResponseV2,
    (ApiKey.OFFSET_COMMIT, 0): OffsetCommitResponseV0,
    (ApiKey.OFFSET_COMMIT, 1): OffsetCommitResponseV1,
    (ApiKey.OFFSET_COMMIT, 2): OffsetCommitResponseV2,
    (ApiKey.OFFSET_FETCH, 0): OffsetFetchResponseV0,
    (ApiKey.OFFSET_FETCH, 1): OffsetFetchResponseV1,
    (ApiKey.FIND_COORDINATOR, 0): FindCoordinatorResponseV0,
    (ApiKey.JOIN_GROUP, 0): JoinGroupResponseV0,
    (ApiKey.JOIN_GROUP, 1): JoinGroupResponseV1,
    (ApiKey.HEARTBEAT, 0): HeartbeatResponseV0,
    (ApiKey.LEAVE_GROUP, 0): LeaveGroupResponseV0,
    (ApiKey.SYNC_GROUP, 0): SyncGroupResponseV0,
    (ApiKey.DESCRIBE_GROUPS, 0): DescribeGroupsResponseV0,
    (ApiKey.LIST_GROUPS, 0): ListGroupsResponseV0,
    (ApiKey.API_VERSIONS, 0): ApiVersionsResponseV0,
    (ApiKey.CREATE_TOPICS, 0): CreateTopicsResponseV0,
    (ApiKey.DELETE_TOPICS, 0): DeleteTopicsResponseV0,
}


def _check_table() -> None:
    for name, table in (("REQUEST_SCHEMAS", REQUEST_SCHEMAS),
                        ("RESPONSE_SCHEMAS", RESPONSE_SCHEMAS)):
        for key, (lo, hi) in SUPPORTED_VERSIONS.items():
            missing = [v for v in range(lo, hi + 1) if (key, v) not in table]
            if missing:
                raise AssertionError(f"{name} lacks {key.name} versions {missing} listed in "
                                     f"SUPPORTED_VERSIONS")
        extra = [k for k in table
                 if k[0] not in SUPPORTED_VERSIONS
                 or not SUPPORTED_VERSIONS[k[0]][0] <= k[1] <= SUPPORTED_VERSIONS[k[0]][1]]
        if extra:
            raise AssertionError(f"{name} has {extra} missing from SUPPORTED_VERSIONS")


_check_table()

_REQUEST_DECODERS = {key: decoder(schema) for key, schema in REQUEST_SCHEMAS.items()}
_RESPONSE_DECODERS = {key: decoder(schema) for key, schema in RESPONSE_SCHEMAS.items()}
_REQUEST_ENCODERS = {key: encoder(schema) for key, schema in REQUEST_SCHEMAS.items()}
_RESPONSE_ENCODERS = {key: encoder(schema) for key, schema in RESPONSE_SCHEMAS.items()}

_ENCODE_ERRORS = (ConstructError, KeyError, TypeError, ValueError, AttributeError,
                  OverflowError, struct.error)


def _what(api_key: ApiKey, version: int, direction: str) -> str:
    return f"{ApiKey(api_key).name} v{version} {direction}"


def _decode(decoders, buf, start: int, end: int, api_key: ApiKey, version: int,
            direction: str):
    try:
        body, pos = decoders[api_key, version](buf, start, end)
    except FieldError as exc:
        raise MalformedFrameError(f"malformed {_what(api_key, version, direction)} at byte "
                                  f"{exc.offset}: {exc}", api_key=api_key,
                                  api_version=version, offset=exc.offset) from None
    if pos != end:
        raise MalformedFrameError(f"{end - pos} unexpected bytes after the "
                                  f"{_what(api_key, version, direction)} body", api_key=api_key,
                                  api_version=version, offset=pos)
    return body


def decode_request_body(api_key: ApiKey, version: int, buf, start: int, end: int):
    """Decode the request body in ``buf[start:end]``; it must fill the range exactly.

    Raises MalformedFrameError (offset = index into ``buf``) for anything that does not parse or
    leaves bytes over. ``(api_key, version)`` must be in REQUEST_SCHEMAS.
    """
    return _decode(_REQUEST_DECODERS, buf, start, end, api_key, version, "request")


def decode_response_body(api_key: ApiKey, version: int, buf, start: int, end: int):
    """Decode the response body in ``buf[start:end]``, as :func:`decode_request_body`."""
    return _decode(_RESPONSE_DECODERS, buf, start, end, api_key, version, "response")


def _encode(encoders, body, api_key: ApiKey, version: int, direction: str) -> bytes:
    out = bytearray()
    try:
        encoders[api_key, version](body, out)
    except _ENCODE_ERRORS as exc:
        raise BodyEncodeError(f"cannot encode {_what(api_key, version, direction)}: "
                              f"{type(exc).__name__}: {exc}", api_key=api_key,
                              api_version=version) from None
    return bytes(out)


def encode_request_body(api_key: ApiKey, version: int, body) -> bytes:
    """Encode a request body (dict or Container); BodyEncodeError if it does not fit."""
    return _encode(_REQUEST_ENCODERS, body, api_key, version, "request")


def encode_response_chunks(api_key: ApiKey, version: int, body) -> tuple[list, int]:
    """Encode a response body as ``(chunks, total_length)``; chunks are bytes, and for Fetch
    also FileRegions standing for record sets."""
    if api_key == ApiKey.FETCH:
        try:
            return encode_fetch_response(version, body)
        except _ENCODE_ERRORS as exc:
            raise BodyEncodeError(f"cannot encode FETCH v{version} response: "
                                  f"{type(exc).__name__}: {exc}", api_key=api_key,
                                  api_version=version) from None
    data = _encode(_RESPONSE_ENCODERS, body, api_key, version, "response")
    return [data], len(data)


def encode_response_body(api_key: ApiKey, version: int, body) -> bytes:
    """Encode a response body to bytes; BodyEncodeError if it does not fit or holds a
    FileRegion."""
    chunks, _ = encode_response_chunks(api_key, version, body)
    if len(chunks) == 1:
        return chunks[0]
    if any(not isinstance(c, bytes) for c in chunks):
        raise BodyEncodeError(f"{_what(api_key, version, 'response')} holds a FileRegion; "
                              f"use send_chunks", api_key=api_key, api_version=version)
    return b"".join(chunks)
