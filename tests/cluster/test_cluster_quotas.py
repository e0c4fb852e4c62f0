"""Client quotas in a cluster: kept in ZooKeeper as Kafka's ZooKeeper mode keeps them
(/config/users/<user>, /config/users/<user>/clients/<client>, /config/clients/<client>, each
``{"version":1,"config":{...}}``, announced by a /config/changes notification), so a change made
through one broker reaches every broker, a change written to ZooKeeper as Kafka's AdminZkClient
writes it is followed, and a restarted broker loads them. Costs about 20 s (two brokers)."""

from __future__ import annotations

import json

from tests.waiting import wait_for
from tests.integration.clients import chronolog_quotas

TIMEOUT_S = 30


def test_quotas_live_in_zookeeper_and_reach_every_broker(cluster_factory):
    cluster = cluster_factory(2)
    chronolog_quotas(
        cluster.broker(2).bootstrap,
        "alter",
        "--user",
        "alice@example.com",
        "--client-default",
        "--add-config",
        "producer_byte_rate=1024",
    )
    assert cluster.zk_json("/config/users/alice%40example.com/clients/<default>") == {
        "version": 1,
        "config": {"producer_byte_rate": "1024"},
    }
    notes = [
        cluster.zk_json(f"/config/changes/{n}") for n in cluster.zk.get_children("/config/changes")
    ]
    assert {"version": 2, "entity_path": "users/alice%40example.com/clients/<default>"} in notes
    expected = "Quota configs for user 'alice@example.com', client-id <default> are producer_byte_rate=1024"
    wait_for(
        lambda: chronolog_quotas(cluster.broker(1).bootstrap, "describe") == expected,
        "broker 1 describes the quota set through broker 2",
        timeout=TIMEOUT_S,
    )

    # written as Kafka's AdminZkClient writes it: the node, then a notification
    cluster.zk.create(
        "/config/clients/<default>",
        json.dumps({"version": 1, "config": {"consumer_byte_rate": "4096"}}).encode(),
        makepath=True,
    )
    cluster.zk.create(
        "/config/changes/config_change_",
        json.dumps({"version": 2, "entity_path": "clients/<default>"}).encode(),
        sequence=True,
    )
    for b in (1, 2):
        wait_for(
            lambda: "Quota configs for client-id <default> are consumer_byte_rate=4096"
            in chronolog_quotas(cluster.broker(b).bootstrap, "describe", "--client-default"),
            f"broker {b} follows the quota written to ZooKeeper",
            timeout=TIMEOUT_S,
        )

    # a restarted broker loads them from ZooKeeper
    cluster.broker(1).restart()
    assert chronolog_quotas(cluster.broker(1).bootstrap, "describe").splitlines() == [
        "Quota configs for client-id <default> are consumer_byte_rate=4096",
        expected,
    ]
