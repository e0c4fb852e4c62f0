"""A test oracle for ``__consumer_offsets``: reads the topic with kafka-python and decodes its
records with a decoder written here from Kafka 3.9's JSON schemas
(group-coordinator/src/main/resources/common/message/{OffsetCommit,GroupMetadata}{Key,Value}
.json), independently of the broker's own code (kafka-python has no decoder for these).

The schemas are transcribed as data: (name, type, versions, nullable versions); a generic
reader walks them for a record's version (non-flexible versions 0-3, what Kafka 3.9 writes at
one inter.broker.protocol.version or another).
"""

from __future__ import annotations

import struct
import time

from kafka import KafkaConsumer, TopicPartition

# (field, type, versions "lo-hi" or "lo+", nullable-from version or None)
OFFSET_COMMIT_KEY = [
    ("group", "string", "0-1", None),
    ("topic", "string", "0-1", None),
    ("partition", "int32", "0-1", None),
]
GROUP_METADATA_KEY = [("group", "string", "2", None)]
OFFSET_COMMIT_VALUE = [
    ("offset", "int64", "0+", None),
    ("leaderEpoch", "int32", "3+", None),
    ("metadata", "string", "0+", None),
    ("commitTimestamp", "int64", "0+", None),
    ("expireTimestamp", "int64", "1", None),
]
MEMBER_METADATA = [
    ("memberId", "string", "0+", None),
    ("groupInstanceId", "string", "3+", 3),
    ("clientId", "string", "0+", None),
    ("clientHost", "string", "0+", None),
    ("rebalanceTimeout", "int32", "1+", None),
    ("sessionTimeout", "int32", "0+", None),
    ("subscription", "bytes", "0+", None),
    ("assignment", "bytes", "0+", None),
]
GROUP_METADATA_VALUE = [
    ("protocolType", "string", "0+", None),
    ("generation", "int32", "0+", None),
    ("protocol", "string", "0+", 0),
    ("leader", "string", "0+", 0),
    ("currentStateTimestamp", "int64", "2+", None),
    ("members", MEMBER_METADATA, "0+", None),
]


def _in(spec: str, version: int) -> bool:
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    lo, _, hi = spec.partition("-")
    return int(lo) <= version <= int(hi or lo)


class _Buf:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def unpack(self, fmt: str):
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def take(self, n: int) -> bytes:
        assert 0 <= n and self.pos + n <= len(self.data), "length overruns the record"
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out


def _read(buf: _Buf, schema, version: int) -> dict:
    out = {}
    for name, type_, versions, nullable_from in schema:
        if not _in(versions, version):
            continue
        if isinstance(type_, list):
            out[name] = [_read(buf, type_, version) for _ in range(buf.unpack(">i"))]
        elif type_ == "string":
            n = buf.unpack(">h")
            if n == -1:
                assert nullable_from is not None and version >= nullable_from, name
                out[name] = None
            else:
                out[name] = buf.take(n).decode()
        elif type_ == "bytes":
            out[name] = buf.take(buf.unpack(">i"))
        else:
            out[name] = buf.unpack({"int32": ">i", "int64": ">q"}[type_])
    return out


def decode(key: bytes, value: bytes | None) -> tuple[str, dict, dict | None]:
    """("offset" | "group", key fields, value fields or None for a tombstone)."""
    kb = _Buf(key)
    kv = kb.unpack(">h")
    if kv in (0, 1):
        kind, k = "offset", _read(kb, OFFSET_COMMIT_KEY, kv)
        value_schema = OFFSET_COMMIT_VALUE
    elif kv == 2:
        kind, k = "group", _read(kb, GROUP_METADATA_KEY, kv)
        value_schema = GROUP_METADATA_VALUE
    else:
        raise AssertionError(f"unknown key version {kv}")
    assert kb.pos == len(key), "trailing bytes in the key"
    if value is None:
        return kind, k, None
    vb = _Buf(value)
    vv = vb.unpack(">h")
    assert 0 <= vv <= 3, f"value version {vv}"
    v = _read(vb, value_schema, vv)
    assert vb.pos == len(value), "trailing bytes in the value"
    v["version"] = vv
    return kind, k, v


def read_records(bootstrap: str, timeout_s: float = 30.0) -> list[tuple[str, dict, dict | None]]:
    """Every record of ``__consumer_offsets`` partition 0, decoded, in log order."""
    tp = TopicPartition("__consumer_offsets", 0)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, request_timeout_ms=20000
    )
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        out = []
        deadline = time.monotonic() + timeout_s
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, "could not read __consumer_offsets to its end"
            for records in consumer.poll(timeout_ms=500).values():
                out.extend(decode(r.key, r.value) for r in records)
        return out
    finally:
        consumer.close()


def last_group_record(bootstrap: str, group: str) -> dict | None:
    """The group's latest group-metadata value (None: none, or a tombstone last)."""
    last = None
    for kind, k, v in read_records(bootstrap):
        if kind == "group" and k["group"] == group:
            last = v
    return last
