"""Hypothesis strategies derived from protocol's construct schemas, shared by the wire tests.

Walking the schema tree means every field of every api version gets generated values without a
hand-written strategy per api: a schema change is tested automatically.
"""
from __future__ import annotations

from construct import Flag, FormatField, Renamed, Struct
from hypothesis import strategies as st

from protocol.primitives import KafkaArray, KafkaBytes, KafkaString

def _int_strategy(nbytes: int):
    bits = 8 * nbytes
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    # Edges matter most on the wire (sign, -1 sentinels, extremes).
    return st.one_of(st.sampled_from([lo, -1, 0, 1, hi]), st.integers(lo, hi))


def value_strategy(con, max_items: int = 3):
    """Values (plain dicts/lists) that ``con`` can build."""
    if isinstance(con, Renamed):
        return value_strategy(con.subcon, max_items)
    if con is Flag:
        return st.booleans()
    if isinstance(con, FormatField):
        return _int_strategy(con.length)
    if isinstance(con, KafkaString):
        s = st.text(max_size=12)
        return st.one_of(st.none(), s) if con.nullable else s
    if isinstance(con, KafkaBytes):
        b = st.binary(max_size=40)
        return st.one_of(st.none(), b) if con.nullable else b
    if isinstance(con, KafkaArray):
        items = st.lists(value_strategy(con.subcon, max_items), max_size=max_items)
        return st.one_of(st.none(), items) if con.nullable else items
    if isinstance(con, Struct):
        names = [sc.name for sc in con.subcons]
        # fixed_dictionaries does not keep key order; wire order matters to leaves().
        return st.fixed_dictionaries({sc.name: value_strategy(sc, max_items)
                                      for sc in con.subcons}).map(
            lambda d: {name: d[name] for name in names})
    raise TypeError(f"no strategy for {con!r}")


def strip(value):
    """A Container tree as plain dicts/lists without construct's private keys (``_io``)."""
    if isinstance(value, dict):
        return {k: strip(v) for k, v in value.items() if not k.startswith("_")}
    if isinstance(value, list):
        return [strip(v) for v in value]
    return value


def leaves(value):
    """The value tree with field names dropped, nested structs spliced into their parent and
    one-field structs replaced by their field, so schemas that name (or group) the same wire
    fields differently compare equal."""
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            if k.startswith("_"):
                continue
            if isinstance(v, dict):
                out.extend(leaves(v))
            else:
                out.append(leaves(v))
        # A one-field struct is wire-identical to its field (kafka-python declares Metadata
        # topics as [name] structs, OffsetFetch partitions as plain int32s).
        return out[0] if len(out) == 1 else out
    if isinstance(value, list):
        return [leaves(v) for v in value]
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value
