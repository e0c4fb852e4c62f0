"""Burrow 1.2.1, Debian's consumer-lag monitor (Makefile target ``burrow``), against a broker:
Burrow reads ``__consumer_offsets`` itself and decodes group-metadata values only at versions 0
and 1 (offset values at 0, 1 and 3).

- At inter.broker.protocol.version=2.0 the broker writes group values v1 and offset values v1, as
  Kafka does at that version, and Burrow's HTTP API reports every partition of a real consumer
  group with its owner (the member's client host, "/127.0.0.1" as Kafka writes it), its client
  id, the committed offset and the lag; the independent decoder in offsets_oracle.py reads the
  same records at v1.
- At the default (3.9) group values are v3: Burrow logs that it cannot decode them and shows no
  owner, while it still reads the (v3) offsets. Hence the README's advice for old readers.

Burrow keeps its own locks in ZooKeeper (the session ``zookeeper`` fixture, a root path of its
own). Its client profile speaks Kafka 2.0.0's requests through sarama 1.22.1 (every
kafka-version from 0.8 to 2.1.0 works against this broker). Burrow stores an owner only for
partitions its cluster module already knows, so the test waits for Burrow to see the topic
before the group forms. Burrow 1.2.1's /lag endpoint never fills client_id (its evaluator copies
only the owner), so the client id is checked on the consumer detail endpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.offsets_oracle import read_records
from tests.integration.test_groups import (
    WAIT_S,
    client_host_seen_by,
    create_topic,
    unique,
)
from tests.waiting import wait_for
from tests.zookeeper import free_port

CLIENT_ID = "burrow-watched-client"
# Messages produced to each partition, and the offsets the group commits there.
END_OFFSETS = {0: 6, 1: 4}
COMMITTED = {0: 4, 1: 1}
STOP_TIMEOUT_S = 20


class BurrowProcess:
    """``Burrow --config-dir DIR`` watching one broker as cluster "local", its output (zap's JSON
    lines) in ``DIR/burrow.log``."""

    def __init__(self, workdir: Path, bootstrap: str, zookeeper: str) -> None:
        if shutil.which("Burrow") is None:
            pytest.fail("Burrow is missing: run `make install-test` (burrow target)")
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.http_port = free_port()
        self.log_path = self.dir / "burrow.log"
        # Burrow 1.2.1's TOML (core/internal/*/coordinator.go and helpers/sarama.go at v1.2.1):
        # refreshes every second so the test does not wait for the defaults (10 s, 60 s).
        (self.dir / "burrow.toml").write_text(
            f"""
[general]
pidfile="{self.dir}/burrow.pid"

[logging]
level="debug"

[zookeeper]
servers=["{zookeeper}"]
timeout=6
root-path="/burrow-{uuid.uuid4().hex[:8]}"

[client-profile.chronolog]
client-id="burrow"
kafka-version="2.0.0"

[cluster.local]
class-name="kafka"
servers=["{bootstrap}"]
client-profile="chronolog"
topic-refresh=1
offset-refresh=1

[consumer.local]
class-name="kafka"
cluster="local"
servers=["{bootstrap}"]
client-profile="chronolog"
offsets-topic="__consumer_offsets"

[httpserver.default]
address="127.0.0.1:{self.http_port}"

[storage.default]
class-name="inmemory"
workers=2
intervals=10
min-distance=1
"""
        )
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                ["Burrow", "--config-dir", str(self.dir)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def get(self, path: str) -> dict | None:
        """The JSON body of GET path, None while Burrow is not answering or answers 404."""
        if self.proc.poll() is not None:
            raise AssertionError(f"Burrow exited with {self.proc.returncode}:\n{self.log_tail()}")
        url = f"http://127.0.0.1:{self.http_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return json.loads(response.read())
        except (urllib.error.URLError, ConnectionError):  # not listening yet, or 404
            return None

    def log_records(self) -> list[dict]:
        return [
            json.loads(line) for line in self.log_path.read_text().splitlines() if line[:1] == "{"
        ]

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text().splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def burrow_factory(tmp_path, request):
    if os.environ.get("CHRONOLOG_BOOTSTRAP"):
        pytest.skip("needs brokers with special configs (CHRONOLOG_BOOTSTRAP is set)")
    zookeeper = request.getfixturevalue("zookeeper")  # not before the skip: no jar under compose
    started: list[BurrowProcess] = []

    def make(broker) -> BurrowProcess:
        # Burrow exits at start-up when __consumer_offsets does not exist yet: the coordinator
        # creates it in the background once the broker listens
        wait_for(
            lambda: "group coordinator started" in broker.log_output(),
            "the broker's group coordinator to start",
            timeout=WAIT_S,
        )
        burrow = BurrowProcess(
            tmp_path / f"burrow-{len(started)}", broker.bootstrap, zookeeper.connect
        )
        started.append(burrow)
        return burrow

    yield make
    for burrow in started:
        burrow.stop()


def group_under_burrow(broker, burrow: BurrowProcess) -> tuple[str, str, Consumer]:
    """A topic of END_OFFSETS messages that Burrow has seen, then a confluent-kafka group
    member owning both partitions that read them all and committed COMMITTED: (topic, group,
    the open consumer)."""
    topic, group = unique("burrowed"), unique("g")
    create_topic(broker.bootstrap, topic, len(END_OFFSETS))
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for partition, n in END_OFFSETS.items():
        for i in range(n):
            producer.produce(topic, f"m-{partition}-{i}".encode(), partition=partition)
    assert producer.flush(30) == 0
    wait_for(
        lambda: (burrow.get(f"/v3/kafka/local/topic/{topic}") or {}).get("offsets")
        == [END_OFFSETS[p] for p in sorted(END_OFFSETS)],
        "Burrow to see the topic's end offsets",
        timeout=WAIT_S,
    )
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "client.id": CLIENT_ID,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    assigned: list[int] = []
    consumer.subscribe(
        [topic], on_assign=lambda c, parts: assigned.extend(p.partition for p in parts)
    )
    received = 0
    deadline = time.monotonic() + 60
    while sorted(assigned) != sorted(END_OFFSETS) or received < sum(END_OFFSETS.values()):
        assert time.monotonic() < deadline, f"assigned {assigned}, {received} messages read"
        message = consumer.poll(0.2)
        if message is not None:
            assert message.error() is None, message.error()
            received += 1
    # commits behind what it read, so the group has lag
    offsets = [TopicPartition(topic, p, o) for p, o in COMMITTED.items()]
    assert all(tp.error is None for tp in consumer.commit(offsets=offsets, asynchronous=False))
    return topic, group, consumer


def wait_for_stored_offsets(burrow: BurrowProcess, group: str, topic: str) -> list[dict]:
    """Wait until Burrow's storage took the group's committed offset of every partition (its
    debug log says so), then Burrow's consumer detail of the group's partitions of ``topic``.
    The API is not polled before: Burrow 1.2.1 purges a group it has an owner but no commit
    for whenever the group is asked for (inmemory.go's fetchConsumer), owners and all."""

    def stored() -> set[int]:
        return {
            r["partition"]
            for r in burrow.log_records()
            if r.get("msg") == "ok"
            and r.get("request") == "StorageSetConsumerOffset"
            and (r.get("consumer"), r.get("topic")) == (group, topic)
        }

    wait_for(
        lambda: stored() == set(END_OFFSETS),
        "Burrow to store the committed offsets",
        timeout=WAIT_S,
    )
    detail = burrow.get(f"/v3/kafka/local/consumer/{group}")
    assert detail is not None, burrow.log_tail()
    return detail["topics"][topic]


def last_offset(view: dict) -> int:
    return [o for o in view["offsets"] if o is not None][-1]["offset"]


def test_burrow_shows_owners_offsets_and_lag_at_inter_broker_protocol_2_0(
    broker_factory, burrow_factory
):
    broker = broker_factory(inter_broker_protocol_version="2.0")
    burrow = burrow_factory(broker)
    topic, group, consumer = group_under_burrow(broker, burrow)
    try:
        host = client_host_seen_by(broker.bootstrap)
        parts = wait_for_stored_offsets(burrow, group, topic)
        assert [(p["owner"], p["client_id"]) for p in parts] == [(host, CLIENT_ID)] * 2
        assert [last_offset(p) for p in parts] == [COMMITTED[0], COMMITTED[1]]
        lags = [END_OFFSETS[p] - COMMITTED[p] for p in sorted(END_OFFSETS)]
        assert [p["current-lag"] for p in parts] == lags
        status = burrow.get(f"/v3/kafka/local/consumer/{group}/lag")["status"]
        assert (status["group"], status["partition_count"], status["totallag"]) == (
            group,
            2,
            sum(lags),
        )
        assert sorted(
            (p["topic"], p["partition"], p["owner"], p["end"]["offset"], p["current_lag"])
            for p in status["partitions"]
        ) == [(topic, p, host, COMMITTED[p], lags[p]) for p in sorted(END_OFFSETS)]
        undecoded = [r for r in burrow.log_records() if r.get("msg") == "failed to decode"]
        assert undecoded == []
        # the independent decoder (Kafka's JSON schemas) reads the same records at v1
        ours = [
            (kind, k, v) for kind, k, v in read_records(broker.bootstrap) if k["group"] == group
        ]
        groups = [v for kind, _, v in ours if kind == "group"]
        assert {v["version"] for v in groups} == {1}
        assert [(m["clientId"], m["clientHost"]) for m in groups[-1]["members"]] == [
            (CLIENT_ID, host)
        ]
        offsets = {k["partition"]: v for kind, k, v in ours if kind == "offset"}
        assert {
            p: (v["version"], v["offset"], v["expireTimestamp"]) for p, v in offsets.items()
        } == {p: (1, o, -1) for p, o in COMMITTED.items()}
    finally:
        consumer.close()


def test_burrow_cannot_decode_the_default_group_records(broker_factory, burrow_factory):
    broker = broker_factory()  # inter.broker.protocol.version 3.9: group values v3
    burrow = burrow_factory(broker)
    topic, group, consumer = group_under_burrow(broker, burrow)
    try:
        # the offsets come after the group record in the log: once Burrow has them, it has
        # been through the group record too
        parts = wait_for_stored_offsets(burrow, group, topic)
        assert [last_offset(p) for p in parts] == [COMMITTED[0], COMMITTED[1]]
        assert [(p["owner"], p["client_id"]) for p in parts] == [("", "")] * 2
        refused = {
            (r["message_type"], r["reason"], r["version"])
            for r in burrow.log_records()
            if r.get("msg") == "failed to decode" and r.get("group") == group
        }
        assert refused == {("metadata", "value version", 3)}
    finally:
        consumer.close()
