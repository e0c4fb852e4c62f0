"""Fuzzing: truncated, bit-flipped, spliced and random frames fed to ServerConnection and
ClientConnection. Whatever the bytes, the only exceptions are ProtocolError subclasses (never
IndexError, struct.error, UnicodeDecodeError, MemoryError)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import SUPPORTED_VERSIONS, ApiKey, ClientConnection, ProtocolError, ServerConnection
from protocol.schemas import REQUEST_SCHEMAS, RESPONSE_SCHEMAS
from tests.protocol.wire_strategies import value_strategy

ALL = [(k, v) for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items()) for v in range(lo, hi + 1)]
MAX_FRAME = 1 << 20


def _refit(frame: bytes) -> bytes:
    """Rewrite the size prefix to match the payload, so the mutation reaches the decoder."""
    return struct.pack(">i", len(frame) - 4) + frame[4:]


@st.composite
def mutated(draw, frame: bytes) -> bytes:
    kind = draw(st.sampled_from(["truncate", "flip", "splice", "extend", "raw"]))
    if kind == "truncate":
        cut = draw(st.integers(4, max(4, len(frame) - 1)))
        return _refit(frame[:cut])
    if kind == "flip":
        out = bytearray(frame)
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(out) - 1))
            out[i] ^= 1 << draw(st.integers(0, 7))
        refit = draw(st.booleans())
        return _refit(bytes(out)) if refit else bytes(out)
    if kind == "splice":
        i = draw(st.integers(4, len(frame)))
        junk = draw(st.binary(min_size=1, max_size=8))
        return _refit(frame[:i] + junk + frame[i:])
    if kind == "extend":
        return _refit(frame + draw(st.binary(min_size=1, max_size=8)))
    return draw(st.binary(max_size=64))


def _drain(iterator) -> list:
    out = []
    try:
        for item in iterator:
            out.append(item)
    except ProtocolError as exc:
        assert exc.args and isinstance(exc.args[0], str) and exc.args[0]
        return out
    return out


def _split_feed(conn, data: bytes, cuts: list[int]) -> None:
    points = sorted({min(c, len(data)) for c in cuts})
    start = 0
    for p in points + [len(data)]:
        try:
            _drain(conn.receive_data(data[start:p]))
        except ProtocolError:
            return
        start = p


@pytest.mark.parametrize("api,version", ALL, ids=lambda x: str(x))
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_server_survives_mutated_requests(api, version, data):
    value = data.draw(value_strategy(REQUEST_SCHEMAS[api, version], max_items=2))
    _, frame = ClientConnection("fuzz").request(api, version, value)
    bad = data.draw(mutated(frame))
    cuts = data.draw(st.lists(st.integers(0, len(bad)), max_size=3))
    _split_feed(ServerConnection(max_request_bytes=MAX_FRAME), frame + bad, cuts)


@pytest.mark.parametrize("api,version", ALL, ids=lambda x: str(x))
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_client_survives_mutated_responses(api, version, data):
    client = ClientConnection("fuzz", max_response_bytes=MAX_FRAME)
    server = ServerConnection()
    request_value = data.draw(value_strategy(REQUEST_SCHEMAS[api, version], max_items=1))
    if api == ApiKey.PRODUCE:
        request_value["acks"] = -1
    _, frame = client.request(api, version, request_value)
    (request,) = server.receive_data(frame)
    value = data.draw(value_strategy(RESPONSE_SCHEMAS[api, version], max_items=2))
    bad = data.draw(mutated(server.send(request, value)))
    cuts = data.draw(st.lists(st.integers(0, len(bad)), max_size=3))
    _split_feed(client, bad, cuts)


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=200), cuts=st.lists(st.integers(0, 200), max_size=4))
def test_random_bytes_to_server_and_client(raw, cuts):
    _split_feed(ServerConnection(max_request_bytes=MAX_FRAME), raw, cuts)
    client = ClientConnection(max_response_bytes=MAX_FRAME)
    for api, version in ((ApiKey.METADATA, 1), (ApiKey.FETCH, 3)):
        body = (
            {"topics": None}
            if api == ApiKey.METADATA
            else {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 0, "topics": []}
        )
        client.request(api, version, body)
    _split_feed(client, raw, cuts)


@settings(max_examples=200, deadline=None)
@given(
    api=st.integers(-32768, 32767),
    version=st.integers(-32768, 32767),
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    tail=st.binary(max_size=40),
)
def test_random_headers(api, version, correlation_id, tail):
    payload = struct.pack(">hhi", api, version, correlation_id) + tail
    _drain(ServerConnection().receive_data(struct.pack(">i", len(payload)) + payload))
