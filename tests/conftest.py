"""Shared fixtures: real ``chronolog serve`` processes for integration tests.

- ``broker`` (session): one broker on a free 127.0.0.1 port with a temporary log dir. When the
  environment variable CHRONOLOG_BOOTSTRAP (host:port) is set, it is that external broker
  instead, and the methods that need to control the process (stop, kill, start, restart,
  log_output) skip the calling test.
- ``broker_factory(overrides=None, **kw)`` (function): brokers with special configs, stopped at
  teardown; keyword names use ``_`` for ``.`` (``log_segment_bytes=2048``). Skips the test when
  CHRONOLOG_BOOTSTRAP is set.
- ``zookeeper`` (session): one ZooKeeper server (tests/zookeeper.py), for the cluster tests and
  Burrow; each user keeps to its own chroot or root path in it.

A BrokerProcess lets the broker pick a free port at its first start (listeners port 0, read back
from the "listening" log line, so concurrent test runs never race for a port), keeps that port
and the log dir across restart(), writes the process's output to
``<tmp>/broker.log`` (appended over restarts; ``log_output(since_start=True)`` reads the latest
start's part) and waits until the broker answers ApiVersions.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from client import BrokerConnection, BrokerConnectionError
from protocol import ApiKey
from tests.zookeeper import ZooKeeperServer

REPO = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0

# Where a test runs, for -m selections (markers registered in pyproject.toml).
PROCESS_DIRS = {"integration", "cluster", "faults", "oracle", "spark", "docker"}
PROCESS_FIXTURES = {"broker", "broker_factory", "broker_with_defaults", "zookeeper", "kafka_oracle"}
SPECIFIC_MARKERS = {"cluster": "cluster", "spark": "spark"}
# Property-based and fuzz runs of several seconds a case: in make test, not in make test-unit.
SLOW_FILES = {
    "test_wire_fuzz.py",
    "test_kafka_python_wire.py",
    "test_records_fuzz.py",
    "test_stateful.py",
    "test_cleaner_stateful.py",
    "test_admin_fuzz.py",
}


# Before pytest-xdist's own hook, which reads the xdist_group marks set here.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Marks every test unit or process, cluster or spark by its directory, slow by its file,
    and groups them for `make test`'s workers (pytest-xdist --dist loadgroup): a file's tests run
    on one worker, so its module fixtures start once, and every Spark test on the same one, so
    one Spark session serves them all."""
    tests_dir = REPO / "tests"
    for item in items:
        parts = Path(str(item.fspath)).resolve().relative_to(tests_dir).parts
        top = parts[0] if len(parts) > 1 else ""
        if top in SPECIFIC_MARKERS:
            item.add_marker(SPECIFIC_MARKERS[top])
        starts_processes = (
            top in PROCESS_DIRS
            or parts[-1] == "test_install.py"
            or not PROCESS_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))
            or item.get_closest_marker("kafka_oracle") is not None
        )
        item.add_marker("process" if starts_processes else "unit")
        if parts[-1] in SLOW_FILES:
            item.add_marker("slow")
        item.add_marker(pytest.mark.xdist_group("spark" if top == "spark" else "/".join(parts)))


def api_versions_ok(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when host:port answers an ApiVersions v0 request with error code 0."""
    try:
        with BrokerConnection(host, port, client_id="chronolog-tests", timeout_s=timeout) as c:
            return c.call(ApiKey.API_VERSIONS, 0, {}).error_code == 0
    except BrokerConnectionError:
        return False


class BrokerProcess:
    """A ``python -m broker serve`` subprocess; see the module docstring."""

    external = False

    def __init__(self, workdir: Path, overrides: dict[str, object] | None = None) -> None:
        self.workdir = Path(workdir)
        self.host = "127.0.0.1"
        self.port: int | None = None  # chosen by the broker (listeners port 0) at first start
        self.log_dir = str(self.workdir / "logs")
        self.log_dirs = [self.log_dir]
        self.overrides = {k: str(v) for k, v in (overrides or {}).items()}
        self.log_path = self.workdir / "broker.log"
        self.proc: subprocess.Popen | None = None
        self.returncode: int | None = None
        self._log_start = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        props = {
            "listeners": f"PLAINTEXT://{self.host}:{self.port or 0}",
            "log.dirs": ",".join(self.log_dirs),
            # As Kafka's own development config: groups form at once (default 3 s).
            "group.initial.rebalance.delay.ms": "0",
            **self.overrides,
        }
        cmd = [sys.executable, "-m", "broker", "serve"]
        for key, value in props.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def start(self) -> "BrokerProcess":
        """Start the process and wait until it answers ApiVersions; raises RuntimeError with the
        log's tail if it exits or does not answer within START_TIMEOUT_S."""
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            self._log_start = out.tell()
            self.proc = subprocess.Popen(
                self.command(),
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.returncode = None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.returncode = self.proc.returncode
                raise RuntimeError(
                    f"broker exited with status {self.returncode} at start-up:\n{self.log_tail()}"
                )
            if self.port is None:
                self.port = self._logged_port()
            elif api_versions_ok(self.host, self.port):
                return self
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker did not answer within {START_TIMEOUT_S} s:\n{self.log_tail()}")

    def _logged_port(self) -> int | None:
        """The port from the broker's "listening" log line, once written."""
        for line in self.log_output(since_start=True).splitlines():
            if '"listening"' in line:
                try:
                    return int(json.loads(line)["port"])
                except (ValueError, KeyError):
                    return None
        return None

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM and wait; SIGKILL if it has not exited within ``timeout``. Returns the exit
        status (None if it was not running)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.returncode = self.proc.wait()
        return self.returncode

    def kill(self) -> int | None:
        """SIGKILL (no clean shutdown) and wait."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.kill()
        self.returncode = self.proc.wait()
        return self.returncode

    def restart(self) -> "BrokerProcess":
        self.stop()
        return self.start()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_output(self, since_start: bool = False) -> str:
        """Everything the process(es) wrote; with ``since_start`` only the latest start's."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_start if since_start else 0)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def log_events(self, event: str | None = None, since_start: bool = False) -> list[dict]:
        """The broker's JSON log lines (every one, or those whose event is ``event``)."""
        lines = self.log_output(since_start).splitlines()
        events = [json.loads(line) for line in lines if line.startswith("{")]
        return [e for e in events if event is None or e.get("event") == event]

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_output().splitlines()[-lines:])

    def metrics_url(self) -> str:
        """The Prometheus endpoint's address (``metrics.listener``, port 0 allowed), from the
        latest start's "metrics listening" log line; the web console is served beside it."""
        for line in self.log_output(since_start=True).splitlines():
            if '"metrics listening"' in line:
                return json.loads(line)["url"]
        raise AssertionError(f"no 'metrics listening' line in the broker's log:\n{self.log_tail()}")


class ExternalBroker:
    """The broker named by CHRONOLOG_BOOTSTRAP; process control skips the test."""

    external = True

    def __init__(self, bootstrap: str) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.host, self.port = host, int(port)
        self.bootstrap = bootstrap
        self.log_dirs: list[str] = []

    def _skip(self, *args, **kwargs):
        pytest.skip("needs a broker process the tests control (CHRONOLOG_BOOTSTRAP is set)")

    stop = kill = start = restart = log_output = _skip


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    bootstrap = os.environ.get("CHRONOLOG_BOOTSTRAP")
    if bootstrap:
        yield ExternalBroker(bootstrap)
        return
    proc = BrokerProcess(tmp_path_factory.mktemp("broker"))
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def broker_with_defaults(tmp_path_factory):
    """A broker of this module's own, every property at its default and its log dir on this
    machine, for tests that check default config sources or read the log dir; skips the test
    when CHRONOLOG_BOOTSTRAP is set (the compose broker runs with config/server.properties)."""
    if os.environ.get("CHRONOLOG_BOOTSTRAP"):
        pytest.skip("needs a broker with default configs (CHRONOLOG_BOOTSTRAP is set)")
    proc = BrokerProcess(tmp_path_factory.mktemp("broker"))
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def broker_factory(tmp_path):
    if os.environ.get("CHRONOLOG_BOOTSTRAP"):
        pytest.skip("needs a broker with special configs (CHRONOLOG_BOOTSTRAP is set)")
    started: list[BrokerProcess] = []

    def make(overrides: dict[str, object] | None = None, **kw: object) -> BrokerProcess:
        props = dict(overrides or {})
        props.update({k.replace("_", "."): v for k, v in kw.items()})
        proc = BrokerProcess(Path(tempfile.mkdtemp(prefix="broker-", dir=tmp_path)), props)
        started.append(proc)
        return proc.start()

    yield make
    for proc in started:
        proc.stop()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    try:
        yield server
    finally:
        server.stop()
