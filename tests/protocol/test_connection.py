"""ServerConnection / ClientConnection: framing under arbitrary splits, pipelining, refusal of
oversized frames, header edge cases and the ApiVersions v3/v4 (header v2) fallback."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from protocol.schemas import encode_response_body
from protocol import (
    ApiKey,
    BodyEncodeError,
    ClientConnection,
    ErrorCode,
    FileRegion,
    FrameTooLargeError,
    MalformedFrameError,
    Request,
    RequestHeader,
    ServerConnection,
    SUPPORTED_VERSIONS,
    UnsupportedApiError,
    UnsupportedVersionError,
    UndecodedRequest,
    api_versions_body,
)

PRODUCE_BODY = {
    "acks": -1,
    "timeout_ms": 1500,
    "topic_data": [
        {
            "name": "events",
            "partition_data": [
                {"index": 0, "records": b"\x00" * 30},
                {"index": 3, "records": b"msgset"},
            ],
        },
        {"name": "t\u00e9", "partition_data": []},
    ],
}
FETCH_BODY = {
    "replica_id": -1,
    "max_wait_ms": 500,
    "min_bytes": 1,
    "max_bytes": 52428800,
    "topics": [
        {
            "topic": "events",
            "partitions": [{"partition": 0, "fetch_offset": 42, "partition_max_bytes": 1048576}],
        }
    ],
}
METADATA_BODY = {"topics": None}


def _frames():
    client = ClientConnection("split-test")
    return [
        client.request(ApiKey.PRODUCE, 2, PRODUCE_BODY)[1],
        client.request(ApiKey.FETCH, 3, FETCH_BODY)[1],
        client.request(ApiKey.METADATA, 1, METADATA_BODY)[1],
        client.request(ApiKey.API_VERSIONS, 0, {})[1],
    ]


def _check(requests):
    assert [r.header.api_key for r in requests] == [
        ApiKey.PRODUCE,
        ApiKey.FETCH,
        ApiKey.METADATA,
        ApiKey.API_VERSIONS,
    ]
    assert [r.header.correlation_id for r in requests] == [0, 1, 2, 3]
    assert all(r.header.client_id == "split-test" for r in requests)
    produce = requests[0].body
    assert produce.acks == -1 and produce.timeout_ms == 1500
    assert produce.topic_data[0].partition_data[1].records == b"msgset"
    assert produce.topic_data[1].name == "t\u00e9"
    assert requests[1].body.topics[0].partitions[0].fetch_offset == 42
    assert requests[2].body.topics is None


def test_pipelined_frames_in_one_read():
    server = ServerConnection()
    _check(list(server.receive_data(b"".join(_frames()))))


def _produce(client: ClientConnection, records: bytes) -> bytes:
    body = {
        "acks": 1,
        "timeout_ms": 1000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}],
    }
    return client.request(ApiKey.PRODUCE, 9, body)[1]


@pytest.mark.parametrize("size", [100, 200_000, 3_000_000])
def test_produce_records_stay_intact_while_later_input_arrives(size):
    """A Produce's records are views of its frame, not copies: whatever arrives after (the
    next requests, in the same read or later, compaction of the receive buffer) leaves them
    as they were sent. Frames of 1 MiB and more keep the buffer they arrived in; smaller ones
    are copied out of it."""
    client = ClientConnection("views")
    records = bytes(range(256)) * (size // 256) + b"end"
    other = b"\xaa" * size
    first, second = _produce(client, records), _produce(client, other)
    metadata = client.request(ApiKey.METADATA, 1, METADATA_BODY)[1]
    server = ServerConnection(max_request_bytes=8 << 20)
    # the first frame whole plus half the second in one read, the rest in later reads
    got = list(server.receive_data(first + second[: len(second) // 2]))
    assert len(got) == 1
    kept = got[0].body.topic_data[0].partition_data[0].records
    assert isinstance(kept, memoryview) and kept == records
    rest = second[len(second) // 2 :] + metadata
    for at in range(0, len(rest), 70_000):
        got += list(server.receive_data(rest[at : at + 70_000]))
    assert [r.header.api_key for r in got] == [ApiKey.PRODUCE, ApiKey.PRODUCE, ApiKey.METADATA]
    assert kept == records and server.request_size == len(metadata) - 4
    assert got[1].body.topic_data[0].partition_data[0].records == other


def test_buffered_request_api_key_names_the_next_whole_frame_only():
    stream = b"".join(_frames())
    first = len(_frames()[0])
    for cut in range(first, len(stream) + 1):
        server = ServerConnection()
        requests = server.receive_data(stream[:cut])
        assert next(requests).header.api_key == ApiKey.PRODUCE
        # FETCH is next: named only once its whole frame is in, and asking consumes nothing
        whole = cut >= first + len(_frames()[1])
        assert server.buffered_request_api_key() == (ApiKey.FETCH if whole else None)
        assert server.buffered_request_api_key() == (ApiKey.FETCH if whole else None)
        rest = list(requests) + list(server.receive_data(stream[cut:]))
        assert [r.header.api_key for r in rest] == [
            ApiKey.FETCH,
            ApiKey.METADATA,
            ApiKey.API_VERSIONS,
        ]
        assert server.buffered_request_api_key() is None
    server = ServerConnection()
    server.raw_frames = True  # SASL tokens after SaslHandshake v0 are not requests
    server.receive_data(stream)
    assert server.buffered_request_api_key() is None


def test_split_at_every_byte_boundary():
    stream = b"".join(_frames())
    for cut in range(len(stream) + 1):
        server = ServerConnection()
        got = list(server.receive_data(stream[:cut])) + list(server.receive_data(stream[cut:]))
        _check(got)


def test_one_byte_at_a_time():
    server = ServerConnection()
    got = []
    for i, byte in enumerate(b"".join(_frames())):
        got.extend(server.receive_data(bytes([byte])))
    _check(got)


def test_two_cuts_everywhere_in_first_frames():
    stream = b"".join(_frames()[:2])
    for a in range(0, len(stream), 3):
        for b in range(a, len(stream), 7):
            server = ServerConnection()
            got = []
            for part in (stream[:a], stream[a:b], stream[b:]):
                got.extend(server.receive_data(part))
            assert [r.header.correlation_id for r in got] == [0, 1]
            assert got[0].body.topic_data[0].partition_data[0].records == b"\x00" * 30


def test_interleaved_iteration_keeps_order():
    # A caller may feed more bytes before draining the previous iterator.
    frames = _frames()
    server = ServerConnection()
    first = server.receive_data(frames[0] + frames[1][:5])
    second = server.receive_data(frames[1][5:] + frames[2] + frames[3])
    got = [next(first)] + list(second) + list(first)
    _check(got)


def test_oversize_frame_refused_from_its_size_prefix():
    server = ServerConnection(max_request_bytes=1000)
    ok = _frames()[2]
    with pytest.raises(FrameTooLargeError) as info:
        # Only the 4-byte prefix of the big frame has arrived: refusal must not wait for more.
        for request in server.receive_data(ok + struct.pack(">i", 1001)):
            assert request.header.api_key == ApiKey.METADATA
    assert "1001" in str(info.value) and "1000" in str(info.value)


def test_frame_exactly_at_the_limit_is_accepted():
    frame = _frames()[0]
    server = ServerConnection(max_request_bytes=len(frame) - 4)
    assert len(list(server.receive_data(frame))) == 1
    server = ServerConnection(max_request_bytes=len(frame) - 5)
    with pytest.raises(FrameTooLargeError):
        list(server.receive_data(frame))


def test_good_requests_are_yielded_before_the_bad_frame():
    frames = _frames()
    bad = struct.pack(">ihhih", 10, 4, 0, 9, -1)  # LeaderAndIsr: not implemented
    got = []
    with pytest.raises(UnsupportedApiError) as info:
        for request in ServerConnection().receive_data(frames[0] + frames[1] + bad + frames[2]):
            got.append(request)
    assert [r.header.correlation_id for r in got] == [0, 1]
    assert info.value.api_key == 4 and info.value.offset == 4


def _decoded_beside(frames: bytes, at: int) -> tuple[list[Request], list[bool]]:
    """The requests of ``frames`` from a connection handing out frames of ``at`` bytes or more
    undecoded (each decoded here in turn), and which came undecoded."""
    conn = ServerConnection(decode_beside_bytes=at)
    requests, undecoded = [], []
    for item in conn.receive_data(frames):
        undecoded.append(isinstance(item, UndecodedRequest))
        requests.append(item.decode() if isinstance(item, UndecodedRequest) else item)
    return requests, undecoded


def test_large_frames_are_handed_out_undecoded_produce_aside():
    """From ``decode_beside_bytes`` on, a frame comes as an UndecodedRequest whose decode()
    gives the same request; a Produce is decoded whatever its size (its records are views)."""
    frames = _frames()
    sizes = [len(f) for f in frames]
    requests, undecoded = _decoded_beside(b"".join(frames), min(sizes[1:]))
    _check(requests)
    assert undecoded == [False, True, True, True]
    assert requests == list(ServerConnection().receive_data(b"".join(frames)))
    _, undecoded = _decoded_beside(b"".join(frames), max(sizes[1:]))
    assert undecoded == [False] + [size == max(sizes[1:]) for size in sizes[1:]]


def test_an_undecoded_frame_raises_its_error_when_decoded():
    bad = struct.pack(">ihhih", 10, ApiKey.FETCH, 19, 7, -1)
    conn = ServerConnection(decode_beside_bytes=10)
    (item,) = conn.receive_data(bad)
    assert conn.request_size == 10
    with pytest.raises(UnsupportedVersionError) as info:
        item.decode()
    assert info.value.api_key == ApiKey.FETCH and info.value.api_version == 19


def test_unsupported_version_of_known_api():
    frame = struct.pack(">ihhih", 10, ApiKey.FETCH, 19, 7, -1)
    with pytest.raises(UnsupportedVersionError) as info:
        list(ServerConnection().receive_data(frame))
    assert info.value.api_key == ApiKey.FETCH and info.value.api_version == 19
    assert "v0-v18" in str(info.value)


def test_api_with_a_schema_but_not_served_is_unsupported():
    unserved = next(key for key in ApiKey if key not in SUPPORTED_VERSIONS)
    frame = struct.pack(">ihhih", 10, unserved, 0, 7, -1)
    with pytest.raises(UnsupportedApiError):
        list(ServerConnection().receive_data(frame))


def test_negative_version_is_unsupported():
    frame = struct.pack(">ihhih", 10, ApiKey.API_VERSIONS, -1, 7, -1)
    with pytest.raises(UnsupportedVersionError):
        list(ServerConnection().receive_data(frame))


@pytest.mark.parametrize(
    "frame,offset",
    [
        (struct.pack(">i", -5), 0),
        (struct.pack(">i", 3) + b"\x00\x03\x00", 4),
        (struct.pack(">ihhih", 10, ApiKey.METADATA, 1, 1, 5), 12),
        (struct.pack(">ihhih", 12, ApiKey.METADATA, 1, 1, 2) + b"\xc3\x28", 14),
        (struct.pack(">ihhih", 10, ApiKey.METADATA, 1, 1, -2), 12),
    ],
)
def test_malformed_headers(frame, offset):
    with pytest.raises(MalformedFrameError) as info:
        list(ServerConnection().receive_data(frame))
    assert info.value.offset == offset


def test_bytes_after_a_request_body_are_ignored_as_kafka_does():
    # librdkafka 2.16's "all topics" Metadata v12 (list_topics()) as captured on the wire: three
    # bytes follow the body's tagged fields, which Kafka's parser never looks at.
    frame = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    (request,) = ServerConnection().receive_data(struct.pack(">i", len(frame)) + frame)
    assert (request.header.api_key, request.header.api_version) == (ApiKey.METADATA, 12)
    assert request.body.topics is None and request.header.client_id == "rdkafka"
    original = _frames()[2]
    padded = bytearray(original + b"\x00\x01")
    struct.pack_into(">i", padded, 0, len(padded) - 4)
    (a,) = ServerConnection().receive_data(original)
    (b,) = ServerConnection().receive_data(bytes(padded))
    assert a == b


def test_bytes_after_a_response_body_are_refused():
    client = ClientConnection()
    correlation_id, _ = client.request(ApiKey.METADATA, 1, {"topics": []})
    body = encode_response_body(ApiKey.METADATA, 1, {"brokers": [], "topics": []})
    frame = struct.pack(">i", correlation_id) + body + b"\x00\x01"
    with pytest.raises(MalformedFrameError) as info:
        list(client.receive_data(struct.pack(">i", len(frame)) + frame))
    assert "2 unexpected bytes" in str(info.value)


def test_null_client_id_header():
    frame = struct.pack(">ihhih", 14, ApiKey.METADATA, 0, 99, -1) + b"\x00\x00\x00\x00"
    (request,) = ServerConnection().receive_data(frame)
    assert request.header == RequestHeader(ApiKey.METADATA, 0, 99, None)
    assert request.body.topics == []


@pytest.mark.parametrize("version", [3, 4])
def test_api_versions_v3_v4_with_header_v2(version):
    """kafka-python's own ApiVersionsRequest (header v2 and a flexible body): answered in its
    own version, with response header v0 as Kafka does for ApiVersions."""
    probe = ApiVersionsRequest(
        client_software_name="kafka-python", client_software_version="3.0.12"
    )
    probe.with_header(correlation_id=77, client_id="kafka-python-producer-1")
    server = ServerConnection()
    (request,) = server.receive_data(bytes(probe.encode(version=version, header=True, framed=True)))
    assert (request.body.client_software_name, request.body.client_software_version) == (
        "kafka-python",
        "3.0.12",
    )
    answer = server.send(request, {**api_versions_body(), "throttle_time_ms": 0})
    decoded = ApiVersionsResponse.decode(answer, version=version, header=True, framed=True)
    assert decoded.header.correlation_id == 77 and decoded.error_code == 0
    assert {(a.api_key, a.min_version, a.max_version) for a in decoded.api_keys} == {
        (int(k), lo, hi) for k, (lo, hi) in SUPPORTED_VERSIONS.items()
    }


@pytest.mark.parametrize("version", [5, 9])
def test_api_versions_above_ours_gets_v0_error_35(version):
    """A client newer than us (header v2, flexible body we cannot know): error 35 in the v0
    layout, as Kafka answers, so the client retries with a version we listed."""
    probe = ApiVersionsRequest(
        client_software_name="kafka-python", client_software_version="3.0.12"
    )
    probe.with_header(correlation_id=1234, client_id="kafka-python-producer-1")
    wire = bytes(probe.encode(version=4, header=True, framed=True))
    wire = wire[:6] + struct.pack(">h", version) + wire[8:]
    server = ServerConnection()
    (request,) = server.receive_data(wire)
    assert request.body is None
    assert request.header == RequestHeader(
        ApiKey.API_VERSIONS, version, 1234, "kafka-python-producer-1"
    )
    answer = server.send(request, api_versions_body(ErrorCode.UNSUPPORTED_VERSION))
    # Exactly: size, correlation id, error 35, api list in v0 layout (no tagged fields,
    # no throttle time).
    entries = b"".join(
        struct.pack(">hhh", k, lo, hi) for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())
    )
    body = struct.pack(">hi", 35, len(SUPPORTED_VERSIONS)) + entries
    assert answer == struct.pack(">ii", 4 + len(body), 1234) + body
    # kafka-python reads it as a v0 response (what it does after a failed probe).
    decoded = ApiVersionsResponse.decode(answer, version=0, header=True, framed=True)
    assert decoded.error_code == 35
    assert {(a.api_key, a.min_version, a.max_version) for a in decoded.api_keys} == {
        (int(k), lo, hi) for k, (lo, hi) in SUPPORTED_VERSIONS.items()
    }


def test_librdkafka_style_probe_then_v0_on_same_connection():
    probe = ApiVersionsRequest(client_software_name="librdkafka", client_software_version="2.16")
    probe.with_header(correlation_id=1, client_id="rdkafka")
    retry = ApiVersionsRequest()
    retry.with_header(correlation_id=2, client_id="rdkafka")
    wire = bytes(probe.encode(version=4, header=True, framed=True))
    wire = (
        wire[:6]
        + struct.pack(">h", 7)
        + wire[8:]
        + bytes(retry.encode(version=0, header=True, framed=True))
    )
    first, second = ServerConnection().receive_data(wire)
    assert first.body is None and second.body.client_software_name == ""
    assert second.header.api_version == 0 and second.header.correlation_id == 2


def test_send_chunks_accounts_for_file_regions():
    client = ClientConnection()
    server = ServerConnection()
    _, frame = client.request(ApiKey.FETCH, 3, FETCH_BODY)
    (request,) = server.receive_data(frame)
    region = FileRegion(source=7, position=4096, length=1234)
    body = {
        "throttle_time_ms": 0,
        "responses": [
            {
                "topic": "events",
                "partitions": [
                    {"partition_index": 0, "error_code": 0, "high_watermark": 99, "records": region}
                ],
            }
        ],
    }
    chunks = server.send_chunks(request, body)
    assert chunks[-1] == region and len(chunks) == 2
    (size, correlation_id) = struct.unpack_from(">ii", chunks[0])
    assert size == len(chunks[0]) - 4 + region.length
    assert correlation_id == request.header.correlation_id
    # The client decodes the frame once the region's bytes are sent in its place.
    (response,) = client.receive_data(chunks[0] + b"R" * 1234)
    part = response.body.responses[0].partitions[0]
    assert part.records == b"R" * 1234 and part.high_watermark == 99
    with pytest.raises(BodyEncodeError):
        server.send(request, body)


def test_send_returns_bytes_and_client_matches_correlation_ids():
    client = ClientConnection("c")
    server = ServerConnection()
    ids = [
        client.request(ApiKey.HEARTBEAT, 0, {"group_id": "g", "generation_id": i, "member_id": "m"})
        for i in range(3)
    ]
    assert [i for i, _ in ids] == [0, 1, 2] and client.pending == 3
    requests = list(server.receive_data(b"".join(f for _, f in ids)))
    # Answer out of order: the client matches by correlation id.
    wire = b"".join(
        server.send(r, {"error_code": r.body.generation_id}) for r in reversed(requests)
    )
    responses = list(client.receive_data(wire))
    assert [(r.correlation_id, r.body.error_code) for r in responses] == [(2, 2), (1, 1), (0, 0)]
    assert all(r.api_key == ApiKey.HEARTBEAT and r.api_version == 0 for r in responses)
    assert client.pending == 0


def test_client_rejects_unknown_correlation_id():
    client = ClientConnection()
    with pytest.raises(MalformedFrameError) as info:
        list(client.receive_data(struct.pack(">iih", 6, 77, 0)))
    assert "77" in str(info.value)


def test_acks_zero_produce_expects_no_response():
    client = ClientConnection()
    client.request(ApiKey.PRODUCE, 2, dict(PRODUCE_BODY, acks=0))
    assert client.pending == 0


def test_client_refuses_unknown_api_and_version():
    client = ClientConnection()
    with pytest.raises(UnsupportedApiError):
        client.request(52, 0, {})  # Vote (KRaft): no schema
    with pytest.raises(UnsupportedVersionError):
        client.request(ApiKey.FETCH, 19, FETCH_BODY)
    with pytest.raises(BodyEncodeError):
        client.request(ApiKey.FETCH, 3, {"replica_id": "-1"})
    assert client.pending == 0


def test_request_is_frozen():
    request = Request(RequestHeader(ApiKey.METADATA, 1, 0, "x"), None)
    with pytest.raises(AttributeError):
        request.body = {}  # type: ignore[misc]


def test_large_frame_in_small_chunks_is_assembled():
    client = ClientConnection()
    body = {
        "acks": 1,
        "timeout_ms": 10,
        "topic_data": [
            {"name": "big", "partition_data": [{"index": 0, "records": bytes(range(256)) * 4096}]}
        ],
    }
    _, frame = client.request(ApiKey.PRODUCE, 2, body)
    server = ServerConnection()
    got = []
    for i in range(0, len(frame), 65536):
        got.extend(server.receive_data(frame[i : i + 65536]))
    assert len(got) == 1
    assert got[0].body.topic_data[0].partition_data[0].records == bytes(range(256)) * 4096
