"""Debian's ZooKeeper 3.8 (Makefile target ``zookeeper``) as a real server for tests: the cluster
tests (tests/cluster/) and Burrow (tests/integration/test_burrow.py) need one.
``ZooKeeperServer(workdir).start()`` runs it standalone from /usr/share/java/zookeeper.jar on a
free 127.0.0.1 port with a fresh data dir; the ``zookeeper`` fixture (tests/conftest.py) shares
one per session.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

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
