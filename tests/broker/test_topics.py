"""Topic registry persistence, meta.properties, and the LogAppendTime clock rule."""
import json
import os

import pytest

from broker.config import BrokerConfig, ConfigError
from broker.context import PartitionState
from broker.topics import StartupError, TopicRegistry, load_or_create_meta
from protocol.records import Codec, TimestampType


def make_config(tmp_path, **props) -> BrokerConfig:
    pairs = [("log.dirs", str(tmp_path)), *((k.replace("_", "."), str(v)) for k, v in props.items())]
    return BrokerConfig.from_properties(pairs)


def test_registry_round_trip_and_derived_settings(tmp_path):
    config = make_config(tmp_path, log_message_timestamp_type="LogAppendTime")
    reg = TopicRegistry(config)
    reg.put(reg.make_topic("a", 3, {"retention.ms": "5", "compression.type": "gzip"}))
    reg.put(reg.make_topic("b", 1, {"message.timestamp.type": "CreateTime",
                                    "message.format.version": "0.9.0",
                                    "cleanup.policy": "compact"}))
    reg.save(reg.snapshot())
    assert not os.path.exists(tmp_path / "chronolog-topics.json.tmp")

    again = TopicRegistry(config)
    again.load()
    a, b = again.get("a"), again.get("b")
    assert (a.partitions, dict(a.overrides)) == (3, {"retention.ms": "5", "compression.type": "gzip"})
    assert a.log_config.retention_ms == 5
    assert a.settings.timestamp_type == TimestampType.LOG_APPEND_TIME  # broker default
    assert a.settings.target_codec == Codec.GZIP and a.settings.magic == 1
    assert b.settings.timestamp_type == TimestampType.CREATE_TIME
    assert b.settings.magic == 0 and b.settings.compacted and b.settings.target_codec is None
    with pytest.raises(ConfigError):
        reg.make_topic("c", 1, {"segment.bytes": "-1"})


def test_corrupt_registry_is_a_startup_error(tmp_path):
    (tmp_path / "chronolog-topics.json").write_text("{not json")
    with pytest.raises(StartupError, match="chronolog-topics.json"):
        TopicRegistry(make_config(tmp_path)).load()
    (tmp_path / "chronolog-topics.json").write_text(json.dumps(
        {"topics": {"x": {"partitions": 1, "configs": {"retention.ms": "soon"}}}}))
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
