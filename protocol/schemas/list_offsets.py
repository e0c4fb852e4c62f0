"""ListOffsets (key 2) v0-v1. v0 returns up to max_num_offsets segment base offsets before a time;
v1 (KIP-79) returns the first offset whose timestamp is >= the target, with that timestamp."""
from construct import Struct

from protocol.primitives import INT16, INT32, INT64, STRING, Array

ListOffsetsRequestV0 = Struct(
    "replica_id" / INT32,
    "topics" / Array(Struct(
        "topic" / STRING,
        "partitions" / Array(Struct(
            "partition" / INT32,
            "timestamp" / INT64,
            "max_num_offsets" / INT32,
        )),
    )),
)

ListOffsetsRequestV1 = Struct(
    "replica_id" / INT32,
    "topics" / Array(Struct(
        "topic" / STRING,
        "partitions" / Array(Struct(
            "partition" / INT32,
            "timestamp" / INT64,
        )),
    )),
)

ListOffsetsResponseV0 = Struct(
    "responses" / Array(Struct(
        "topic" / STRING,
        "partition_responses" / Array(Struct(
            "partition" / INT32,
            "error_code" / INT16,
            "offsets" / Array(INT64),
        )),
    )),
)

ListOffsetsResponseV1 = Struct(
    "responses" / Array(Struct(
        "topic" / STRING,
        "partition_responses" / Array(Struct(
            "partition" / INT32,
            "error_code" / INT16,
            "timestamp" / INT64,
            "offset" / INT64,
        )),
    )),
)
