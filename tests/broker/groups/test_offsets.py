"""``__consumer_offsets`` record formats (byte layouts from Kafka's GroupMetadataManager schemas,
built here independently with struct) and the offset cache's expiry rule."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings, strategies as st

from broker.groups.offsets import (
    CommittedOffset,
    GroupKey,
    OffsetCache,
    OffsetKey,
    OffsetRecordError,
    decode_key,
    decode_offset_value,
    encode_offset_key,
    encode_offset_value,
    expire_timestamp,
)


def kstr(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def test_offset_key_layout_is_kafkas_version_1():
    assert encode_offset_key("grp", "tópic", 7) == (
        struct.pack(">h", 1) + kstr("grp") + kstr("tópic") + struct.pack(">i", 7)
    )


def test_offset_value_layout_is_kafkas_version_1():
    v = CommittedOffset(42, "meta", 1000, 2000)
    assert encode_offset_value(v) == (
        struct.pack(">hq", 1, 42) + kstr("meta") + struct.pack(">qq", 1000, 2000)
    )


def test_decodes_kafka_version_0_records():
    key = struct.pack(">h", 0) + kstr("g") + kstr("t") + struct.pack(">i", 3)
    assert decode_key(key) == OffsetKey("g", "t", 3)
    value = struct.pack(">hq", 0, 9) + kstr("") + struct.pack(">q", 500)
    assert decode_offset_value(value, default_retention_ms=100) == CommittedOffset(9, "", 500, 600)


def test_group_metadata_key():
    assert decode_key(struct.pack(">h", 2) + kstr("g")) == GroupKey("g")


@pytest.mark.parametrize(
    "buf, message",
    [
        (b"", "truncated at byte 0"),
        (struct.pack(">h", 3) + kstr("g"), "unknown version 3"),
        (struct.pack(">h", 1) + kstr("g") + kstr("t"), "truncated"),
        (
            struct.pack(">h", 1) + kstr("g") + kstr("t") + struct.pack(">ib", 1, 0),
            "1 bytes left over",
        ),
        (struct.pack(">hh", 1, -1), "string length -1"),
        (struct.pack(">hh", 1, 10) + b"abc", "string length 10"),
        (struct.pack(">hh", 1, 2) + b"\xff\xfe", "not UTF-8"),
    ],
)
def test_bad_keys_raise_precise_errors(buf, message):
    with pytest.raises(OffsetRecordError, match=message):
        decode_key(buf)


def test_bad_value_version():
    with pytest.raises(OffsetRecordError, match="unknown version 7"):
        decode_offset_value(struct.pack(">hq", 7, 0), default_retention_ms=0)


def test_too_long_strings_are_refused():
    with pytest.raises(OffsetRecordError, match="offset metadata is 40000 bytes"):
        encode_offset_value(CommittedOffset(1, "x" * 40000, 0, 0))


@settings(max_examples=200, deadline=None)
@given(
    st.text(max_size=50),
    st.text(max_size=50),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.text(max_size=100),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**63), 2**63 - 1),
)
def test_round_trip(group, topic, partition, offset, metadata, commit_ts, expire_ts):
    assert decode_key(encode_offset_key(group, topic, partition)) == OffsetKey(
        group, topic, partition
    )
    v = CommittedOffset(offset, metadata, commit_ts, expire_ts)
    assert decode_offset_value(encode_offset_value(v), default_retention_ms=0) == v


def test_expire_timestamp():
    assert expire_timestamp(now_ms=1000, retention_ms=50, commit_timestamp=-1) == 1050
    assert expire_timestamp(now_ms=1000, retention_ms=50, commit_timestamp=10) == 60


def test_cache_put_get_delete_and_expiry():
    c = OffsetCache()
    c.put("g", "t", 0, CommittedOffset(5, "", 0, 100))
    c.put("g", "t", 1, CommittedOffset(6, "", 0, 200))
    c.put("h", "t", 0, CommittedOffset(7, "m", 0, 100))
    assert c.get("g", "t", 1).offset == 6 and c.get("g", "t", 2) is None
    assert list(c.expired(100)) == []  # Kafka expires strictly before now
    assert sorted(c.expired(101), key=str) == [OffsetKey("g", "t", 0), OffsetKey("h", "t", 0)]
    c.delete("h", "t", 0)
    assert not c.has_group("h") and c.groups() == ["g"]
    c.delete("g", "t", 0)
    c.delete("g", "t", 1)
    assert c.groups() == [] and c.get("g", "t", 1) is None
