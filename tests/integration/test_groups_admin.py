"""The group apis through real admin clients: kafka-python's KafkaAdminClient (list_groups,
describe_groups, list_group_offsets with and without partitions and for several groups at
once, delete_groups), confluent-kafka's AdminClient (list/describe consumer groups,
list_consumer_group_offsets with and without partitions, delete_consumer_groups) and KafkaJS's
admin (fetchOffsets without topics, listGroups, describeGroups, deleteGroups)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import GroupIdNotFoundError, NonEmptyGroupError
from kafka.structs import OffsetAndMetadata

from tests.integration.test_groups import (
    WAIT_S,
    PollingConsumer,
    bounded,
    create_topic,
    kafka_consumer,
    partitions,
    unique,
)
from tests.waiting import wait_for

JS_DIR = Path(__file__).resolve().parent / "js"


def commit(bootstrap: str, group: str, offsets: dict[TopicPartition, int]) -> None:
    """Commit offsets for a group without members (generation -1)."""
    consumer = kafka_consumer(bootstrap, group)
    try:
        consumer.commit({tp: OffsetAndMetadata(o, f"m{o}", -1) for tp, o in offsets.items()})
    finally:
        bounded(lambda: consumer.close(), what="KafkaConsumer.close()")


@pytest.fixture
def groups(broker):
    """Two topics; an empty group with offsets on both, another with offsets on one, and a
    group with a live member."""
    t1, t2 = unique("adm"), unique("adm")
    create_topic(broker.bootstrap, t1, 3)
    create_topic(broker.bootstrap, t2, 1)
    offsets = {"a": unique("ga"), "b": unique("gb"), "busy": unique("gbusy")}
    commit(
        broker.bootstrap,
        offsets["a"],
        {TopicPartition(t1, 0): 5, TopicPartition(t1, 2): 7, TopicPartition(t2, 0): 9},
    )
    commit(broker.bootstrap, offsets["b"], {TopicPartition(t1, 1): 3})
    member = PollingConsumer(broker.bootstrap, offsets["busy"], t1)
    member.start()
    try:
        wait_for(
            lambda: member.assignment == partitions(t1, 3),
            "the busy group's member",
            timeout=WAIT_S,
        )
        yield t1, t2, offsets
    finally:
        member.stop()


def test_kafka_python_admin(broker, groups):
    t1, t2, g = groups
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    try:
        listed = {x["group_id"]: x for x in admin.list_groups()}
        assert {g["a"], g["b"], g["busy"]} <= set(listed)
        assert listed[g["busy"]]["protocol_type"] == "consumer"
        assert listed[g["a"]]["protocol_type"] == ""
        stable = {x["group_id"] for x in admin.list_groups(states_filter=["Stable"])}
        assert g["busy"] in stable and g["a"] not in stable
        busy = admin.describe_groups([g["busy"]])[g["busy"]]
        assert busy["group_state"] == "Stable" and len(busy["members"]) == 1
        # without partitions: everything the group committed (OffsetFetch with null topics)
        everything = admin.list_group_offsets(g["a"])[g["a"]]
        assert {tp: (o.offset, o.metadata) for tp, o in everything.items()} == {
            TopicPartition(t1, 0): (5, "m5"),
            TopicPartition(t1, 2): (7, "m7"),
            TopicPartition(t2, 0): (9, "m9"),
        }
        some = admin.list_group_offsets({g["a"]: [TopicPartition(t1, 2), TopicPartition(t1, 1)]})
        assert {tp: o.offset for tp, o in some[g["a"]].items()} == {
            TopicPartition(t1, 2): 7,
            TopicPartition(t1, 1): -1,
        }
        # several groups in one OffsetFetch (v8+)
        both = admin.list_group_offsets([g["a"], g["b"]])
        assert {tp: o.offset for tp, o in both[g["b"]].items()} == {TopicPartition(t1, 1): 3}
        assert len(both[g["a"]]) == 3
        assert admin.delete_groups([g["busy"], g["a"]]) == {
            g["busy"]: NonEmptyGroupError.__name__,
            g["a"]: "OK",
        }
        assert admin.delete_groups([g["a"]]) == {g["a"]: GroupIdNotFoundError.__name__}
        assert g["a"] not in {x["group_id"] for x in admin.list_groups()}
        assert admin.list_group_offsets(g["a"])[g["a"]] == {}
        assert len(admin.list_group_offsets(g["b"])[g["b"]]) == 1
    finally:
        admin.close()


def test_confluent_admin(broker, groups):
    from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions
    from confluent_kafka import TopicPartition as CTP
    from confluent_kafka.admin import AdminClient

    t1, t2, g = groups
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    listed = admin.list_consumer_groups(request_timeout=15).result(timeout=30)
    states = {x.group_id: x.state for x in listed.valid}
    assert states[g["busy"]] == ConsumerGroupState.STABLE
    assert states[g["a"]] == ConsumerGroupState.EMPTY
    only_stable = admin.list_consumer_groups(
        request_timeout=15, states={ConsumerGroupState.STABLE}
    ).result(timeout=30)
    assert g["busy"] in {x.group_id for x in only_stable.valid}
    assert g["a"] not in {x.group_id for x in only_stable.valid}
    (d,) = admin.describe_consumer_groups([g["busy"]], request_timeout=15).values()
    described = d.result(timeout=30)
    assert described.state == ConsumerGroupState.STABLE
    assert described.partition_assignor == "range"
    (member,) = described.members
    assert sorted(tp.partition for tp in member.assignment.topic_partitions) == [0, 1, 2]
    # without partitions: every committed one. (Not .metadata: confluent-kafka 2.16's binding
    # reads it as a NUL-terminated string, past the end of the bytes librdkafka holds.)
    (f,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g["a"])]).values()
    got = f.result(timeout=30)
    assert sorted((tp.topic, tp.partition, tp.offset) for tp in got.topic_partitions) == sorted(
        [(t1, 0, 5), (t1, 2, 7), (t2, 0, 9)]
    )
    (f,) = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(g["a"], [CTP(t1, 2), CTP(t1, 1)])]
    ).values()
    got = f.result(timeout=30)
    assert sorted((tp.partition, tp.offset) for tp in got.topic_partitions) == [(1, -1001), (2, 7)]
    futures = admin.delete_consumer_groups([g["a"], g["busy"]], request_timeout=15)
    assert futures[g["a"]].result(timeout=30) is None
    with pytest.raises(Exception, match="NON_EMPTY_GROUP|not empty"):
        futures[g["busy"]].result(timeout=30)
    left = admin.list_consumer_groups(request_timeout=15).result(timeout=30)
    assert g["a"] not in {x.group_id for x in left.valid}


@pytest.mark.skipif(
    shutil.which("node") is None or not (JS_DIR / "node_modules" / "kafkajs").is_dir(),
    reason="node or tests/integration/js/node_modules missing: run `make install-test`",
)
def test_kafkajs_admin(broker, groups):
    t1, t2, g = groups
    done = subprocess.run(
        ["node", str(JS_DIR / "kafkajs_groups.js"), broker.bootstrap, g["a"], g["b"], g["busy"]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    offsets = {
        (t["topic"], p["partition"]): (p["offset"], p["metadata"])
        for t in seen["offsets"]
        for p in t["partitions"]
    }
    assert offsets == {(t1, 0): ("5", "m5"), (t1, 2): ("7", "m7"), (t2, 0): ("9", "m9")}
    listed = {x["groupId"]: x["protocolType"] for x in seen["listed"]["groups"]}
    assert listed[g["busy"]] == "consumer" and g["a"] in listed
    described = {x["groupId"]: x for x in seen["described"]["groups"]}
    assert described[g["busy"]]["state"] == "Stable"
    assert described[g["a"]]["state"] == "Empty"
    assert seen["deleted"] == [{"groupId": g["b"], "errorCode": 0}]
    assert seen["busy"]["error"] == "KafkaJSDeleteGroupsError"
    assert seen["busy"]["groups"][0]["error"] == "NON_EMPTY_GROUP"
    assert seen["afterDelete"] == []
