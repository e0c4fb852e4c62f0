"""Layer 1: brokers register in ZooKeeper as Kafka 0.10.1 does, one is the controller, and the
controller role moves when it dies."""

from __future__ import annotations

from protocol import ApiKey
from tests.cluster.helpers import call
from tests.waiting import wait_for


def controller_epoch(cluster) -> int:
    """/controller_epoch, or 0 before the first controller wrote it (a controller creates
    /controller first, then bumps the epoch, as in Kafka)."""
    found = cluster.zk.exists("/controller_epoch")
    return int(cluster.zk.get("/controller_epoch")[0]) if found else 0


def test_brokers_register_and_one_controller_is_elected(cluster_factory):
    cluster = cluster_factory(3)
    assert cluster.registered() == [1, 2, 3]
    for broker in cluster.brokers:
        doc = cluster.zk_json(f"/brokers/ids/{broker.overrides['broker.id']}")
        assert doc["host"] == "127.0.0.1" and doc["port"] == broker.port
        assert doc["endpoints"] == [f"PLAINTEXT://127.0.0.1:{broker.port}"]
    controller = wait_for(lambda: cluster.controller() > 0, "a controller", timeout=30)
    assert controller in (1, 2, 3)
    wait_for(lambda: controller_epoch(cluster) >= 1, "the controller's epoch", timeout=30)
    cluster_id = cluster.zk_json("/cluster/id")["id"]
    for broker in cluster.brokers:
        meta = broker.log_dirs[0] + "/meta.properties"
        assert f"cluster.id={cluster_id}" in open(meta).read()
    # Metadata: every broker lists the three live brokers and the controller
    for broker_id in (1, 2, 3):
        meta = wait_for(
            lambda: (m := cluster.metadata(broker_id)) and len(m.brokers) == 3 and m,
            "three brokers in metadata",
            timeout=30,
        )
        assert meta.controller_id == controller
        assert sorted(b.node_id for b in meta.brokers) == [1, 2, 3]
        assert meta.cluster_id == cluster_id


def test_controller_moves_when_it_is_killed(cluster_factory):
    cluster = cluster_factory(3)
    first = wait_for(lambda: cluster.controller() > 0, "a controller", timeout=30)
    epoch = wait_for(lambda: controller_epoch(cluster), "the first controller's epoch", timeout=30)
    cluster.broker(first).kill()
    second = wait_for(
        lambda: (c := cluster.controller()) > 0 and c != first and c, "a new controller", timeout=30
    )
    wait_for(
        lambda: controller_epoch(cluster) == epoch + 1,
        f"/controller_epoch {epoch + 1} from the new controller",
        timeout=30,
    )
    cluster.wait_registered([b for b in (1, 2, 3) if b != first])
    # the survivors' metadata drops the dead broker
    for broker_id in (1, 2, 3):
        if broker_id == first:
            continue
        wait_for(
            lambda: sorted(b.node_id for b in cluster.metadata(broker_id).brokers)
            == sorted({1, 2, 3} - {first})
            and cluster.metadata(broker_id).controller_id == second,
            "metadata without the dead broker",
            timeout=30,
        )
    # the killed broker comes back under the same id once its old session has expired
    cluster.broker(first).start()
    cluster.wait_registered([1, 2, 3])
    assert cluster.controller() == second


def test_producer_ids_are_unique_across_brokers(cluster_factory):
    cluster = cluster_factory(3)
    seen = []
    for _ in range(3):
        for broker_id in (1, 2, 3):
            answer = call(
                cluster.broker(broker_id),
                ApiKey.INIT_PRODUCER_ID,
                1,
                {"transactional_id": None, "transaction_timeout_ms": 60000},
            )
            assert answer.error_code == 0
            seen.append(answer.producer_id)
    assert len(set(seen)) == len(seen)
    block = cluster.zk_json("/latest_producer_id_block")
    assert block["version"] == 1 and int(block["block_end"]) == 2999  # three blocks of 1000
