"""Helpers of the cluster tests (imported as tests.cluster.helpers): a set of broker processes
in one ZooKeeper chroot, ZooKeeper reads, Kafka-protocol calls to each broker, and polling with
a deadline for what the cluster converges to."""

from __future__ import annotations

import glob
import json
import tempfile
import time
import uuid
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from client import BrokerConnection
from protocol import ApiKey
from tests.conftest import BrokerProcess
from tests.waiting import wait_for


def call(broker, api: ApiKey, version: int, body: dict, timeout: float = 15.0):
    with BrokerConnection(
        broker.host, broker.port, client_id="cluster-test", timeout_s=timeout
    ) as c:
        return c.call(api, version, body)


class ClusterProcesses:
    """Brokers 1..n of one cluster; ``brokers[i]`` is broker id i+1."""

    def __init__(self, brokers, zookeeper, chroot: str) -> None:
        self.brokers = brokers
        self.zookeeper = zookeeper
        self.chroot = chroot
        self._zk: KazooClient | None = None

    @classmethod
    def create(
        cls,
        zookeeper,
        parent: Path,
        size: int = 3,
        props: dict | None = None,
        per_broker: dict[int, dict] | None = None,
    ) -> "ClusterProcesses":
        """``size`` brokers (ids 1..size, not started) in a new chroot of ``zookeeper``, each
        with a work dir of its own under ``parent``; ``props`` for all, ``per_broker`` by id."""
        chroot = f"/chronolog-{uuid.uuid4().hex[:12]}"
        brokers = []
        for broker_id in range(1, size + 1):
            workdir = Path(tempfile.mkdtemp(prefix=f"broker{broker_id}-", dir=parent))
            brokers.append(
                BrokerProcess(
                    workdir,
                    {
                        "broker.id": broker_id,
                        "zookeeper.connect": zookeeper.connect + chroot,
                        "zookeeper.session.timeout.ms": 3000,
                        "replica.lag.time.max.ms": 4000,
                        "replica.fetch.wait.max.ms": 200,
                        "replica.high.watermark.checkpoint.interval.ms": 500,
                        **(props or {}),
                        **(per_broker or {}).get(broker_id, {}),
                    },
                )
            )
        return cls(brokers, zookeeper, chroot)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers if b.running())

    def broker(self, broker_id: int):
        return self.brokers[broker_id - 1]

    def skew_clock(self, broker_id: int, seconds: int) -> None:
        """Run ``broker_id`` (from its next start) with its wall clock ``seconds`` off, through
        Debian's libfaketime (Makefile target ``faketime``); its monotonic clock is left alone."""
        libs = glob.glob("/usr/lib/*/faketime/libfaketime.so.1")
        if not libs:
            raise AssertionError("libfaketime is missing: run `make install-test`")
        broker = self.broker(broker_id)
        command = broker.command
        prefix = [
            "env",
            f"LD_PRELOAD={libs[0]}",
            f"FAKETIME={seconds:+d}",
            "DONT_FAKE_MONOTONIC=1",
            "FAKETIME_DONT_RESET=1",
        ]
        broker.command = lambda: prefix + command()

    def start(self) -> "ClusterProcesses":
        for broker in self.brokers:
            broker.start()
        self.wait_registered([b for b in range(1, len(self.brokers) + 1)])
        return self

    def stop(self) -> None:
        for broker in self.brokers:
            broker.stop()
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()
            self._zk = None

    # -- ZooKeeper ---------------------------------------------------------------------------
    @property
    def zk(self) -> KazooClient:
        if self._zk is None:
            self._zk = KazooClient(hosts=self.zookeeper.connect + self.chroot, timeout=10)
            self._zk.start(timeout=15)
        return self._zk

    def zk_json(self, path: str):
        """The JSON at `path`, or None when it does not exist (an ephemeral node such as
        /controller can vanish at any moment, so this asks once instead of exists-then-get)."""
        try:
            data, _ = self.zk.get(path)
        except NoNodeError:
            return None
        return json.loads(data)

    def registered(self) -> list[int]:
        if not self.zk.exists("/brokers/ids"):
            return []
        return sorted(int(i) for i in self.zk.get_children("/brokers/ids"))

    def wait_registered(self, ids: list[int], timeout: float = 30.0) -> None:
        wait_for(
            lambda: self.registered() == sorted(ids), f"brokers {ids} registered", timeout=timeout
        )

    def wait_controller_knows_brokers(self, timeout: float = 30.0) -> None:
        """Until the controller's metadata lists every broker registered in ZooKeeper. It
        assigns a new topic's replicas among the brokers its metadata knows, as Kafka's does,
        and learns of a broker a moment after its registration: a CreateTopics sent in that
        moment gets INVALID_REPLICATION_FACTOR or an assignment without that broker."""
        registered = len(self.registered())

        def knows_them() -> bool:
            controller = self.controller()
            return controller > 0 and len(self.metadata(controller).brokers) >= registered

        wait_for(knows_them, f"the controller to know the {registered} brokers", timeout=timeout)

    def controller(self) -> int:
        doc = self.zk_json("/controller")
        return -1 if doc is None else doc["brokerid"]

    def state(self, topic: str, partition: int = 0) -> dict | None:
        return self.zk_json(f"/brokers/topics/{topic}/partitions/{partition}/state")

    def leader(self, topic: str, partition: int = 0) -> int:
        state = self.state(topic, partition)
        return -1 if state is None else state["leader"]

    # -- Kafka protocol ----------------------------------------------------------------------
    def metadata(self, broker_id: int, topics: list[str] | None = None):
        body = {
            "topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": False,
        }
        return call(self.broker(broker_id), ApiKey.METADATA, 12, body)

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 3,
        configs: dict[str, str] | None = None,
        assignment: dict[int, list[int]] | None = None,
        timeout_ms: int = 20000,
    ) -> int:
        """CreateTopics v0 to the controller, once it knows every registered broker; its error
        code."""
        self.wait_controller_knows_brokers()
        entry = {
            "name": name,
            "num_partitions": -1 if assignment else partitions,
            "replication_factor": -1 if assignment else replication_factor,
            "assignments": [
                {"partition_index": p, "broker_ids": r} for p, r in (assignment or {}).items()
            ],
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
        }
        broker = self.broker(self.controller())
        answer = call(
            broker,
            ApiKey.CREATE_TOPICS,
            0,
            {"topics": [entry], "timeout_ms": timeout_ms},
            timeout=timeout_ms / 1000 + 10,
        )
        error = answer.topics[0].error_code
        if error == 0:
            self.wait_led(name)
        return error

    def wait_led(self, topic: str, timeout: float = 30.0) -> None:
        """Until every running broker's metadata names the leader and epoch ZooKeeper holds
        for every partition of ``topic`` (each has then applied the controller's LeaderAndIsr,
        sent before)."""

        def led() -> bool:
            for broker in self.brokers:
                if not broker.running():
                    continue
                broker_id = int(broker.overrides["broker.id"])
                meta = self.metadata(broker_id, [topic])
                parts = meta.topics[0].partitions
                if not parts:
                    return False
                for p in parts:
                    state = self.state(topic, p.partition_index)
                    if state is None or state["leader"] < 0:
                        return False
                    if (p.leader_id, p.leader_epoch) != (state["leader"], state["leader_epoch"]):
                        return False
            return True

        wait_for(led, f"leaders of {topic} known everywhere", timeout=timeout)

    def partition_view(self, broker_id: int, topic: str, partition: int = 0):
        """(leader, leader epoch, replicas, isr) in ``broker_id``'s Metadata answer."""
        meta = self.metadata(broker_id, [topic])
        for p in meta.topics[0].partitions:
            if p.partition_index == partition:
                return p.leader_id, p.leader_epoch, list(p.replica_nodes), list(p.isr_nodes)
        return None


DEBUGGING_REPLICA_ID = -2


def replica_fetch(
    broker,
    topic: str,
    partition: int,
    offset: int,
    max_bytes: int = 4 << 20,
    replica_id: int = DEBUGGING_REPLICA_ID,
):
    """Fetch v11 as a debugging reader (replica id -2): any replica answers from its own log,
    up to its high watermark; as a consumer (-1): the leader, up to its high watermark."""
    body = {
        "replica_id": replica_id,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": max_bytes,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": partition,
                        "fetch_offset": offset,
                        "partition_max_bytes": max_bytes,
                    }
                ],
            }
        ],
    }
    return call(broker, ApiKey.FETCH, 11, body).responses[0].partitions[0]


def replica_bytes(broker, topic: str, partition: int = 0) -> tuple[bytes, int]:
    """(every byte of the replica's log from its log start below its high watermark, that high
    watermark), read by successive fetches; AssertionError when the high watermark moved
    meanwhile (retry)."""
    from protocol.records import iter_shallow

    out = bytearray()
    offset = replica_offsets(broker, topic, partition, -2)[1]  # its log start offset
    for _ in range(10_000):
        part = replica_fetch(broker, topic, partition, offset)
        if part.error_code:
            raise AssertionError(f"broker fetch of {topic}-{partition}: error {part.error_code}")
        data = bytes(part.records or b"")
        entries = list(iter_shallow(data))
        if not entries:
            if part.high_watermark != offset:
                raise AssertionError(
                    f"read up to {offset}, but the high watermark is {part.high_watermark}"
                )
            return bytes(out), offset
        out += data[: entries[-1].next_position]
        offset = entries[-1].offset + 1
    raise AssertionError("replica did not end")


def replica_offsets(
    broker, topic: str, partition: int = 0, timestamp: int = -1, replica_id: int = -2
) -> tuple[int, int]:
    """ListOffsets v4: (timestamp, offset). As a debugging reader (replica id -2, default) from
    this replica's own log (latest: its log end offset); as a consumer (-1) from the leader
    (latest: the high watermark)."""
    body = {
        "replica_id": replica_id,
        "isolation_level": 0,
        "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "timestamp": timestamp}]}
        ],
    }
    part = call(broker, ApiKey.LIST_OFFSETS, 4, body).topics[0].partitions[0]
    if part.error_code:
        raise AssertionError(f"list offsets of {topic}-{partition}: error {part.error_code}")
    return part.timestamp, part.offset


def produce(
    broker,
    topic: str,
    values: list[bytes],
    *,
    partition: int = 0,
    acks: int = -1,
    timeout_ms: int = 15000,
    timestamps: list[int] | None = None,
):
    """Produce v9 of one batch; the partition's answer (error_code, base_offset...)."""
    from protocol.records import MessageSetBuilder

    builder = MessageSetBuilder(magic=2)
    for i, value in enumerate(values):
        builder.append(value, timestamp=timestamps[i] if timestamps else int(time.time() * 1000))
    body = {
        "acks": acks,
        "timeout_ms": timeout_ms,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": builder.build()}]}
        ],
    }
    answer = call(broker, ApiKey.PRODUCE, 9, body, timeout=timeout_ms / 1000 + 10)
    return answer.responses[0].partition_responses[0]


def elect_leaders(cluster, partitions: list[tuple[str, int]] | None, election_type: int = 0):
    """ElectLeaders v1 to the controller: {(topic, partition): error code}."""
    body = {
        "election_type": election_type,
        "topic_partitions": None
        if partitions is None
        else [{"topic": t, "partitions": [p]} for t, p in partitions],
        "timeout_ms": 10000,
    }
    answer = call(cluster.broker(cluster.controller()), ApiKey.ELECT_LEADERS, 1, body)
    assert answer.error_code == 0
    return {
        (r.topic, p.partition_id): p.error_code
        for r in answer.replica_election_results
        for p in r.partition_result
    }


def reassign(cluster, moves: dict[tuple[str, int], list[int] | None]):
    """AlterPartitionReassignments v0 to the controller: {(topic, partition): error code}."""
    topics: dict[str, list] = {}
    for (t, p), replicas in moves.items():
        topics.setdefault(t, []).append({"partition_index": p, "replicas": replicas})
    body = {
        "timeout_ms": 10000,
        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
    }
    answer = call(
        cluster.broker(cluster.controller()), ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, body
    )
    assert answer.error_code == 0
    return {
        (r.name, p.partition_index): p.error_code for r in answer.responses for p in r.partitions
    }


def list_reassignments(cluster):
    body = {"timeout_ms": 10000, "topics": None}
    answer = call(
        cluster.broker(cluster.controller()), ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, body
    )
    assert answer.error_code == 0
    return {
        (t.name, p.partition_index): (
            list(p.replicas),
            list(p.adding_replicas),
            list(p.removing_replicas),
        )
        for t in answer.topics
        for p in t.partitions
    }
