"""The broker container restarted mid-run (only under docker/docker-compose.yml's test-runner).

Messages acknowledged with acks=all before and after a `docker stop` / `docker start` of the
broker container must all be readable at their acknowledged offsets, the stop must be a clean
SIGTERM shutdown (exit status 0, not a SIGKILL after the grace period), and offsets_for_times
must answer exactly as before the restart -- and as a brute-force scan of the acknowledged
messages says it should. The container is driven through the Docker Engine API (Docker or
podman) on the unix socket that the compose file mounts into the runner.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import stat
import time
import urllib.parse
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from broker.health import HealthCheckError, check

DOCKER_SOCKET = os.environ.get("CHRONOLOG_DOCKER_SOCKET", "")
BOOTSTRAP = os.environ.get("CHRONOLOG_BOOTSTRAP", "")


def _socket_reason() -> str | None:
    if not DOCKER_SOCKET or not BOOTSTRAP:
        return (
            "restarts the broker container: runs only in the test-runner of "
            "docker/docker-compose.yml (CHRONOLOG_DOCKER_SOCKET and CHRONOLOG_BOOTSTRAP unset)"
        )
    try:
        if stat.S_ISSOCK(os.stat(DOCKER_SOCKET).st_mode):
            return None
    except OSError:
        pass
    return f"CHRONOLOG_DOCKER_SOCKET={DOCKER_SOCKET} is not a Docker API socket"


pytestmark = pytest.mark.skipif(_socket_reason() is not None, reason=_socket_reason() or "")

PARTITIONS = 3
BEFORE, AFTER = 600, 300
STEP_MS = 10
STOP_GRACE_S = 30


class DockerAPIError(Exception):
    """Raised when the Docker Engine API answers a call with an unexpected HTTP status."""


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


def _docker(method: str, path: str, timeout: float = 120):
    conn = _UnixHTTPConnection(DOCKER_SOCKET, timeout)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    if response.status not in (200, 201, 204, 304):
        raise DockerAPIError(f"{method} {path} -> HTTP {response.status}: {body[:500]!r}")
    return json.loads(body) if body.strip() else None


def _broker_container() -> dict:
    """The broker service's container in this runner's own compose project."""
    me = _docker("GET", f"/containers/{socket.gethostname()}/json")
    project = me["Config"]["Labels"]["com.docker.compose.project"]
    filters = json.dumps(
        {"label": [f"com.docker.compose.project={project}", "com.docker.compose.service=broker"]}
    )
    found = _docker("GET", "/containers/json?all=true&filters=" + urllib.parse.quote(filters))
    assert len(found) == 1, f"expected one broker container in project {project}, got {found}"
    return _docker("GET", f"/containers/{found[0]['Id']}/json")


def _wait_healthy(host: str, port: int, deadline_s: float = 120) -> None:
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            check(host, port, timeout=2)
            return
        except HealthCheckError as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"broker not serving {deadline_s} s after start: {exc}")
            time.sleep(0.5)


def _produce(producer, topic, first, count, base_ts, acked):
    futures = []
    for i in range(first, first + count):
        key, value = f"k{i}".encode(), uuid.uuid4().bytes + i.to_bytes(4, "big")
        ts = base_ts + i * STEP_MS
        future = producer.send(
            topic, key=key, value=value, partition=i % PARTITIONS, timestamp_ms=ts
        )
        futures.append((future, key, value, ts))
    producer.flush(timeout=60)
    for future, key, value, ts in futures:
        md = future.get(timeout=60)
        acked[(md.partition, md.offset)] = (key, value, ts)


def _offsets_for_times(probes: list[int], topic: str) -> list[dict]:
    consumer = KafkaConsumer(
        bootstrap_servers=BOOTSTRAP,
        group_id=None,
        enable_auto_commit=False,
        request_timeout_ms=30000,
    )
    try:
        answers = []
        for ts in probes:
            found = consumer.offsets_for_times(
                {TopicPartition(topic, p): ts for p in range(PARTITIONS)}
            )
            answers.append(
                {
                    tp.partition: None if ot is None else (ot.offset, ot.timestamp)
                    for tp, ot in found.items()
                }
            )
        return answers
    finally:
        consumer.close()


def _oracle(probes: list[int], acked: dict) -> list[dict]:
    """Earliest acknowledged (offset, timestamp) with timestamp >= probe, per partition."""
    answers = []
    for ts in probes:
        answer = {}
        for p in range(PARTITIONS):
            hits = sorted(
                (off, t) for (part, off), (_, _, t) in acked.items() if part == p and t >= ts
            )
            answer[p] = hits[0] if hits else None
        answers.append(answer)
    return answers


def _read_all(topic: str, deadline_s: float = 120) -> dict:
    consumer = KafkaConsumer(
        bootstrap_servers=BOOTSTRAP,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(tps)
        seen = {}
        deadline = time.monotonic() + deadline_s
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, (
                f"consumer stuck at {[consumer.position(tp) for tp in tps]}, ends {ends}"
            )
            for records in consumer.poll(timeout_ms=1000).values():
                for r in records:
                    seen[(r.partition, r.offset)] = (r.key, r.value, r.timestamp)
        return seen
    finally:
        consumer.close()


def test_acknowledged_messages_and_time_lookups_survive_a_broker_container_restart():
    host, _, port = BOOTSTRAP.rpartition(":")
    broker = _broker_container()
    # The compose file's named volume, not the image's anonymous VOLUME, holds the data.
    data = [
        m
        for m in broker["Mounts"]
        if m["Type"] == "volume" and m.get("Name", "").endswith("_chronolog-data")
    ]
    assert data, f"broker data is not on the named volume chronolog-data: {broker['Mounts']}"

    topic = f"restart-{uuid.uuid4().hex[:12]}"
    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])
    finally:
        admin.close()

    base_ts = (int(time.time() * 1000) // 1000) * 1000
    acked: dict[tuple[int, int], tuple[bytes, bytes, int]] = {}
    producer = KafkaProducer(
        bootstrap_servers=BOOTSTRAP, acks="all", linger_ms=5, retries=10, request_timeout_ms=30000
    )
    try:
        _produce(producer, topic, 0, BEFORE, base_ts, acked)
        assert len(acked) == BEFORE
        last_ts = base_ts + (BEFORE - 1) * STEP_MS
        # Before everything, on every 37th message, between two messages, after everything.
        probes = (
            [base_ts - 60_000]
            + [base_ts + i * STEP_MS for i in range(0, BEFORE, 37)]
            + [base_ts + i * STEP_MS + 1 for i in range(5, BEFORE, 91)]
            + [last_ts + 60_000]
        )
        before = _offsets_for_times(probes, topic)
        assert before == _oracle(probes, acked)

        _docker(
            "POST", f"/containers/{broker['Id']}/stop?t={STOP_GRACE_S}", timeout=STOP_GRACE_S + 60
        )
        state = _docker("GET", f"/containers/{broker['Id']}/json")["State"]
        assert not state["Running"]
        assert state["ExitCode"] == 0, (
            f"broker did not shut down cleanly on SIGTERM: exit status {state['ExitCode']} "
            f"(137 = killed after the {STOP_GRACE_S} s grace period)"
        )
        _docker("POST", f"/containers/{broker['Id']}/start")
        _wait_healthy(host, int(port))

        assert _offsets_for_times(probes, topic) == before
        # The same producer carries on: it must find the restarted broker by itself.
        _produce(producer, topic, BEFORE, AFTER, base_ts, acked)
    finally:
        producer.close(timeout=10)
    assert len(acked) == BEFORE + AFTER

    stored = _read_all(topic)
    missing = {k: v for k, v in acked.items() if stored.get(k) != v}
    assert not missing, (
        f"{len(missing)} acknowledged messages lost or changed, e.g. "
        f"{sorted(missing.items())[:3]} stored as "
        f"{[stored.get(k) for k in sorted(missing)[:3]]}"
    )
