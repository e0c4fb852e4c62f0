"""Metadata (key 3) v0-v2. v1 makes the topic list nullable (null = all topics) and adds rack,
controller_id and is_internal; v2 adds cluster_id."""
from construct import Struct

from protocol.primitives import BOOLEAN, INT16, INT32, NULLABLE_STRING, STRING, Array, NullableArray

MetadataRequestV0 = Struct("topics" / Array(STRING))
MetadataRequestV1 = Struct("topics" / NullableArray(STRING))
MetadataRequestV2 = MetadataRequestV1

_BrokerV0 = Struct("node_id" / INT32, "host" / STRING, "port" / INT32)
_BrokerV1 = Struct("node_id" / INT32, "host" / STRING, "port" / INT32, "rack" / NULLABLE_STRING)

_PartitionMetadataV0 = Struct(
    "partition_error_code" / INT16,
    "partition_id" / INT32,
    "leader" / INT32,
    "replicas" / Array(INT32),
    "isr" / Array(INT32),
)

_TopicMetadataV0 = Struct(
    "topic_error_code" / INT16,
    "topic" / STRING,
    "partition_metadata" / Array(_PartitionMetadataV0),
)

_TopicMetadataV1 = Struct(
    "topic_error_code" / INT16,
    "topic" / STRING,
    "is_internal" / BOOLEAN,
    "partition_metadata" / Array(_PartitionMetadataV0),
)

MetadataResponseV0 = Struct(
    "brokers" / Array(_BrokerV0),
    "topic_metadata" / Array(_TopicMetadataV0),
)

MetadataResponseV1 = Struct(
    "brokers" / Array(_BrokerV1),
    "controller_id" / INT32,
    "topic_metadata" / Array(_TopicMetadataV1),
)

MetadataResponseV2 = Struct(
    "brokers" / Array(_BrokerV1),
    "cluster_id" / NULLABLE_STRING,
    "controller_id" / INT32,
    "topic_metadata" / Array(_TopicMetadataV1),
)
