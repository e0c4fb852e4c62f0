"""__consumer_offsets replicated (offsets.topic.replication.factor) and the group coordinator
following its leader: committed offsets survive the coordinator's broker being killed."""

from __future__ import annotations

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaTimeoutError
from kafka.structs import OffsetAndMetadata

from protocol import ApiKey
from tests.cluster.helpers import call
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


def test_list_groups_on_every_broker(cluster_factory):
    """Admin clients (librdkafka's ListConsumerGroups, Kafka's kafka-consumer-groups --list) ask
    every broker and count an error from any: brokers that do not coordinate answer no groups
    and no error, as Kafka's brokers that lead no offsets partition do (librdkafka's 0081)."""
    cluster = cluster_factory(3)
    assert cluster.create_topic("t", 1, 3) == 0
    consumer = KafkaConsumer(
        "t", bootstrap_servers=cluster.bootstrap, group_id="listed", consumer_timeout_ms=500
    )

    def assigned() -> bool:
        consumer.poll(200)
        return bool(consumer.assignment())

    wait_for(assigned, "the consumer's assignment", timeout=60)
    coordinator = _coordinator_leader(cluster)
    for broker_id in (1, 2, 3):
        for version, body in (
            (4, {"states_filter": []}),
            (5, {"states_filter": [], "types_filter": ["classic"]}),
        ):
            answer = call(cluster.broker(broker_id), ApiKey.LIST_GROUPS, version, body)
            assert answer["error_code"] == 0, (broker_id, version, answer)
            listed = [g["group_id"] for g in answer["groups"]]
            assert listed == (["listed"] if broker_id == coordinator else []), (broker_id, answer)
    consumer.close()
