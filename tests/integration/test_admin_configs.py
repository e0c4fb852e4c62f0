"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs against real brokers, with raw
requests: sources and synonyms as Kafka 3.9 reports them, per-resource errors, changes that take
effect on the running broker (produce limits, segment rolls, retention) and survive a restart."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from protocol import ApiKey
from tests.integration.kafka_wire import WireClient, create_topic, message_set, produce

TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
TOPIC_CONFIG, DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 1, 2, 3, 4, 5


@pytest.fixture(scope="module")
def broker(broker_with_defaults):
    """These tests check default config sources or sizes in the log dir: not the compose
    broker's, which runs with config/server.properties."""
    return broker_with_defaults


def name(prefix: str = "cfg") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def client(broker):
    with WireClient(broker.host, broker.port) as c:
        yield c


def describe(client, kind, resource, keys=None, version=4):
    body = {
        "resources": [
            {"resource_type": kind, "resource_name": resource, "configuration_keys": keys}
        ],
        "include_synonyms": True,
    }
    (result,) = client.call(ApiKey.DESCRIBE_CONFIGS, version, body).results
    return result


def entries(client, kind, resource, keys=None):
    result = describe(client, kind, resource, keys)
    assert result.error_code == 0, result.error_message
    return {c.name: c for c in result.configs}


def synonyms(entry):
    return [(s.name, s.value, s.source) for s in entry.synonyms]


def incremental(client, kind, resource, *ops, validate_only=False):
    body = {
        "resources": [
            {
                "resource_type": kind,
                "resource_name": resource,
                "configs": [{"name": n, "config_operation": op, "value": v} for n, op, v in ops],
            }
        ],
        "validate_only": validate_only,
    }
    (result,) = client.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body).responses
    return result


def alter(client, kind, resource, configs, validate_only=False, version=2):
    body = {
        "resources": [
            {
                "resource_type": kind,
                "resource_name": resource,
                "configs": [{"name": k, "value": v} for k, v in configs.items()],
            }
        ],
        "validate_only": validate_only,
    }
    (result,) = client.call(ApiKey.ALTER_CONFIGS, version, body).responses
    return result


def test_topic_configs_sources_and_synonyms_as_kafka_reports_them(broker_factory):
    broker = broker_factory(log_retention_hours=24, log_segment_bytes=500000)
    with WireClient(broker.host, broker.port) as client:
        topic = name()
        assert create_topic(client, topic, 1, {"retention.bytes": "123456"}) == 0
        got = entries(client, TOPIC, topic)
        assert len(got) >= 18 and not any(e.read_only or e.is_sensitive for e in got.values())
        r = got["retention.bytes"]
        assert (r.value, r.config_source, r.config_type) == ("123456", TOPIC_CONFIG, 5)
        assert synonyms(r) == [
            ("retention.bytes", "123456", TOPIC_CONFIG),
            ("log.retention.bytes", "-1", DEFAULT),
        ]
        s = got["segment.bytes"]
        assert (s.value, s.config_source, s.config_type) == ("500000", STATIC, 3)
        assert synonyms(s) == [
            ("log.segment.bytes", "500000", STATIC),
            ("log.segment.bytes", "1073741824", DEFAULT),
        ]
        # Kafka's ConfigHelper drops the synonyms before log.retention.ms itself: a default
        # from log.retention.hours reports no synonyms and DEFAULT_CONFIG.
        t = got["retention.ms"]
        assert (t.value, t.config_source, synonyms(t)) == ("86400000", DEFAULT, [])
        assert got["cleanup.policy"].config_type == 7  # LIST
        # filtered by name; unknown names are simply absent
        only = entries(client, TOPIC, topic, ["segment.ms", "no.such"])
        assert list(only) == ["segment.ms"]
        # v0: no synonyms or sources on the wire, is_default says where the value comes from
        v0 = {c.name: c for c in describe(client, TOPIC, topic, version=0).configs}
        assert v0["retention.bytes"].is_default is False
        assert v0["index.interval.bytes"].is_default is True


def test_broker_configs_and_read_only_flags(client, broker):
    got = entries(client, BROKER, "0")
    assert got["broker.id"].read_only and got["log.dirs"].read_only
    assert got["log.dirs"].config_source == STATIC
    assert got["log.retention.hours"].read_only  # only log.retention.ms is dynamic in Kafka
    assert not got["log.retention.ms"].read_only and got["log.retention.ms"].value is None
    assert not got["message.max.bytes"].read_only and not got["max.connections"].read_only
    assert (got["log.retention.hours"].value, got["log.retention.hours"].config_source) == (
        "168",
        DEFAULT,
    )
    assert describe(client, BROKER, "7").error_code == 42
    assert (
        describe(client, BROKER, "x").error_message == "Broker id must be an integer, but it is: x"
    )
    assert describe(client, TOPIC, name()).error_code == 3
    assert describe(client, TOPIC, "bad/name").error_code == 17
    assert describe(client, 8, "0").error_code == 42  # BROKER_LOGGER: not served


def test_alter_configs_replaces_the_whole_set_and_survives_restart(broker_factory):
    broker = broker_factory()
    topic = name()
    with WireClient(broker.host, broker.port) as client:
        assert create_topic(client, topic, 1, {"retention.ms": "1000", "segment.ms": "5000"}) == 0
        assert alter(client, TOPIC, topic, {"retention.bytes": "99999"}).error_code == 0
        got = entries(client, TOPIC, topic)
        overridden = {n for n, e in got.items() if e.config_source == TOPIC_CONFIG}
        assert overridden == {"retention.bytes"}
        assert got["retention.ms"].value == "604800000"
        result = incremental(
            client,
            TOPIC,
            topic,
            ("cleanup.policy", APPEND, "compact"),
            ("retention.bytes", DELETE, None),
            ("max.message.bytes", SET, "2048"),
        )
        assert result.error_code == 0, result.error_message
    broker.restart()
    with WireClient(broker.host, broker.port) as client:
        got = entries(client, TOPIC, topic)
        assert got["cleanup.policy"].value == "delete,compact"
        assert {n for n, e in got.items() if e.config_source == TOPIC_CONFIG} == {
            "cleanup.policy",
            "max.message.bytes",
        }
        assert (
            incremental(client, TOPIC, topic, ("cleanup.policy", SUBTRACT, "delete")).error_code
            == 0
        )
        assert (
            entries(client, TOPIC, topic, ["cleanup.policy"])["cleanup.policy"].value == "compact"
        )


def test_alter_errors_per_resource(client):
    topic = name()
    assert create_topic(client, topic) == 0
    cases = [
        (
            incremental(client, TOPIC, topic, ("retention.ms", SET, "soon")),
            40,
            "retention.ms",
        ),
        (incremental(client, TOPIC, topic, ("no.such", SET, "1")), 40, "no.such"),
        (
            incremental(client, TOPIC, topic, ("retention.ms", APPEND, "1")),
            40,
            "Config value append is not allowed for config key: retention.ms",
        ),
        (
            incremental(client, TOPIC, topic, ("retention.ms", 7, "1")),
            42,
            "Unknown operations type 7",
        ),
        (
            incremental(client, TOPIC, topic, ("retention.ms", SET, None)),
            42,
            "Null value not supported for : retention.ms",
        ),
        (
            incremental(
                client, TOPIC, topic, ("retention.ms", SET, "1"), ("retention.ms", DELETE, None)
            ),
            42,
            "Error due to duplicate config keys",
        ),
        (incremental(client, TOPIC, name(), ("retention.ms", SET, "1")), 3, "does not exist"),
        (incremental(client, TOPIC, "", ("retention.ms", SET, "1")), 42, "Default topic"),
        (
            incremental(client, BROKER, "0", ("broker.id", SET, "3")),
            42,
            "Cannot update these configs dynamically: broker.id",
        ),
        (
            incremental(client, BROKER, "", ("log.retention.hours", SET, "3")),
            42,
            "log.retention.hours",
        ),
        (
            incremental(client, BROKER, "", ("message.max.bytes", SET, "big")),
            40,
            "message.max.bytes",
        ),
        (incremental(client, BROKER, "", ("no.such.property", SET, "1")), 40, "no.such.property"),
        (incremental(client, BROKER, "9", ("message.max.bytes", SET, "100")), 42, "expected 0"),
        (alter(client, TOPIC, topic, {"segment.bytes": "1"}), 40, "segment.bytes"),
        (alter(client, 8, "0", {"root": "DEBUG"}), 42, ""),
    ]
    for result, code, message in cases:
        assert result.error_code == code, result
        assert message in result.error_message
    # nothing changed
    got = entries(client, TOPIC, topic)
    assert not [n for n, e in got.items() if e.config_source == TOPIC_CONFIG]
    body = {
        "resources": [
            {"resource_type": TOPIC, "resource_name": topic, "configs": []},
            {"resource_type": TOPIC, "resource_name": topic, "configs": []},
        ],
        "validate_only": False,
    }
    dup = client.call(ApiKey.ALTER_CONFIGS, 0, body).responses
    assert [(r.error_code, r.error_message) for r in dup] == [
        (42, "Each resource must appear at most once.")
    ] * 2


def test_validate_only_changes_nothing(client):
    topic = name()
    assert create_topic(client, topic) == 0
    ok = incremental(client, TOPIC, topic, ("retention.ms", SET, "1"), validate_only=True)
    assert ok.error_code == 0
    assert entries(client, TOPIC, topic)["retention.ms"].config_source != TOPIC_CONFIG
    bad = incremental(client, TOPIC, topic, ("retention.ms", SET, "x"), validate_only=True)
    assert bad.error_code == 40


def test_dynamic_broker_configs_apply_at_once_and_survive_restart(broker_factory):
    broker = broker_factory()
    topic, pinned = name(), name()
    big = message_set([b"x" * 3000])
    with WireClient(broker.host, broker.port) as client:
        assert create_topic(client, topic) == 0
        assert create_topic(client, pinned, 1, {"max.message.bytes": "100000"}) == 0
        assert produce(client, topic, big).error_code == 0
        result = incremental(client, BROKER, "", ("message.max.bytes", SET, "2000"))
        assert result.error_code == 0, result.error_message
        assert produce(client, topic, big).error_code == 10  # MESSAGE_TOO_LARGE, no restart
        assert produce(client, pinned, big).error_code == 0  # its own override wins
        got = entries(client, TOPIC, topic, ["max.message.bytes"])["max.message.bytes"]
        assert (got.value, got.config_source) == ("2000", DYNAMIC_DEFAULT)
        assert synonyms(got) == [
            ("message.max.bytes", "2000", DYNAMIC_DEFAULT),
            ("message.max.bytes", "1000012", DEFAULT),
        ]
        # this broker's own value wins over the cluster-wide default
        assert incremental(client, BROKER, "0", ("message.max.bytes", SET, "5000")).error_code == 0
        assert produce(client, topic, big).error_code == 0
        got = entries(client, BROKER, "0", ["message.max.bytes"])["message.max.bytes"]
        assert (got.value, got.config_source) == ("5000", DYNAMIC_BROKER)
        assert [s[2] for s in synonyms(got)] == [DYNAMIC_BROKER, DYNAMIC_DEFAULT, DEFAULT]
        cluster = entries(client, BROKER, "")
        assert list(cluster) == ["message.max.bytes"]
        assert synonyms(cluster["message.max.bytes"]) == [
            ("message.max.bytes", "2000", DYNAMIC_DEFAULT)
        ]
    broker.restart()
    with WireClient(broker.host, broker.port) as client:
        got = entries(client, TOPIC, topic, ["max.message.bytes"])["max.message.bytes"]
        assert (got.value, got.config_source) == ("5000", DYNAMIC_BROKER)
        assert produce(client, topic, message_set([b"x" * 6000])).error_code == 10
        # deleting this broker's value falls back to the cluster-wide default
        assert incremental(client, BROKER, "0", ("message.max.bytes", DELETE, None)).error_code == 0
        assert produce(client, topic, big).error_code == 10
        assert alter(client, BROKER, "", {}).error_code == 0  # AlterConfigs: the set is now empty
        assert produce(client, topic, big).error_code == 0
        assert entries(client, BROKER, "") == {}


def _segments(broker, topic: str) -> list[str]:
    directory = os.path.join(broker.log_dir, f"{topic}-0")
    return sorted(f for f in os.listdir(directory) if f.endswith(".log"))


def test_segment_and_retention_changes_reach_the_running_logs(broker_factory):
    broker = broker_factory(log_retention_check_interval_ms=200)
    topic = name()
    with WireClient(broker.host, broker.port) as client:
        assert create_topic(client, topic) == 0
        assert incremental(client, BROKER, "", ("log.segment.bytes", SET, "2000")).error_code == 0
        for i in range(10):
            assert produce(client, topic, message_set([b"%d" % i * 500])).error_code == 0
        # about 500 bytes a message: 3 to a segment of 2000 bytes, rolled without a restart
        assert len(_segments(broker, topic)) == 4
        result = incremental(client, TOPIC, topic, ("retention.bytes", SET, "1"))
        assert result.error_code == 0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(_segments(broker, topic)) > 1:
            time.sleep(0.1)
        assert len(_segments(broker, topic)) == 1
        body = {
            "replica_id": -1,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -2}]}],
        }
        start = client.call(ApiKey.LIST_OFFSETS, 1, body).topics[0].partitions[0].offset
        assert start == int(_segments(broker, topic)[0][:-4]) == 9
