"""Sans-IO connection state machines: bytes in, requests/responses out (h11 style).

Wire framing (all big-endian)::

    frame           = size:int32  payload[size]
    request payload = api_key:int16 api_version:int16 correlation_id:int32
                      client_id:nullable_string(int16 length)  [tagged fields, header v2]  body
    response payload= correlation_id:int32 [tagged fields, header v1] body

Requests at a flexible version (KIP-482) carry header v2 (tagged fields after client_id) and
get response header v1 (tagged fields after the correlation id), except ApiVersions, whose
response header is always v0 so that a client can read it whatever it asked. An ApiVersions
request above the highest version served is answered in the v0 layout with error 35
(UNSUPPORTED_VERSION), as Kafka does, so the client retries with one we listed.

Error offsets are byte indices into the frame, counting its 4-byte size prefix.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from protocol.api import (
    SUPPORTED_VERSIONS,
    ApiKey,
    RawFrame,
    Request,
    RequestHeader,
    Response,
    UndecodedRequest,
)
from protocol.errors import (
    BodyEncodeError,
    FrameTooLargeError,
    MalformedFrameError,
    UnsupportedApiError,
    UnsupportedVersionError,
)
from protocol.schemas import (
    REQUEST_SCHEMAS,
    RESPONSE_SCHEMAS,
    decode_request_body,
    decode_response_body,
    encode_request_body,
    encode_response_chunks,
    is_flexible,
)
from protocol.schemas.codec import Chunk, FieldError, skip_tagged_fields

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

__all__ = ["ServerConnection", "ClientConnection", "DEFAULT_MAX_FRAME_BYTES"]

DEFAULT_MAX_FRAME_BYTES = 104857600  # Kafka's socket.request.max.bytes

_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
# api_key int16, api_version int16, correlation_id int32, client_id length int16: 10 bytes.
_REQUEST_HEAD = struct.Struct(">hhih")
# size int32 + correlation_id int32: the response frame prefix.
_RESPONSE_HEAD = struct.Struct(">ii")
_KNOWN_KEYS = frozenset(int(k) for k in ApiKey)
_NO_TAGGED_FIELDS = b"\x00"
# Compact the receive buffer once this many consumed bytes sit in front of it.
_COMPACT_AT = 1 << 16
# A Produce frame this large keeps the receive buffer it arrived in (the bytes after it move to a
# new one); a smaller one is copied out. Above the server's 256 KiB reads, so what moves is less
# than what stays.
_TAKE_WHOLE_AT = 1 << 20


class _FrameBuffer:
    """Accumulates bytes and hands out complete frames as (buffer, start, end) ranges.

    The size prefix is checked as soon as its 4 bytes are in: a frame above ``max_frame_bytes``
    is refused before any of its payload is waited for.
    """

    def __init__(self, max_frame_bytes: int, what: str) -> None:
        if max_frame_bytes < 0:
            raise ValueError(f"max_frame_bytes must be >= 0, got {max_frame_bytes}")
        self.max_frame_bytes = max_frame_bytes
        self._what = what
        self._buf = bytearray()
        self._pos = 0

    def feed(self, data: Buffer) -> None:
        self._buf += data

    def next_frame(self) -> tuple[bytearray, int, int] | None:
        """The next complete frame as ``(buf, start, end)`` (``start`` = its size prefix), or
        None if incomplete. The range stays valid until the next call, which may compact."""
        buf, pos = self._buf, self._pos
        if pos and (pos >= _COMPACT_AT or pos == len(buf)):
            del buf[:pos]
            self._pos = pos = 0
        if len(buf) - pos < 4:
            return None
        (size,) = _INT32.unpack_from(buf, pos)
        if size < 0:
            self._discard()
            raise MalformedFrameError(f"{self._what} frame size {size} is negative", offset=0)
        if size > self.max_frame_bytes:
            self._discard()
            raise FrameTooLargeError(
                f"{self._what} frame of {size} bytes exceeds the maximum of "
                f"{self.max_frame_bytes}; closing the connection",
                offset=0,
            )
        end = pos + 4 + size
        if len(buf) < end:
            if pos:
                del buf[:pos]
                self._pos = 0
            return None
        self._pos = end
        return buf, pos, end

    def take(self, buf: bytearray, start: int, end: int) -> tuple[Buffer, int, int]:
        """The frame ``buf[start:end]`` (from :meth:`next_frame`) in a buffer of its own that
        nothing here changes again, as (buffer, start, end): a large frame keeps the buffer it
        arrived in (only the bytes after it are copied to a new one), a small one is copied."""
        if end - start < _TAKE_WHOLE_AT:
            # One copy: slicing the bytearray itself would copy the frame twice.
            with memoryview(buf) as view:
                return bytes(view[start:end]), 0, end - start
        self._buf = bytearray(buf[end:])
        self._pos = 0
        return buf, start, end

    def next_frame_api_key(self) -> int | None:
        """The first int16 of the next frame (a request's api key) if the whole frame is
        buffered, else None. Consumes nothing."""
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 6:
            return None
        (size,) = _INT32.unpack_from(buf, pos)
        if size < 2 or len(buf) - pos - 4 < size:
            return None
        key: int = _INT16.unpack_from(buf, pos + 4)[0]
        return key

    def _discard(self) -> None:
        # The stream cannot be resynchronised after a bad size; free what we hold.
        self._buf = bytearray()
        self._pos = 0


class ServerConnection:
    """The broker side of one client connection.

    Feed received bytes to :meth:`receive_data` and iterate the requests it yields; encode each
    answer with :meth:`send` or :meth:`send_chunks`. No I/O, no clocks. After any exception from
    :meth:`receive_data` the byte stream is unusable and the connection must be closed. Memory
    held is at most one partial frame (bounded by ``max_request_bytes``) plus unread input.
    """

    def __init__(
        self,
        max_request_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        versions: Mapping[ApiKey, tuple[int, int]] = SUPPORTED_VERSIONS,
        decode_beside_bytes: int | None = None,
    ) -> None:
        """``versions``: the (min, max) version served per api (a broker in a cluster adds
        CLUSTER_VERSIONS); any other api or version is refused. ``decode_beside_bytes``: a
        request frame of this size or more is yielded as an :class:`UndecodedRequest` (its
        decoding can take milliseconds: a Fetch naming 10,000 partitions is 330 KB), Produce
        aside (its records decode as views, whatever their size)."""
        self._frames = _FrameBuffer(max_request_bytes, "request")
        self._decode_beside_bytes = decode_beside_bytes
        self._versions = versions
        # The served api keys by number: a dict lookup, cheaper than ApiKey() per request.
        self._keys = {int(k): k for k in versions}
        self.raw_frames = False
        """While set, each frame is yielded as a :class:`RawFrame` (a SASL token after a
        SaslHandshake v0); read before each frame, so the caller may flip it between two."""
        self.request_size = 0
        """The size of the last request yielded, without its 4-byte size prefix (Kafka's
        ``request.sizeInBytes``, what a producer_byte_rate quota counts)."""

    @property
    def max_request_bytes(self) -> int:
        return self._frames.max_frame_bytes

    def receive_data(self, data: Buffer) -> Iterator[Request | RawFrame | UndecodedRequest]:
        """Buffer ``data`` and return an iterator over every request now complete, in order.

        The iterator raises FrameTooLargeError, MalformedFrameError, UnsupportedApiError or
        UnsupportedVersionError at the first bad frame, after yielding the good ones before it.
        """
        self._frames.feed(data)
        return self._requests()

    def _requests(self) -> Iterator[Request | RawFrame | UndecodedRequest]:
        frames = self._frames
        while (frame := frames.next_frame()) is not None:
            received, start, end = frame
            if self.raw_frames:
                yield RawFrame(bytes(received[start + 4 : end]))
                continue
            buf: Buffer = received
            beside = self._decode_beside_bytes
            if end - start >= 6 and _INT16.unpack_from(received, start + 4)[0] == ApiKey.PRODUCE:
                # A Produce's records decode as views of its frame (no copy of a 30 MB batch
                # on the event loop): the frame gets a buffer that later input cannot change.
                buf, start, end = frames.take(received, start, end)
            elif beside is not None and end - start >= beside:
                buf, start, end = frames.take(received, start, end)
                self.request_size = end - start - 4
                yield UndecodedRequest(
                    partial(_decode_request, buf, start, end, self._keys, self._versions)
                )
                continue
            request = _decode_request(buf, start, end, self._keys, self._versions)
            self.request_size = end - start - 4
            yield request

    def buffered_request_api_key(self) -> int | None:
        """The api key of the next request when its whole frame is already buffered (the
        iterator from :meth:`receive_data` will yield it without more input), else None. A
        server may hold a response back to send it with the next one's."""
        if self.raw_frames:
            return None
        return self._frames.next_frame_api_key()

    def send_raw(self, payload: bytes) -> bytes:
        """A frame holding ``payload`` as it is (the answer to a :class:`RawFrame`)."""
        return _INT32.pack(len(payload)) + payload

    def send(self, request: Request, body: Mapping[str, Any]) -> bytes:
        """The response frame for ``request`` as bytes.

        Raises BodyEncodeError if ``body`` does not fit the response schema (or holds a
        FileRegion: use :meth:`send_chunks`).
        """
        chunks = self.send_chunks(request, body)
        if len(chunks) == 1:
            only = chunks[0]
            assert isinstance(only, bytes)  # the first chunk is always bytes
            return only
        if not all(isinstance(c, bytes) for c in chunks):
            raise BodyEncodeError(
                "response holds a FileRegion; use send_chunks",
                api_key=request.header.api_key,
                api_version=request.header.api_version,
            )
        return b"".join(cast("list[bytes]", chunks))  # checked just above

    def send_chunks(self, request: Request, body: Mapping[str, Any]) -> list[Chunk]:
        """The response frame for ``request`` as ``list[bytes | FileRegion]`` in wire order.

        Only a Fetch response's ``record_set`` may be a FileRegion; the size prefix counts its
        length. ApiVersions requests above v0 are answered in the v0 layout.
        """
        header = request.header
        version = header.api_version
        if header.api_key == ApiKey.API_VERSIONS and request.body is None:
            version = 0
        out = bytearray()
        out += _RESPONSE_HEAD.pack(0, header.correlation_id)
        if (
            header.api_key != ApiKey.API_VERSIONS
            and (header.api_key, version) in RESPONSE_SCHEMAS.flexible
        ):
            out += _NO_TAGGED_FIELDS
        chunks, total = encode_response_chunks(header.api_key, version, body, out)
        # The first chunk is always bytes, holding the header: fill in the size.
        head = chunks[0]
        assert isinstance(head, bytes)
        first = bytearray(head)
        _INT32.pack_into(first, 0, total - 4)
        chunks[0] = bytes(first)
        return chunks


def _decode_request(
    buf: Buffer,
    start: int,
    end: int,
    keys: Mapping[int, ApiKey],
    versions: Mapping[ApiKey, tuple[int, int]],
) -> Request:
    with memoryview(buf)[start:end] as frame:
        end = len(frame)
        if end < 4 + _REQUEST_HEAD.size:
            raise MalformedFrameError(
                f"request frame of {end - 4} bytes is shorter than the "
                f"{_REQUEST_HEAD.size}-byte request header",
                offset=4,
            )
        api_key, version, correlation_id, id_len = _REQUEST_HEAD.unpack_from(frame, 4)
        pos = 4 + _REQUEST_HEAD.size
        if api_key not in keys:
            raise UnsupportedApiError(
                f"api key {api_key} (version {version}, correlation id "
                f"{correlation_id}) is not implemented by this broker",
                api_key=api_key,
                api_version=version,
                offset=4,
            )
        key = keys[api_key]
        if id_len < -1 or id_len > end - pos:
            raise MalformedFrameError(
                f"{key.name} v{version} request: client_id length {id_len} "
                f"is invalid for the {end - pos} bytes left",
                api_key=key,
                api_version=version,
                offset=pos - 2,
            )
        if id_len == -1:
            client_id = None
        else:
            try:
                client_id = str(frame[pos : pos + id_len], "utf-8")
            except UnicodeDecodeError as exc:
                raise MalformedFrameError(
                    f"{key.name} v{version} request: client_id is not valid UTF-8",
                    api_key=key,
                    api_version=version,
                    offset=pos + exc.start,
                ) from None
            pos += id_len
        header = RequestHeader(key, version, correlation_id, client_id)
        lo, hi = versions[key]
        if not lo <= version <= hi:
            if key == ApiKey.API_VERSIONS and version > hi:
                # A client newer than us: answer error 35 in the v0 layout, it retries lower.
                return Request(header, None)
            raise UnsupportedVersionError(
                f"{key.name} v{version} is not supported (this broker implements v{lo}-v{hi})",
                api_key=key,
                api_version=version,
                offset=6,
            )
        if (key, version) in REQUEST_SCHEMAS.flexible:
            if pos < end and frame[pos] == 0:  # no tagged fields, what clients send
                pos += 1
            else:
                pos = _header_tags_skipped(frame, pos, key, version, "request")
        return Request(header, decode_request_body(key, version, frame, pos, end))


def _header_tags_skipped(
    frame: memoryview, pos: int, key: ApiKey, version: int, direction: str
) -> int:
    """Past the tagged fields of a flexible request or response header at ``pos``;
    MalformedFrameError when they are cut short or malformed."""
    try:
        return skip_tagged_fields(frame, pos, len(frame))
    except FieldError as exc:
        raise MalformedFrameError(
            f"{key.name} v{version} {direction} header: {exc}",
            api_key=key,
            api_version=version,
            offset=exc.offset,
        ) from None


class ClientConnection:
    """The client side of one connection, for tests, tools, benchmarks and the Spark source.

    :meth:`request` encodes a request and remembers its api and version under a fresh
    correlation id; :meth:`receive_data` decodes the responses. Produce requests with acks=0 get
    no response and are not remembered.
    """

    def __init__(
        self, client_id: str | None = "chronolog", max_response_bytes: int = DEFAULT_MAX_FRAME_BYTES
    ) -> None:
        self.client_id = client_id
        if client_id is None:
            self._client_id = b"\xff\xff"
        else:
            raw = client_id.encode("utf-8")
            if len(raw) > 0x7FFF:
                raise ValueError(f"client_id of {len(raw)} bytes exceeds 32767")
            self._client_id = struct.pack(">h", len(raw)) + raw
        self._frames = _FrameBuffer(max_response_bytes, "response")
        self._next_correlation_id = 0
        self._pending: dict[int, tuple[ApiKey, int]] = {}

    @property
    def pending(self) -> int:
        """How many requests still await their response."""
        return len(self._pending)

    def request(self, api_key: int, api_version: int, body: Mapping[str, Any]) -> tuple[int, bytes]:
        """Encode a request frame; returns ``(correlation_id, frame bytes)``.

        Raises UnsupportedApiError / UnsupportedVersionError for an api or version not in the
        schema table, BodyEncodeError if ``body`` does not fit the schema.
        """
        if api_key not in _KNOWN_KEYS:
            raise UnsupportedApiError(
                f"api key {api_key} has no schema", api_key=api_key, api_version=api_version
            )
        key = ApiKey(api_key)
        if (key, api_version) not in REQUEST_SCHEMAS:
            raise UnsupportedVersionError(
                f"{key.name} v{api_version} has no schema", api_key=key, api_version=api_version
            )
        payload = encode_request_body(key, api_version, body)
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        head = struct.pack(">hhi", key, api_version, correlation_id) + self._client_id
        if is_flexible(key, api_version):
            head += _NO_TAGGED_FIELDS
        frame = _INT32.pack(len(head) + len(payload)) + head + payload
        if not (key == ApiKey.PRODUCE and body["acks"] == 0):
            self._pending[correlation_id] = (key, api_version)
        return correlation_id, frame

    def receive_data(self, data: bytes) -> Iterator[Response]:
        """Buffer ``data`` and return an iterator over every response now complete, in order.

        Raises FrameTooLargeError or MalformedFrameError (also for a correlation id that matches
        no outstanding request); the connection is unusable afterwards.
        """
        self._frames.feed(data)
        return self._responses()

    def _responses(self) -> Iterator[Response]:
        while (frame := self._frames.next_frame()) is not None:
            buf, start, end = frame
            view = memoryview(buf)[start:end]
            try:
                response = self._decode_response(view)
            finally:
                view.release()
            yield response

    def _decode_response(self, frame: memoryview) -> Response:
        if len(frame) < 8:
            raise MalformedFrameError(
                f"response frame of {len(frame) - 4} bytes has no correlation id", offset=4
            )
        (correlation_id,) = _INT32.unpack_from(frame, 4)
        try:
            key, version = self._pending.pop(correlation_id)
        except KeyError:
            raise MalformedFrameError(
                f"response correlation id {correlation_id} matches no outstanding request", offset=4
            ) from None
        pos = 8
        if key != ApiKey.API_VERSIONS and is_flexible(key, version, "response"):
            pos = _header_tags_skipped(frame, pos, key, version, "response")
        body = decode_response_body(key, version, frame, pos, len(frame))
        return Response(correlation_id, key, version, body)
