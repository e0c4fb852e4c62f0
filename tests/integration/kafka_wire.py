"""A tiny blocking Kafka client over protocol.ClientConnection, for protocol-level checks that
real clients cannot express (duplicate partitions, v0 requests, raw frames)."""
from __future__ import annotations

import socket
import struct

from protocol import ApiKey, ClientConnection, MessageSetBuilder


class WireClient:
    def __init__(self, host: str, port: int, timeout: float = 15.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.conn = ClientConnection(client_id="wire-test")

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "WireClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send(self, api_key: ApiKey, version: int, body) -> int:
        correlation_id, frame = self.conn.request(api_key, version, body)
        self.sock.sendall(frame)
        return correlation_id

    def receive(self):
        while True:
            for response in self.conn.receive_data(b""):
                return response
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("broker closed the connection")
            for response in self.conn.receive_data(data):
                return response

    def call(self, api_key: ApiKey, version: int, body):
        self.send(api_key, version, body)
        return self.receive().body

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
        builder.append(value, key=keys[i] if keys else None,
                       timestamp=timestamps[i] if timestamps else -1)
    return builder.build()


def produce(client: WireClient, topic: str, record_set: bytes, *, partition: int = 0,
            acks: int = 1, version: int = 2):
    body = {"acks": acks, "timeout_ms": 10000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition,
                                                               "records": record_set}]}]}
    response = client.call(ApiKey.PRODUCE, version, body)
    return response.responses[0].partition_responses[0]


def create_topic(client: WireClient, topic: str, partitions: int = 1, configs=None,
                 replication_factor: int = 1) -> int:
    body = {"topics": [{
        "name": topic, "num_partitions": partitions, "replication_factor": replication_factor,
        "assignments": [],
        "configs": [{"name": k, "value": str(v)} for k, v in (configs or {}).items()],
    }], "timeout_ms": 10000}
    return client.call(ApiKey.CREATE_TOPICS, 0, body).topics[0].error_code


def frame(api_key: int, version: int, correlation_id: int, payload: bytes,
          client_id: bytes = b"raw") -> bytes:
    head = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(head) + len(payload)) + head + payload
