"""Cluster fixtures: a ZooKeeper server (Debian's zookeeper 3.8, Makefile target ``zookeeper``)
and brokers in a cluster, all real processes on 127.0.0.1.

- ``zookeeper`` (session): one ZooKeeper server with a fresh data dir on a free port; each
  cluster uses its own chroot in it, so tests do not see each other's clusters.
- ``zookeeper_factory()`` (function): a ZooKeeper server of the test's own (to stop it).
- ``cluster_factory(size=3, zk=None, start=True, per_broker=None, **overrides)`` (function):
  ``size`` brokers (ids 1..size) joined through a new chroot; stopped at teardown. Keyword names
  use ``_`` for ``.``; ``per_broker`` maps a broker id to properties of its own. With
  CHRONOLOG_CLUSTER_LOGS=DIR every broker's log is copied to DIR/<test name>/ at teardown.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tests.cluster.helpers import ClusterProcesses
from tests.conftest import BrokerProcess

ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"
SLF4J_SIMPLE = "/usr/share/java/slf4j-simple.jar"
START_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ZooKeeperServer:
    """``java ... QuorumPeerMain zoo.cfg`` in standalone mode on 127.0.0.1."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = self.workdir / "zookeeper.log"

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "ZooKeeperServer":
        if not os.path.exists(ZOOKEEPER_JAR):
            pytest.fail(f"{ZOOKEEPER_JAR} is missing: run `make install-test` (zookeeper target)")
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "zoo.cfg"
        config.write_text(
            f"tickTime=500\ndataDir={data}\nclientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\nadmin.enableServer=false\nmaxClientCnxns=0\n"
            "minSessionTimeout=1000\n"
        )
        classpath = ZOOKEEPER_JAR + (":" + SLF4J_SIMPLE if os.path.exists(SLF4J_SIMPLE) else "")
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [
                    "java",
                    "-Xmx256m",
                    "-Dzookeeper.4lw.commands.whitelist=ruok",
                    "-cp",
                    classpath,
                    "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                    str(config),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"zookeeper exited:\n{self.log_path.read_text()[-3000:]}")
            if self.ruok():
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"zookeeper did not start:\n{self.log_path.read_text()[-3000:]}")

    def ruok(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"ruok")
                return s.recv(4) == b"imok"
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zookeeper_factory(tmp_path):
    started: list[ZooKeeperServer] = []

    def make() -> ZooKeeperServer:
        server = ZooKeeperServer(Path(tempfile.mkdtemp(prefix="zk-", dir=tmp_path))).start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture
def cluster_factory(zookeeper, tmp_path, request):
    if os.environ.get("CHRONOLOG_BOOTSTRAP"):
        pytest.skip("starts its own brokers (CHRONOLOG_BOOTSTRAP is set)")
    made: list[ClusterProcesses] = []

    def make(
        size: int = 3,
        zk: ZooKeeperServer | None = None,
        start: bool = True,
        per_broker: dict[int, dict] | None = None,
        **kw,
    ):
        server = zk or zookeeper
        chroot = f"/chronolog-{uuid.uuid4().hex[:12]}"
        props = {k.replace("_", "."): v for k, v in kw.items()}
        brokers = []
        for broker_id in range(1, size + 1):
            workdir = Path(tempfile.mkdtemp(prefix=f"broker{broker_id}-", dir=tmp_path))
            brokers.append(
                BrokerProcess(
                    workdir,
                    {
                        "broker.id": broker_id,
                        "zookeeper.connect": server.connect + chroot,
                        "zookeeper.session.timeout.ms": 3000,
                        "replica.lag.time.max.ms": 4000,
                        "replica.fetch.wait.max.ms": 200,
                        "replica.high.watermark.checkpoint.interval.ms": 500,
                        **props,
                        **(per_broker or {}).get(broker_id, {}),
                    },
                )
            )
        cluster = ClusterProcesses(brokers, server, chroot)
        made.append(cluster)
        if start:
            cluster.start()
        return cluster

    yield make
    for cluster in made:
        cluster.stop()
    keep = os.environ.get("CHRONOLOG_CLUSTER_LOGS")
    if keep:  # a directory to copy every broker's log to, for a person reading a failure
        for cluster in made:
            for broker in cluster.brokers:
                target = Path(keep) / request.node.name
                target.mkdir(parents=True, exist_ok=True)
                name = f"broker{broker.overrides['broker.id']}.log"
                (target / name).write_text(broker.log_output())
