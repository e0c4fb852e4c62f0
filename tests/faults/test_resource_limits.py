"""Resource limits: file descriptors run out, responses that would be huge, clients that do not
read or send at a crawl. The broker stays up, says what happened once, and serves the others."""

from __future__ import annotations

import json
import shutil
import socket
import struct
import subprocess
import time

import pytest

from protocol import ApiKey, iter_shallow
from tests.conftest import api_versions_ok
from tests.integration.kafka_wire import (
    WireClient,
    create_topic,
    fetch_partition,
    frame,
    message_set,
    produce,
)
from tests.waiting import wait_for


def events(broker) -> list[str]:
    lines = broker.log_output().splitlines()
    return [json.loads(x).get("event") for x in lines if x.startswith("{")]


def test_out_of_file_descriptors_the_broker_waits_and_recovers(broker_factory):
    if shutil.which("prlimit") is None:
        pytest.skip("prlimit (util-linux) is not installed")
    broker = broker_factory()
    with WireClient(broker.host, broker.port) as served:
        assert create_topic(served, "fds") == 0
        # The first append opens the segment file; under the limit below it could not.
        assert produce(served, "fds", message_set([b"first"], magic=2), acks=-1).error_code == 0
        limited = subprocess.run(
            ["prlimit", "--nofile=48:48", "--pid", str(broker.proc.pid)], capture_output=True
        )
        if limited.returncode != 0:
            pytest.skip(f"cannot lower the broker's descriptor limit: {limited.stderr!r}")
        flood = [socket.create_connection((broker.host, broker.port), timeout=5) for _ in range(80)]
        try:
            wait_for(
                lambda: "cannot accept connections; new ones wait until descriptors are free"
                in events(broker),
                "the broker to run out of descriptors",
            )
            # An established connection is still served, and the broker is alive.
            assert produce(served, "fds", message_set([b"still"], magic=2), acks=-1).error_code == 0
            assert broker.proc.poll() is None
        finally:
            for s in flood:
                s.close()
        wait_for(lambda: api_versions_ok(broker.host, broker.port), "a new connection")
        wait_for(lambda: "accepting connections again" in events(broker), "the recovery line")
    said = events(broker)
    assert said.count("cannot accept connections; new ones wait until descriptors are free") == 1
    assert "log dir offline: its partitions are not served until a restart" not in said
    assert "Traceback" not in broker.log_output()


def test_fetch_max_bytes_bounds_every_response(broker_factory):
    broker = broker_factory({"fetch.max.bytes": 4096})
    partitions = 8
    with WireClient(broker.host, broker.port) as client:
        assert create_topic(client, "big", partitions) == 0
        for p in range(partitions):
            for _ in range(5):
                records = message_set([b"x" * 900], magic=2)
                assert produce(client, "big", records, partition=p, acks=-1).error_code == 0
        for version, max_bytes in ((2, None), (11, 100 << 20)):
            body = {
                "replica_id": -1,
                "max_wait_ms": 0,
                "min_bytes": 0,
                "max_bytes": max_bytes,
                "isolation_level": 0,
                "topics": [
                    {
                        "topic": "big",
                        "partitions": [
                            {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                            for p in range(partitions)
                        ],
                    }
                ],
            }
            if max_bytes is None:
                del body["max_bytes"], body["isolation_level"]
            response = client.call(ApiKey.FETCH, version, body)
            sizes = [len(bytes(p.records or b"")) for p in response.responses[0].partitions]
            assert 0 < sum(sizes) <= 4096, (version, sizes)
            assert all(
                e.magic in (1, 2)
                for p in response.responses[0].partitions
                for e in iter_shallow(bytes(p.records or b""))
            )


def test_clients_that_do_not_read_or_crawl_do_not_hold_up_the_others(broker_factory):
    broker = broker_factory()
    with WireClient(broker.host, broker.port) as client:
        assert create_topic(client, "busy") == 0
        big = message_set([b"y" * 200_000 for _ in range(4)], magic=2)
        for _ in range(5):
            assert produce(client, "busy", big, acks=-1).error_code == 0

    # A client that asks for megabytes again and again and never reads the answers: the
    # broker's sends to it block once the socket buffers are full.
    hog = socket.create_connection((broker.host, broker.port))
    hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    fetch_body = struct.pack(">iii", -1, 0, 0) + struct.pack(">i", 1)
    fetch_body += struct.pack(">h", 4) + b"busy" + struct.pack(">i", 1)
    fetch_body += struct.pack(">iqi", 0, 0, 8 << 20)
    for i in range(20):
        hog.sendall(frame(int(ApiKey.FETCH), 2, i, fetch_body))
    # A client that sends its request one byte every 50 ms.
    crawler = socket.create_connection((broker.host, broker.port))
    slow = frame(int(ApiKey.API_VERSIONS), 0, 1, b"")
    crawler.sendall(slow[:3])

    try:
        started = time.monotonic()
        with WireClient(broker.host, broker.port, timeout=10) as client:
            for i in range(20):
                answer = produce(client, "busy", message_set([b"ok%d" % i], magic=2), acks=-1)
                assert answer.error_code == 0
                part = fetch_partition(client, "busy", 0, answer.base_offset)
                assert part.error_code == 0 and part.records
        # Generous on purpose: this checks "not held up", not a speed.
        assert time.monotonic() - started < 10
        for byte in slow[3:]:
            crawler.sendall(bytes([byte]))
            time.sleep(0.05)
        crawler.settimeout(10)
        size = struct.unpack(">i", crawler.recv(4))[0]
        assert size > 0  # the crawler got its answer in the end
    finally:
        hog.close()
        crawler.close()
    assert broker.proc.poll() is None
