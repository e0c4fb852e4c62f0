"""Topic registry persistence, meta.properties, and the LogAppendTime clock rule."""

import json
import os
import uuid

import pytest

from broker.config import BrokerConfig, ConfigError
from broker.context import PartitionState
from broker.cluster_meta import load_or_create_meta
from broker.errors import StartupError
from broker.topics import TopicRegistry
from protocol.records import Codec, TimestampType


def make_config(tmp_path, **props) -> BrokerConfig:
    pairs = [
        ("log.dirs", str(tmp_path)),
        *((k.replace("_", "."), str(v)) for k, v in props.items()),
    ]
    return BrokerConfig.from_properties(pairs)


def test_registry_round_trip_and_derived_settings(tmp_path):
    config = make_config(tmp_path, log_message_timestamp_type="LogAppendTime")
    reg = TopicRegistry(config)
    reg.put(reg.make_topic("a", 3, {"retention.ms": "5", "compression.type": "gzip"}))
    reg.put(
        reg.make_topic(
            "b",
            1,
            {
                "message.timestamp.type": "CreateTime",
                "message.format.version": "0.9.0",
                "cleanup.policy": "compact",
            },
        )
    )
    reg.save(reg.snapshot())
    assert not os.path.exists(tmp_path / "chronolog-topics.json.tmp")

    again = TopicRegistry(config)
    again.load()
    a, b = again.get("a"), again.get("b")
    assert (a.partitions, dict(a.overrides)) == (
        3,
        {"retention.ms": "5", "compression.type": "gzip"},
    )
    assert a.log_config.retention_ms == 5
    assert a.settings.timestamp_type == TimestampType.LOG_APPEND_TIME  # broker default
    assert a.settings.target_codec == Codec.GZIP and a.settings.magic == 2  # Kafka 3.9 default
    assert b.settings.timestamp_type == TimestampType.CREATE_TIME
    assert b.settings.magic == 0 and b.settings.compacted and b.settings.target_codec is None
    with pytest.raises(ConfigError):
        reg.make_topic("c", 1, {"segment.bytes": "-1"})


def test_corrupt_registry_is_a_startup_error(tmp_path):
    (tmp_path / "chronolog-topics.json").write_text("{not json")
    with pytest.raises(StartupError, match="chronolog-topics.json"):
        TopicRegistry(make_config(tmp_path)).load()
    (tmp_path / "chronolog-topics.json").write_text(
        json.dumps({"topics": {"x": {"partitions": 1, "configs": {"retention.ms": "soon"}}}})
    )
    with pytest.raises(StartupError, match="retention.ms"):
        TopicRegistry(make_config(tmp_path)).load()


def test_cluster_id_is_generated_once_and_broker_id_checked(tmp_path):
    config = make_config(tmp_path, broker_id=4)
    first = load_or_create_meta(config)
    assert load_or_create_meta(config) == first
    text = (tmp_path / "meta.properties").read_text()
    assert "broker.id=4" in text and f"cluster.id={first}" in text
    with pytest.raises(StartupError, match="broker.id 4"):
        load_or_create_meta(make_config(tmp_path, broker_id=5))


def test_log_append_time_never_goes_backwards():
    state = PartitionState()
    assert state.next_append_time(1000) == 1000
    assert state.next_append_time(900) == 1000  # wall clock stepped back
    assert state.next_append_time(1200) == 1200


def test_topic_ids_are_kept_and_given_to_old_entries(tmp_path):
    """KIP-516: a topic's id survives restarts; a registry written before ids existed gets
    one id per topic at load, flagged so the broker saves it."""
    from broker.topics import topic_id_from_string, topic_id_string

    config = BrokerConfig.from_properties([("log.dirs", str(tmp_path))])
    registry = TopicRegistry(config)
    registry.put(registry.make_topic("a", 2, {}))
    registry.save(registry.snapshot())
    first = registry.get("a").topic_id
    assert registry.by_id(first).name == "a" and registry.by_id(uuid.uuid4()) is None

    again = TopicRegistry(config)
    again.load()
    assert again.get("a").topic_id == first and not again.ids_assigned

    doc = json.loads((tmp_path / "chronolog-topics.json").read_text())
    del doc["topics"]["a"]["topic_id"]
    (tmp_path / "chronolog-topics.json").write_text(json.dumps(doc))
    old = TopicRegistry(config)
    old.load()
    assert old.ids_assigned and old.get("a").topic_id not in (first, None)
    assert topic_id_from_string(topic_id_string(first)) == first
    assert not topic_id_string(old.get("a").topic_id).startswith("-")
