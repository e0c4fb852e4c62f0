"""UpdateFeatures (KIP-584) beside Apache Kafka 4.1.1: Kafka's own kafka-features.sh
(FeatureCommand) upgrades, downgrades and disables transaction.version on chronolog and on Kafka
with the same outcome, the same texts and the same finalized levels in ApiVersions; raw requests
at v0, v1 and v2 are answered alike; chronolog keeps the level across a restart.

Kafka finalizes other features too (metadata.version, group.version...); chronolog supports
transaction.version only, so the comparisons look at that feature. Kafka names its controller's
node id in two refusals, chronolog its broker id: the texts are compared with the id masked.
"""

from __future__ import annotations

import re

import pytest

from client import BrokerConnection
from protocol import ApiKey
from tests.oracle.kafka_oracle import run_kafka_tool

pytestmark = pytest.mark.kafka_oracle

FEATURE_COMMAND = "org.apache.kafka.tools.FeatureCommand"
TV = "transaction.version"


def _features(bootstrap: str, *args: str) -> tuple[int, str]:
    """kafka-features.sh's exit status and what it printed about transaction.version (its
    describe line without the epoch, or its outcome line), node ids masked."""
    done = run_kafka_tool(FEATURE_COMMAND, "--bootstrap-server", bootstrap, *args, check=False)
    lines = [
        line
        for line in done.stdout.splitlines()
        if TV in line and not line.startswith("[") and "INFO" not in line
    ]
    text = "\n".join(re.sub(r"\tEpoch: \d+", "", line) for line in lines)
    return done.returncode, re.sub(r"(controller|Broker) \d+", r"\1 N", text)


def _finalized(host: str, port: int) -> dict[str, int]:
    with BrokerConnection(host, port, client_id="features", timeout_s=15) as c:
        answer = c.call(
            ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
        )
    return {f.name: f.max_version_level for f in answer.finalized_features if f.name == TV}


def _update(host: str, port: int, version: int, level: int, how: int) -> dict:
    """One raw UpdateFeatures of transaction.version; ``how`` is v1+'s upgrade type (v0: 1
    sends allow_downgrade false, else true). The answer with node ids masked."""
    update = {"feature": TV, "max_version_level": level}
    update.update({"allow_downgrade": how != 1} if version == 0 else {"upgrade_type": how})
    body = {"timeout_ms": 30000, "feature_updates": [update], "validate_only": False}
    with BrokerConnection(host, port, client_id="features", timeout_s=15) as c:
        answer = c.call(ApiKey.UPDATE_FEATURES, version, body)
    masked = re.sub(r"controller \d+", "controller N", answer.error_message or "")
    results = [(r.feature, r.error_code, r.error_message) for r in answer.get("results") or []]
    return {"error": answer.error_code, "message": masked or None, "results": results}


COMMANDS = [
    ("describe",),
    ("downgrade", "--feature", f"{TV}=1", "--dry-run"),
    ("downgrade", "--feature", f"{TV}=1"),
    ("describe",),
    ("upgrade", "--feature", f"{TV}=3"),
    ("upgrade", "--feature", "nosuch.version=1"),
    ("upgrade", "--feature", f"{TV}=1"),
    ("downgrade", "--feature", f"{TV}=2"),
    ("downgrade", "--feature", f"{TV}=0"),
    ("describe",),
    ("upgrade", "--feature", f"{TV}=2"),
    ("disable", "--feature", TV),
    ("describe",),
    ("upgrade", "--feature", f"{TV}=2"),
]


def _run(server) -> list:
    seen = []
    for command in COMMANDS:
        seen.append((command, *_features(server.bootstrap, *command)))
        seen.append(("finalized", _finalized(server.host, server.port)))
    for version in (0, 1, 2):
        seen.append((f"v{version} downgrade", _update(server.host, server.port, version, 1, 2)))
        seen.append((f"v{version} upgrade", _update(server.host, server.port, version, 2, 1)))
        seen.append((f"v{version} bad", _update(server.host, server.port, version, 7, 1)))
    seen.append(("finalized", _finalized(server.host, server.port)))
    return seen


def test_kafka_features_tool_and_raw_requests_as_on_kafka(broker_factory, kafka_oracle):
    chronolog = broker_factory()
    try:
        kafka = _run(kafka_oracle)
    finally:  # the session's Kafka serves other tests at transaction.version 2
        _update(kafka_oracle.host, kafka_oracle.port, 2, 2, 1)
    ours = _run(chronolog)
    for theirs, mine in zip(kafka, ours):
        assert mine == theirs
    assert len(ours) == len(kafka)
    # and what the tool printed was not nothing
    assert any("FinalizedVersionLevel: 1" in str(step) for step in ours)
    assert any("Invalid update version 3" in str(step) for step in ours)


def test_the_level_survives_a_restart(broker_factory):
    broker = broker_factory()
    assert _features(broker.bootstrap, "downgrade", "--feature", f"{TV}=1")[0] == 0
    assert _finalized(broker.host, broker.port) == {TV: 1}
    broker.restart()
    assert _finalized(broker.host, broker.port) == {TV: 1}
    assert "FinalizedVersionLevel: 1" in _features(broker.bootstrap, "describe")[1]
