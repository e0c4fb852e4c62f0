"""Schema table tests: every (api, version) round-trips both directions, field names and
layouts match Kafka 0.10.1's Protocol.java, and the codecs used at run time (compiled from the
schemas, and the Fetch response encoder) agree with the declared construct schemas on valid,
mutated and random input."""
from __future__ import annotations

import io
import struct

import pytest
from construct import ConstructError, Container, Struct
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import ApiKey, FileRegion, SUPPORTED_VERSIONS
from protocol.errors import BodyEncodeError, MalformedFrameError
from protocol.schemas import (
    REQUEST_SCHEMAS,
    RESPONSE_SCHEMAS,
    decode_request_body,
    decode_response_body,
    encode_request_body,
    encode_response_body,
    encode_response_chunks,
)
from protocol.schemas.fetch import encode_fetch_response
from protocol.schemas.produce import ProduceRequestV0
from wire_strategies import strip, value_strategy

ALL_KEYS = sorted(REQUEST_SCHEMAS)


def test_table_covers_exactly_supported_versions():
    expected = {(k, v) for k, (lo, hi) in SUPPORTED_VERSIONS.items() for v in range(lo, hi + 1)}
    assert set(REQUEST_SCHEMAS) == expected
    assert set(RESPONSE_SCHEMAS) == expected


def test_supported_versions_are_what_clients_need():
    # docs: kafka-python identifies 0.10.1 from Metadata v2; clients use Fetch v3, ListOffsets
    # v1, Produce v2, JoinGroup v1, OffsetCommit v2, OffsetFetch v1.
    assert SUPPORTED_VERSIONS[ApiKey.METADATA] == (0, 2)
    assert SUPPORTED_VERSIONS[ApiKey.FETCH] == (0, 3)
    assert SUPPORTED_VERSIONS[ApiKey.PRODUCE] == (0, 2)
    assert SUPPORTED_VERSIONS[ApiKey.LIST_OFFSETS] == (0, 1)
    assert SUPPORTED_VERSIONS[ApiKey.JOIN_GROUP] == (0, 1)
    assert SUPPORTED_VERSIONS[ApiKey.OFFSET_COMMIT] == (0, 2)
    assert SUPPORTED_VERSIONS[ApiKey.OFFSET_FETCH] == (0, 1)
    assert SUPPORTED_VERSIONS[ApiKey.API_VERSIONS] == (0, 0)


def _names(con):
    """Field names as a nested tuple, arrays shown as [..]."""
    from protocol.primitives import KafkaArray
    from construct import Renamed
    if isinstance(con, Renamed):
        return _names(con.subcon)
    if isinstance(con, KafkaArray):
        return [_names(con.subcon)]
    if isinstance(con, Struct):
        return tuple((sc.name, _names(sc)) if _names(sc) is not None else sc.name
                     for sc in con.subcons)
    return None


# Layouts transcribed from Protocol.java (0.10.1 names), independent of the schema code.
EXPECTED_LAYOUTS = {
    ("req", ApiKey.PRODUCE, 2): ("acks", "timeout", ("topic_data", [("topic", ("data", [(
        "partition", "record_set")]))])),
    ("resp", ApiKey.PRODUCE, 2): (("responses", [("topic", ("partition_responses", [(
        "partition", "error_code", "base_offset", "timestamp")]))]), "throttle_time_ms"),
    ("resp", ApiKey.FETCH, 3): ("throttle_time_ms", ("responses", [("topic", (
        "partition_responses", [(("partition_header", ("partition", "error_code",
                                                       "high_watermark")), "record_set")]))])),
    ("req", ApiKey.FETCH, 3): ("replica_id", "max_wait_time", "min_bytes", "max_bytes", (
        "topics", [("topic", ("partitions", [("partition", "fetch_offset", "max_bytes")]))])),
    ("resp", ApiKey.METADATA, 2): (("brokers", [("node_id", "host", "port", "rack")]),
                                   "cluster_id", "controller_id",
                                   ("topic_metadata", [("topic_error_code", "topic",
                                                        "is_internal", ("partition_metadata", [(
                                                            "partition_error_code",
                                                            "partition_id", "leader",
                                                            ("replicas", [None]),
                                                            ("isr", [None]))]))])),
    ("req", ApiKey.LIST_OFFSETS, 1): ("replica_id", ("topics", [("topic", ("partitions", [(
        "partition", "timestamp")]))])),
    ("resp", ApiKey.LIST_OFFSETS, 1): (("responses", [("topic", ("partition_responses", [(
        "partition", "error_code", "timestamp", "offset")]))]),),
    ("req", ApiKey.JOIN_GROUP, 1): ("group_id", "session_timeout", "rebalance_timeout",
                                    "member_id", "protocol_type", ("group_protocols", [(
                                        "protocol_name", "protocol_metadata")])),
    ("req", ApiKey.OFFSET_COMMIT, 2): ("group_id", "group_generation_id", "member_id",
                                       "retention_time", ("topics", [("topic", ("partitions", [(
                                           "partition", "offset", "metadata")]))])),
    ("resp", ApiKey.API_VERSIONS, 0): ("error_code", ("api_versions", [(
        "api_key", "min_version", "max_version")])),
}


@pytest.mark.parametrize("key", sorted(EXPECTED_LAYOUTS, key=str))
def test_field_names_match_protocol_java(key):
    direction, api, version = key
    table = REQUEST_SCHEMAS if direction == "req" else RESPONSE_SCHEMAS
    assert _names(table[api, version]) == EXPECTED_LAYOUTS[key]


@pytest.mark.parametrize("api,version", ALL_KEYS, ids=lambda x: str(x))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip_every_schema(api, version, data):
    for direction, encode, decode, table in (
            ("request", encode_request_body, decode_request_body, REQUEST_SCHEMAS),
            ("response", encode_response_body, decode_response_body, RESPONSE_SCHEMAS)):
        value = data.draw(value_strategy(table[api, version]), label=direction)
        raw = encode(api, version, value)
        assert raw == table[api, version].build(value)
        decoded = decode(api, version, raw, 0, len(raw))
        assert strip(decoded) == value
        # Decoding a memoryview slice in the middle of a bigger buffer gives the same answer.
        padded = memoryview(b"\xAA" * 7 + raw + b"\x55" * 3)
        assert strip(decode(api, version, padded, 7, 7 + len(raw))) == value


def test_nullable_fields_round_trip_as_none():
    raw = encode_request_body(ApiKey.METADATA, 1, {"topics": None})
    assert raw == b"\xff\xff\xff\xff"
    assert decode_request_body(ApiKey.METADATA, 1, raw, 0, 4).topics is None
    # v0 has no null: -1 is malformed there.
    with pytest.raises(MalformedFrameError):
        decode_request_body(ApiKey.METADATA, 0, raw, 0, 4)
    body = {"brokers": [{"node_id": 0, "host": "h", "port": 9092, "rack": None}],
            "cluster_id": None, "controller_id": 0, "topic_metadata": []}
    raw = encode_response_body(ApiKey.METADATA, 2, body)
    got = decode_response_body(ApiKey.METADATA, 2, raw, 0, len(raw))
    assert got.cluster_id is None and got.brokers[0].rack is None
    commit = {"group_id": "g", "topics": [{"topic": "t", "partitions": [
        {"partition": 0, "offset": 5, "metadata": None}]}]}
    raw = encode_request_body(ApiKey.OFFSET_COMMIT, 0, commit)
    assert decode_request_body(ApiKey.OFFSET_COMMIT, 0, raw, 0, len(raw)).topics[0] \
        .partitions[0].metadata is None


def test_empty_string_and_bytes_are_not_null():
    raw = encode_response_body(ApiKey.SYNC_GROUP, 0, {"error_code": 0, "member_assignment": b""})
    assert raw == b"\x00\x00" + b"\x00\x00\x00\x00"
    assert decode_response_body(ApiKey.SYNC_GROUP, 0, raw, 0, len(raw)).member_assignment == b""


@pytest.mark.parametrize("raw,what", [
    (b"\x00\x01\x00\x00\x00\x01\x00\x00\x00\x01\xff\xfe", "negative string length"),
    (b"\x00\x01\x00\x00\x00\x01\x80\x00\x00\x00", "negative array count"),
    (b"\x00\x01\x00\x00\x00\x01\x7f\xff\xff\xff", "huge array count"),
    (b"\x00\x01\x00\x00\x00\x01\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x01\x00\x00\x00\x00"
     b"\x7f\xff\xff\xff", "huge record_set"),
    (b"\x00\x01\x00\x00\x00\x01\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x01\x00\x00\x00\x00"
     b"\xff\xff\xff\xff", "null record_set"),
    (b"\x00\x01\x00\x00\x00\x01\x00\x00\x00\x01\x00\x02\xff\xfe\x00\x00\x00\x00", "bad utf-8"),
    (b"\x00\x01\x00\x00\x00\x01\x00\x00\x00\x00\x00", "trailing byte"),
    (b"\x00\x01\x00", "truncated"),
])
def test_malformed_produce_bodies_are_typed_errors(raw, what):
    for version in (0, 1, 2):
        with pytest.raises(MalformedFrameError) as info:
            decode_request_body(ApiKey.PRODUCE, version, raw, 0, len(raw))
        assert info.value.api_key == ApiKey.PRODUCE and info.value.api_version == version
        assert 0 <= info.value.offset <= len(raw)
    # The declared schema refuses the same bytes (the compiled codec is not more lenient).
    assert construct_decode(ProduceRequestV0, raw) is REFUSED


def test_huge_counts_fail_fast_without_allocating():
    # 2**31-1 int32 elements claimed in a 20-byte body must fail at the count, not loop.
    raw = struct.pack(">i", 2**31 - 1) + b"\x00" * 16
    with pytest.raises(MalformedFrameError) as info:
        decode_request_body(ApiKey.DESCRIBE_GROUPS, 0, raw, 0, len(raw))
    # Refused at the count itself (offset 0), before any element was read.
    assert "cannot fit" in str(info.value) and info.value.offset == 0
    assert construct_decode(REQUEST_SCHEMAS[ApiKey.DESCRIBE_GROUPS, 0], raw) is REFUSED


REFUSED = object()


def construct_decode(schema, raw: bytes):
    """The declared schema's verdict: the parsed value, or REFUSED (error or bytes left)."""
    stream = io.BytesIO(raw)
    try:
        value = schema.parse_stream(stream)
    except ConstructError:
        return REFUSED
    return strip(value) if stream.tell() == len(raw) else REFUSED


def compiled_decode(api, version, raw: bytes, table):
    decode = decode_request_body if table is REQUEST_SCHEMAS else decode_response_body
    try:
        value = decode(api, version, memoryview(raw), 0, len(raw))
    except MalformedFrameError as exc:
        assert 0 <= exc.offset <= len(raw)
        return REFUSED
    assert "_io" not in value
    return strip(value)


def _mutations(raw: bytes):
    cut = st.integers(0, max(len(raw) - 1, 0))
    return st.one_of(
        st.just(raw),
        cut.map(lambda i: raw[:i]),
        st.tuples(cut, st.integers(0, 255)).map(
            lambda t: raw[:t[0]] + bytes([t[1]]) + raw[t[0] + 1:] if raw else raw),
        st.tuples(cut, st.binary(min_size=1, max_size=4)).map(
            lambda t: raw[:t[0]] + t[1] + raw[t[0]:]),
        st.binary(max_size=40),
    )


@pytest.mark.parametrize("api,version", ALL_KEYS, ids=lambda x: str(x))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_compiled_codec_equals_construct_on_any_bytes(api, version, data):
    for table in (REQUEST_SCHEMAS, RESPONSE_SCHEMAS):
        schema = table[api, version]
        raw = schema.build(data.draw(value_strategy(schema, max_items=2)))
        mutated = data.draw(_mutations(raw))
        expected = construct_decode(schema, mutated)
        assert compiled_decode(api, version, mutated, table) == expected


def test_record_sets_decode_to_bytes():
    body = {"acks": 1, "timeout": 5, "topic_data": [{"topic": "t", "data": [
        {"partition": 0, "record_set": b"abc"}]}]}
    raw = memoryview(bytearray(ProduceRequestV0.build(body)))
    decoded = decode_request_body(ApiKey.PRODUCE, 2, raw, 0, len(raw))
    record_set = decoded.topic_data[0].data[0].record_set
    assert type(record_set) is bytes and record_set == b"abc"
    raw.release()  # no view into the receive buffer survives decoding


def _fetch_body_strategy(version):
    return value_strategy(RESPONSE_SCHEMAS[ApiKey.FETCH, version]).map(_with_big_record_sets)


def _with_big_record_sets(body):
    # Some record sets above the separate-chunk threshold, to exercise that branch.
    for i, topic in enumerate(body["responses"]):
        for j, part in enumerate(topic["partition_responses"]):
            if (i + j) % 2:
                part["record_set"] = bytes([i, j]) * 9000
    return body


@pytest.mark.parametrize("version", [0, 1, 2, 3])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_fetch_fast_encoder_equals_schema(version, data):
    body = data.draw(_fetch_body_strategy(version))
    schema = RESPONSE_SCHEMAS[ApiKey.FETCH, version]
    chunks, total = encode_fetch_response(version, body)
    joined = b"".join(chunks)
    assert joined == schema.build(body)
    assert total == len(joined)
    assert encode_response_body(ApiKey.FETCH, version, body) == joined


@pytest.mark.parametrize("version", [0, 3])
def test_fetch_file_regions_become_separate_chunks(version):
    regions = [FileRegion("seg-a", 10, 100), FileRegion("seg-b", 0, 0)]
    body = {"throttle_time_ms": 0, "responses": [{"topic": "t", "partition_responses": [
        {"partition_header": {"partition": 0, "error_code": 0, "high_watermark": 110},
         "record_set": regions[0]},
        {"partition_header": {"partition": 1, "error_code": 0, "high_watermark": 0},
         "record_set": b"xy"},
        {"partition_header": {"partition": 2, "error_code": 1, "high_watermark": 0},
         "record_set": regions[1]}]}]}
    chunks, total = encode_response_chunks(ApiKey.FETCH, version, body)
    assert [c for c in chunks if isinstance(c, FileRegion)] == regions
    assert isinstance(chunks[0], bytes)
    assert total == sum(c.length if isinstance(c, FileRegion) else len(c) for c in chunks)
    # Replacing each region by the bytes it stands for gives the schema's encoding.
    filled = {"seg-a": b"r" * 100, "seg-b": b""}
    concrete = Container(body)
    concrete["responses"] = [{"topic": "t", "partition_responses": [
        dict(p, record_set=filled[p["record_set"].source]
             if isinstance(p["record_set"], FileRegion) else p["record_set"])
        for p in body["responses"][0]["partition_responses"]]}]
    wire = b"".join(filled[c.source] if isinstance(c, FileRegion) else c for c in chunks)
    assert wire == RESPONSE_SCHEMAS[ApiKey.FETCH, version].build(concrete)
    with pytest.raises(BodyEncodeError):
        encode_response_body(ApiKey.FETCH, version, body)


@pytest.mark.parametrize("api,version,body", [
    (ApiKey.HEARTBEAT, 0, {}),
    (ApiKey.HEARTBEAT, 0, {"error_code": 70000}),
    (ApiKey.SYNC_GROUP, 0, {"error_code": 0, "member_assignment": "text, not bytes"}),
    (ApiKey.LIST_GROUPS, 0, {"error_code": 0, "groups": [{"group_id": None,
                                                          "protocol_type": "c"}]}),
    (ApiKey.FETCH, 3, {"throttle_time_ms": 0, "responses": [{"topic": "t",
                                                             "partition_responses": [{}]}]}),
    (ApiKey.FETCH, 1, {"throttle_time_ms": 0, "responses": [{"topic": "t" * 40000,
                                                             "partition_responses": []}]}),
])
def test_bad_bodies_raise_body_encode_error(api, version, body):
    with pytest.raises(BodyEncodeError) as info:
        encode_response_body(api, version, body)
    assert info.value.api_key == api and info.value.api_version == version
