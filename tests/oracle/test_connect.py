"""A Kafka Connect 4.1.1 distributed worker on chronolog: Kafka's file source and sink connectors
carry a file through a topic into another file, across a broker kill -9 and a restart of the
worker itself (issue 34: Connect surviving a broker restart, resuming from committed offsets).

The worker runs from the jars of ``make kafka-jvm`` (ConnectDistributed, its REST api on a free
loopback port) with its config, offset and status topics on chronolog (compacted, replication 1,
created by the worker through CreateTopics). What a user sees is checked: every line of the source
file reaches the sink file in order; a broker kill -9 loses none; after the worker is stopped and
started again, it goes on from the offsets it committed, so the lines added meanwhile follow
without the earlier ones repeated.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import BrokerProcess
from tests.integration.clients import topic_name
from tests.oracle.kafka_oracle import TOOL_JVM_FLAGS, kafka_classpath
from tests.waiting import wait_for
from tests.zookeeper import free_port

pytestmark = pytest.mark.kafka_oracle

CONNECT_MAIN = "org.apache.kafka.connect.cli.ConnectDistributed"
START_TIMEOUT_S = 90.0
FLOW_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def chronolog(tmp_path_factory):
    """This module's broker (it is killed): every message flushed."""
    proc = BrokerProcess(tmp_path_factory.mktemp("connect"), {"log.flush.interval.messages": 1})
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


class ConnectWorker:
    """One ConnectDistributed JVM; ``start``/``stop`` keep its properties (group, topics, port),
    so a restart is the same worker coming back. Output goes to ``<workdir>/connect.log``."""

    def __init__(self, workdir: Path, bootstrap: str) -> None:
        self.workdir = workdir
        self.port = free_port()
        name = topic_name("connect")
        self.properties = workdir / "worker.properties"
        self.properties.write_text(
            "\n".join(
                f"{k}={v}"
                for k, v in {
                    "bootstrap.servers": bootstrap,
                    "group.id": name,
                    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
                    "value.converter": "org.apache.kafka.connect.storage.StringConverter",
                    "config.storage.topic": f"{name}-configs",
                    "offset.storage.topic": f"{name}-offsets",
                    "status.storage.topic": f"{name}-status",
                    "config.storage.replication.factor": 1,
                    "offset.storage.replication.factor": 1,
                    "status.storage.replication.factor": 1,
                    "offset.flush.interval.ms": 1000,
                    "listeners": f"http://127.0.0.1:{self.port}",
                }.items()
            )
            + "\n"
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ConnectWorker:
        with open(self.workdir / "connect.log", "ab") as log:
            self.proc = subprocess.Popen(
                [
                    "java",
                    *TOOL_JVM_FLAGS,
                    "-cp",
                    kafka_classpath(),
                    CONNECT_MAIN,
                    str(self.properties),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        wait_for(self._ready, "the Connect worker's REST api", timeout=START_TIMEOUT_S)
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"the Connect worker exited:\n{self.log_tail()}")
        try:
            return self.rest("GET", "/connectors") is not None
        except (urllib.error.URLError, ConnectionError):
            return False

    def stop(self) -> None:
        """SIGTERM, as a service manager stops it: the worker stops its tasks, which commit."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(60)
        self.proc = None

    def rest(self, method: str, path: str, body: dict | None = None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            text = answer.read()
        return json.loads(text) if text else {}

    def running(self, connector: str) -> bool:
        """The connector and its one task report RUNNING."""
        try:
            status = self.rest("GET", f"/connectors/{connector}/status")
        except urllib.error.HTTPError:
            return False
        tasks = status.get("tasks", [])
        return status["connector"]["state"] == "RUNNING" and [t["state"] for t in tasks] == [
            "RUNNING"
        ]

    def log_tail(self, lines: int = 40) -> str:
        text = (self.workdir / "connect.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])


def _append(path: Path, lines: list[str]) -> None:
    with open(path, "a") as f:
        f.writelines(f"{line}\n" for line in lines)


def _sunk(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_file_source_and_sink_across_a_broker_kill9_and_a_worker_restart(chronolog, tmp_path):
    source, sink, topic = tmp_path / "in.txt", tmp_path / "out.txt", topic_name("connect-lines")
    first = [f"first-{i}" for i in range(200)]
    _append(source, first)
    worker = ConnectWorker(tmp_path, chronolog.bootstrap).start()
    try:
        worker.rest(
            "POST",
            "/connectors",
            {
                "name": "lines-in",
                "config": {
                    "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
                    "tasks.max": "1",
                    "file": str(source),
                    "topic": topic,
                },
            },
        )
        worker.rest(
            "POST",
            "/connectors",
            {
                "name": "lines-out",
                "config": {
                    "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
                    "tasks.max": "1",
                    "file": str(sink),
                    "topics": topic,
                },
            },
        )
        wait_for(
            lambda: _sunk(sink) == first, "the first lines in the sink", timeout=FLOW_TIMEOUT_S
        )
        assert worker.running("lines-in") and worker.running("lines-out")

        # The broker dies under the worker; lines written meanwhile arrive once it is back.
        chronolog.kill()
        during = [f"during-{i}" for i in range(100)]
        _append(source, during)
        chronolog.start()

        def caught_up() -> bool:
            seen = _sunk(sink)
            return set(seen) == set(first + during)

        wait_for(caught_up, "the lines written while the broker was down", timeout=FLOW_TIMEOUT_S)
        seen = _sunk(sink)
        # In order, nothing lost; a repeat (at-least-once, after the kill) only of a line sent.
        assert list(dict.fromkeys(seen)) == first + during, seen
        wait_for(
            lambda: worker.running("lines-in") and worker.running("lines-out"),
            "both connectors running after the broker came back",
            timeout=FLOW_TIMEOUT_S,
        )

        # The worker restarts: its connectors come back from the config topic and go on from
        # the offsets they committed when stopped.
        worker.stop()
        before = len(_sunk(sink))
        after = [f"after-{i}" for i in range(100)]
        _append(source, after)
        worker.start()
        wait_for(
            lambda: len(_sunk(sink)) >= before + len(after),
            "the lines written while the worker was stopped",
            timeout=FLOW_TIMEOUT_S,
        )
        assert _sunk(sink)[before:] == after
        assert sorted(worker.rest("GET", "/connectors")) == ["lines-in", "lines-out"]
    except BaseException:
        print(worker.log_tail(80))
        raise
    finally:
        worker.stop()
