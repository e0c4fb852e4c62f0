"""Produce (key 0) v0-v2.

The request body is the same in v0-v2 (v2 only announces message format 1); responses gain
throttle_time_ms in v1 and a per-partition timestamp (LogAppendTime or -1) in v2. Message sets are
opaque ``record_set`` bytes here; protocol.records parses them.

:func:`decode_produce_request` is the hot-path decoder: precompiled struct over the frame's
memoryview, one copy per record set, producing exactly what ``ProduceRequestV*.parse`` produces
(tests/protocol/test_schemas.py checks both on the same bytes, valid and invalid).
"""
import struct

from construct import Container, ListContainer, Struct

from protocol.primitives import INT16, INT32, INT64, RECORDS, STRING, Array, FieldError

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

# acks int16, timeout int32, topic_data count int32: 10 bytes.
_HEAD = struct.Struct(">hii")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
# partition int32, record_set size int32: 8 bytes.
_PARTITION = struct.Struct(">ii")
_TOPIC_MIN = 6      # string length 2 + partition count 4
_PARTITION_MIN = 8  # partition 4 + record_set size 4


def _fail(message: str, offset: int) -> FieldError:
    err = FieldError(message)
    err.offset = offset
    return err


def decode_produce_request(buf, pos: int, end: int):
    """Parse a Produce v0-v2 body from ``buf[pos:end]`` (bytes-like, usually a memoryview).

    Returns ``(Container, position after the body)``. Raises :class:`FieldError` with an
    ``offset`` attribute (absolute index into ``buf``) at the first invalid byte. Lengths and
    counts are checked against ``end`` before use, so nothing large is allocated for bad input.
    """
    if end - pos < 10:
        raise _fail("truncated before topic_data", pos)
    acks, timeout, ntopics = _HEAD.unpack_from(buf, pos)
    pos += 10
    if ntopics < 0 or ntopics * _TOPIC_MIN > end - pos:
        raise _fail(f"topic_data count {ntopics} is negative or exceeds the body", pos - 4)
    topics = []
    for _ in range(ntopics):
        if end - pos < 2:
            raise _fail("truncated topic name", pos)
        (nlen,) = _INT16.unpack_from(buf, pos)
        pos += 2
        if nlen < 0 or nlen > end - pos:
            raise _fail(f"topic name length {nlen} is negative or exceeds the body", pos - 2)
        try:
            topic = str(buf[pos:pos + nlen], "utf-8")
        except UnicodeDecodeError as exc:
            raise _fail(f"topic name is not valid UTF-8: {exc.reason}", pos + exc.start) from None
        pos += nlen
        if end - pos < 4:
            raise _fail("truncated partition count", pos)
        (nparts,) = _INT32.unpack_from(buf, pos)
        pos += 4
        if nparts < 0 or nparts * _PARTITION_MIN > end - pos:
            raise _fail(f"data count {nparts} for topic {topic!r} is negative or exceeds the "
                        f"body", pos - 4)
        data = []
        for _ in range(nparts):
            if end - pos < 8:
                raise _fail(f"truncated partition entry of topic {topic!r}", pos)
            partition, size = _PARTITION.unpack_from(buf, pos)
            pos += 8
            if size < 0 or size > end - pos:
                raise _fail(f"record_set size {size} of {topic}-{partition} is negative or "
                            f"exceeds the body", pos - 4)
            data.append(Container(partition=partition, record_set=bytes(buf[pos:pos + size])))
            pos += size
        topics.append(Container(topic=topic, data=ListContainer(data)))
    return Container(acks=acks, timeout=timeout, topic_data=ListContainer(topics)), pos
