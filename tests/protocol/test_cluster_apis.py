"""The inter-broker apis (CLUSTER_VERSIONS): decoded only by a connection that serves them."""

from __future__ import annotations

import uuid

import pytest

from protocol import (
    CLUSTER_VERSIONS,
    SUPPORTED_VERSIONS,
    ApiKey,
    ClientConnection,
    ServerConnection,
)
from protocol.errors import UnsupportedApiError

LEADER_AND_ISR = {
    "controller_id": 2,
    "controller_epoch": 7,
    "broker_epoch": 4242,
    "type": 0,
    "topic_states": [
        {
            "topic_name": "orders",
            "topic_id": uuid.UUID(int=99),
            "partition_states": [
                {
                    "partition_index": 0,
                    "controller_epoch": 7,
                    "leader": 1,
                    "leader_epoch": 3,
                    "isr": [1, 2],
                    "partition_epoch": 11,
                    "replicas": [1, 2, 3],
                    "adding_replicas": [3],
                    "removing_replicas": [],
                    "is_new": True,
                }
            ],
        }
    ],
    "live_leaders": [{"broker_id": 1, "host_name": "127.0.0.1", "port": 9093}],
}


def test_cluster_apis_are_not_served_by_a_single_broker():
    _, frame = ClientConnection().request(ApiKey.LEADER_AND_ISR, 6, LEADER_AND_ISR)
    with pytest.raises(UnsupportedApiError):
        list(ServerConnection().receive_data(frame))
    assert not set(CLUSTER_VERSIONS) & set(SUPPORTED_VERSIONS)


def test_leader_and_isr_round_trip_in_a_cluster_connection():
    _, frame = ClientConnection().request(ApiKey.LEADER_AND_ISR, 6, LEADER_AND_ISR)
    server = ServerConnection(versions={**SUPPORTED_VERSIONS, **CLUSTER_VERSIONS})
    (request,) = list(server.receive_data(frame))
    body = request.body
    assert (body.controller_id, body.controller_epoch, body.broker_epoch) == (2, 7, 4242)
    (topic,) = body.topic_states
    assert topic.topic_name == "orders" and topic.topic_id == uuid.UUID(int=99)
    (state,) = topic.partition_states
    assert (state.leader, state.leader_epoch, list(state.isr), list(state.replicas)) == (
        1,
        3,
        [1, 2],
        [1, 2, 3],
    )
    assert list(state.adding_replicas) == [3] and state.is_new
    assert body.live_leaders[0].port == 9093
