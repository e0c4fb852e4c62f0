"""The compiled codecs against the interpreter they replaced (interpreted_codec.py), for every
api and version in definitions.py, both directions: random bodies, mutated (keys dropped,
unknown or other versions' keys added, values of the wrong type or range, big records, Bodies
for dicts), encode to the same chunks or fail with the same error; their bytes, intact,
truncated, bit-flipped, spliced or random, decode to the same Body or fail with the same
FieldError message and offset. Plus the zero-copy promise for records."""

from __future__ import annotations

import functools
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import ApiKey, FileRegion
from protocol.schemas import (
    REQUEST_SCHEMAS,
    RESPONSE_SCHEMAS,
    Body,
    encode_request_body,
    encode_response_chunks,
)
from tests.protocol import interpreted_codec
from tests.protocol.wire_strategies import value_strategy

TABLES = {"request": REQUEST_SCHEMAS, "response": RESPONSE_SCHEMAS}
EVERY = [
    (direction, api, version)
    for direction, table in TABLES.items()
    for api, version in sorted(table)
]

# Values put where they may or may not fit: wrong types, out of range, nulls, big records.
ODD_VALUES = [
    None,
    "text",
    "\u00e9t\u00e9",
    b"raw",
    bytearray(b"ab"),
    memoryview(b"abcd"),
    memoryview(b"abcd").cast("I"),
    b"\x07" * 16384,
    FileRegion(3, 0, 7),
    1.5,
    -1,
    0,
    2**31,
    2**63,
    -(2**70),
    True,
    [],
    [1],
    ["a"],
    ("x",),
    {},
    {"bogus": 1},
    uuid.UUID(int=5),
    object(),
]


@functools.cache
def oracle(direction: str, api: ApiKey, version: int):
    schema = TABLES[direction][api, version].schema
    return (
        interpreted_codec.decoder(schema, records_view=direction == "request"),
        interpreted_codec.encoder(schema),
    )


def outcome(fn, *args):
    """What ``fn(*args)`` returned, or the class, message and offset of what it raised."""
    try:
        return ("returned", fn(*args))
    except Exception as exc:  # noqa: BLE001 - any difference in what is raised counts
        return ("raised", type(exc), str(exc), getattr(exc, "offset", None))


def same(a, b) -> bool:
    """Equal, of the same types all the way down, dict keys in the same order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, float) and a != a:
        return b != b
    return a == b


def struct_nodes(schema, value, found: list) -> list:
    """Every (struct definition, dict) pair in a body."""
    found.append((schema, value))
    for f in schema.fields:
        v = value.get(f.name) if isinstance(value, dict) else None
        if f.type == "struct" and isinstance(v, dict):
            struct_nodes(f.struct, v, found)
        elif f.type == "[]" and f.element == "struct" and isinstance(v, list):
            for item in v:
                if isinstance(item, dict):
                    struct_nodes(f.struct, item, found)
    return found


def as_bodies(value):
    if isinstance(value, dict):
        return Body((k, as_bodies(v)) for k, v in value.items())
    if isinstance(value, list):
        return [as_bodies(v) for v in value]
    return value


def odd_value():
    # By index: sampled_from would hash the values, and a cast memoryview refuses to be.
    return st.integers(0, len(ODD_VALUES) - 1).map(ODD_VALUES.__getitem__)


@st.composite
def mutated_body(draw, codec):
    value = draw(value_strategy(codec, max_items=2))
    for _ in range(draw(st.integers(0, 2))):
        schema, node = draw(st.sampled_from(struct_nodes(codec.schema, value, [])))
        present = [f.name for f in schema.fields if f.present]
        absent = [f.name for f in schema.fields if not f.present]
        kind = draw(st.sampled_from(["drop", "unknown", "other_version", "odd"]))
        if kind == "drop" and node:
            del node[draw(st.sampled_from(sorted(node)))]
        elif kind == "unknown":
            node["not_a_field"] = 1
        elif kind == "other_version" and absent:
            node[draw(st.sampled_from(absent))] = draw(odd_value())
        elif kind == "odd" and present:
            node[draw(st.sampled_from(present))] = draw(odd_value())
    return as_bodies(value) if draw(st.booleans()) else value


@st.composite
def mutated_bytes(draw, raw: bytes) -> bytes:
    kind = draw(st.sampled_from(["intact", "truncate", "flip", "splice", "random"]))
    if kind == "truncate" and raw:
        return raw[: draw(st.integers(0, len(raw) - 1))]
    if kind == "flip" and raw:
        out = bytearray(raw)
        for _ in range(draw(st.integers(1, 3))):
            out[draw(st.integers(0, len(out) - 1))] ^= 1 << draw(st.integers(0, 7))
        return bytes(out)
    if kind == "splice":
        at = draw(st.integers(0, len(raw)))
        return raw[:at] + draw(st.binary(min_size=1, max_size=6)) + raw[at:]
    if kind == "random":
        return draw(st.binary(max_size=48))
    return raw


@pytest.mark.parametrize("direction,api,version", EVERY, ids=lambda x: str(x))
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_compiled_codec_agrees_with_the_interpreter(direction, api, version, data):
    codec = TABLES[direction][api, version]
    decode, encode = oracle(direction, api, version)

    body = data.draw(mutated_body(codec), label="body")
    compiled, interpreted = outcome(codec.encode, body), outcome(encode, body)
    assert same(compiled, interpreted), (compiled, interpreted)

    if compiled[0] != "returned" or not all(isinstance(c, bytes) for c in compiled[1][0]):
        return
    raw = data.draw(mutated_bytes(b"".join(compiled[1][0])), label="raw")
    # Decode from the middle of a larger buffer, so offsets and `end` are exercised.
    before, after = data.draw(st.binary(max_size=3)), data.draw(st.binary(max_size=3))
    buf = before + raw + after
    if data.draw(st.booleans()):
        buf = memoryview(buf)
    start, end = len(before), len(before) + len(raw)
    compiled, interpreted = outcome(codec.decode, buf, start, end), outcome(decode, buf, start, end)
    assert same(compiled, interpreted), (compiled, interpreted)


def test_records_pass_through_uncopied():
    big, region = b"\x01" * 16384, FileRegion(3, 100, 5)
    small, view = b"\x02" * 10, memoryview(b"\x03" * 20000)
    for version in (3, 12):
        body = {
            "responses": [
                {
                    "topic": "t",
                    "partitions": [
                        {"partition_index": p, "records": records}
                        for p, records in enumerate((big, region, small, view))
                    ],
                }
            ]
        }
        chunks, total = encode_response_chunks(ApiKey.FETCH, version, body)
        assert chunks[1] is big and chunks[3] is region
        assert chunks[5] == bytes(view) and isinstance(chunks[5], bytes)
        # v12 ends with tagged-field sections: bytes after the last records.
        assert all(isinstance(c, bytes) for c in chunks[::2])
        assert len(chunks) == (6 if version == 3 else 7)
        assert total == sum(len(c) for c in chunks if isinstance(c, bytes)) + region.length
    produce = {
        "acks": -1,
        "timeout_ms": 0,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": big}]}],
    }
    for version in (2, 9):
        chunks, _ = REQUEST_SCHEMAS[ApiKey.PRODUCE, version].encode(produce)
        assert chunks[1] is big
        assert encode_request_body(ApiKey.PRODUCE, version, produce) == b"".join(chunks)
