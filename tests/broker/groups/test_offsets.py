"""``__consumer_offsets`` record formats (byte layouts from Kafka 3.9's group-coordinator JSON
schemas, built here independently with struct) at every version Kafka writes, which version it
writes at each inter.broker.protocol.version, and the offset cache's expiry rules."""

from __future__ import annotations

import dataclasses
import struct

import pytest
from hypothesis import given, settings, strategies as st

from broker.groups.offsets import (
    CommittedOffset,
    GroupKey,
    GroupRecord,
    MemberRecord,
    OffsetCache,
    OffsetKey,
    OffsetRecordError,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    expire_timestamp,
    group_value_version,
    offset_value_version,
)


def kstr(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def kbytes(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        if n < 0x80:
            out.append(n)
            return bytes(out)
        out.append((n & 0x7F) | 0x80)
        n >>= 7


def cstr(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode()
    return uvarint(len(raw) + 1) + raw


def test_offset_key_layout_is_kafkas_version_1():
    assert encode_offset_key("grp", "tópic", 7) == (
        struct.pack(">h", 1) + kstr("grp") + kstr("tópic") + struct.pack(">i", 7)
    )


def test_offset_value_layout_is_kafkas_version_3():
    v = CommittedOffset(42, "meta", 1000, None, 5)
    assert encode_offset_value(v) == (
        struct.pack(">hqi", 3, 42, 5) + kstr("meta") + struct.pack(">q", 1000)
    )


def test_offset_value_with_its_own_expiry_is_version_1():
    v = CommittedOffset(42, "meta", 1000, 2000, 5)
    assert encode_offset_value(v) == (
        struct.pack(">hq", 1, 42) + kstr("meta") + struct.pack(">qq", 1000, 2000)
    )
    # version 1 has no leader epoch
    assert decode_offset_value(encode_offset_value(v)) == CommittedOffset(42, "meta", 1000, 2000)


def test_decodes_kafka_versions_0_2_and_4():
    key = struct.pack(">h", 0) + kstr("g") + kstr("t") + struct.pack(">i", 3)
    assert decode_key(key) == OffsetKey("g", "t", 3)
    v0 = struct.pack(">hq", 0, 9) + kstr("") + struct.pack(">q", 500)
    assert decode_offset_value(v0) == CommittedOffset(9, "", 500)
    v2 = struct.pack(">hq", 2, 9) + kstr("m") + struct.pack(">q", 500)
    assert decode_offset_value(v2) == CommittedOffset(9, "m", 500)
    # v4: flexible (compact string, one unknown tagged field skipped)
    v4 = struct.pack(">hqi", 4, 9, 3) + cstr("m") + struct.pack(">q", 500) + b"\x01\x05\x02ab"
    assert decode_offset_value(v4) == CommittedOffset(9, "m", 500, None, 3)


def test_offset_values_at_versions_1_and_2_have_no_leader_epoch():
    v = CommittedOffset(42, "meta", 1000, None, 5)
    # v1 without its own expiry carries expire timestamp -1 (OffsetCommitRequest.DEFAULT_TIMESTAMP)
    v1 = struct.pack(">hq", 1, 42) + kstr("meta") + struct.pack(">qq", 1000, -1)
    v2 = struct.pack(">hq", 2, 42) + kstr("meta") + struct.pack(">q", 1000)
    assert encode_offset_value(v, 1) == v1
    assert encode_offset_value(v, 2) == v2
    assert decode_offset_value(v1) == decode_offset_value(v2) == CommittedOffset(42, "meta", 1000)
    # a commit with its own retention is v1 whatever the version asked for
    own = CommittedOffset(42, "meta", 1000, 2000, 5)
    assert (
        encode_offset_value(own, 2)
        == encode_offset_value(own, 3)
        == (struct.pack(">hq", 1, 42) + kstr("meta") + struct.pack(">qq", 1000, 2000))
    )
    with pytest.raises(OffsetRecordError, match="version 1, 2 or 3, not 0"):
        encode_offset_value(v, 0)


@pytest.mark.parametrize(
    "ibp, group_version, offset_version",
    [
        ("0.9.0", 0, 1),
        ("0.10.0-IV1", 0, 1),
        ("0.10.1-IV0", 1, 1),
        ("2.0", 1, 1),
        ("2.1-IV0", 2, 2),
        ("2.1-IV1", 2, 3),
        ("2.1", 2, 3),
        ("2.2-IV1", 2, 3),
        ("2.3-IV0", 3, 3),
        ("3.9", 3, 3),
    ],
)
def test_versions_follow_the_inter_broker_protocol_version(ibp, group_version, offset_version):
    # Kafka 3.9's MetadataVersion.groupMetadataValueVersion / offsetCommitValueVersion
    assert group_value_version(ibp) == group_version
    assert offset_value_version(ibp) == offset_version


def test_group_key_layout():
    assert encode_group_key("g") == struct.pack(">h", 2) + kstr("g")
    assert decode_key(struct.pack(">h", 2) + kstr("g")) == GroupKey("g")


RECORD = GroupRecord(
    protocol_type="consumer",
    generation=7,
    protocol="range",
    leader="m1",
    current_state_timestamp=123456,
    members=(
        MemberRecord("m1", "static-1", "c1", "/127.0.0.1", 30000, 10000, b"sub1", b"asg1"),
        MemberRecord("m2", None, "c2", "/10.0.0.2", 40000, 12000, b"", b"asg2"),
    ),
)


def test_group_value_layout_is_kafkas_version_3():
    expected = (
        struct.pack(">h", 3)
        + kstr("consumer")
        + struct.pack(">i", 7)
        + kstr("range")
        + kstr("m1")
        + struct.pack(">q", 123456)
        + struct.pack(">i", 2)
        + kstr("m1")
        + kstr("static-1")
        + kstr("c1")
        + kstr("/127.0.0.1")
        + struct.pack(">ii", 30000, 10000)
        + kbytes(b"sub1")
        + kbytes(b"asg1")
        + kstr("m2")
        + kstr(None)
        + kstr("c2")
        + kstr("/10.0.0.2")
        + struct.pack(">ii", 40000, 12000)
        + kbytes(b"")
        + kbytes(b"asg2")
    )
    assert encode_group_value(RECORD) == expected
    assert decode_group_value(expected) == RECORD


def _member(m: MemberRecord, version: int) -> bytes:
    return (
        kstr(m.member_id)
        + (kstr(m.group_instance_id) if version >= 3 else b"")
        + kstr(m.client_id)
        + kstr(m.client_host)
        + (struct.pack(">i", m.rebalance_timeout) if version >= 1 else b"")
        + struct.pack(">i", m.session_timeout)
        + kbytes(m.subscription)
        + kbytes(m.assignment)
    )


@pytest.mark.parametrize("version", [0, 1, 2])
def test_group_value_layouts_before_version_3(version):
    # GroupMetadataValue.json: currentStateTimestamp from v2, rebalanceTimeout from v1,
    # groupInstanceId from v3
    expected = (
        struct.pack(">h", version)
        + kstr("consumer")
        + struct.pack(">i", 7)
        + kstr("range")
        + kstr("m1")
        + (struct.pack(">q", 123456) if version >= 2 else b"")
        + struct.pack(">i", 2)
        + _member(RECORD.members[0], version)
        + _member(RECORD.members[1], version)
    )
    assert encode_group_value(RECORD, version) == expected
    back = decode_group_value(expected)
    assert back == GroupRecord(
        "consumer",
        7,
        "range",
        "m1",
        123456 if version >= 2 else -1,
        tuple(
            MemberRecord(
                m.member_id,
                None,
                m.client_id,
                m.client_host,
                m.rebalance_timeout if version >= 1 else m.session_timeout,
                m.session_timeout,
                m.subscription,
                m.assignment,
            )
            for m in RECORD.members
        ),
    )
    with pytest.raises(OffsetRecordError, match="version 0-3, not 4"):
        encode_group_value(RECORD, 4)


def test_empty_group_value():
    empty = GroupRecord("consumer", 8, None, None, 99, ())
    raw = encode_group_value(empty)
    assert raw == (
        struct.pack(">h", 3)
        + kstr("consumer")
        + struct.pack(">i", 8)
        + kstr(None)
        + kstr(None)
        + struct.pack(">qi", 99, 0)
    )
    assert decode_group_value(raw) == empty


def test_decodes_older_group_values():
    # v0: no rebalance timeout (it is the session timeout), no state timestamp, no instance id
    v0 = (
        struct.pack(">h", 0)
        + kstr("consumer")
        + struct.pack(">i", 1)
        + kstr("range")
        + kstr("m")
        + struct.pack(">i", 1)
        + kstr("m")
        + kstr("c")
        + kstr("h")
        + struct.pack(">i", 10000)
        + kbytes(b"s")
        + kbytes(b"a")
    )
    assert decode_group_value(v0) == GroupRecord(
        "consumer",
        1,
        "range",
        "m",
        -1,
        (MemberRecord("m", None, "c", "h", 10000, 10000, b"s", b"a"),),
    )
    # v4: v3 flexible, with tagged fields at the member and top level
    v4 = (
        struct.pack(">h", 4)
        + cstr("consumer")
        + struct.pack(">i", 2)
        + cstr("range")
        + cstr(None)
        + struct.pack(">q", 5)
        + uvarint(2)
        + cstr("m")
        + cstr("i")
        + cstr("c")
        + cstr("h")
        + struct.pack(">ii", 3, 4)
        + uvarint(2)
        + b"s"
        + uvarint(1)
        + b"\x00"
        + b"\x00"
    )
    assert decode_group_value(v4) == GroupRecord(
        "consumer", 2, "range", None, 5, (MemberRecord("m", "i", "c", "h", 3, 4, b"s", b""),)
    )


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


def test_bad_values():
    with pytest.raises(OffsetRecordError, match="unknown version 7"):
        decode_offset_value(struct.pack(">hq", 7, 0))
    with pytest.raises(OffsetRecordError, match="unknown version 9"):
        decode_group_value(struct.pack(">h", 9))
    raw = encode_group_value(RECORD)
    with pytest.raises(OffsetRecordError):
        decode_group_value(raw[:-1])
    with pytest.raises(OffsetRecordError, match="array of"):
        decode_group_value(
            struct.pack(">h", 3)
            + kstr("c")
            + struct.pack(">i", 1)
            + kstr(None) * 2
            + struct.pack(">qi", 0, 1 << 30)
        )


def test_too_long_strings_are_refused():
    with pytest.raises(OffsetRecordError, match="offset metadata is 40000 bytes"):
        encode_offset_value(CommittedOffset(1, "x" * 40000, 0))


ints32 = st.integers(-(2**31), 2**31 - 1)
ints64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=200, deadline=None)
@given(
    st.text(max_size=50),
    st.text(max_size=50),
    ints32,
    ints64,
    st.text(max_size=100),
    ints64,
    # -1 is Kafka's "no expire timestamp" in a v1 value
    st.one_of(st.none(), ints64.filter(lambda t: t != -1)),
    ints32,
    st.sampled_from([1, 2, 3]),
)
def test_offset_round_trip(
    group, topic, partition, offset, metadata, commit_ts, expire_ts, epoch, version
):
    assert decode_key(encode_offset_key(group, topic, partition)) == OffsetKey(
        group, topic, partition
    )
    v = CommittedOffset(offset, metadata, commit_ts, expire_ts, epoch)
    # only v3 holds the leader epoch; a commit with its own expiry is always v1
    kept = epoch if version == 3 and expire_ts is None else -1
    assert decode_offset_value(encode_offset_value(v, version)) == CommittedOffset(
        offset, metadata, commit_ts, expire_ts, kept
    )


members = st.builds(
    MemberRecord,
    st.text(max_size=20),
    st.one_of(st.none(), st.text(max_size=20)),
    st.text(max_size=20),
    st.text(max_size=20),
    ints32,
    ints32,
    st.binary(max_size=30),
    st.binary(max_size=30),
)


@settings(max_examples=200, deadline=None)
@given(
    st.builds(
        GroupRecord,
        st.text(max_size=20),
        ints32,
        st.one_of(st.none(), st.text(max_size=20)),
        st.one_of(st.none(), st.text(max_size=20)),
        ints64,
        st.lists(members, max_size=4).map(tuple),
    ),
    st.text(max_size=20),
    st.sampled_from([0, 1, 2, 3]),
)
def test_group_round_trip(record, group, version):
    assert decode_key(encode_group_key(group)) == GroupKey(group)
    # what the older versions cannot hold comes back as Kafka reads it
    members = tuple(
        dataclasses.replace(
            m,
            group_instance_id=m.group_instance_id if version >= 3 else None,
            rebalance_timeout=m.rebalance_timeout if version >= 1 else m.session_timeout,
        )
        for m in record.members
    )
    expected = dataclasses.replace(
        record,
        current_state_timestamp=record.current_state_timestamp if version >= 2 else -1,
        members=members,
    )
    assert decode_group_value(encode_group_value(record, version)) == expected


def test_expire_timestamp():
    assert expire_timestamp(now_ms=1000, retention_ms=50) == 1050
    assert expire_timestamp(now_ms=1000, retention_ms=None) is None


def test_cache_put_get_delete():
    c = OffsetCache()
    c.put("g", "t", 0, CommittedOffset(5, "", 0))
    c.put("g", "t", 1, CommittedOffset(6, "", 0))
    c.put("h", "t", 0, CommittedOffset(7, "m", 0))
    assert c.get("g", "t", 1).offset == 6 and c.get("g", "t", 2) is None
    assert c.of_group("g") == {
        ("t", 0): CommittedOffset(5, "", 0),
        ("t", 1): CommittedOffset(6, "", 0),
    }
    c.delete("h", "t", 0)
    assert not c.has_group("h") and c.groups() == ["g"]
    c.delete("g", "t", 0)
    c.delete("g", "t", 1)
    assert c.groups() == [] and c.get("g", "t", 1) is None


def test_expiry_rules():
    """GroupMetadata.removeExpiredOffsets: from the commit time, or from the time the group
    became Empty; never for subscribed topics or rebalancing groups; explicit expire
    timestamps win."""
    c = OffsetCache()
    c.put("simple", "t", 0, CommittedOffset(1, "", 100))
    c.put("simple", "t", 1, CommittedOffset(1, "", 500))
    c.put("emptied", "t", 0, CommittedOffset(1, "", 0))
    c.put("stable", "sub", 0, CommittedOffset(1, "", 0))
    c.put("stable", "old", 0, CommittedOffset(1, "", 0))
    c.put("busy", "t", 0, CommittedOffset(1, "", 0))
    c.put("own", "t", 0, CommittedOffset(1, "", 0, 150))
    policies = {
        "simple": (None, frozenset()),
        "emptied": (1000, frozenset()),
        "stable": (None, frozenset({"sub"})),
        "busy": None,
        "own": (None, frozenset()),
    }

    def expired(now):
        return sorted(
            (k.group, k.topic, k.partition) for k in c.expired(now, 1000, policies.__getitem__)
        )

    assert expired(149) == []
    assert expired(150) == [("own", "t", 0)]
    assert expired(1100) == [("own", "t", 0), ("simple", "t", 0), ("stable", "old", 0)]
    assert expired(2000) == [
        ("emptied", "t", 0),
        ("own", "t", 0),
        ("simple", "t", 0),
        ("simple", "t", 1),
        ("stable", "old", 0),
    ]
