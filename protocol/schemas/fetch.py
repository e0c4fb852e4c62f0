"""Fetch (key 1) v0-v3.

Requests: v3 adds a response-level max_bytes (KIP-74). Responses: v1 adds throttle_time_ms; v2
and v3 have v1's layout (v2 announces message format 1 in record sets).

:func:`encode_fetch_response` is the hot-path encoder. It produces the same bytes as
``FetchResponseV*.build`` (tests prove it) but writes each partition's ``record_set`` as its own
chunk when it is a :class:`~protocol.api.FileRegion` (for sendfile) or large bytes (no copy).
"""
import struct

from construct import Struct

from protocol.api import FileRegion
from protocol.primitives import INT16, INT32, INT64, RECORDS, STRING, Array

_FetchTopicV0 = Struct(
    "topic" / STRING,
    "partitions" / Array(Struct(
        "partition" / INT32,
        "fetch_offset" / INT64,
        "max_bytes" / INT32,
    )),
)

FetchRequestV0 = Struct(
    "replica_id" / INT32,
    "max_wait_time" / INT32,
    "min_bytes" / INT32,
    "topics" / Array(_FetchTopicV0),
)
FetchRequestV1 = FetchRequestV0
FetchRequestV2 = FetchRequestV0

FetchRequestV3 = Struct(
    "replica_id" / INT32,
    "max_wait_time" / INT32,
    "min_bytes" / INT32,
    "max_bytes" / INT32,
    "topics" / Array(_FetchTopicV0),
)

_FetchResponseTopicV0 = Struct(
    "topic" / STRING,
    "partition_responses" / Array(Struct(
        "partition_header" / Struct(
            "partition" / INT32,
            "error_code" / INT16,
            "high_watermark" / INT64,
        ),
        "record_set" / RECORDS,
    )),
)

FetchResponseV0 = Struct("responses" / Array(_FetchResponseTopicV0))

FetchResponseV1 = Struct(
    "throttle_time_ms" / INT32,
    "responses" / Array(_FetchResponseTopicV0),
)
FetchResponseV2 = FetchResponseV1
FetchResponseV3 = FetchResponseV1

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
# partition int32, error_code int16, high_watermark int64, record_set size int32: 18 bytes.
_PARTITION_HEAD = struct.Struct(">ihqi")
# Record sets at least this large go out as their own chunk instead of being copied.
_SEPARATE_CHUNK = 16384


def encode_fetch_response(version: int, body) -> tuple[list, int]:
    """Encode a Fetch v0-v3 response body into chunks.

    Returns ``(chunks, total_length)``: bytes and FileRegions in wire order (the first chunk
    is always bytes); ``total_length`` counts region lengths. Raises KeyError / TypeError / struct.error / ValueError for a body that does not
    fit the schema (the caller converts them).
    """
    chunks: list = []
    out = bytearray()
    total = 0
    if version >= 1:
        out += _INT32.pack(body["throttle_time_ms"])
    responses = body["responses"]
    out += _INT32.pack(len(responses))
    for topic in responses:
        name = topic["topic"].encode("utf-8")
        if len(name) > 0x7FFF:
            raise ValueError(f"topic name of {len(name)} bytes exceeds 32767")
        parts = topic["partition_responses"]
        out += _INT16.pack(len(name))
        out += name
        out += _INT32.pack(len(parts))
        for part in parts:
            head = part["partition_header"]
            records = part["record_set"]
            if isinstance(records, FileRegion):
                size = records.length
            elif isinstance(records, (bytes, bytearray, memoryview)):
                size = len(records) if not isinstance(records, memoryview) else records.nbytes
            else:
                raise TypeError(f"record_set must be bytes or FileRegion, got "
                                f"{type(records).__name__}")
            out += _PARTITION_HEAD.pack(head["partition"], head["error_code"],
                                        head["high_watermark"], size)
            if isinstance(records, FileRegion) or size >= _SEPARATE_CHUNK:
                if out:
                    chunks.append(bytes(out))
                    total += len(out)
                    out = bytearray()
                chunks.append(records if isinstance(records, (FileRegion, bytes))
                              else bytes(records))
                total += size
            else:
                out += records
    if out:
        chunks.append(bytes(out))
        total += len(out)
    return chunks, total

