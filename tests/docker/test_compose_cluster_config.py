"""docker/docker-compose.cluster.yml as Debian's docker-compose resolves it: ZooKeeper, three
brokers of one cluster, and the cluster test runner waiting for them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker" / "docker-compose.cluster.yml"

pytestmark = pytest.mark.skipif(
    shutil.which("docker-compose") is None,
    reason="docker-compose not installed (`make install-test` installs it)",
)


def _config() -> dict:
    result = subprocess.run(
        ["docker-compose", "-f", str(COMPOSE_FILE), "config"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, f"docker-compose config failed:\n{result.stderr}"
    return yaml.safe_load(result.stdout)


def _overrides(command: list[str]) -> dict[str, str]:
    values = [command[i + 1] for i, arg in enumerate(command) if arg == "--override"]
    return dict(v.split("=", 1) for v in values)


def test_zookeeper_three_brokers_and_the_runner():
    config = _config()
    assert set(config["services"]) == {
        "zookeeper",
        "broker1",
        "broker2",
        "broker3",
        "cluster-test-runner",
    }
    ids, connects = set(), set()
    for n in (1, 2, 3):
        broker = config["services"][f"broker{n}"]
        overrides = _overrides(broker["command"])
        ids.add(overrides["broker.id"])
        connects.add(overrides["zookeeper.connect"])
        assert overrides["advertised.listeners"] == f"PLAINTEXT://broker{n}:9092"
        assert broker["depends_on"] == {"zookeeper": {"condition": "service_healthy"}}
        assert f"broker{n}-data:{overrides['log.dirs']}:rw" in broker["volumes"]
    assert ids == {"1", "2", "3"} and connects == {"zookeeper:2181/chronolog"}
    runner = config["services"]["cluster-test-runner"]
    assert runner["environment"]["CHRONOLOG_CLUSTER_BOOTSTRAP"] == (
        "broker1:9092,broker2:9092,broker3:9092"
    )
    assert set(runner["depends_on"]) == {"broker1", "broker2", "broker3"}
    assert config["services"]["zookeeper"]["build"]["target"] == "zookeeper"
