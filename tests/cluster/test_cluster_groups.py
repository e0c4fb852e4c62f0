"""__consumer_offsets replicated (offsets.topic.replication.factor) and the group coordinator
following its leader: committed offsets survive the coordinator's broker being killed."""

from __future__ import annotations

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaTimeoutError
from kafka.structs import OffsetAndMetadata

from tests.waiting import wait_for


def _coordinator_leader(cluster):
    state = cluster.state("__consumer_offsets", 0)
    return -1 if state is None else state["leader"]


def test_committed_offsets_move_with_the_offsets_partition(cluster_factory):
    cluster = cluster_factory(3, zookeeper_session_timeout_ms=3000)
    assert cluster.create_topic("t", 1, 3) == 0
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    for i in range(10):
        producer.send("t", b"m%d" % i).get(timeout=30)
    producer.close()
    tp = TopicPartition("t", 0)
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap, group_id="g", enable_auto_commit=False
    )
    consumer.assign([tp])

    def commit() -> bool:
        # the first FindCoordinator creates __consumer_offsets (RF 3) and elects its leader:
        # on a loaded machine that can outlast one commit's timeout, so retry until it is there
        try:
            consumer.commit({tp: OffsetAndMetadata(7, "", -1)})
            return True
        except KafkaTimeoutError:
            return False

    wait_for(commit, "the first commit", timeout=120)
    consumer.close()
    doc = cluster.zk_json("/brokers/topics/__consumer_offsets")
    assert len(doc["partitions"]["0"]) == 3  # offsets.topic.replication.factor
    old = _coordinator_leader(cluster)
    assert old in (1, 2, 3)
    cluster.broker(old).kill()
    wait_for(lambda: _coordinator_leader(cluster) not in (-1, old), "a new coordinator", timeout=30)
    alive = ",".join(b.bootstrap for b in cluster.brokers if b.running())

    def committed():
        c = KafkaConsumer(bootstrap_servers=alive, group_id="g", enable_auto_commit=False)
        try:
            return c.committed(tp)
        finally:
            c.close()

    wait_for(lambda: committed() == 7, "the commit on the new coordinator", timeout=60)
