"""CreateTopics (key 19) v0 and DeleteTopics (key 20) v0, with Kafka 0.10.1's field names
(``configs[config_key, config_value]``, ``topic_error_codes``; 0.11 renamed them)."""
from construct import Struct

from protocol.primitives import INT16, INT32, STRING, Array

_TopicErrorCode = Struct("topic" / STRING, "error_code" / INT16)

CreateTopicsRequestV0 = Struct(
    "create_topic_requests" / Array(Struct(
        "topic" / STRING,
        "num_partitions" / INT32,
        "replication_factor" / INT16,
        "replica_assignment" / Array(Struct(
            "partition_id" / INT32,
            "replicas" / Array(INT32),
        )),
        "configs" / Array(Struct(
            "config_key" / STRING,
            "config_value" / STRING,
        )),
    )),
    "timeout" / INT32,
)

CreateTopicsResponseV0 = Struct("topic_error_codes" / Array(_TopicErrorCode))

DeleteTopicsRequestV0 = Struct(
    "topics" / Array(STRING),
    "timeout" / INT32,
)

DeleteTopicsResponseV0 = Struct("topic_error_codes" / Array(_TopicErrorCode))
