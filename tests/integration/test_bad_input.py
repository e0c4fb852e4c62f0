"""Hostile and broken input: the broker closes the offending connection, logs why, and keeps
serving everyone else."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from protocol import ApiKey
from tests.conftest import api_versions_ok
from tests.integration.kafka_wire import WireClient, frame, message_set, produce

BAD_FRAMES = {
    "metadata with a bad array count": frame(3, 1, 1, b"\x7f\xff\xff\xff"),
    "frame shorter than a header": struct.pack(">i", 3) + b"abc",
    "negative size": struct.pack(">i", -5),
    "oversized frame": struct.pack(">i", 500_000_000) + b"\x00" * 100,
    "unknown api key": frame(99, 0, 1, b""),
    "unsupported produce version": frame(0, 9, 1, b""),
    "truncated produce body": frame(0, 2, 1, b"\x00\x01\x00\x00"),
    "bad client id length": struct.pack(">ihhih", 10, 3, 0, 1, 3000),
}


@pytest.mark.parametrize("what", BAD_FRAMES)
def test_bad_frame_closes_only_that_connection(broker, what):
    with WireClient(broker.host, broker.port) as bystander:
        assert bystander.call(ApiKey.API_VERSIONS, 0, {}).error_code == 0
        with WireClient(broker.host, broker.port) as bad:
            bad.sock.sendall(BAD_FRAMES[what])
            assert bad.closed_by_peer(), what
        assert bystander.call(ApiKey.METADATA, 1, {"topics": []}).controller_id == 0
    assert api_versions_ok(broker.host, broker.port)


def test_garbage_after_a_valid_request(broker):
    with WireClient(broker.host, broker.port) as c:
        _, valid = c.conn.request(ApiKey.API_VERSIONS, 0, {})
        c.sock.sendall(valid + struct.pack(">i", 8) + b"\xde\xad\xbe\xef" * 2)
        assert c.receive().body.error_code == 0  # the good request is still answered
        assert c.closed_by_peer()


def test_bad_input_is_logged_with_its_reason(broker):
    if broker.external:
        pytest.skip("needs the broker's log")
    with WireClient(broker.host, broker.port) as bad:
        bad.sock.sendall(frame(99, 0, 1, b""))
        assert bad.closed_by_peer()
    deadline = time.monotonic() + 5
    while "api key 99" not in broker.log_output() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "api key 99" in broker.log_output()


def test_a_thousand_connections_opened_and_dropped(broker):
    with WireClient(broker.host, broker.port) as steady:
        for batch in range(10):
            socks = [
                socket.create_connection((broker.host, broker.port), timeout=10) for _ in range(100)
            ]
            for i, s in enumerate(socks):
                if i % 3 == 0:
                    s.sendall(struct.pack(">i", 1000) + b"partial")
                elif i % 3 == 1:  # abortive close (RST)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
            assert steady.call(ApiKey.API_VERSIONS, 0, {}).error_code == 0
    assert api_versions_ok(broker.host, broker.port)


def test_connection_limits(broker_factory):
    b = broker_factory(
        {"max.connections": 2, "connections.max.idle.ms": 700, "socket.request.max.bytes": 2000}
    )
    first, second = WireClient(b.host, b.port), WireClient(b.host, b.port)
    try:
        assert first.call(ApiKey.API_VERSIONS, 0, {}).error_code == 0
        assert second.call(ApiKey.API_VERSIONS, 0, {}).error_code == 0
        with WireClient(b.host, b.port) as third:
            assert third.closed_by_peer(5)
        # idle connections are closed after connections.max.idle.ms
        assert first.closed_by_peer(10) and second.closed_by_peer(10)
    finally:
        first.close()
        second.close()
    with WireClient(b.host, b.port) as c:
        # under the limit: answered (no such topic, and Produce never creates one)
        assert produce(c, "small", message_set([b"x" * 100])).error_code == 3
        c.send(
            ApiKey.PRODUCE,
            2,
            {
                "acks": 1,
                "timeout_ms": 1000,
                "topic_data": [
                    {
                        "name": "small",
                        "partition_data": [{"index": 0, "records": message_set([b"x" * 3000])}],
                    }
                ],
            },
        )
        assert c.closed_by_peer()  # frame over socket.request.max.bytes
    out = b.log_output()
    assert "limit reached" in out and "idle for 700 ms" in out


def test_produce_to_a_missing_topic_is_logged_once_not_per_partition(broker):
    """A client writing to a missing topic names every partition in every request; a warning a
    partition cost the event loop about 20 µs each and flooded the log."""
    if broker.external:
        pytest.skip("needs the broker's log")
    topic, partitions = "never-created-for-logging", 50
    records = message_set([b"v"], magic=2)
    body = {
        "acks": 1,
        "timeout_ms": 10000,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [{"index": p, "records": records} for p in range(partitions)],
            }
        ],
    }
    with WireClient(broker.host, broker.port) as c:
        for _ in range(4):
            answer = c.call(ApiKey.PRODUCE, 7, body).responses[0].partition_responses
            assert [a.error_code for a in answer] == [3] * partitions  # UNKNOWN_TOPIC_OR_PARTITION
        # The line written comes before the answer that caused it.
        lines = [x for x in broker.log_output().splitlines() if topic in x]
    assert len(lines) == 1, lines
    assert "UNKNOWN_TOPIC_OR_PARTITION" in lines[0] and "produce rejected" in lines[0]
