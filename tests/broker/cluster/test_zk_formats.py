"""The ZooKeeper documents in Kafka's formats: what Kafka 0.10.1 / 3.9 brokers write parses,
and what chronolog writes reads back."""

from __future__ import annotations

import json

import pytest

from broker.cluster.zk import (
    BrokerInfo,
    Endpoint,
    LeaderIsr,
    TopicAssignment,
    ZkDataError,
    config_change_json,
    parse_config_change,
    parse_controller,
    parse_entity_config,
    parse_isr_change,
    split_connect,
    topic_config_json,
)


def test_kafka_broker_registrations_parse():
    v3 = (
        b'{"jmx_port":-1,"timestamp":"1477424522339","endpoints":["PLAINTEXT://h1:9092"],'
        b'"host":"h1","version":3,"port":9092,"rack":"r1"}'
    )
    plaintext = (Endpoint("PLAINTEXT", "PLAINTEXT", "h1", 9092),)
    assert BrokerInfo.from_json(1, v3, 77) == BrokerInfo(1, "h1", 9092, "r1", 77, plaintext)
    # Kafka 3.x with only named listeners: host null, port -1, endpoints carry the address
    v5 = (
        b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},"endpoints":'
        b'["PLAINTEXT://[::1]:9093"],"jmx_port":-1,"features":{},"host":null,'
        b'"timestamp":"1","port":-1,"version":5}'
    )
    v5_endpoint = Endpoint("PLAINTEXT", "PLAINTEXT", "::1", 9093)
    assert BrokerInfo.from_json(2, v5, 1) == BrokerInfo(2, "::1", 9093, None, 1, (v5_endpoint,))
    mine = BrokerInfo(3, "127.0.0.1", 9094, "r2")
    doc = json.loads(mine.to_json())
    assert doc["endpoints"] == ["PLAINTEXT://127.0.0.1:9094"] and doc["rack"] == "r2"
    assert BrokerInfo.from_json(3, mine.to_json(), 5) == BrokerInfo(
        3, "127.0.0.1", 9094, "r2", 5, (Endpoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9094),)
    )
    # every listener registered, as Kafka registers them: a SASL client is sent to the SASL one
    listeners = (
        Endpoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9094),
        Endpoint("CLIENTS", "SASL_SSL", "broker3.example", 9096),
    )
    both = BrokerInfo(3, "127.0.0.1", 9094, None, -1, listeners)
    doc = json.loads(both.to_json())
    assert doc["endpoints"] == ["PLAINTEXT://127.0.0.1:9094", "CLIENTS://broker3.example:9096"]
    assert doc["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT",
                                                     "CLIENTS": "SASL_SSL"}  # fmt: skip
    assert BrokerInfo.from_json(3, both.to_json(), 5).listeners == listeners
    assert both.address("CLIENTS") == ("broker3.example", 9096)
    assert both.address("OTHER") is None
    with pytest.raises(ZkDataError):
        BrokerInfo.from_json(4, b'{"version":4}', 1)
    with pytest.raises(ZkDataError):
        BrokerInfo.from_json(4, b"not json", 1)


def test_partition_state_round_trip_and_kafka_text():
    kafka = b'{"controller_epoch":3,"leader":2,"version":1,"leader_epoch":7,"isr":[2,1]}'
    state = LeaderIsr.from_json("/p", kafka, 12)
    assert state == LeaderIsr(2, 7, (2, 1), 3, 12)
    assert json.loads(state.to_json()) == json.loads(kafka)
    with pytest.raises(ZkDataError):
        LeaderIsr.from_json("/p", b'{"leader":1}', 0)


def test_topic_assignment_versions():
    v1 = b'{"version":1,"partitions":{"1":[2,3],"0":[1,2]}}'
    topic = TopicAssignment.from_json("t", v1)
    assert topic.partitions == {0: (1, 2), 1: (2, 3)} and topic.topic_id is None
    v3 = TopicAssignment("t", "AAAAAAAAAAAAAAAAAAAAAQ", {0: (1, 2)}, {0: (3,)}, {0: (1,)})
    doc = json.loads(v3.to_json())
    assert doc == {
        "version": 3,
        "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ",
        "partitions": {"0": [1, 2]},
        "adding_replicas": {"0": [3]},
        "removing_replicas": {"0": [1]},
    }
    assert TopicAssignment.from_json("t", v3.to_json()) == v3


def test_small_documents():
    assert parse_controller(b'{"version":1,"brokerid":4,"timestamp":"1"}') == 4
    assert parse_controller(b"2") == 2  # Kafka 0.8's plain id
    path = "/isr_change_notification/isr_change_0000000001"
    assert parse_isr_change(path, b'{"version":1,"partitions":[{"topic":"a","partition":3}]}') == [
        ("a", 3)
    ]
    assert split_connect("a:1,b:2/kafka/x") == ("a:1,b:2", "/kafka/x")
    assert split_connect("a:1") == ("a:1", "")


def test_config_documents_as_kafka_writes_them():
    # AdminZkClient.changeTopicConfig / changeBrokerConfig: the entity's config, then a
    # version 2 notification; Kafka before 2.0 wrote version 1 notifications
    path = "/config/changes/config_change_0000000007"
    assert parse_config_change(path, b'{"version":2,"entity_path":"topics/orders"}') == (
        "topics",
        "orders",
    )
    assert parse_config_change(path, b'{"version":2,"entity_path":"brokers/<default>"}') == (
        "brokers",
        "<default>",
    )
    old = b'{"version":1,"entity_type":"topics","entity_name":"orders"}'
    assert parse_config_change(path, old) == ("topics", "orders")
    assert json.loads(config_change_json("brokers/3")) == {"version": 2, "entity_path": "brokers/3"}
    for bad in (b'{"version":2,"entity_path":"topics"}', b'{"version":2}', b"[]"):
        with pytest.raises(ZkDataError):
            parse_config_change(path, bad)
    kafka = b'{"version":1,"config":{"retention.ms":"1000","cleanup.policy":"compact"}}'
    config = parse_entity_config("/config/topics/orders", kafka)
    assert config == {"retention.ms": "1000", "cleanup.policy": "compact"}
    assert json.loads(topic_config_json(config)) == json.loads(kafka)
    with pytest.raises(ZkDataError, match="/config/brokers/1"):
        parse_entity_config("/config/brokers/1", b'{"version":1}')
