"""librdkafka's own test suite against chronolog: ``make test-librdkafka`` (not part of
``make test``: the build takes minutes and the run most of an hour on two cores).

The Makefile builds librdkafka 2.15.1 and its ``test-runner`` under build/librdkafka-2.15.1/ and
a Kafka installation's layout over Kafka 4.1.1's jars under build/kafka-path/ (for the tests
that run ``kafka-topics.sh`` and friends or Kafka's Java clients). This runner starts chronolog
itself, first one broker, then three brokers on ZooKeeper (tests/zookeeper.py,
tests/cluster/helpers.py), once per librdkafka test scenario the chosen tests need (``default``,
and ``noautocreate`` with ``auto.create.topics.enable=false``), and runs each test number in a
``test-runner`` process of its own (``TESTS=0011 test-runner -L -Q -p1``: the broker tests,
quick mode, one at a time), so one crash or hang costs one number. librdkafka takes the
brokers for Kafka 3.9.0 (TEST_KAFKA_VERSION), the last with ZooKeeper, as chronolog's cluster is.

Results: build/librdkafka-results.json (every test's state, reason and time, counts per mode)
and each number's output in build/librdkafka-results/<mode>-<scenario>/<number>.log; a summary
on stdout. Exits 1 when any test failed, crashed or timed out.

    python -m tests.suites.librdkafka_suite --librdkafka build/librdkafka-2.15.1 \\
        --kafka-path build/kafka-path [--tests 0011,0055] [--modes single,cluster]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.cluster.helpers import ClusterProcesses
from tests.conftest import REPO, BrokerProcess
from tests.zookeeper import ZooKeeperServer

# The broker version librdkafka's tests are told (they skip what the version lacks and pick
# kafka-topics.sh's --bootstrap-server from 3.0 on).
BROKER_VERSION = "3.9.0"
# How librdkafka's harness (trivup 0.12) configures every Kafka broker: an ACL authorizer that
# lets everyone do what no ACL names (the admin and authorization tests create ACLs).
HARNESS = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}
# librdkafka's tests/scenarios/*.json: four partitions and replication factor 3 (1 on a single
# broker) for auto-created topics, with or without auto-creation.
SCENARIOS = {
    "default": {**HARNESS, "auto.create.topics.enable": "true", "num.partitions": "4"},
    "noautocreate": {**HARNESS, "auto.create.topics.enable": "false", "num.partitions": "4"},
}
MODES = ("single", "cluster")
# librdkafka scales its own timeouts by this (test.timeout.multiplier): two shared cores.
TIMEOUT_MULTIPLIER = 3
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# A row of test-runner's summary: "| 0011_produce_batch | PASSED | 12.345s | reason".
SUMMARY_ROW = re.compile(r"^\|\s*(\d{4}_\w+)\s*\|\s*(\w+)\s*\|\s*([\d.]+)s\s*\|\s?(.*)$")
# A failure as the test prints it (a failure in the runner's main thread aborts it before the
# summary): '### Test "0092_mixed_msgver (subtest)" failed at test.c:4623:...: ###' and the
# reason on the next line.
FAILURE = re.compile(r'^### Test "(\d{4}_\w+)[^"]*" failed at ([^\n]*?): ###\n(.*)$', re.M)


@dataclass(frozen=True)
class SuiteTest:
    """One entry of test.c's ``tests[]`` table."""

    name: str
    local: bool  # TEST_F_LOCAL: runs against librdkafka's mock cluster, not a broker
    manual: bool
    scenarios: tuple[str, ...]

    @property
    def number(self) -> str:
        return self.name[:4]


def suite_tests(test_c: Path) -> list[SuiteTest]:
    """The tests declared in librdkafka's tests/test.c, in its order."""
    text = test_c.read_text()
    table = text[text.index("struct test tests[] = {") :]
    table = table[: table.index("{NULL}")]
    entries = re.split(r"\b_TEST\(", table)[1:]
    found = []
    for entry in entries:
        name, _, rest = entry.partition(",")
        flags = rest.split(",")[0].split(")")[0]
        scenario = re.search(r'\.scenario\s*=\s*"([^"]*)"', entry)
        found.append(
            SuiteTest(
                name=name.strip(),
                local="TEST_F_LOCAL" in flags,
                manual="TEST_F_MANUAL" in flags,
                scenarios=tuple((scenario.group(1) if scenario else "default").split(",")),
            )
        )
    return found


def parse_summary(output: str) -> dict[str, dict]:
    """test-runner's summary rows by test name: state, seconds, reason."""
    rows = {}
    for line in ANSI.sub("", output).splitlines():
        m = SUMMARY_ROW.match(line.strip())
        if m:
            name, state, seconds, reason = m.groups()
            rows[name] = {
                "state": state,
                "seconds": float(seconds),
                "reason": reason.strip().rstrip("|").strip(),
            }
    return rows


def first_failures(output: str) -> dict[str, str]:
    """The first failure each test printed: "where: reason"."""
    failures: dict[str, str] = {}
    for name, where, reason in FAILURE.findall(ANSI.sub("", output)):
        failures.setdefault(name, f"{reason.strip()} ({where.split(' at ')[0]})")
    return failures


class Brokers:
    """chronolog brokers for one mode and scenario: one standalone broker, or three on a
    ZooKeeper server of their own. A context manager: stops what it started."""

    def __init__(self, mode: str, props: dict[str, str], workdir: Path) -> None:
        self.mode = mode
        self.props = props
        self.workdir = workdir
        self.zookeeper: ZooKeeperServer | None = None
        self.cluster: ClusterProcesses | None = None
        self.single: BrokerProcess | None = None

    def __enter__(self) -> "Brokers":
        if self.mode == "single":
            props = {**self.props, "default.replication.factor": "1"}
            self.single = BrokerProcess(self.workdir / "broker", props).start()
        else:
            self.zookeeper = ZooKeeperServer(self.workdir / "zookeeper").start()
            props = {**self.props, "default.replication.factor": "3"}
            # One rack per broker, as trivup gives them (librdkafka's rack-aware tests).
            racks = {i: {"broker.rack": f"RACK{i}"} for i in (1, 2, 3)}
            self.cluster = ClusterProcesses.create(self.zookeeper, self.workdir, 3, props, racks)
            self.cluster.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.single is not None:
            self.single.stop()
        if self.cluster is not None:
            self.cluster.stop()
        if self.zookeeper is not None:
            self.zookeeper.stop()

    @property
    def bootstrap(self) -> str:
        if self.single is not None:
            return self.single.bootstrap
        assert self.cluster is not None
        return self.cluster.bootstrap

    @property
    def processes(self) -> list[BrokerProcess]:
        return [self.single] if self.single is not None else list(self.cluster.brokers)

    def env(self) -> dict[str, str]:
        """What librdkafka's test helpers read about the brokers."""
        env = {"BROKERS": self.bootstrap}
        if self.cluster is not None and self.zookeeper is not None:
            env["ZK_ADDRESS"] = self.zookeeper.connect + self.cluster.chroot
        return env


def run_number(
    number: str, runner: Path, env: dict[str, str], log_path: Path, timeout_s: float
) -> tuple[str | None, dict[str, dict]]:
    """Runs one test number; returns (what went wrong with the process or None, summary rows).
    The output goes to ``log_path``."""
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            [str(runner), "-L", "-Q", "-p1"],
            cwd=runner.parent,
            env={**env, "TESTS": number},
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            status = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return f"TIMEOUT after {timeout_s:.0f} s", parse_summary(
                log_path.read_text("utf-8", "replace")
            )
        except BaseException:  # interrupted: the runner is in a session of its own
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    rows = parse_summary(log_path.read_text("utf-8", "replace"))
    if status < 0:
        return f"CRASHED (signal {-status})", rows
    if not rows:
        return f"CRASHED (exit status {status}, no summary)", rows
    return None, rows


def run_suite(args: argparse.Namespace) -> int:
    librdkafka = Path(args.librdkafka).resolve()
    runner = librdkafka / "tests" / "test-runner"
    if not runner.exists():
        sys.exit(f"{runner} is missing: build it with `make librdkafka` (or make test-librdkafka)")
    kafka_path = Path(args.kafka_path).resolve()
    tests = [
        t for t in suite_tests(librdkafka / "tests" / "test.c") if not t.local and not t.manual
    ]
    wanted = set(args.tests.split(",")) if args.tests else None
    if wanted:
        unknown = wanted - {t.number for t in tests}
        if unknown:
            sys.exit(f"no broker test numbered {', '.join(sorted(unknown))} in librdkafka's test.c")
        tests = [t for t in tests if t.number in wanted]
    out_dir = REPO / "build" / "librdkafka-results"
    results: dict = {
        "librdkafka": librdkafka.name,
        "broker_version": BROKER_VERSION,
        "runner_args": "-L -Q -p1",
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tests": args.tests or "every broker test",
        "modes": {},
    }
    failed = 0
    for mode in args.modes.split(","):
        mode_results: dict[str, dict] = {}
        for scenario, props in SCENARIOS.items():
            chosen = [t for t in tests if scenario in t.scenarios]
            if not chosen:
                continue
            numbers = list(dict.fromkeys(t.number for t in chosen))
            log_dir = out_dir / f"{mode}-{scenario}"
            log_dir.mkdir(parents=True, exist_ok=True)
            workdir = Path(tempfile.mkdtemp(prefix=f"librdkafka-{mode}-{scenario}-"))
            print(f"== {mode}, scenario {scenario}: {len(numbers)} test numbers", flush=True)
            with Brokers(mode, props, workdir) as brokers:
                conf = workdir / "test.conf"
                conf.write_text(
                    f"bootstrap.servers={brokers.bootstrap}\n"
                    f"test.timeout.multiplier={TIMEOUT_MULTIPLIER}\n"
                    "test.topic.random=true\n"
                )
                env = {
                    **os.environ,
                    **brokers.env(),
                    "RDKAFKA_TEST_CONF": str(conf),
                    "TEST_KAFKA_VERSION": BROKER_VERSION,
                    "TEST_SCENARIO": scenario,
                    "KAFKA_PATH": str(kafka_path),
                    "LD_LIBRARY_PATH": f"{librdkafka / 'src'}:{librdkafka / 'src-cpp'}",
                }
                for number in numbers:
                    log_path = log_dir / f"{number}.log"
                    trouble, rows = run_number(number, runner, env, log_path, args.timeout)
                    failures = first_failures(log_path.read_text("utf-8", "replace"))
                    for t in (t for t in chosen if t.number == number):
                        row = rows.get(t.name)
                        if trouble and (row is None or row["state"] == "RUNNING"):
                            reason = failures.get(t.name, "")
                            row = {"state": "FAILED", "seconds": 0.0, "reason": reason}
                            row["reason"] = f"{trouble}: {reason}" if reason else trouble
                        elif row is None:  # skipped silently: not for this broker version
                            row = {"state": "SKIPPED", "seconds": 0.0, "reason": ""}
                        row = {**row, "scenario": scenario, "log": str(log_path.relative_to(REPO))}
                        mode_results[t.name] = row
                        if row["state"] == "FAILED":
                            failed += 1
                        print(
                            f"{mode:8} {t.name:44} {row['state']:8} {row['reason'][:90]}",
                            flush=True,
                        )
                    if trouble:
                        print(f"{mode:8} {number}: {trouble}; see {log_path}", flush=True)
                    if any(not b.running() for b in brokers.processes):
                        sys.exit(
                            f"a chronolog broker exited during librdkafka's {number} "
                            f"({mode}, {scenario}); its log is under {workdir}"
                        )
        counts: dict[str, int] = {}
        for row in mode_results.values():
            counts[row["state"]] = counts.get(row["state"], 0) + 1
        results["modes"][mode] = {"counts": counts, "tests": mode_results}
        results_path = REPO / "build" / "librdkafka-results.json"
        results_path.write_text(json.dumps(results, indent=2) + "\n")
    print("\nlibrdkafka", librdkafka.name, "against chronolog:")
    for mode, mode_results in results["modes"].items():
        counts = ", ".join(
            f"{n} {state.lower()}" for state, n in sorted(mode_results["counts"].items())
        )
        print(f"  {mode}: {counts}")
        for name, row in mode_results["tests"].items():
            if row["state"] == "FAILED":
                print(f"    FAILED {name}: {row['reason'][:150]}")
    print(f"results: {REPO / 'build' / 'librdkafka-results.json'}")
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--librdkafka", required=True, help="librdkafka's built source tree")
    parser.add_argument("--kafka-path", required=True, help="the Kafka layout (bin/, libs/)")
    parser.add_argument(
        "--tests", help="test numbers, comma-separated (default: every broker test)"
    )
    parser.add_argument("--modes", default=",".join(MODES), help="single, cluster or both")
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="seconds one test number may take"
    )
    sys.exit(run_suite(parser.parse_args()))


if __name__ == "__main__":
    main()
