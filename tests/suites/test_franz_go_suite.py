"""franz-go's own kgo test suite against a chronolog broker (issue #32).

``make franz-go`` (in ``make install-test``) downloads github.com/twmb/franz-go at the version the
Makefile pins from the Go module proxy into build/gomod and compiles the tests its pkg/kgo ships
into build/franz-go-<version>/kgo.test. This test starts one broker, with a PLAINTEXT listener
(KGO_SEEDS) and a SASL_PLAINTEXT one taking SCRAM-SHA-256 (KGO_TEST_SCRAM_SEEDS, a user made with
``chronolog users add``), and runs that binary against it, the way franz-go's CI runs it against
Kafka, with the tests named in KGO_TESTS: every kgo test that talks to a broker and that a single
chronolog broker can run. The binary runs in the package's source directory, as ``go test``
would run it.

Left out, and why (`kgo.test -test.list .` lists them all; the others need no broker):
- TestShareGroup, TestShareGroupETL, TestShareGroupAckOnClose, TestShareGroupOffsetsAdmin,
  TestConsumeRegexShareSkipsInternal: share groups (KIP-932, Kafka 4.2), which chronolog lacks;
  they skip themselves.
- Test848RegexBrokerResolves and the /848 subtests of the ETL tests: the KIP-848 consumer group
  protocol (ConsumerGroupHeartbeat), which chronolog lacks; they skip themselves.
- TestIssueProduceBrokerTooOldFailsRecords: needs a broker that refuses Produce v2 (Kafka 4
  removed it; chronolog keeps it for old clients); skips itself.
- TestOAuthAuth: SASL/OAUTHBEARER, which chronolog lacks; skips itself without its listener.

A skipped test prints "--- SKIP", never "--- PASS", so each named test must print "--- PASS".
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, BrokerProcess

# The version the Makefile pins (FRANZ_GO_VERSION); its sources are where the binary runs.
FRANZ_GO_VERSION = "v1.22.3"
KGO_TEST = REPO / "build" / f"franz-go-{FRANZ_GO_VERSION}" / "kgo.test"
KGO_SOURCE = (
    REPO
    / "build"
    / "gomod"
    / "github.com"
    / "twmb"
    / f"franz-go@{FRANZ_GO_VERSION}"
    / "pkg"
    / "kgo"
)

KGO_TESTS = (
    # Transactional consume-transform-produce (TxnOffsetCommit, EndTxn, read_committed) and the
    # same through plain groups, with the eager, cooperative and static-membership balancers.
    "TestTxnEtl",
    "TestGroupETL",
    # Producing: batching, large records, manual partitions, errors per record.
    "TestClient_Produce",
    "TestClient_ProduceLargeMessages",
    "TestIssue769",
    "TestIssue831",
    "TestIssueProduceSyncManualPartitionNegativeDoesNotPanic",
    # Consuming: regex subscriptions, topics deleted under a consumer, pause/resume, fetch sizes.
    "TestIssue325",
    "TestConsumeRegex",
    "TestConsumeTopicRetrieval",
    "TestConsumeTopicRetrieval_Many",
    "TestIssue337",
    "TestDirectPartitionPurge",
    "TestIssue434",
    "TestAddRemovePartitions",
    "TestPauseIssue489",
    "TestPauseIssueOct2023",
    "TestIssue523",
    "TestIssue648",
    "TestIssue810",
    "TestIssue865",
    "TestIssueFetchLargerThanBrokerMaxReadBytes",
    "TestPooling",
    "TestGroupSimple",
    "TestHookPollStart",
    "TestConsumeMaxDecompressBatchBytes",
    # Requests: ping, batched FindCoordinator, OffsetFetch for an unknown group.
    "TestPing",
    # SASL/SCRAM-SHA-256: a known user pings and reads metadata; an unknown one is refused.
    "TestSCRAMAuth",
    "TestSCRAMAuthBadCredentials",
    "TestIssue1034",
    "TestUnknownGroupOffsetFetchPinned",
)
# Records each ETL test pushes through its chain of groups (franz-go's default is 500,000): enough
# for several transactions and rebalances per consumer, and for TestTxnEtl's producer, which ends
# a transaction every 10,000 records, to end and begin two (EndAndBeginTransaction, the second
# time without waiting for the end: KGO_TEST_UNSAFE, off in franz-go's runs against Redpanda,
# which wants each end complete first). Its topics keep franz-go's 7, 11 and 31 partitions: with 3
# (KGO_TEST_MAX_TOPIC_PARTS) a transaction's markers were written too quickly to race the
# producer's next EndTxn, which chronolog fenced until dec1e97.
RECORDS = 25_000
# The whole run takes about 80 s here, mostly waiting (TestTxnEtl about 35 s, TestIssue434 and
# TestIssue523 wait for metadata to drop deleted topics); franz-go's own timeouts are per test.
RUN_TIMEOUT_S = 300
# franz-go's test helpers log these on every run; they say nothing of a failure.
NOISE = re.compile(r"deleting (topic|group)|completed in")
# The user TestSCRAMAuth logs in as (TestSCRAMAuthBadCredentials tries an unknown one).
SCRAM_USER, SCRAM_PASSWORD = "franz", "franz-scram-pw"


def test_franz_go_kgo_suite(broker_factory, tmp_path):
    assert KGO_TEST.exists(), f"{KGO_TEST} is missing: `make franz-go` builds it"
    broker = broker_factory(
        listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        **{
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        },
    )
    # `chronolog users add` writes the credentials file, which the running broker reads.
    subprocess.run(
        [sys.executable, "-m", "broker", "users", "--log-dir", broker.log_dir, "add", SCRAM_USER,
         "--mechanism", "SCRAM-SHA-256", "--password-stdin"],
        input=SCRAM_PASSWORD.encode(), check=True, capture_output=True, cwd=REPO,
    )  # fmt: skip
    ports = {e["listener"]: e["port"] for e in broker.log_events("listening")}
    run_kgo_suite(broker, ports, tmp_path)


def run_kgo_suite(broker: BrokerProcess, ports: dict[str, int], tmp_path: Path) -> None:
    env = {
        **os.environ,
        "KGO_SEEDS": f"{broker.host}:{ports['PLAINTEXT']}",
        "KGO_TEST_SCRAM_SEEDS": f"{broker.host}:{ports['SASL_PLAINTEXT']}",
        "KGO_TEST_SCRAM": f"{SCRAM_USER}:{SCRAM_PASSWORD}",
        "KGO_TEST_RF": "1",
        "KGO_TEST_RECORDS": str(RECORDS),
        "KGO_TEST_UNSAFE": "1",
        "KGO_LOG_LEVEL": "none",
    }
    output = tmp_path / "kgo.log"
    with open(output, "wb") as out:
        proc = subprocess.run(
            [
                str(KGO_TEST),
                "-test.run",
                "^(" + "|".join(KGO_TESTS) + ")$",
                "-test.v",
                f"-test.timeout={RUN_TIMEOUT_S}s",
            ],
            cwd=KGO_SOURCE,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            # -test.timeout makes the binary panic with every goroutine's stack first.
            timeout=RUN_TIMEOUT_S + 60,
        )
    log = output.read_text(errors="replace")
    results = {
        name: state for state, name in re.findall(r"^--- (PASS|FAIL|SKIP): (\w+) ", log, re.M)
    }
    not_passed = {
        name: results.get(name, "not run") for name in KGO_TESTS if results.get(name) != "PASS"
    }
    failures = "\n".join(
        line
        for line in log.splitlines()
        if re.search(r"--- FAIL|_test\.go:\d+:|panic:", line) and not NOISE.search(line)
    )
    assert proc.returncode == 0 and not not_passed, (
        f"franz-go's kgo tests against chronolog at {env['KGO_SEEDS']}: "
        f"exit status {proc.returncode}, "
        f"not passed: {not_passed}; the failing lines (whole output in {output}, broker log in "
        f"{broker.log_path}):\n{failures[-6000:]}"
    )
