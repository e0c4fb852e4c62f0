"""Produce (key 0) v0-v2.

The request body is the same in v0-v2 (v2 only announces message format 1); responses gain
throttle_time_ms in v1 and a per-partition timestamp (LogAppendTime or -1) in v2. Message sets are
opaque ``record_set`` bytes here (copied once out of the frame by the compiled decoder);
protocol.records parses them.
"""
from construct import Struct

from protocol.primitives import INT16, INT32, INT64, RECORDS, STRING, Array

ProduceRequestV0 = Struct(
    "acks" / INT16,
    "timeout" / INT32,
    "topic_data" / Array(Struct(
        "topic" / STRING,
        "data" / Array(Struct(
            "partition" / INT32,
            "record_set" / RECORDS,
        )),
    )),
)
ProduceRequestV1 = ProduceRequestV0
ProduceRequestV2 = ProduceRequestV0

ProduceResponseV0 = Struct(
    "responses" / Array(Struct(
        "topic" / STRING,
        "partition_responses" / Array(Struct(
            "partition" / INT32,
            "error_code" / INT16,
            "base_offset" / INT64,
        )),
    )),
)

ProduceResponseV1 = Struct(
    "responses" / Array(Struct(
        "topic" / STRING,
        "partition_responses" / Array(Struct(
            "partition" / INT32,
            "error_code" / INT16,
            "base_offset" / INT64,
        )),
    )),
    "throttle_time_ms" / INT32,
)

# Kafka 0.10.1 names the v2 field "timestamp" (0.11 renamed it log_append_time).
ProduceResponseV2 = Struct(
    "responses" / Array(Struct(
        "topic" / STRING,
        "partition_responses" / Array(Struct(
            "partition" / INT32,
            "error_code" / INT16,
            "base_offset" / INT64,
            "timestamp" / INT64,
        )),
    )),
    "throttle_time_ms" / INT32,
)
