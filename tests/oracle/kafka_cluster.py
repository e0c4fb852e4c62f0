"""Apache Kafka 4.1.1 as a 3-node cluster beside chronolog's (issue #34): three KRaft nodes, each
broker and controller in one JVM (``KafkaServer`` from tests/oracle/kafka_oracle.py with node ids
1-3 and one quorum), formatted with one cluster id. Internal topics at replication factor 3,
min.insync.replicas 2, and no automatic leader rebalancing, so a test decides when leaders move.

- ``KafkaCluster(workdir, size=3, overrides=None)``: ``start()`` (the nodes start together: each
  waits for a quorum of voters), ``stop()``, ``node(node_id)``, ``bootstrap`` (every node).
  ``node(i).stop()`` / ``node(i).start()`` stop and restart one node on its ports and log dir.
About 15 s to start on this machine; -Xmx384m a node.
"""

from __future__ import annotations

import threading
from pathlib import Path

from tests.oracle.kafka_oracle import KafkaServer, _kafka_uuid, run_kafka_tool

CLUSTER_PROPERTIES = {
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    "auto.leader.rebalance.enable": "false",
}


class KafkaCluster:
    """See the module docstring."""

    def __init__(
        self, workdir: Path, size: int = 3, overrides: dict[str, object] | None = None
    ) -> None:
        self.nodes = [
            KafkaServer(Path(workdir) / f"node{i}", {**CLUSTER_PROPERTIES, **(overrides or {})})
            for i in range(1, size + 1)
        ]
        voters = ",".join(
            f"{i}@{n.host}:{n.controller_port}" for i, n in enumerate(self.nodes, start=1)
        )
        for i, node in enumerate(self.nodes, start=1):
            node.overrides.update({"node.id": str(i), "controller.quorum.voters": voters})
        self._cluster_id = _kafka_uuid()

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def node(self, node_id: int) -> KafkaServer:
        return self.nodes[node_id - 1]

    def start(self) -> "KafkaCluster":
        """Format every node with the cluster's id (first start), then start them together;
        raises the first node's RuntimeError (with its log's tail) if one does not start."""
        for node in self.nodes:
            if not (Path(node.log_dir) / "meta.properties").exists():
                node.workdir.mkdir(parents=True, exist_ok=True)
                node.config_path.write_text(
                    "".join(f"{k}={v}\n" for k, v in sorted(node.properties().items()))
                )
                run_kafka_tool(
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    self._cluster_id,
                    "-c",
                    str(node.config_path),
                )
        errors: list[BaseException] = []

        def start(node: KafkaServer) -> None:
            try:
                node.start()
            except BaseException as exc:  # reported below, after every thread ended
                errors.append(exc)

        threads = [threading.Thread(target=start, args=(n,)) for n in self.nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.stop()
            raise errors[0]
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
