"""Hypothesis strategies derived from protocol's generated schemas, shared by the wire tests.

Walking a codec's field tree means every field of every api version gets generated values
without a hand-written strategy per api: a schema change is tested automatically.
"""

from __future__ import annotations

import uuid

from hypothesis import strategies as st

_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


def _int_strategy(bits: int):
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    # Edges matter most on the wire (sign, -1 sentinels, extremes).
    return st.one_of(st.sampled_from([lo, -1, 0, 1, hi]), st.integers(lo, hi))


def _primitive(type_: str, nullable: bool):
    if type_ in _INT_BITS:
        base = _int_strategy(_INT_BITS[type_])
    elif type_ == "uint16":
        base = st.integers(0, 65535)
    elif type_ == "float64":
        base = st.floats(allow_nan=False)
    elif type_ == "bool":
        base = st.booleans()
    elif type_ == "uuid":
        base = st.uuids() | st.just(uuid.UUID(int=0))
    elif type_ == "string":
        base = st.text(max_size=12)
    else:  # bytes, records
        base = st.binary(max_size=40)
    return st.one_of(st.none(), base) if nullable else base


def _struct(schema, max_items: int):
    fields = [f for f in schema.fields if f.present]
    return st.fixed_dictionaries({f.name: _field(f, max_items) for f in fields}).map(
        lambda d: {f.name: d[f.name] for f in fields}
    )


def _field(f, max_items: int):
    if f.type == "struct":
        return _struct(f.struct, max_items)
    if f.type != "[]":
        return _primitive(f.type, f.nullable)
    element = (
        _struct(f.struct, max_items) if f.element == "struct" else _primitive(f.element, False)
    )
    items = st.lists(element, max_size=max_items)
    return st.one_of(st.none(), items) if f.nullable else items


def value_strategy(codec, max_items: int = 3):
    """Bodies (plain dicts/lists) of every field ``codec``'s version has."""
    return _struct(codec.schema, max_items)


def present(codec, value):
    """``value`` cut down to the fields ``codec``'s version has (a decoded body also holds
    the other versions' fields at their defaults), as plain dicts and lists."""
    return _cut(codec.schema, value)


def _cut(schema, value):
    out = {}
    fields = [f for f in schema.fields if f.present]
    by_position = list(value.values())
    for i, f in enumerate(fields):
        # kafka-python's generated classes use a later Kafka's JSON, which renamed a few
        # fields (Metadata's cluster_authorized_operations): fall back to the wire position.
        v = value[f.name] if f.name in value or len(by_position) != len(fields) else by_position[i]
        if f.type == "struct":
            # kafka-python reads a tagged struct left at its defaults (not sent) as None
            v = _cut(f.struct, v if v is not None else f.default())
        elif f.type == "[]" and f.element == "struct" and v is not None:
            v = [_cut(f.struct, item) for item in v]
        elif f.name.endswith("authorized_operations") and not isinstance(v, int):
            # kafka-python reads these int32 bit fields as sets of bits (None: "not requested")
            n = -2147483648 if v is None else sum(1 << b for b in v)
            v = n - (1 << 32) if n >= 1 << 31 else n
        elif f.type == "uuid" and v is None:
            v = uuid.UUID(int=0)  # kafka-python reads the zero uuid as None
        elif isinstance(v, (bytearray, memoryview)):
            v = bytes(v)
        elif isinstance(v, list):
            v = list(v)
        out[f.name] = v
    return out
