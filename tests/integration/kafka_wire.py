"""The shared blocking client (client.BrokerConnection) with raw socket access, for
protocol-level checks that real clients cannot express (duplicate partitions, v0 requests, raw
frames)."""

from __future__ import annotations

import socket
import struct

from client import BrokerConnection

from protocol import ApiKey, MessageSetBuilder, iter_deep


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


def fetch_body(
    topic: str,
    partition: int = 0,
    offset: int = 0,
    max_bytes: int = 1 << 20,
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
) -> dict:
    """A Fetch request body (v3 onwards) for one partition of ``topic``."""
    return {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": partition,
                        "fetch_offset": offset,
                        "partition_max_bytes": max_bytes,
                    }
                ],
            }
        ],
    }


def fetch_partition(
    client: WireClient, topic: str, partition: int = 0, offset: int = 0, max_bytes: int = 1 << 20
):
    """One partition's answer to Fetch v12 (no wait, stored bytes unconverted) from ``offset``."""
    body = fetch_body(topic, partition, offset, max_bytes)
    return client.call(ApiKey.FETCH, 12, body).responses[0].partitions[0]


def stored_records(client: WireClient, topic: str, *, partition: int = 0) -> bytes:
    """The first MiB of a partition as stored."""
    return fetch_partition(client, topic, partition).records


def read_all(client: WireClient, topic: str, partition: int = 0, start: int = 0) -> list:
    """Every message (protocol.records.DeepMessage) of a partition from ``start`` to its end, by
    successive fetches; RuntimeError names the error code of a fetch that fails."""
    out: list = []
    offset = start
    for _ in range(100_000):
        part = fetch_partition(client, topic, partition, offset, 4 << 20)
        if part.error_code != 0:
            raise RuntimeError(f"fetch of {topic}-{partition} at {offset}: error {part.error_code}")
        got = [m for m in iter_deep(bytes(part.records)) if m.offset >= offset]
        if not got:
            return out
        out += got
        offset = got[-1].offset + 1
    raise RuntimeError(f"{topic}-{partition} did not end after 100,000 fetches")


def random_batch(
    rng, tag: bytes, now_ms: int, max_count: int, sizes: tuple[int, int], past_ms: int, share: float
) -> tuple[list[bytes], list[int]]:
    """(values, CreateTime stamps) of a batch of 1..max_count messages: values tagged for
    tracing, stamps mostly ``now_ms`` onwards but a ``share`` of them up to ``past_ms`` earlier
    (out of order, as KIP-33's time index must handle)."""
    count = rng.randint(1, max_count)
    values = [b"%s-m%d-" % (tag, j) + b"x" * rng.randrange(*sizes) for j in range(count)]
    stamps = [
        now_ms - rng.randrange(1, past_ms) if rng.random() < share else now_ms + j
        for j in range(count)
    ]
    return values, stamps


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
