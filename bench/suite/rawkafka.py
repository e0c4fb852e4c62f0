"""A minimal blocking Kafka wire client for the two requests whose latency the suite measures raw.

Client libraries add their own queues and timers (librdkafka's offsets_for_times alone can take
hundreds of milliseconds), so the broker's own answer time is taken over a plain socket with
ApiVersions v0 (readiness probe) and ListOffsets v1 (time-index look-ups). Only these two layouts
are encoded; every frame is ``int32 size`` + header + body, big-endian, as in Protocol.java.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

# Request header v1: api_key int16, api_version int16, correlation_id int32, client_id string.
_HEADER = struct.Struct(">hhih")
_INT32 = struct.Struct(">i")
# ListOffsets v1 request body after the header: replica_id int32, [topics] count int32.
_LIST_OFFSETS_HEAD = struct.Struct(">ii")
# Per partition: partition int32, timestamp int64.
_PARTITION_TS = struct.Struct(">iq")
# Per partition in the v1 response: partition int32, error_code int16, timestamp int64, offset int64.
_PARTITION_ANSWER = struct.Struct(">ihqq")

CLIENT_ID = b"chronolog-bench"
API_VERSIONS = 18
LIST_OFFSETS = 2


class RawKafkaError(Exception):
    """Raised when the broker closes the connection or answers with a frame this client cannot parse."""


@dataclass(frozen=True)
class OffsetAnswer:
    """One partition's ListOffsets v1 answer: the first offset at or after the queried time."""

    error_code: int
    timestamp: int
    offset: int


class RawConnection:
    """One blocking TCP connection to a broker on loopback; close() releases the socket.

    Every call sends one request and waits for its response (no pipelining), so the measured time
    is one network round trip plus the broker's work. Socket errors propagate as OSError; a short
    or unparsable response raises RawKafkaError.
    """

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation_id = 0

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _roundtrip(self, api_key: int, api_version: int, body: bytes) -> memoryview:
        self._correlation_id += 1
        header = (
            _HEADER.pack(api_key, api_version, self._correlation_id, len(CLIENT_ID)) + CLIENT_ID
        )
        payload = header + body
        self._sock.sendall(_INT32.pack(len(payload)) + payload)
        (size,) = _INT32.unpack(self._recv_exact(4))
        frame = memoryview(self._recv_exact(size))
        (correlation_id,) = _INT32.unpack_from(frame, 0)
        if correlation_id != self._correlation_id:
            raise RawKafkaError(
                f"api {api_key} v{api_version}: response correlation id {correlation_id}, "
                f"expected {self._correlation_id}"
            )
        return frame[4:]

    def _recv_exact(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self._sock.recv(n)
            if not chunk:
                raise RawKafkaError("broker closed the connection mid-response")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def api_versions(self) -> int:
        """Send ApiVersions v0 and return the error code of the answer (0 = broker is serving)."""
        body = self._roundtrip(API_VERSIONS, 0, b"")
        return struct.unpack_from(">h", body, 0)[0]

    def list_offsets(self, topic: str, partition: int, timestamp: int) -> OffsetAnswer:
        """ListOffsets v1 for one partition: the earliest offset whose timestamp >= ``timestamp``."""
        name = topic.encode()
        body = (
            _LIST_OFFSETS_HEAD.pack(-1, 1)
            + struct.pack(">h", len(name))
            + name
            + _INT32.pack(1)
            + _PARTITION_TS.pack(partition, timestamp)
        )
        resp = self._roundtrip(LIST_OFFSETS, 1, body)
        try:
            pos = 4  # responses count (always 1 here)
            (name_len,) = struct.unpack_from(">h", resp, pos)
            pos += 2 + name_len + 4  # topic name, then partition count
            _, error_code, ts, offset = _PARTITION_ANSWER.unpack_from(resp, pos)
        except struct.error as exc:
            raise RawKafkaError(
                f"short ListOffsets v1 response for {topic}/{partition}: {exc}"
            ) from exc
        return OffsetAnswer(error_code, ts, offset)
