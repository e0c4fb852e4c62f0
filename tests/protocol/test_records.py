"""Message sets against kafka-python's legacy record code as the independent oracle."""

from __future__ import annotations

import mmap
import struct

import pytest
from tests.protocol.kafka_python_oracle import kp_build, kp_read, ours

from protocol.compression import LEGACY_CODECS
from protocol.errors import CorruptRecordError
from protocol.conversion import convert
from protocol.records import (
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    Codec,
    MessageSetBuilder,
    TimestampType,
    check_entry,
    iter_deep,
    iter_shallow,
)

CODECS = list(LEGACY_CODECS)
MAGICS = [0, 1]


SAMPLE = [
    (1000, b"k0", b"v0"),
    (1005, None, b"v1"),
    (999, b"k2", None),
    (1003, b"", b""),
    (1001, b"key" * 50, b"value" * 300),
]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("magic", MAGICS)
def test_builder_output_reads_identically_with_kafka_python(magic, codec):
    b = MessageSetBuilder(magic=magic, codec=codec, base_offset=40)
    for ts, key, value in SAMPLE:
        b.append(value, key=key, timestamp=ts)
    buf = b.build()
    expected = [
        (40 + i, ts if magic == 1 else NO_TIMESTAMP, key, value)
        for i, (ts, key, value) in enumerate(SAMPLE)
    ]
    assert ours(buf) == expected
    assert kp_read(buf) == expected
    for entry in iter_shallow(buf):
        check_entry(buf, entry, 1000012)
    shallow = list(iter_shallow(buf))
    if codec == Codec.NONE:
        assert [e.offset for e in shallow] == list(range(40, 45))
    else:
        assert len(shallow) == 1 and shallow[0].offset == 44 and shallow[0].codec == codec
        if magic == 1:
            assert shallow[0].timestamp == 1005  # wrapper = max inner timestamp


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("magic", MAGICS)
def test_kafka_python_sets_deep_iterate_identically(magic, codec):
    buf = bytearray(kp_build(magic, codec, SAMPLE))
    if codec != Codec.NONE:
        # As a broker leaves it: wrapper offset = absolute offset of the last inner message.
        # (kafka-python ignores KIP-31 resolution when the base would be negative.)
        struct.pack_into(">q", buf, 0, 100 + len(SAMPLE) - 1)
    assert ours(buf) == kp_read(buf)
    if magic == 1 or codec == Codec.NONE:
        assert [m[0] for m in ours(buf)] == (
            [100 + i for i in range(len(SAMPLE))] if codec else list(range(len(SAMPLE)))
        )
    for entry in iter_shallow(buf):
        check_entry(buf, entry, 1000012)


def test_log_append_time_wrapper_applies_to_inner_messages():
    b = MessageSetBuilder(codec=Codec.GZIP, timestamp_type=TimestampType.LOG_APPEND_TIME)
    b.append(b"a", timestamp=7)
    b.append(b"b", timestamp=9)
    buf = b.build()
    msgs = list(iter_deep(buf))
    assert [(m.timestamp, m.timestamp_type) for m in msgs] == [
        (9, TimestampType.LOG_APPEND_TIME)
    ] * 2
    assert [r[1] for r in kp_read(buf)] == [9, 9]


def test_incomplete_trailing_entry_is_skipped():
    b = MessageSetBuilder()
    for i in range(3):
        b.append(b"x" * 10, timestamp=i)
    buf = b.build()
    one = len(buf) // 3
    for cut in range(1, one):
        entries = list(iter_shallow(buf[: len(buf) - cut]))
        assert [e.offset for e in entries] == [0, 1]
        assert len(list(iter_deep(buf[: len(buf) - cut]))) == 2


def test_size_below_minimum_raises_with_position():
    b = MessageSetBuilder()
    b.append(b"x")
    b.append(b"y")
    buf = bytearray(b.build())
    second = next(iter_shallow(buf)).next_position
    struct.pack_into(">i", buf, second + 8, 13)
    with pytest.raises(CorruptRecordError) as info:
        list(iter_shallow(buf))
    assert info.value.offset == second


def test_check_entry_detects_crc_and_size():
    b = MessageSetBuilder()
    b.append(b"payload", key=b"k", timestamp=5)
    buf = bytearray(b.build())
    entry = next(iter_shallow(buf))
    check_entry(buf, entry, 100)
    with pytest.raises(CorruptRecordError, match="max.message.bytes"):
        check_entry(buf, entry, entry.size - 1)
    buf[-1] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC"):
        check_entry(buf, next(iter_shallow(buf)), 100)


def test_shallow_positions_and_mmap(tmp_path):
    b = MessageSetBuilder(base_offset=7)
    for i in range(4):
        b.append(b"v" * i, timestamp=100 + i)
    buf = b.build()
    path = tmp_path / "seg.log"
    path.write_bytes(buf)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        entries = list(iter_shallow(m))
        for e in entries:
            check_entry(m, e, 1000)
        assert [m_.offset for m_ in iter_deep(m, entries[1].position)] == [8, 9, 10]
    assert [(e.offset, e.timestamp) for e in entries] == [(7 + i, 100 + i) for i in range(4)]
    assert entries[0].position == 0
    assert all(a.next_position == b_.position for a, b_ in zip(entries, entries[1:]))
    assert entries[-1].next_position == len(buf)
    assert [e.size + LOG_OVERHEAD for e in entries] == [34 + i for i in range(4)]


@pytest.mark.parametrize("codec", CODECS)
def test_convert_round_trip(codec):
    b = MessageSetBuilder(magic=1, codec=codec, base_offset=10)
    for ts, key, value in SAMPLE:
        b.append(value, key=key, timestamp=ts)
    buf = b.build()
    down = convert(buf, 0)
    assert {e.magic for e in iter_shallow(down)} == {0}
    assert kp_read(down) == [(10 + i, NO_TIMESTAMP, k, v) for i, (_, k, v) in enumerate(SAMPLE)]
    up = convert(down, 1)
    assert kp_read(up) == [(10 + i, NO_TIMESTAMP, k, v) for i, (_, k, v) in enumerate(SAMPLE)]
    assert convert(buf, 1) == buf


def test_inner_timestamp_type_comes_from_the_wrapper_only():
    from protocol.compression import compress
    from protocol.legacy import append_message

    inner = bytearray()
    append_message(inner, 0, 1, 0x08, 5, b"k", b"v")  # inner claims LogAppendTime
    wrapper = bytearray()
    append_message(wrapper, 3, 1, int(Codec.GZIP), 5, None, compress(Codec.GZIP, inner, 1))
    (m,) = iter_deep(bytes(wrapper))
    assert (m.offset, m.timestamp, m.timestamp_type) == (3, 5, TimestampType.CREATE_TIME)
