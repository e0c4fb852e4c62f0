"""Fuzzing the admin handlers with well-formed but arbitrary requests, against a real broker
context (files in a temporary dir): every new request kind at every version it is served, with
bodies generated from its schema (and names mostly of topics and configs that exist, so the
deep paths run). Whatever the request, the handler answers with a body that encodes at that
version, never an exception; and a config change answered NONE is what DescribeConfigs then
reports."""

from __future__ import annotations

import shutil
import tempfile

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.config import BROKER_KEYS, TOPIC_KEYS
from broker.handlers import HANDLERS
from broker.server import open_context
from protocol import SUPPORTED_VERSIONS, ApiKey
from protocol.schemas import REQUEST_SCHEMAS, encode_response_body
from tests.broker.test_server import config, request
from tests.protocol.wire_strategies import value_strategy

NEW_KINDS = [
    ApiKey.CREATE_TOPICS,
    ApiKey.DELETE_TOPICS,
    ApiKey.DELETE_RECORDS,
    ApiKey.DESCRIBE_CONFIGS,
    ApiKey.ALTER_CONFIGS,
    ApiKey.INCREMENTAL_ALTER_CONFIGS,
    ApiKey.CREATE_PARTITIONS,
    ApiKey.DESCRIBE_CLUSTER,
    ApiKey.DESCRIBE_LOG_DIRS,
]
CASES = [
    (k, v) for k in NEW_KINDS for v in range(SUPPORTED_VERSIONS[k][0], SUPPORTED_VERSIONS[k][1] + 1)
]
TOPICS = ["t", "u", "__consumer_offsets"]
NAMES = st.sampled_from(TOPICS) | st.text(max_size=6)
CONFIG_NAMES = st.sampled_from(sorted(TOPIC_KEYS) + sorted(BROKER_KEYS)) | st.text(max_size=8)
VALUES = (
    st.none()
    | st.sampled_from(["-1", "0", "1", "1000", "delete", "compact", "x"])
    | st.text(max_size=6)
)
SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _steer(value, data):
    """Replace most names in a generated body by existing topics and real config names."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in ("name", "resource_name", "topic") and isinstance(item, str):
                out[key] = data.draw(
                    NAMES if key != "name" or "config" not in value else CONFIG_NAMES
                )
            elif key == "resource_type":
                out[key] = data.draw(st.sampled_from([2, 4, 8, 0]) | st.integers(-128, 127))
            elif key == "config_operation":
                out[key] = data.draw(st.integers(0, 3) | st.integers(-128, 127))
            else:
                out[key] = _steer(item, data)
        return out
    if isinstance(value, list):
        return [_steer(item, data) for item in value]
    return value


async def _answer(api: ApiKey, version: int, body: dict) -> None:
    directory = tempfile.mkdtemp(prefix="admin-fuzz-")
    try:
        ctx = await open_context(config(directory))
        await ctx.create_topic("t", 2)
        await ctx.create_topic("u", 1, {"cleanup.policy": "compact"})
        answer = await HANDLERS[api](ctx, request(api, version, body))
        encode_response_body(api, version, answer)
        await trio.to_thread.run_sync(ctx.log_manager.shutdown)
    finally:
        shutil.rmtree(directory)


def test_cases_cover_every_new_version():
    assert len(CASES) == 8 + 7 + 3 + 5 + 3 + 2 + 4 + 3 + 5  # DescribeCluster v0-v2


@SETTINGS
@given(data=st.data())
def test_admin_handlers_answer_any_request(data):
    api, version = data.draw(st.sampled_from(CASES))
    body = data.draw(value_strategy(REQUEST_SCHEMAS[api, version], max_items=3))
    if data.draw(st.booleans()):
        body = _steer(body, data)
    trio.run(_answer, api, version, body)


async def _set_then_describe(kind: int, name: str, key: str, value: str) -> None:
    directory = tempfile.mkdtemp(prefix="admin-fuzz-")
    try:
        ctx = await open_context(config(directory))
        await ctx.create_topic("t", 1)
        alter = {
            "resources": [
                {
                    "resource_type": kind,
                    "resource_name": name,
                    "configs": [{"name": key, "config_operation": 0, "value": value}],
                }
            ],
            "validate_only": False,
        }
        api = ApiKey.INCREMENTAL_ALTER_CONFIGS
        (result,) = (await HANDLERS[api](ctx, request(api, 1, alter)))["responses"]
        describe = {
            "resources": [
                {"resource_type": kind, "resource_name": name, "configuration_keys": [key]}
            ],
            "include_synonyms": True,
        }
        api = ApiKey.DESCRIBE_CONFIGS
        (described,) = (await HANDLERS[api](ctx, request(api, 4, describe)))["results"]
        entries = {e["name"]: e for e in described["configs"]}
        if result["error_code"] == 0:
            assert entries[key]["config_source"] == (1 if kind == 2 else 2)
            assert entries[key]["synonyms"][0]["source"] == (1 if kind == 2 else 2)
        else:
            assert result["error_code"] in (40, 42) and result["error_message"]
            assert key not in entries or entries[key]["config_source"] not in (1, 2)
        await trio.to_thread.run_sync(ctx.log_manager.shutdown)
    finally:
        shutil.rmtree(directory)


@SETTINGS
@given(
    target=st.sampled_from([(2, "t", sorted(TOPIC_KEYS)), (4, "0", sorted(BROKER_KEYS))]),
    data=st.data(),
)
def test_a_change_answered_none_is_what_describe_reports(target, data):
    kind, name, keys = target
    key = data.draw(st.sampled_from(keys))
    value = data.draw(
        st.sampled_from(["-1", "0", "1", "100000", "delete,compact", "CreateTime", "gzip"])
        | st.integers(-(2**63), 2**63).map(str)
        | st.text(max_size=5)
    )
    trio.run(_set_then_describe, kind, name, key, value)
