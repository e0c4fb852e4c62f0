"""docker/docker-compose.cluster.yml as Debian's docker-compose resolves it: ZooKeeper, three
brokers of one cluster, and the cluster test runner waiting for them."""

from __future__ import annotations

from tests.docker.helpers import ROOT, command_overrides, compose_config, needs_docker_compose

COMPOSE_FILE = ROOT / "docker" / "docker-compose.cluster.yml"

pytestmark = needs_docker_compose


def test_zookeeper_three_brokers_and_the_runner():
    config = compose_config(COMPOSE_FILE)
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
        overrides = command_overrides(broker["command"])
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
