"""The group coordination apis: FindCoordinator (GroupCoordinator, key 10) v0, JoinGroup (11)
v0-v1, Heartbeat (12) v0, LeaveGroup (13) v0, SyncGroup (14) v0, DescribeGroups (15) v0,
ListGroups (16) v0, OffsetCommit (8) v0-v2 and OffsetFetch (9) v0-v1."""
from construct import Struct

from protocol.primitives import BYTES, INT16, INT32, INT64, NULLABLE_STRING, STRING, Array

FindCoordinatorRequestV0 = Struct("group_id" / STRING)

FindCoordinatorResponseV0 = Struct(
    "error_code" / INT16,
    "coordinator" / Struct("node_id" / INT32, "host" / STRING, "port" / INT32),
)

_GroupProtocol = Struct("protocol_name" / STRING, "protocol_metadata" / BYTES)

JoinGroupRequestV0 = Struct(
    "group_id" / STRING,
    "session_timeout" / INT32,
    "member_id" / STRING,
    "protocol_type" / STRING,
    "group_protocols" / Array(_GroupProtocol),
)

# v1 adds rebalance_timeout (KIP-62); the response is unchanged.
JoinGroupRequestV1 = Struct(
    "group_id" / STRING,
    "session_timeout" / INT32,
    "rebalance_timeout" / INT32,
    "member_id" / STRING,
    "protocol_type" / STRING,
    "group_protocols" / Array(_GroupProtocol),
)

JoinGroupResponseV0 = Struct(
    "error_code" / INT16,
    "generation_id" / INT32,
    "group_protocol" / STRING,
    "leader_id" / STRING,
    "member_id" / STRING,
    "members" / Array(Struct("member_id" / STRING, "member_metadata" / BYTES)),
)
JoinGroupResponseV1 = JoinGroupResponseV0

SyncGroupRequestV0 = Struct(
    "group_id" / STRING,
    "generation_id" / INT32,
    "member_id" / STRING,
    "group_assignment" / Array(Struct("member_id" / STRING, "member_assignment" / BYTES)),
)

SyncGroupResponseV0 = Struct("error_code" / INT16, "member_assignment" / BYTES)

HeartbeatRequestV0 = Struct(
    "group_id" / STRING,
    "group_generation_id" / INT32,
    "member_id" / STRING,
)

HeartbeatResponseV0 = Struct("error_code" / INT16)

LeaveGroupRequestV0 = Struct("group_id" / STRING, "member_id" / STRING)

LeaveGroupResponseV0 = Struct("error_code" / INT16)

DescribeGroupsRequestV0 = Struct("group_ids" / Array(STRING))

DescribeGroupsResponseV0 = Struct(
    "groups" / Array(Struct(
        "error_code" / INT16,
        "group_id" / STRING,
        "state" / STRING,
        "protocol_type" / STRING,
        "protocol" / STRING,
        "members" / Array(Struct(
            "member_id" / STRING,
            "client_id" / STRING,
            "client_host" / STRING,
            "member_metadata" / BYTES,
            "member_assignment" / BYTES,
        )),
    )),
)

ListGroupsRequestV0 = Struct()

ListGroupsResponseV0 = Struct(
    "error_code" / INT16,
    "groups" / Array(Struct("group_id" / STRING, "protocol_type" / STRING)),
)

OffsetCommitRequestV0 = Struct(
    "group_id" / STRING,
    "topics" / Array(Struct(
        "topic" / STRING,
        "partitions" / Array(Struct(
            "partition" / INT32,
            "offset" / INT64,
            "metadata" / NULLABLE_STRING,
        )),
    )),
)

OffsetCommitRequestV1 = Struct(
    "group_id" / STRING,
    "group_generation_id" / INT32,
    "member_id" / STRING,
    "topics" / Array(Struct(
        "topic" / STRING,
        "partitions" / Array(Struct(
            "partition" / INT32,
            "offset" / INT64,
            "timestamp" / INT64,
            "metadata" / NULLABLE_STRING,
        )),
    )),
)

OffsetCommitRequestV2 = Struct(
    "group_id" / STRING,
    "group_generation_id" / INT32,
    "member_id" / STRING,
    "retention_time" / INT64,
    "topics" / Array(Struct(
        "topic" / STRING,
        "partitions" / Array(Struct(
            "partition" / INT32,
            "offset" / INT64,
            "metadata" / NULLABLE_STRING,
        )),
    )),
)

OffsetCommitResponseV0 = Struct(
    "responses" / Array(Struct(
        "topic" / STRING,
        "partition_responses" / Array(Struct("partition" / INT32, "error_code" / INT16)),
    )),
)
OffsetCommitResponseV1 = OffsetCommitResponseV0
OffsetCommitResponseV2 = OffsetCommitResponseV0

# v0 reads offsets from ZooKeeper, v1 from Kafka; the wire format is the same.
OffsetFetchRequestV0 = Struct(
    "group_id" / STRING,
    "topics" / Array(Struct(
        "topic" / STRING,
        "partitions" / Array(Struct("partition" / INT32)),
    )),
)
OffsetFetchRequestV1 = OffsetFetchRequestV0

OffsetFetchResponseV0 = Struct(
    "responses" / Array(Struct(
        "topic" / STRING,
        "partition_responses" / Array(Struct(
            "partition" / INT32,
            "offset" / INT64,
            "metadata" / NULLABLE_STRING,
            "error_code" / INT16,
        )),
    )),
)
OffsetFetchResponseV1 = OffsetFetchResponseV0
