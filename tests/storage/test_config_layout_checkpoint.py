"""LogConfig, layout names and topic rules, checkpoint and clean-shutdown files."""

from __future__ import annotations

import os

import pytest

from storage import LogConfig
from storage.checkpoint import (
    CheckpointError,
    has_clean_shutdown_marker,
    read_checkpoint,
    remove_clean_shutdown_marker,
    write_checkpoint,
    write_clean_shutdown_marker,
)
from storage.errors import InvalidConfigError, InvalidTopicError
from storage.layout import (
    parse_partition_dir,
    parse_segment_file,
    segment_file_name,
    validate_topic,
)


def test_log_config_defaults_are_kafkas():
    c = LogConfig()
    assert (c.segment_bytes, c.segment_ms, c.segment_jitter_ms) == (1073741824, 604800000, 0)
    assert (c.retention_ms, c.retention_bytes) == (604800000, -1)
    assert (c.index_interval_bytes, c.segment_index_bytes) == (4096, 10485760)
    assert c.max_message_bytes == 1000012
    assert c.flush_messages == c.flush_ms == 2**63 - 1
    assert c.file_delete_delay_ms == 60000


def test_log_config_overrides_take_kafka_names():
    c = LogConfig().with_overrides(
        {"segment.bytes": "1024", "retention_ms": 5, "flush.messages": "1"}
    )
    assert (c.segment_bytes, c.retention_ms, c.flush_messages) == (1024, 5, 1)
    with pytest.raises(InvalidConfigError, match="unknown log config 'compression.type'"):
        LogConfig().with_overrides({"compression.type": "gzip"})
    with pytest.raises(InvalidConfigError, match="not an integer"):
        LogConfig().with_overrides({"segment.ms": "soon"})


def test_log_config_compaction_settings():
    c = LogConfig()
    assert (c.cleanup_policy, c.min_cleanable_dirty_ratio, c.delete_retention_ms) == (
        "delete",
        0.5,
        86400000,
    )
    assert (c.min_compaction_lag_ms, c.max_compaction_lag_ms) == (0, 2**63 - 1)
    assert c.delete and not c.compact and c.max_segment_ms == c.segment_ms
    c = c.with_overrides({"cleanup.policy": "compact, delete", "min.cleanable.dirty.ratio": "0.25"})
    assert (c.cleanup_policy, c.min_cleanable_dirty_ratio) == ("compact,delete", 0.25)
    assert c.compact and c.delete
    # KIP-354: a compacted log's active segment rolls by max.compaction.lag.ms at the latest
    c = c.with_overrides({"max.compaction.lag.ms": 1000})
    assert c.max_segment_ms == 1000
    assert c.with_overrides({"cleanup.policy": "delete"}).max_segment_ms == c.segment_ms
    for bad in (
        {"cleanup.policy": "shred"},
        {"min.cleanable.dirty.ratio": "1.5"},
        {"min.cleanable.dirty.ratio": "half"},
        {"min.compaction.lag.ms": 2000},  # above max.compaction.lag.ms
        {"max.compaction.lag.ms": 0},
    ):
        with pytest.raises(InvalidConfigError):
            c.with_overrides(bad)


@pytest.mark.parametrize(
    "field,value",
    [
        ("segment_bytes", 10),
        ("segment_index_bytes", 8),
        ("segment_bytes", 2**31),
        ("flush_messages", 0),
    ],
)
def test_log_config_refuses_out_of_range(field, value):
    with pytest.raises(InvalidConfigError, match=field):
        LogConfig(**{field: value})


@pytest.mark.parametrize("topic", ["a", "my.topic_name-1", "x" * 249, "__consumer_offsets"])
def test_legal_topic_names(topic):
    validate_topic(topic, 0)
    assert parse_partition_dir(f"{topic}-12") == (topic, 12)


@pytest.mark.parametrize(
    "topic,partition,message",
    [
        ("", 0, "empty"),
        (".", 0, "not allowed"),
        ("..", 0, "not allowed"),
        ("x" * 250, 0, "limit is 249"),
        ("a/b", 0, "may only contain"),
        ("é", 0, "may only contain"),
        ("a b", 0, "may only contain"),
        ("ok", -1, "non-negative"),
        ("ok", 2**31, "non-negative"),
    ],
)
def test_illegal_topic_names(topic, partition, message):
    with pytest.raises(InvalidTopicError, match=message):
        validate_topic(topic, partition)


def test_partition_dir_parsing_uses_last_dash():
    assert parse_partition_dir("my-topic-3") == ("my-topic", 3)
    assert parse_partition_dir("nodash") is None
    assert parse_partition_dir("t-x") is None
    assert parse_partition_dir("t-1.abc-delete") is None


def test_segment_names_have_20_digits():
    assert segment_file_name(42, ".log") == "00000000000000000042.log"
    assert parse_segment_file("00000000000000000042.timeindex") == (42, ".timeindex")
    assert parse_segment_file("00000000000000000042.log.deleted") is None
    assert parse_segment_file("42.log") is None


def test_checkpoint_round_trip_in_kafka_format(tmp_path):
    path = str(tmp_path / "recovery-point-offset-checkpoint")
    write_checkpoint(path, {("b", 1): 7, ("a", 0): 12345678901})
    assert open(path).read() == "0\n2\na 0 12345678901\nb 1 7\n"
    assert read_checkpoint(path) == {("a", 0): 12345678901, ("b", 1): 7}
    assert not os.path.exists(path + ".tmp")
    assert read_checkpoint(str(tmp_path / "missing")) == {}


@pytest.mark.parametrize(
    "content,message",
    [
        ("1\n0\n", "unknown version"),
        ("0\n2\na 0 1\n", "announces 2 entries"),
        ("0\n1\na zero 1\n", "bad line"),
        ("0\n", "truncated"),
        ("0\nx\n", "bad entry count"),
        ("0\n1\na 0 -5\n", "bad line"),
    ],
)
def test_malformed_checkpoint_is_refused(tmp_path, content, message):
    path = tmp_path / "cp"
    path.write_text(content)
    with pytest.raises(CheckpointError, match=message):
        read_checkpoint(str(path))


def test_clean_shutdown_marker(tmp_path):
    d = str(tmp_path)
    assert not has_clean_shutdown_marker(d)
    write_clean_shutdown_marker(d)
    assert os.path.exists(tmp_path / ".kafka_cleanshutdown")
    assert has_clean_shutdown_marker(d)
    remove_clean_shutdown_marker(d)
    remove_clean_shutdown_marker(d)
    assert not has_clean_shutdown_marker(d)
