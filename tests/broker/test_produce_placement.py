"""Where a produce is validated (broker/handlers/produce.py): on the trio thread only when its
work is known to be small, so a decompression bomb or a conversion never stalls the event loop
while a producer's usual batch skips the worker-thread hand-off."""

from __future__ import annotations

import random
import uuid

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.config import BrokerConfig, TopicConfig
from broker.handlers.produce import INLINE_BYTES, INLINE_SCAN_BYTES, Placement, placement
from broker.topics import Topic
from protocol import validator
from protocol.compression import Codec
from protocol.records import MessageSetBuilder

NOW = 1_700_000_000_000


@pytest.fixture(autouse=True)
def native_scan(monkeypatch):
    """Batches go inline only where the native scan checks their records: stand one in where
    the C extension is not built (test-pure); placement never calls it."""
    if validator.scan_v2 is None:
        monkeypatch.setattr(validator, "scan_v2", lambda *args: None)


def topic(**overrides: str) -> Topic:
    defaults = BrokerConfig.from_properties([]).topic_defaults
    return Topic("t", 1, overrides, TopicConfig.resolve(defaults, overrides), uuid.uuid4())


def batch(codec: Codec, values: list[bytes]) -> bytes:
    b = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, batch_size=1 << 30)
    for i, v in enumerate(values):
        b.append(i, NOW, None, v, [])
    return bytes(b.build())


def test_a_producers_lz4_batch_is_validated_inline():
    """librdkafka's 100-byte lz4 batches: about 140 KB holding 900 KB of records."""
    values = [bytes([i % 7]) * 40 + i.to_bytes(8, "big") * 7 for i in range(8000)]
    sent = batch(Codec.LZ4, values)
    assert len(sent) > INLINE_BYTES
    assert placement(sent, topic()) is Placement.NATIVE_INLINE


def test_an_uncompressed_batch_is_inline_up_to_the_scan_limit():
    assert placement(batch(Codec.NONE, [b"v" * 1000] * 900), topic()) is Placement.NATIVE_INLINE
    assert placement(batch(Codec.NONE, [b"v" * 1000] * 1100), topic()) is Placement.THREAD


@pytest.mark.parametrize(
    ("codec", "mib"),
    [
        (Codec.GZIP, 16),
        (Codec.SNAPPY, 1.2),
        (Codec.LZ4, 12),
        (Codec.ZSTD, 16),
    ],  # most each can give
)
def test_a_small_bomb_goes_to_a_worker_thread(codec, mib):
    bomb = batch(codec, [b"\x00" * int(mib * (1 << 19))] * 2)
    assert len(bomb) <= INLINE_BYTES  # inline by size alone
    assert placement(bomb, topic()) is Placement.THREAD


def test_a_gzip_batch_goes_inline_only_when_its_worst_case_is_small():
    """DEFLATE can give 1032 bytes per byte: 1 KiB of gzip may hold 1 MiB."""
    assert placement(batch(Codec.GZIP, [b"x"]), topic()) is Placement.NATIVE_INLINE
    sent = batch(Codec.GZIP, [random.Random(1).randbytes(2000) + bytes(2000)])
    assert sent[22] & 0x07 == Codec.GZIP  # kafka-python sends it compressed
    assert placement(sent, topic()) is Placement.THREAD


def test_a_conversion_is_placed_by_size():
    """Re-encoding for the topic's codec or format costs per record: only small sets inline."""
    small = batch(Codec.LZ4, [b"v" * 100] * 50)
    large = batch(Codec.NONE, [b"v" * 1000] * 100)
    for converting in (
        topic(**{"compression.type": "gzip"}),
        topic(**{"message.format.version": "0.10.2"}),
    ):
        assert placement(small, converting) is Placement.INLINE
        assert placement(large, converting) is Placement.THREAD


def test_old_message_sets_are_placed_by_size():
    small, large = MessageSetBuilder(1), MessageSetBuilder(1)
    for _ in range(10):
        small.append(b"v" * 100, timestamp=NOW)
    for _ in range(100):
        large.append(b"v" * 1000, timestamp=NOW)
    assert placement(small.build(), topic()) is Placement.INLINE
    assert placement(large.build(), topic()) is Placement.THREAD


def test_without_the_native_scan_a_batch_is_placed_by_size(monkeypatch):
    monkeypatch.setattr(validator, "scan_v2", None)
    values = [bytes([i % 7]) * 40 + i.to_bytes(8, "big") * 7 for i in range(8000)]
    assert placement(batch(Codec.LZ4, values), topic()) is Placement.THREAD
    assert INLINE_SCAN_BYTES > INLINE_BYTES
