"""``chronolog groups`` pieces that need no broker: the consumer-assignment decoder (checked
against kafka-python's encoder) and argument errors. The tool itself runs against a real
broker in tests/integration/test_groups.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

from broker.groups.cli import decode_assignment, main


def kafka_python_assignment(topics: dict[str, list[int]], user_data: bytes = b"") -> bytes:
    tps = [
        ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=ps)
        for t, ps in topics.items()
    ]
    return bytes(
        ConsumerProtocolAssignment(version=0, assigned_partitions=tps, user_data=user_data).encode()
    )


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.text(min_size=1, max_size=20),
        st.lists(st.integers(0, 2**31 - 1), max_size=8),
        max_size=5,
    ),
    st.binary(max_size=20),
)
def test_decodes_what_kafka_python_encodes(topics, user_data):
    assert decode_assignment(kafka_python_assignment(topics, user_data)) == [
        (t, p) for t, ps in topics.items() for p in ps
    ]


@pytest.mark.parametrize(
    "buf",
    [
        b"",
        b"\x00\x00\x00\x00\x00\x01\x00\x05ab",
        b"\x00\x00\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x03\x00",
    ],
)
def test_truncated_assignments_raise(buf):
    with pytest.raises(ValueError, match="not a consumer assignment"):
        decode_assignment(buf)


def test_bad_bootstrap_address(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--bootstrap-server", "nohost", "list"])
    assert exc.value.code == 2
    assert "'nohost' is not HOST:PORT" in capsys.readouterr().err
