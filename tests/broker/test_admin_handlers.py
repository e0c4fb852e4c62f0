"""Admin handlers against a real broker context (files in tmp_path, no sockets): what they
answer for a log dir gone offline (KIP-112), and the dynamic config file's persistence."""

from __future__ import annotations

import errno
import json

import pytest

from broker.admin.dynamic import DYNAMIC_CONFIG_FILE
from broker.errors import StartupError
from broker.handlers import HANDLERS
from broker.server import open_context
from protocol import ApiKey
from protocol.errors import ErrorCode as E
from tests.broker.test_server import config, request


async def call(ctx, api: ApiKey, version: int, body: dict) -> dict:
    return await HANDLERS[api](ctx, request(api, version, body))


async def test_offline_log_dir_in_describe_log_dirs_and_delete_records(tmp_path):
    dirs = f"{tmp_path / 'a'},{tmp_path / 'b'}"
    ctx = await open_context(config(tmp_path, log_dirs=dirs))
    await ctx.create_topic("t", 2)
    bad = ctx.log_manager.log_dir_of("t", 1)
    await ctx.storage_failed("t", 1, OSError(errno.EIO, "Input/output error"))
    assert list(ctx.log_manager.offline_dirs) == [bad]
    got = await call(ctx, ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})
    by_dir = {r["log_dir"]: r for r in got["results"]}
    assert by_dir[bad]["error_code"] == E.KAFKA_STORAGE_ERROR and by_dir[bad]["topics"] == []
    (good,) = set(by_dir) - {bad}
    assert by_dir[good]["error_code"] == 0
    assert [
        (t["name"], [p["partition_index"] for p in t["partitions"]]) for t in by_dir[good]["topics"]
    ] == [("t", [0])]
    body = {
        "topics": [{"name": "t", "partitions": [{"partition_index": 1, "offset": 0}]}],
        "timeout_ms": 1000,
    }
    deleted = await call(ctx, ApiKey.DELETE_RECORDS, 2, body)
    assert deleted["topics"][0]["partitions"][0]["error_code"] == E.KAFKA_STORAGE_ERROR
    ctx.log_manager.shutdown()


async def test_dynamic_configs_are_written_atomically_and_reloaded(tmp_path):
    ctx = await open_context(config(tmp_path))
    body = {
        "resources": [
            {
                "resource_type": 4,
                "resource_name": "",
                "configs": [{"name": "log.retention.ms", "config_operation": 0, "value": "5000"}],
            },
        ],
        "validate_only": False,
    }
    answer = await call(ctx, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body)
    assert answer["responses"][0]["error_code"] == 0
    path = tmp_path / DYNAMIC_CONFIG_FILE
    assert json.loads(path.read_text())["cluster_default"] == {"log.retention.ms": "5000"}
    assert not (tmp_path / (DYNAMIC_CONFIG_FILE + ".tmp")).exists()
    assert ctx.config.topic_defaults["retention.ms"] == 5000
    ctx.log_manager.shutdown()
    again = await open_context(config(tmp_path))
    assert again.config.topic_defaults["retention.ms"] == 5000
    assert again.dynamic_configs.cluster_default == {"log.retention.ms": "5000"}
    again.log_manager.shutdown()
    path.write_text('{"cluster_default": {"broker.id": "4"}}')
    with pytest.raises(StartupError, match=f"{DYNAMIC_CONFIG_FILE}.*broker.id"):
        await open_context(config(tmp_path))


async def test_requests_for_more_than_ten_thousand_partitions_are_refused(tmp_path):
    """Kafka 4.1's controller refuses a CreateTopics of more than 10,000 partitions with
    POLICY_VIOLATION and this text (Kafka answers CreatePartitions past it UNKNOWN_SERVER_ERROR
    after creating some: chronolog refuses it as CreateTopics, creating nothing)."""
    ctx = await open_context(config(tmp_path))
    await ctx.create_topic("t", 2)
    text = "Excessively large number of partitions per request."
    body = {
        "topics": [{"name": "t", "count": 10_003, "assignments": None}],
        "timeout_ms": 1000,
        "validate_only": False,
    }
    got = await call(ctx, ApiKey.CREATE_PARTITIONS, 3, body)
    assert (got["results"][0]["error_code"], got["results"][0]["error_message"]) == (
        E.POLICY_VIOLATION,
        text,
    )
    assert ctx.topics.get("t").partitions == 2 and ctx.get_log("t", 2) is None
    body["topics"][0]["count"] = 10_002  # 10,000 more: allowed, as on Kafka
    got = await call(ctx, ApiKey.CREATE_PARTITIONS, 3, {**body, "validate_only": True})
    assert got["results"][0]["error_code"] == 0
    topic = {"name": "big", "num_partitions": 10_001, "replication_factor": 1}
    body = {"topics": [{**topic, "assignments": [], "configs": []}], "timeout_ms": 1000}
    got = await call(ctx, ApiKey.CREATE_TOPICS, 5, {**body, "validate_only": False})
    assert (got["topics"][0]["error_code"], got["topics"][0]["error_message"]) == (
        E.POLICY_VIOLATION,
        text,
    )
    assert "big" not in ctx.topics
    ctx.log_manager.shutdown()
