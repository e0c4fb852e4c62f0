"""The generated schema table: coverage, defaults, round trips for every version Kafka 3.9
defines, typed errors, and the definitions checked against Kafka's JSON when a Kafka checkout
is at hand."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import SUPPORTED_VERSIONS, ApiKey
from protocol.errors import BodyEncodeError, MalformedFrameError
from protocol.schemas import (
    REQUEST_SCHEMAS,
    RESPONSE_SCHEMAS,
    decode_request_body,
    decode_response_body,
    encode_request_body,
    encode_response_body,
    is_flexible,
)
from protocol.schemas.codec import Body, body_class, snake_case
from protocol.schemas.definitions import MESSAGES
from tests.protocol.wire_strategies import present, value_strategy

EVERY = sorted(REQUEST_SCHEMAS)
KAFKA_GIT = os.environ.get("CHRONOLOG_KAFKA_GIT", "/work/.mirror/apache+kafka/repo")
KAFKA_JARS = Path(
    os.environ.get("CHRONOLOG_KAFKA_JARS", Path.home() / ".m2/repository/org/apache/kafka")
)


def test_every_served_version_and_api_key_has_schemas():
    for key, (lo, hi) in SUPPORTED_VERSIONS.items():
        for v in range(lo, hi + 1):
            assert (key, v) in REQUEST_SCHEMAS and (key, v) in RESPONSE_SCHEMAS
    assert {k for k, _ in EVERY} == set(ApiKey)
    assert set(REQUEST_SCHEMAS) == set(RESPONSE_SCHEMAS)
    assert repr(REQUEST_SCHEMAS[ApiKey.PRODUCE, 9]) == "<ProduceRequestV9>"


@pytest.mark.parametrize(
    "name,snake",
    [
        ("TopicData", "topic_data"),
        ("ThrottleTimeMs", "throttle_time_ms"),
        ("TopicId", "topic_id"),
        ("IsolationLevel", "isolation_level"),
        ("ZkMigrationReady", "zk_migration_ready"),
    ],
)
def test_snake_case(name, snake):
    assert snake_case(name) == snake


def test_flexible_versions_follow_the_definitions():
    assert not is_flexible(ApiKey.PRODUCE, 8) and is_flexible(ApiKey.PRODUCE, 9)
    assert not is_flexible(ApiKey.FETCH, 11) and is_flexible(ApiKey.FETCH, 12)
    assert is_flexible(ApiKey.API_VERSIONS, 3)


def test_decoded_bodies_hold_every_field_with_later_versions_defaults():
    raw = encode_request_body(
        ApiKey.FETCH, 0, {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "topics": []}
    )
    body = decode_request_body(ApiKey.FETCH, 0, raw, 0, len(raw))
    assert (
        body.max_wait_ms,
        body.max_bytes,
        body.isolation_level,
        body.session_epoch,
        body.rack_id,
        body.cluster_id,
    ) == (500, 0x7FFFFFFF, 0, -1, "", None)
    raw = encode_response_body(
        ApiKey.METADATA,
        12,
        {"topics": [{"name": "t", "topic_id": uuid.UUID(int=7), "partitions": []}]},
    )
    body = decode_response_body(ApiKey.METADATA, 12, raw, 0, len(raw))
    assert body.topics[0].topic_id == uuid.UUID(int=7) and body.topics[0].is_internal is False
    assert body.brokers == [] and body.cluster_id is None


def test_decoded_fields_are_properties_and_bodies_stay_dicts():
    """Every decoded struct reads its fields as class properties (not through __getattr__ after
    a failed lookup); it is still a Body and a dict, takes no new attributes, and a field named
    like a dict method leaves the method in place."""
    raw = encode_request_body(
        ApiKey.PRODUCE,
        9,
        {"acks": -1, "timeout_ms": 5, "topic_data": [{"name": "t", "partition_data": []}]},
    )
    body = decode_request_body(ApiKey.PRODUCE, 9, raw, 0, len(raw))
    topic = body.topic_data[0]
    for struct, name in ((body, "acks"), (body, "transactional_id"), (topic, "name")):
        assert isinstance(type(struct).__dict__.get(name), property), name
        assert getattr(struct, name) == struct[name]
        assert isinstance(struct, Body) and isinstance(struct, dict)
    assert (body.acks, body.timeout_ms, topic.name, topic.partition_data) == (-1, 5, "t", [])
    assert body == {"transactional_id": None, "acks": -1, "timeout_ms": 5, "topic_data": [topic]}
    with pytest.raises(AttributeError):
        body.not_a_field  # noqa: B018
    with pytest.raises(AttributeError):
        body.acks = 1
    with pytest.raises(AttributeError):
        body.extra = 1
    odd = body_class(("items", "count"))({"items": [1], "count": 2})
    assert (
        odd.count == 2
        and odd["items"] == [1]
        and list(odd.items()) == [("items", [1]), ("count", 2)]
    )


def test_tagged_fields_are_sent_only_when_not_default():
    plain = encode_response_body(ApiKey.API_VERSIONS, 3, {"api_keys": []})
    tagged = encode_response_body(
        ApiKey.API_VERSIONS, 3, {"api_keys": [], "zk_migration_ready": True}
    )
    assert plain.endswith(b"\x00") and len(tagged) == len(plain) + 3
    body = decode_response_body(ApiKey.API_VERSIONS, 3, tagged, 0, len(tagged))
    assert body.zk_migration_ready is True and body.finalized_features_epoch == -1


def test_unknown_tags_are_skipped():
    raw = bytearray(encode_response_body(ApiKey.API_VERSIONS, 3, {"api_keys": []}))
    raw[-1:] = b"\x01\x09\x02\xab\xcd"  # one tagged field, tag 9, two bytes
    body = decode_response_body(ApiKey.API_VERSIONS, 3, bytes(raw), 0, len(raw))
    assert body.api_keys == []


@pytest.mark.parametrize(
    "raw,why",
    [
        (b"\x00\x00", "truncated"),  # cut inside acks/timeout
        (b"\xff\xff\x00\x01\x00\x00\x00\x00\x7f\xff\xff\xff", "cannot fit"),  # huge array count
    ],
)
def test_malformed_bodies_raise_typed_errors(raw, why):
    with pytest.raises(MalformedFrameError, match=why):
        decode_request_body(ApiKey.PRODUCE, 2, raw, 0, len(raw))


def test_bad_values_raise_body_encode_error():
    with pytest.raises(BodyEncodeError, match="PRODUCE v2 request"):
        encode_request_body(ApiKey.PRODUCE, 2, {"acks": "all", "topic_data": []})
    with pytest.raises(BodyEncodeError, match="not nullable"):
        encode_request_body(ApiKey.PRODUCE, 2, {"topic_data": None})


@pytest.mark.parametrize("api,version", EVERY, ids=lambda x: str(x))
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_version_round_trips(api, version, data):
    for table, encode, decode in (
        (REQUEST_SCHEMAS, encode_request_body, decode_request_body),
        (RESPONSE_SCHEMAS, encode_response_body, decode_response_body),
    ):
        codec = table[api, version]
        value = data.draw(value_strategy(codec, max_items=2))
        raw = encode(api, version, value)
        assert present(codec, decode(api, version, raw, 0, len(raw))) == value
        assert encode(api, version, decode(api, version, raw, 0, len(raw))) == raw


def test_definitions_hold_every_api_key():
    apis = {n: m for n, m in MESSAGES.items() if n.endswith(("Request", "Response"))}
    assert {m["apiKey"] for m in apis.values()} == {int(k) for k in ApiKey}
    for m in apis.values():
        assert m["type"] in ("request", "response") and m["fields"]
    records = {n: m["type"] for n, m in MESSAGES.items() if n not in apis}
    assert records == {
        "TransactionLogKey": "coordinator-key",
        "TransactionLogValue": "coordinator-value",
    }


@pytest.mark.skipif(
    not Path(KAFKA_GIT).exists() or not (KAFKA_JARS / "kafka-clients").exists(),
    reason="no Kafka git checkout (set CHRONOLOG_KAFKA_GIT) or Kafka 4.1.1 jars in a Maven "
    "repository (CHRONOLOG_KAFKA_JARS) to compare with",
)
def test_definitions_match_kafkas_json():
    from protocol.schemas.generate import load

    assert load(KAFKA_GIT, "3.9.0-rc3", KAFKA_JARS) == MESSAGES
