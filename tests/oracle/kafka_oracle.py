"""Apache Kafka 4.1.1 beside chronolog in the tests: the broker as an oracle, its tools and its
Java clients, from the jars ``make kafka-jvm`` (part of ``make install-test``) put in build/jvm/
(tests/jvm/pom.xml). No test touches the network; a missing build/jvm fails the test with the make
target to run (and skips it in the compose test runner, whose image has no JVM).

API (tests/oracle/conftest.py registers the fixture; a conftest elsewhere can
``from tests.oracle.kafka_oracle import kafka_oracle`` to use it there too):

- ``kafka_oracle`` (session fixture): one ``KafkaServer``, single node in KRaft mode (broker and
  controller in one JVM, node id 1, -Xmx384m), on two free 127.0.0.1 ports, log dir under the
  session's tmp dir; started at first use, stopped at session end. Like the ``broker`` fixture
  (tests/conftest.py) it has ``host``, ``port``, ``bootstrap`` ("127.0.0.1:PORT"), ``log_dir`` /
  ``log_dirs``, ``log_output()`` and ``log_tail()``, so a test can run the same scenario against
  ``broker`` and ``kafka_oracle``. Its settings (``KafkaServer.PROPERTIES``): offsets and
  transaction-state topics with replication 1, ``group.initial.rebalance.delay.ms=0``,
  ``auto.create.topics.enable=false``, both group protocols (classic, consumer). Kafka 4.1 refuses a
  topic ``segment.bytes`` below 1 MiB (scenarios shared with it need >= 1 MiB segments) and deletes
  data older than ``retention.ms`` at its first retention pass: topics with old timestamps need
  ``retention.ms=-1``.
- ``KafkaServer(workdir, overrides=None, jvm_flags=SERVER_JVM_FLAGS)``: the same for a test that
  needs its own Kafka (``start()``, ``stop()``, ``kill()``, ``restart()``: same ports and log
  dir); ``overrides`` are server.properties entries, winning over the settings above;
  ``jvm_flags`` replace the heap and GC flags (bench/suite/brokers.py runs Kafka's own defaults).
- ``run_kafka_tool(main_class, *args, timeout=120, check=True)``: runs one of Kafka's command-line
  tools (``DUMP_LOG_SEGMENTS``, ``GET_OFFSET_SHELL``, ``TOPIC_COMMAND``, ``CONFIG_COMMAND``,
  ``CONSUMER_GROUP_COMMAND``, ``TRANSACTIONS_COMMAND``, or any main class in the jars) as
  ``java -cp build/jvm/lib/* <main_class> args``; returns the CompletedProcess (text); raises
  KafkaToolError when it exits non-zero and ``check`` is true.
- ``JavaClients(bootstrap, config=None)``: Kafka's Java clients 4.1.1 in one JVM
  (tests/jvm/src/main/java/chronolog/jvm/Clients.java), driven by JSON lines: ``call(op,
  **args)`` returns the answer as a dict or raises JavaClientError carrying the Java exception's
  class and message. ``config`` (e.g. SASL settings) applies to every client it makes; an op's
  own ``config=`` argument adds to it for that op. The ops and their arguments are documented in
  Clients.java (create_topic, produce (also as a committed or aborted transaction),
  consume_group, read_partition, consumer_offsets, list_offsets, describe_producers,
  delete_records); a new op is a new case there. Use it as a context manager (one JVM per
  with-block: start it once per module).

Tests that use these carry ``pytest.mark.kafka_oracle`` (registered in pyproject.toml): ``pytest
-m kafka_oracle`` runs them alone, and ``make test-pure`` leaves them out.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import api_versions_ok
from tests.zookeeper import free_port

REPO = Path(__file__).resolve().parent.parent.parent
JVM_BUILD = REPO / "build" / "jvm"
KAFKA_LIB = JVM_BUILD / "lib"
DRIVERS_JAR = JVM_BUILD / "chronolog-jvm-tests.jar"
KAFKA_VERSION = "4.1.1"

DUMP_LOG_SEGMENTS = "kafka.tools.DumpLogSegments"
GET_OFFSET_SHELL = "org.apache.kafka.tools.GetOffsetShell"
TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"
CONFIG_COMMAND = "kafka.admin.ConfigCommand"
CONSUMER_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
TRANSACTIONS_COMMAND = "org.apache.kafka.tools.TransactionsCommand"

# Short-lived tools and drivers: the client compiler only (starts faster), one GC thread.
TOOL_JVM_FLAGS = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
# The server in tests: a small heap and one GC thread, beside other JVMs on a shared machine.
SERVER_JVM_FLAGS = ("-Xmx384m", "-XX:+UseSerialGC", "-Djava.awt.headless=true")
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 120.0


class KafkaToolError(Exception):
    """Raised by run_kafka_tool when the tool exits with a non-zero status (the message has the
    command line, the status and the tail of its output)."""


class JavaClientError(Exception):
    """Raised by JavaClients.call when the Java client raised: ``error`` is the exception's class
    name (e.g. org.apache.kafka.common.errors.InvalidConfigurationException), ``message`` its
    message."""

    def __init__(self, op: str, error: str, message: str) -> None:
        super().__init__(f"{op}: {error}: {message}")
        self.op, self.error, self.message = op, error, message


def kafka_classpath(with_drivers: bool = False) -> str:
    """The jars' classpath; fails the test (with the make target to run) when they are missing,
    skips it in the compose test runner (CHRONOLOG_BOOTSTRAP set: its image has no JVM)."""
    if not (KAFKA_LIB / f"kafka_2.13-{KAFKA_VERSION}.jar").exists() or not DRIVERS_JAR.exists():
        if os.environ.get("CHRONOLOG_BOOTSTRAP"):
            pytest.skip(f"needs Kafka {KAFKA_VERSION}'s jars, which the compose runner lacks")
        pytest.fail(
            f"Kafka {KAFKA_VERSION}'s jars are not in {JVM_BUILD}: run `make kafka-jvm` "
            "(part of `make install-test`)"
        )
    return (f"{DRIVERS_JAR}:" if with_drivers else "") + f"{KAFKA_LIB}/*"


def run_kafka_tool(
    main_class: str,
    *args: str,
    timeout: float = 120.0,
    check: bool = True,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's tools to completion, ``input`` on its stdin (else none); see the
    module docstring."""
    cmd = ["java", *TOOL_JVM_FLAGS, "-cp", kafka_classpath(), main_class, *args]
    done = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=timeout,
        **({"stdin": subprocess.DEVNULL} if input is None else {"input": input}),
    )
    if check and done.returncode != 0:
        raise KafkaToolError(
            f"{' '.join(cmd[-len(args) - 1 :])} exited with status {done.returncode}:\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done


def _kafka_uuid() -> str:
    """A cluster id as Kafka's Uuid.randomUuid writes it (16 random bytes, URL-safe base64 without
    padding, never starting with '-'), without a JVM start for ``StorageTool random-uuid``."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


class KafkaServer:
    """Apache Kafka 4.1.1, one node in KRaft mode; see the module docstring."""

    PROPERTIES = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "group.coordinator.rebalance.protocols": "classic,consumer",
    }

    def __init__(
        self,
        workdir: Path,
        overrides: dict[str, object] | None = None,
        jvm_flags: tuple[str, ...] = SERVER_JVM_FLAGS,
        format_args: tuple[str, ...] = (),
    ) -> None:
        self.workdir = Path(workdir)
        self.format_args = format_args  # more StorageTool format options (e.g. --add-scram)
        self.jvm_flags = jvm_flags
        self.host = "127.0.0.1"
        self.port = free_port()
        self.controller_port = free_port()
        self.log_dir = str(self.workdir / "kafka-logs")
        self.log_dirs = [self.log_dir]
        self.overrides = {k: str(v) for k, v in (overrides or {}).items()}
        self.log_path = self.workdir / "kafka.log"
        self.config_path = self.workdir / "server.properties"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_start = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def properties(self) -> dict[str, str]:
        return {
            **self.PROPERTIES,
            "controller.quorum.voters": f"1@{self.host}:{self.controller_port}",
            "listeners": (
                f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "log.dirs": self.log_dir,
            **self.overrides,
        }

    def start(self) -> "KafkaServer":
        """Format the log dir (first start only), start ``kafka.Kafka`` and wait until it logs that
        it started and answers ApiVersions; raises RuntimeError with the log's tail if it exits or
        is not up within START_TIMEOUT_S."""
        assert self.proc is None or self.proc.poll() is not None, "kafka already running"
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            "".join(f"{k}={v}\n" for k, v in sorted(self.properties().items()))
        )
        if not (Path(self.log_dir) / "meta.properties").exists():
            run_kafka_tool(
                "kafka.tools.StorageTool",
                "format",
                "--ignore-formatted",
                "-t",
                _kafka_uuid(),
                "-c",
                str(self.config_path),
                *self.format_args,
            )
        cmd = [
            "java",
            *self.jvm_flags,
            "-cp",
            kafka_classpath(),
            "kafka.Kafka",
            str(self.config_path),
        ]
        with open(self.log_path, "ab") as out:
            self._log_start = out.tell()
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"kafka exited with status {self.proc.returncode} at start-up:\n"
                    f"{self.log_tail()}"
                )
            # KafkaRaftServer logs this once the broker is registered and unfenced.
            if "Kafka Server started" in self.log_output(since_start=True) and api_versions_ok(
                self.host, self.port
            ):
                return self
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"kafka did not start within {START_TIMEOUT_S} s:\n{self.log_tail()}")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM (controlled shutdown) and wait; SIGKILL after ``timeout``. Returns the exit
        status (143 after a clean SIGTERM, as for any JVM; None if it was not running)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def kill(self) -> int | None:
        """SIGKILL and wait."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.kill()
        return self.proc.wait()

    def restart(self) -> "KafkaServer":
        self.stop()
        return self.start()

    def log_output(self, since_start: bool = False) -> str:
        """Everything the process(es) wrote; with ``since_start`` only the latest start's."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_start if since_start else 0)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_output().splitlines()[-lines:])


@pytest.fixture(scope="session")
def kafka_oracle(tmp_path_factory):
    server = KafkaServer(tmp_path_factory.mktemp("kafka")).start()
    try:
        yield server
    finally:
        server.stop()


class JavaClients:
    """``java chronolog.jvm.Clients <bootstrap>`` as a subprocess answering JSON lines; see the
    module docstring. Its stderr (client logs at WARN) goes to ``log_path`` (a temporary file,
    removed at exit, unless given) and is quoted when the process dies."""

    def __init__(
        self,
        bootstrap: str,
        log_path: Path | None = None,
        config: dict[str, object] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.config = {k: str(v) for k, v in (config or {}).items()}
        self.log_path = log_path
        self.proc: subprocess.Popen[str] | None = None
        self._own_log = False
        self._lines: queue.Queue[str | None] = queue.Queue()

    def __enter__(self) -> "JavaClients":
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="chronolog-java-clients-", suffix=".log")
            os.close(fd)
            self.log_path, self._own_log = Path(name), True
        with open(self.log_path, "ab") as err:
            self.proc = subprocess.Popen(
                [
                    "java",
                    *TOOL_JVM_FLAGS,
                    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                    "-cp",
                    kafka_classpath(with_drivers=True),
                    "chronolog.jvm.Clients",
                    self.bootstrap,
                    *(f"{k}={v}" for k, v in self.config.items()),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                encoding="utf-8",
            )
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()
        return self

    def _read(self, stdout: Any) -> None:
        for line in stdout:
            self._lines.put(line)
        self._lines.put(None)

    def call(self, op: str, timeout: float = CALL_TIMEOUT_S, **args: Any) -> dict[str, Any]:
        """Send one request and wait for its answer; see the module docstring."""
        assert self.proc is not None and self.proc.stdin is not None, "use JavaClients in a with"
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"the Java clients did not answer {op} within {timeout} s"
            ) from None
        if line is None:
            raise AssertionError(f"the Java clients exited during {op}:\n{self._stderr_tail()}")
        answer: dict[str, Any] = json.loads(line)
        if not answer.pop("ok"):
            raise JavaClientError(op, answer["error"], answer["message"])
        return answer

    def _stderr_tail(self) -> str:
        assert self.log_path is not None
        return self.log_path.read_text(errors="replace")[-3000:]

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self._own_log and self.log_path is not None:
            self.log_path.unlink(missing_ok=True)
