"""Finalized feature levels in a cluster (KIP-584): kept in ZooKeeper's /feature as Kafka's
ZooKeeper mode kept them, so Kafka's kafka-features.sh changes them through any broker, every
broker's ApiVersions answers the new level with one epoch, a restarted broker loads it, and two
updates at once are each checked against the levels the other left. About 25 s (three brokers,
two JVM tool runs)."""

from __future__ import annotations

import threading

import pytest

from tests.oracle.test_features import FEATURE_COMMAND, TV, _update
from tests.oracle.kafka_oracle import run_kafka_tool
from tests.waiting import wait_for
from client import BrokerConnection
from protocol import ApiKey

pytestmark = pytest.mark.kafka_oracle

TIMEOUT_S = 30


def _finalized(broker) -> tuple[int, dict[str, int]]:
    """(finalized_features_epoch, {feature: level}) of one broker's ApiVersions v3."""
    with BrokerConnection(broker.host, broker.port, client_id="features", timeout_s=15) as c:
        answer = c.call(
            ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
        )
    levels = {f.name: f.max_version_level for f in answer.finalized_features}
    return answer.finalized_features_epoch, levels


def _agreed(cluster, level: int) -> int:
    """The epoch every running broker answers ``level`` of transaction.version with."""
    seen = [_finalized(b) for b in cluster.brokers if b.running()]
    assert all(answer == seen[0] for answer in seen), seen
    epoch, levels = seen[0]
    assert levels.get(TV, 0) == level, levels
    return epoch


def test_feature_levels_live_in_zookeeper_and_reach_every_broker(cluster_factory):
    cluster = cluster_factory(3)
    wait_for(lambda: _agreed(cluster, 2) == 0, "the defaults, epoch 0, everywhere")
    assert cluster.zk_json("/feature") is None

    done = run_kafka_tool(
        FEATURE_COMMAND,
        "--bootstrap-server",
        cluster.broker(2).bootstrap,
        "downgrade",
        "--feature",
        f"{TV}=1",
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert cluster.zk_json("/feature") == {
        "version": 2,
        "status": 1,
        "features": {TV: {"max_version_level": 1}},
    }
    epoch = wait_for(lambda: _agreed(cluster, 1), "every broker at level 1", timeout=TIMEOUT_S)
    assert epoch == 1

    cluster.broker(3).stop()
    cluster.broker(3).start()
    cluster.wait_registered([1, 2, 3])
    assert _finalized(cluster.broker(3)) == (1, {TV: 1})

    # Two upgrades to 2 at once through two brokers: one writes, the other finds 2 already
    # finalized when it checks again, so the epoch moves once.
    answers: list[dict] = []
    threads = [
        threading.Thread(target=lambda b=b: answers.append(_update(b.host, b.port, 1, 2, 1)))
        for b in (cluster.broker(1), cluster.broker(3))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert [a["error"] for a in answers] == [0, 0], answers
    wait_for(
        lambda: _agreed(cluster, 2) == 2, "every broker at level 2, epoch 2", timeout=TIMEOUT_S
    )

    refused = _update(cluster.broker(1).host, cluster.broker(1).port, 1, 3, 1)
    assert refused["error"] == 95  # INVALID_UPDATE_VERSION, as a single broker answers it
    assert _agreed(cluster, 2) == 2
