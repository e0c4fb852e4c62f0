"""Golden-bytes interop with kafka-python 3.0.12's own protocol classes (an independent
implementation generated from Kafka's message JSON, with the same snake_case field names): for
every api and version we serve that kafka-python knows (all but the delegation token apis), in
both directions, kafka-python decodes our bytes to the same
values and re-encodes them to the same bytes, and frames it builds (header v1 or v2 included)
decode with our ServerConnection / ClientConnection."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    AlterConfigsRequest,
    AlterConfigsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    DescribeAclsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeLogDirsRequest,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    DescribeLogDirsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.protocol.consumer.offsets import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kafka.protocol.admin.transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from protocol import SUPPORTED_VERSIONS, ApiKey, ClientConnection, ServerConnection
from protocol.schemas import (
    REQUEST_SCHEMAS,
    RESPONSE_SCHEMAS,
    decode_response_body,
    encode_request_body,
    encode_response_body,
)
from tests.protocol.wire_strategies import present, value_strategy

KAFKA_PYTHON = {
    ApiKey.PRODUCE: (ProduceRequest, ProduceResponse),
    ApiKey.FETCH: (FetchRequest, FetchResponse),
    ApiKey.LIST_OFFSETS: (ListOffsetsRequest, ListOffsetsResponse),
    ApiKey.METADATA: (MetadataRequest, MetadataResponse),
    ApiKey.OFFSET_COMMIT: (OffsetCommitRequest, OffsetCommitResponse),
    ApiKey.OFFSET_FETCH: (OffsetFetchRequest, OffsetFetchResponse),
    ApiKey.FIND_COORDINATOR: (FindCoordinatorRequest, FindCoordinatorResponse),
    ApiKey.JOIN_GROUP: (JoinGroupRequest, JoinGroupResponse),
    ApiKey.HEARTBEAT: (HeartbeatRequest, HeartbeatResponse),
    ApiKey.LEAVE_GROUP: (LeaveGroupRequest, LeaveGroupResponse),
    ApiKey.SYNC_GROUP: (SyncGroupRequest, SyncGroupResponse),
    ApiKey.DESCRIBE_GROUPS: (DescribeGroupsRequest, DescribeGroupsResponse),
    ApiKey.LIST_GROUPS: (ListGroupsRequest, ListGroupsResponse),
    ApiKey.API_VERSIONS: (ApiVersionsRequest, ApiVersionsResponse),
    ApiKey.CREATE_TOPICS: (CreateTopicsRequest, CreateTopicsResponse),
    ApiKey.DELETE_TOPICS: (DeleteTopicsRequest, DeleteTopicsResponse),
    ApiKey.INIT_PRODUCER_ID: (InitProducerIdRequest, InitProducerIdResponse),
    ApiKey.ADD_PARTITIONS_TO_TXN: (AddPartitionsToTxnRequest, AddPartitionsToTxnResponse),
    ApiKey.ADD_OFFSETS_TO_TXN: (AddOffsetsToTxnRequest, AddOffsetsToTxnResponse),
    ApiKey.END_TXN: (EndTxnRequest, EndTxnResponse),
    ApiKey.WRITE_TXN_MARKERS: (WriteTxnMarkersRequest, WriteTxnMarkersResponse),
    ApiKey.TXN_OFFSET_COMMIT: (TxnOffsetCommitRequest, TxnOffsetCommitResponse),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse),
    ApiKey.DESCRIBE_TRANSACTIONS: (DescribeTransactionsRequest, DescribeTransactionsResponse),
    ApiKey.LIST_TRANSACTIONS: (ListTransactionsRequest, ListTransactionsResponse),
    ApiKey.DELETE_GROUPS: (DeleteGroupsRequest, DeleteGroupsResponse),
    ApiKey.OFFSET_DELETE: (OffsetDeleteRequest, OffsetDeleteResponse),
    ApiKey.DESCRIBE_CONFIGS: (DescribeConfigsRequest, DescribeConfigsResponse),
    ApiKey.ALTER_CONFIGS: (AlterConfigsRequest, AlterConfigsResponse),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (
        IncrementalAlterConfigsRequest,
        IncrementalAlterConfigsResponse,
    ),
    ApiKey.CREATE_PARTITIONS: (CreatePartitionsRequest, CreatePartitionsResponse),
    ApiKey.DELETE_RECORDS: (DeleteRecordsRequest, DeleteRecordsResponse),
    ApiKey.DESCRIBE_CLUSTER: (DescribeClusterRequest, DescribeClusterResponse),
    ApiKey.DESCRIBE_LOG_DIRS: (DescribeLogDirsRequest, DescribeLogDirsResponse),
    ApiKey.DESCRIBE_PRODUCERS: (DescribeProducersRequest, DescribeProducersResponse),
    ApiKey.SASL_HANDSHAKE: (SaslHandshakeRequest, SaslHandshakeResponse),
    ApiKey.SASL_AUTHENTICATE: (SaslAuthenticateRequest, SaslAuthenticateResponse),
    ApiKey.DESCRIBE_ACLS: (DescribeAclsRequest, DescribeAclsResponse),
    ApiKey.CREATE_ACLS: (CreateAclsRequest, CreateAclsResponse),
    ApiKey.DELETE_ACLS: (DeleteAclsRequest, DeleteAclsResponse),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (
        DescribeUserScramCredentialsRequest,
        DescribeUserScramCredentialsResponse,
    ),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (
        AlterUserScramCredentialsRequest,
        AlterUserScramCredentialsResponse,
    ),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (DescribeClientQuotasRequest, DescribeClientQuotasResponse),
    ApiKey.ALTER_CLIENT_QUOTAS: (AlterClientQuotasRequest, AlterClientQuotasResponse),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (
        DescribeTopicPartitionsRequest,
        DescribeTopicPartitionsResponse,
    ),
    ApiKey.ELECT_LEADERS: (ElectLeadersRequest, ElectLeadersResponse),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (
        ListPartitionReassignmentsRequest,
        ListPartitionReassignmentsResponse,
    ),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (
        AlterPartitionReassignmentsRequest,
        AlterPartitionReassignmentsResponse,
    ),
    ApiKey.UPDATE_FEATURES: (UpdateFeaturesRequest, UpdateFeaturesResponse),
    ApiKey.ALTER_REPLICA_LOG_DIRS: (AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse),
}
# kafka-python 3.0.12 has no classes for the delegation token apis: Kafka's own Java admin
# client and tool check their bytes instead (tests/integration/test_delegation_tokens.py).
NOT_IN_KAFKA_PYTHON = {
    ApiKey.CREATE_DELEGATION_TOKEN,
    ApiKey.RENEW_DELEGATION_TOKEN,
    ApiKey.EXPIRE_DELEGATION_TOKEN,
    ApiKey.DESCRIBE_DELEGATION_TOKEN,
}

# Every version served, but ApiVersions above v0 is checked in test_api_versions_v3.
ALL = [
    (k, v)
    for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())
    if k not in NOT_IN_KAFKA_PYTHON
    for v in range(lo, hi + 1)
]


def test_kafka_python_has_every_api_we_serve():
    assert set(KAFKA_PYTHON) == set(SUPPORTED_VERSIONS) - NOT_IN_KAFKA_PYTHON
    for api, (req, resp) in KAFKA_PYTHON.items():
        assert req.API_KEY == api and resp.API_KEY == api
        lo, hi = SUPPORTED_VERSIONS[api]
        assert req.min_version <= lo and hi <= req.max_version


@pytest.mark.parametrize("api,version", ALL, ids=lambda x: str(x))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_requests_agree_with_kafka_python(api, version, data):
    codec = REQUEST_SCHEMAS[api, version]
    value = data.draw(value_strategy(codec))
    ours = encode_request_body(api, version, value)
    kp = KAFKA_PYTHON[api][0].decode(ours, version=version)
    assert present(codec, kp.to_dict(json=False)) == value
    kp.with_header(correlation_id=5, client_id="kp-client")
    framed = bytes(kp.encode(version=version, header=True, framed=True))
    assert framed.endswith(ours)
    (request,) = ServerConnection().receive_data(framed)
    assert (request.header.api_key, request.header.api_version) == (api, version)
    assert (request.header.correlation_id, request.header.client_id) == (5, "kp-client")
    assert present(codec, request.body) == value


@pytest.mark.parametrize("api,version", ALL, ids=lambda x: str(x))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_responses_agree_with_kafka_python(api, version, data):
    codec = RESPONSE_SCHEMAS[api, version]
    value = data.draw(value_strategy(codec))
    if api == ApiKey.API_VERSIONS:
        value["error_code"] = 0  # clients read an ApiVersions error in the v0 layout
    client = ClientConnection()
    server = ServerConnection()
    request_value = data.draw(value_strategy(REQUEST_SCHEMAS[api, version]))
    if api == ApiKey.PRODUCE:
        request_value["acks"] = 1
    _, frame = client.request(api, version, request_value)
    (request,) = server.receive_data(frame)
    wire = server.send(request, value)
    kp = KAFKA_PYTHON[api][1].decode(wire, version=version, header=True, framed=True)
    assert kp.header.correlation_id == request.header.correlation_id
    assert present(codec, kp.to_dict(json=False)) == value
    # kafka-python re-encodes the body to our exact bytes, which we decode back to the value.
    body = bytes(kp.encode())
    assert body == encode_response_body(api, version, value)
    assert present(codec, decode_response_body(api, version, body, 0, len(body))) == value
    (response,) = client.receive_data(wire)
    assert present(codec, response.body) == value


def _kp_frame(message, version, correlation_id=9, client_id="kafka-python-3.0.12"):
    message.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(message.encode(version=version, header=True, framed=True))


def _receive(frame):
    (request,) = ServerConnection().receive_data(frame)
    assert request.header.correlation_id == 9
    return request.body


def test_produce_v2_built_by_kafka_python():
    T, P = ProduceRequest.TopicProduceData, ProduceRequest.TopicProduceData.PartitionProduceData
    req = ProduceRequest(
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            T(
                name="orders",
                partition_data=[P(index=0, records=b"\x00" * 40), P(index=2, records=b"set-2")],
            )
        ],
    )
    for version in (2, 9):
        body = _receive(_kp_frame(req, version))
        assert body.acks == -1 and body.timeout_ms == 30000
        assert body.topic_data[0].name == "orders"
        assert [(d.index, d.records) for d in body.topic_data[0].partition_data] == [
            (0, b"\x00" * 40),
            (2, b"set-2"),
        ]


def test_fetch_v3_built_by_kafka_python():
    T = FetchRequest.FetchTopic
    req = FetchRequest(
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=52428800,
        topics=[
            T(
                topic="orders",
                partitions=[
                    T.FetchPartition(partition=1, fetch_offset=1234, partition_max_bytes=1048576)
                ],
            )
        ],
    )
    body = _receive(_kp_frame(req, 3))
    assert (body.replica_id, body.max_wait_ms, body.min_bytes, body.max_bytes) == (
        -1,
        500,
        1,
        52428800,
    )
    p = body.topics[0].partitions[0]
    assert (body.topics[0].topic, p.partition, p.fetch_offset, p.partition_max_bytes) == (
        "orders",
        1,
        1234,
        1048576,
    )
    assert body.isolation_level == 0 and body.session_epoch == -1  # defaults of later versions


def test_metadata_v1_null_topics_built_by_kafka_python():
    assert _receive(_kp_frame(MetadataRequest(topics=None), 1)).topics is None
    assert _receive(_kp_frame(MetadataRequest(topics=[]), 1)).topics == []


def test_list_offsets_v1_built_by_kafka_python():
    T = ListOffsetsRequest.ListOffsetsTopic
    req = ListOffsetsRequest(
        replica_id=-1,
        topics=[
            T(
                name="orders",
                partitions=[
                    T.ListOffsetsPartition(partition_index=0, timestamp=-2),
                    T.ListOffsetsPartition(partition_index=1, timestamp=1700000000000),
                ],
            )
        ],
    )
    body = _receive(_kp_frame(req, 1))
    assert [(p.partition_index, p.timestamp) for p in body.topics[0].partitions] == [
        (0, -2),
        (1, 1700000000000),
    ]


def test_join_group_v1_built_by_kafka_python():
    req = JoinGroupRequest(
        group_id="g1",
        session_timeout_ms=10000,
        rebalance_timeout_ms=300000,
        member_id="",
        protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01")],
    )
    body = _receive(_kp_frame(req, 1))
    assert (
        body.group_id,
        body.session_timeout_ms,
        body.rebalance_timeout_ms,
        body.member_id,
        body.protocol_type,
    ) == ("g1", 10000, 300000, "", "consumer")
    assert body.protocols[0].name == "range"
    assert body.protocols[0].metadata == b"\x00\x01"


def test_offset_commit_v2_built_by_kafka_python():
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    req = OffsetCommitRequest(
        group_id="g1",
        generation_id_or_member_epoch=3,
        member_id="m-1",
        retention_time_ms=-1,
        topics=[
            T(
                name="orders",
                partitions=[
                    T.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=77, committed_metadata=""
                    )
                ],
            )
        ],
    )
    body = _receive(_kp_frame(req, 2))
    assert (
        body.group_id,
        body.generation_id_or_member_epoch,
        body.member_id,
        body.retention_time_ms,
    ) == ("g1", 3, "m-1", -1)
    p = body.topics[0].partitions[0]
    assert (p.partition_index, p.committed_offset, p.committed_metadata) == (0, 77, "")


def test_create_topics_v0_built_by_kafka_python():
    T = CreateTopicsRequest.CreatableTopic
    req = CreateTopicsRequest(
        topics=[
            T(
                name="new",
                num_partitions=3,
                replication_factor=1,
                assignments=[],
                configs=[T.CreatableTopicConfig(name="retention.ms", value="1000")],
            )
        ],
        timeout_ms=5000,
    )
    body = _receive(_kp_frame(req, 0))
    topic = body.topics[0]
    assert (topic.name, topic.num_partitions, topic.replication_factor) == ("new", 3, 1)
    assert [(c.name, c.value) for c in topic.configs] == [("retention.ms", "1000")]
    assert body.timeout_ms == 5000


def test_admin_requests_built_by_kafka_pythons_admin_client():
    """The requests kafka-python's KafkaAdminClient builds (its own request builders, with
    tuples for nested structs) decode to what the admin client meant."""
    from kafka.admin import ConfigResource, ConfigResourceType
    from kafka.admin._configs import AlterConfigOp, ConfigAdminMixin

    describe = ConfigAdminMixin._describe_configs_request(
        [ConfigResource(ConfigResourceType.TOPIC, "t", configs={"retention.ms": None})],
        include_synonyms=True,
    )
    body = _receive(_kp_frame(describe, 4))
    (resource,) = body.resources
    assert (resource.resource_type, resource.resource_name) == (2, "t")
    assert list(resource.configuration_keys) == ["retention.ms"] and body.include_synonyms
    alter = ConfigAdminMixin._alter_configs_request(
        [
            ConfigResource(
                ConfigResourceType.BROKER,
                "0",
                configs={
                    "log.retention.ms": "5",
                    "message.max.bytes": (AlterConfigOp.DELETE, None),
                },
            )
        ],
        validate_only=True,
        incremental=True,
    )
    body = _receive(_kp_frame(alter, 1))
    (resource,) = body.resources
    assert (resource.resource_type, resource.resource_name, body.validate_only) == (4, "0", True)
    assert [(c.name, c.config_operation, c.value) for c in resource.configs] == [
        ("log.retention.ms", 0, "5"),
        ("message.max.bytes", 1, None),
    ]


def test_create_partitions_and_delete_records_built_by_kafka_python():
    T = CreatePartitionsRequest.CreatePartitionsTopic
    req = CreatePartitionsRequest(
        topics=[T(name="t", count=4, assignments=None)], timeout_ms=900, validate_only=False
    )
    body = _receive(_kp_frame(req, 3))
    assert [(t.name, t.count, t.assignments) for t in body.topics] == [("t", 4, None)]
    R = DeleteRecordsRequest.DeleteRecordsTopic
    req = DeleteRecordsRequest(
        topics=[R(name="t", partitions=[R.DeleteRecordsPartition(partition_index=2, offset=-1)])],
        timeout_ms=900,
    )
    body = _receive(_kp_frame(req, 2))
    (topic,) = body.topics
    assert [(p.partition_index, p.offset) for p in topic.partitions] == [(2, -1)]
