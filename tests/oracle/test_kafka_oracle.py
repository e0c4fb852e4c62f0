"""The oracle itself (kafka_oracle.py): Apache Kafka 4.1.1 starts in KRaft mode, its Java clients
round-trip a record with headers through it, and its tools run with the jars' classpath. If these
fail, every differential test would fail for the harness's reasons, not chronolog's."""

from __future__ import annotations

import pytest

from tests.oracle.kafka_oracle import (
    GET_OFFSET_SHELL,
    KAFKA_VERSION,
    JavaClientError,
    JavaClients,
    run_kafka_tool,
)

pytestmark = pytest.mark.kafka_oracle


def test_kafka_answers_and_java_clients_round_trip(kafka_oracle):
    assert f"Kafka version: {KAFKA_VERSION}" in kafka_oracle.log_output()
    with JavaClients(kafka_oracle.bootstrap) as clients:
        # Kafka would delete the record (timestamp 1970) at its first retention pass.
        clients.call(
            "create_topic", topic="oracle-smoke", partitions=1, configs={"retention.ms": "-1"}
        )
        acks = clients.call(
            "produce",
            topic="oracle-smoke",
            records=[{"key": "k", "value": "v", "timestamp": 1_000, "headers": [["h", "x"]]}],
        )["records"]
        assert acks == [{"partition": 0, "offset": 0, "timestamp": 1_000}]
        (record,) = clients.call("read_partition", topic="oracle-smoke", partition=0)["records"]
        assert (record["key"], record["value"], record["headers"]) == ("k", "v", [["h", "x"]])
        with pytest.raises(JavaClientError) as raised:
            clients.call("create_topic", topic="oracle-smoke", partitions=1, configs={})
        assert raised.value.error == "org.apache.kafka.common.errors.TopicExistsException"

    shell = run_kafka_tool(
        GET_OFFSET_SHELL, "--bootstrap-server", kafka_oracle.bootstrap, "--topic", "oracle-smoke"
    )
    assert shell.stdout.split() == ["oracle-smoke:0:1"]
