"""The schema table: one codec per (api key, version) and direction, generated from Kafka's
message definitions (:mod:`.definitions`, written by :mod:`.generate` from Kafka 3.9.0's
``common/message/*.json``; see :mod:`.codec` for the wire types and field naming).

``REQUEST_SCHEMAS`` and ``RESPONSE_SCHEMAS`` map ``(ApiKey, version)`` to a
:class:`~.codec.MessageCodec` (named kio style, ``ProduceRequestV9``) for every version Kafka
3.9 defines; codecs are compiled on first use, so importing costs only the table. Every version
in :data:`protocol.api.SUPPORTED_VERSIONS` must be in it (checked at import).

Decoding takes a buffer (bytes or memoryview) and a body range, so the connection layer parses in
place; offsets in the errors raised are indices into that buffer.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from typing import Any, cast

from protocol.api import CLUSTER_VERSIONS, SUPPORTED_VERSIONS, ApiKey
from protocol.errors import BodyEncodeError, MalformedFrameError
from protocol.schemas.codec import (
    Body,
    ByteBuffer,
    Chunk,
    FieldError,
    MessageCodec,
    build_codec,
    version_in,
)
from protocol.schemas.definitions import MESSAGES

__all__ = [
    "REQUEST_SCHEMAS",
    "RESPONSE_SCHEMAS",
    "Body",
    "decode_request_body",
    "decode_response_body",
    "encode_request_body",
    "encode_response_chunks",
    "encode_response_body",
    "is_flexible",
]


def _versions(spec: str) -> range:
    lo, _, hi = spec.partition("-")
    return range(int(lo), int(hi or lo) + 1)


class _CodecTable(Mapping[tuple[ApiKey, int], MessageCodec]):
    """(ApiKey, version) -> MessageCodec for one direction, compiled on first use."""

    def __init__(self, kind: str) -> None:
        messages = cast("list[dict[str, Any]]", list(MESSAGES.values()))
        self._messages = {
            (ApiKey(m["apiKey"]), v): m
            for m in messages
            if m["type"] == kind
            for v in _versions(m["validVersions"])
        }
        # The (ApiKey, version) pairs of KIP-482's flexible encoding: a set lookup, where a
        # codec's ``flexible`` costs the connection layer a call per request and direction.
        self.flexible = frozenset(
            key for key, m in self._messages.items() if version_in(m["flexibleVersions"], key[1])
        )
        # The codecs built so far: the hot paths below look here before calling __getitem__.
        self.compiled: dict[tuple[ApiKey, int], MessageCodec] = {}

    def __getitem__(self, key: tuple[ApiKey, int]) -> MessageCodec:
        codec = self.compiled.get(key)
        if codec is None:
            codec = self.compiled[key] = build_codec(self._messages[key], key[1])
        return codec

    def __contains__(self, key: object) -> bool:
        return key in self._messages

    def __iter__(self) -> Iterator[tuple[ApiKey, int]]:
        return iter(self._messages)

    def __len__(self) -> int:
        return len(self._messages)


REQUEST_SCHEMAS = _CodecTable("request")
RESPONSE_SCHEMAS = _CodecTable("response")


def _check_table() -> None:
    for key, (lo, hi) in [*SUPPORTED_VERSIONS.items(), *CLUSTER_VERSIONS.items()]:
        missing = [
            v
            for v in range(lo, hi + 1)
            if (key, v) not in REQUEST_SCHEMAS or (key, v) not in RESPONSE_SCHEMAS
        ]
        if missing:
            raise AssertionError(f"{key.name} versions {missing} are served but have no schema")


_check_table()

_ENCODE_ERRORS = (
    FieldError,
    KeyError,
    TypeError,
    ValueError,
    AttributeError,
    OverflowError,
    struct.error,
)


def is_flexible(api_key: ApiKey, version: int, direction: str = "request") -> bool:
    """Whether this version uses KIP-482's flexible encoding (and header v2 / v1)."""
    table = REQUEST_SCHEMAS if direction == "request" else RESPONSE_SCHEMAS
    return (api_key, version) in table.flexible


def _what(api_key: ApiKey, version: int, direction: str) -> str:
    return f"{ApiKey(api_key).name} v{version} {direction}"


def _decode(
    table: _CodecTable,
    buf: ByteBuffer,
    start: int,
    end: int,
    api_key: ApiKey,
    version: int,
    direction: str,
    *,
    exact: bool,
) -> Body:
    try:
        codec = table.compiled.get((api_key, version)) or table[api_key, version]
        body, pos = codec.decode(buf, start, end)
    except FieldError as exc:
        raise MalformedFrameError(
            f"malformed {_what(api_key, version, direction)} at byte {exc.offset}: {exc}",
            api_key=api_key,
            api_version=version,
            offset=exc.offset,
        ) from None
    if exact and pos != end:
        raise MalformedFrameError(
            f"{end - pos} unexpected bytes after the {_what(api_key, version, direction)} body",
            api_key=api_key,
            api_version=version,
            offset=pos,
        )
    return body


def decode_request_body(
    api_key: ApiKey, version: int, buf: ByteBuffer, start: int, end: int
) -> Body:
    """Decode the request body in ``buf[start:end]``; it must fill the range exactly.

    Raises MalformedFrameError (offset = index into ``buf``) for anything that does not parse.
    Bytes after the body are ignored, as Kafka's RequestContext.parseRequest ignores them:
    librdkafka 2.16 sends three such bytes after its "all topics" Metadata v12 request.
    ``(api_key, version)`` must be in REQUEST_SCHEMAS.
    """
    return _decode(REQUEST_SCHEMAS, buf, start, end, api_key, version, "request", exact=False)


def decode_response_body(
    api_key: ApiKey, version: int, buf: ByteBuffer, start: int, end: int
) -> Body:
    """Decode the response body in ``buf[start:end]``, as :func:`decode_request_body`, except
    that it must fill the range exactly (MalformedFrameError for bytes left over)."""
    return _decode(RESPONSE_SCHEMAS, buf, start, end, api_key, version, "response", exact=True)


def _encode_error(exc: Exception, api_key: ApiKey, version: int, direction: str) -> BodyEncodeError:
    return BodyEncodeError(
        f"cannot encode {_what(api_key, version, direction)}: {type(exc).__name__}: {exc}",
        api_key=api_key,
        api_version=version,
    )


def encode_request_body(api_key: ApiKey, version: int, body: Mapping[str, Any]) -> bytes:
    """Encode a request body (dict or Body); BodyEncodeError if it does not fit."""
    try:
        codec = (
            REQUEST_SCHEMAS.compiled.get((api_key, version)) or REQUEST_SCHEMAS[api_key, version]
        )
        chunks, _ = codec.encode(body, None)
    except _ENCODE_ERRORS as exc:
        raise _encode_error(exc, api_key, version, "request") from None
    return b"".join(cast("list[bytes]", chunks))  # requests carry no FileRegion


def encode_response_chunks(
    api_key: ApiKey, version: int, body: Mapping[str, Any], out: bytearray | None = None
) -> tuple[list[Chunk], int]:
    """Encode a response body as ``(chunks, total_length)``: bytes, and FileRegions (or large
    bytes, kept uncopied) standing for records fields; the first chunk is always bytes. ``out``
    may already hold a header: the first chunk starts with it."""
    try:
        codec = (
            RESPONSE_SCHEMAS.compiled.get((api_key, version)) or RESPONSE_SCHEMAS[api_key, version]
        )
        return codec.encode(body, out)
    except _ENCODE_ERRORS as exc:
        raise _encode_error(exc, api_key, version, "response") from None


def encode_response_body(api_key: ApiKey, version: int, body: Mapping[str, Any]) -> bytes:
    """Encode a response body to bytes; BodyEncodeError if it does not fit or holds a
    FileRegion."""
    chunks, _ = encode_response_chunks(api_key, version, body)
    if any(not isinstance(c, (bytes, bytearray)) for c in chunks):
        raise BodyEncodeError(
            f"{_what(api_key, version, 'response')} holds a FileRegion; use send_chunks",
            api_key=api_key,
            api_version=version,
        )
    return b"".join(cast("list[bytes]", chunks))  # checked just above
