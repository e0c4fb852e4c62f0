"""Broker-to-broker connections over the Kafka protocol (trio, protocol's sans-IO client).

The controller sends LeaderAndIsr / UpdateMetadata / StopReplica through one per broker, a
replica fetcher its Fetch and OffsetForLeaderEpoch requests through one per leader. One request
is in flight at a time. Any failure (refused connection, reset, a timeout, a malformed answer)
closes the connection and raises :class:`ChannelError`; the next call connects again.
"""

from __future__ import annotations

from typing import Any

import structlog
import trio

from protocol import ApiKey, ClientConnection, ProtocolError

logger = structlog.get_logger(__name__)

RECEIVE_BYTES = 262144


class ChannelError(Exception):
    """Raised by :meth:`BrokerChannel.call` when the request could not be sent or answered;
    the connection is closed and the next call reconnects."""


class BrokerChannel:
    """A connection to one broker; see the module docstring."""

    def __init__(self, host: str, port: int, *, client_id: str, timeout_s: float) -> None:
        self.host, self.port = host, port
        self._client_id = client_id
        self._timeout_s = timeout_s
        self._stream: trio.SocketStream | None = None
        self._conn: ClientConnection | None = None
        self._lock = trio.Lock()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def call(self, api_key: ApiKey, version: int, body: dict[str, Any]) -> Any:
        """Send one request and return the decoded response body; raises ChannelError."""
        async with self._lock:
            try:
                with trio.fail_after(self._timeout_s):
                    return await self._call(api_key, version, body)
            except (OSError, trio.TooSlowError, trio.BrokenResourceError, ProtocolError) as exc:
                await self._close()
                raise ChannelError(f"{api_key.name} to {self.address} failed: {exc!r}") from exc
            except BaseException:  # cancelled mid-request: its answer would confuse the next
                await self._close()
                raise

    async def _call(self, api_key: ApiKey, version: int, body: dict[str, Any]) -> Any:
        if self._stream is None:
            self._stream = await trio.open_tcp_stream(self.host, self.port)
            self._conn = ClientConnection(client_id=self._client_id)
        assert self._conn is not None
        correlation_id, frame = self._conn.request(api_key, version, body)
        await self._stream.send_all(frame)
        while True:
            data = await self._stream.receive_some(RECEIVE_BYTES)
            if not data:
                raise trio.BrokenResourceError("connection closed by the broker")
            for response in self._conn.receive_data(data):
                if response.correlation_id == correlation_id:
                    return response.body

    async def _close(self) -> None:
        stream, self._stream, self._conn = self._stream, None, None
        if stream is not None:
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def close(self) -> None:
        await self._close()
