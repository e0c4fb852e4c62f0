"""DescribeCluster v0-v1 and DescribeLogDirs v0-v4 against a real broker: the one broker as
cluster and controller, endpoint-type errors, partition sizes per log dir as the files hold
them. (An offline log dir: tests/broker/test_admin_handlers.py.)"""

from __future__ import annotations

import os
import uuid

import pytest

from protocol import ApiKey
from tests.integration.kafka_wire import WireClient, create_topic, message_set, produce


@pytest.fixture(scope="module")
def broker(broker_with_defaults):
    """These tests check default config sources or sizes in the log dir: not the compose
    broker's, which runs with config/server.properties."""
    return broker_with_defaults


def name(prefix: str = "dir") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.mark.parametrize("version", [0, 1])
def test_describe_cluster(broker, version):
    with WireClient(broker.host, broker.port) as client:
        meta = client.call(ApiKey.METADATA, 12, {"topics": []})
        body = {"include_cluster_authorized_operations": True, "endpoint_type": 1}
        got = client.call(ApiKey.DESCRIBE_CLUSTER, version, body)
        assert (got.error_code, got.error_message) == (0, None)
        assert (got.cluster_id, got.controller_id) == (meta.cluster_id, 0)
        assert [(b.broker_id, b.host, b.port, b.rack) for b in got.brokers] == [
            (0, broker.host, broker.port, None)
        ]
        # every CLUSTER operation: CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS,
        # ALTER_CONFIGS, IDEMPOTENT_WRITE
        assert got.cluster_authorized_operations == 0b1_1111_1010_0000
        body["include_cluster_authorized_operations"] = False
        assert client.call(
            ApiKey.DESCRIBE_CLUSTER, version, body
        ).cluster_authorized_operations == (-(2**31))


def test_describe_cluster_endpoint_types(broker):
    with WireClient(broker.host, broker.port) as client:
        controller = client.call(
            ApiKey.DESCRIBE_CLUSTER,
            1,
            {"include_cluster_authorized_operations": False, "endpoint_type": 2},
        )
        assert controller.error_code == 114  # MISMATCHED_ENDPOINT_TYPE
        assert controller.error_message == (
            "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of "
            "type CONTROLLER"
        )
        assert controller.brokers == []
        unknown = client.call(
            ApiKey.DESCRIBE_CLUSTER,
            1,
            {"include_cluster_authorized_operations": False, "endpoint_type": 9},
        )
        assert (unknown.error_code, unknown.error_message) == (115, "Unsupported endpoint type 9")


def _size_on_disk(log_dir: str, topic: str, partition: int) -> int:
    directory = os.path.join(log_dir, f"{topic}-{partition}")
    return sum(
        os.path.getsize(os.path.join(directory, f))
        for f in os.listdir(directory)
        if f.endswith(".log")
    )


@pytest.mark.parametrize("version", range(5))
def test_describe_log_dirs_sizes_per_partition(broker, version):
    topic = name()
    with WireClient(broker.host, broker.port) as client:
        assert create_topic(client, topic, 3) == 0
        for p, count in ((0, 3), (2, 1)):
            for _ in range(count):
                assert (
                    produce(client, topic, message_set([b"v" * 100]), partition=p).error_code == 0
                )
        asked = {"topics": [{"topic": topic, "partitions": [0, 1, 2, 7]}]}
        got = client.call(ApiKey.DESCRIBE_LOG_DIRS, version, asked)
        (result,) = got.results
        assert (result.error_code, result.log_dir) == (0, os.path.abspath(broker.log_dir))
        (entry,) = result.topics
        assert entry.name == topic
        sizes = {p.partition_index: p.partition_size for p in entry.partitions}
        assert sizes == {p: _size_on_disk(broker.log_dir, topic, p) for p in (0, 1, 2)}
        assert sizes[0] > sizes[2] > sizes[1] == 0
        assert all((p.offset_lag, p.is_future_key) == (0, False) for p in entry.partitions)
        if version >= 4:
            st = os.statvfs(broker.log_dir)
            assert result.total_bytes == st.f_blocks * st.f_frsize
            assert 0 < result.usable_bytes <= result.total_bytes
        everything = client.call(ApiKey.DESCRIBE_LOG_DIRS, version, {"topics": None})
        names = {t.name for t in everything.results[0].topics}
        assert topic in names
