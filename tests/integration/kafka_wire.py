"""The shared blocking client (client.BrokerConnection) with raw socket access, for
protocol-level checks that real clients cannot express (duplicate partitions, v0 requests, raw
frames)."""

from __future__ import annotations

import socket
import struct

from client import BrokerConnection
from protocol import ApiKey, MessageSetBuilder


class WireClient(BrokerConnection):
    """client.BrokerConnection with the raw socket (``sock``) and the sans-IO connection
    (``conn``) at hand, for hand-made and malformed frames."""

    def __init__(self, host: str, port: int, timeout: float = 15.0) -> None:
        super().__init__(host, port, client_id="wire-test", timeout_s=timeout)
        self.sock, self.conn = self.socket, self.codec

    def closed_by_peer(self, timeout: float = 10.0) -> bool:
        """True when the broker closes the connection (EOF/reset) within ``timeout``."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False


def message_set(values, *, timestamps=None, keys=None, magic=1, codec=0) -> bytes:
    builder = MessageSetBuilder(magic=magic, codec=codec)
    for i, value in enumerate(values):
        builder.append(
            value, key=keys[i] if keys else None, timestamp=timestamps[i] if timestamps else -1
        )
    return builder.build()


def produce(
    client: WireClient,
    topic: str,
    record_set: bytes,
    *,
    partition: int = 0,
    acks: int = 1,
    version: int = 2,
):
    body = {
        "acks": acks,
        "timeout_ms": 10000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": record_set}]}
        ],
    }
    response = client.call(ApiKey.PRODUCE, version, body)
    return response.responses[0].partition_responses[0]


def stored_records(client: WireClient, topic: str, *, partition: int = 0) -> bytes:
    """The first MiB of a partition as stored: Fetch v12 reads it unconverted."""
    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": partition, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                ],
            }
        ],
    }
    return client.call(ApiKey.FETCH, 12, body).responses[0].partitions[0].records


def create_topic(
    client: WireClient, topic: str, partitions: int = 1, configs=None, replication_factor: int = 1
) -> int:
    body = {
        "topics": [
            {
                "name": topic,
                "num_partitions": partitions,
                "replication_factor": replication_factor,
                "assignments": [],
                "configs": [{"name": k, "value": str(v)} for k, v in (configs or {}).items()],
            }
        ],
        "timeout_ms": 10000,
    }
    return client.call(ApiKey.CREATE_TOPICS, 0, body).topics[0].error_code


def frame(
    api_key: int, version: int, correlation_id: int, payload: bytes, client_id: bytes = b"raw"
) -> bytes:
    head = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(head) + len(payload)) + head + payload
