"""The broker's log cleaner threads (broker/cleaner.py) over a real BrokerContext: compacted
topics produced through the Produce handler are cleaned, the checkpoint file follows, the
partition stays writable while a (throttled) cleaning runs, and the properties parse."""

from __future__ import annotations

import os
import time

import pytest
import trio

from broker import cleaner as broker_cleaner
from broker.config import BrokerConfig, ConfigError
from broker.handlers import HANDLERS
from broker.server import open_context
from protocol.api import ApiKey
from protocol.records import MessageSetBuilder, iter_deep
from protocol.validator import TopicSettings, validate_produce
from storage.checkpoint import cleaner_checkpoint_path, read_checkpoint
from storage.cleaner import Cleaner
from tests.broker.test_server import config, produce_body, request

COMPACT = {"cleanup.policy": "compact", "segment.bytes": "20000"}


def keyed_set(keys: range, tag: bytes, value_size: int = 100) -> bytes:
    builder = MessageSetBuilder(magic=2)
    for k in keys:
        builder.append(tag + b"." * value_size, key=b"key-%d" % k, timestamp=1_700_000_000_000)
    return builder.build()


async def produce(ctx, topic: str, record_set: bytes) -> int:
    body = await HANDLERS[ApiKey.PRODUCE](
        ctx, request(ApiKey.PRODUCE, 7, produce_body(topic, record_set))
    )
    part = body["responses"][0]["partition_responses"][0]
    assert part["error_code"] == 0, part
    return part["base_offset"]


def values_by_key(log) -> dict[bytes, tuple[int, bytes]]:
    out = {}
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        raw = log.read(offset, 1 << 20).read_bytes()
        messages = list(iter_deep(raw))
        if not messages:
            break
        for m in messages:
            if m.offset >= offset:
                out[m.key] = (m.offset, m.value[:3])
        offset = messages[-1].offset + 1
    return out


async def test_a_compacted_topic_is_cleaned_and_its_checkpoint_written(tmp_path):
    ctx = await open_context(config(tmp_path))
    await ctx.create_topic("t", 1, COMPACT)
    await ctx.create_topic("plain", 1, {"segment.bytes": "20000"})
    for round_ in range(5):
        await produce(ctx, "t", keyed_set(range(40), b"r%d" % round_))
        await produce(ctx, "plain", keyed_set(range(40), b"r%d" % round_))
    log = ctx.get_log("t", 0)
    log.roll()
    expected = {b"key-%d" % k: b"r4." for k in range(40)}
    before = log.size
    result = await broker_cleaner.clean_filthiest(ctx, Cleaner(1 << 20))
    assert result is not None and (result.topic, result.partition) == ("t", 0)
    assert {k: v for k, (_, v) in values_by_key(log).items()} == expected
    assert log.size < before / 3
    assert read_checkpoint(cleaner_checkpoint_path(str(tmp_path))) == {("t", 0): result.end_offset}
    # nothing else is due: the plain topic is not compacted
    assert await broker_cleaner.clean_filthiest(ctx, Cleaner(1 << 20)) is None
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)


async def test_consumer_offsets_is_cleaned_like_any_compacted_topic(tmp_path):
    ctx = await open_context(config(tmp_path))
    await ctx.create_topic("__consumer_offsets", 1, COMPACT)
    for round_ in range(3):
        await trio.to_thread.run_sync(
            ctx.get_log("__consumer_offsets", 0).append,
            _validated(ctx.get_log("__consumer_offsets", 0), round_),
        )
    log = ctx.get_log("__consumer_offsets", 0)
    log.roll()
    result = await broker_cleaner.clean_filthiest(ctx, Cleaner(1 << 20))
    assert result is not None and (result.topic, result.partition) == ("__consumer_offsets", 0)
    assert {k: v for k, (_, v) in values_by_key(log).items()} == {
        b"key-%d" % k: b"r2." for k in range(5)
    }
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)


def _validated(log, round_):
    return validate_produce(
        keyed_set(range(5), b"r%d" % round_),
        TopicSettings(magic=2, compacted=True),
        next_offset=log.log_end_offset,
        now_ms=1_700_000_000_000,
    )


async def test_produce_is_not_blocked_while_a_throttled_cleaning_runs(tmp_path):
    ctx = await open_context(
        config(
            tmp_path,
            log_cleaner_backoff_ms=50,
            log_cleaner_io_max_bytes_per_second=400_000,
        )
    )
    await ctx.create_topic("t", 1, {**COMPACT, "segment.bytes": "300000"})
    for round_ in range(8):
        await produce(ctx, "t", keyed_set(range(100), b"r%d" % round_, 1000))  # 100 KB each
    ctx.get_log("t", 0).roll()
    log = ctx.get_log("t", 0)
    latencies = []
    async with trio.open_nursery() as nursery:
        cleaners = broker_cleaner.start(ctx, nursery)
        assert len(cleaners) == 1
        # the cleaning reads and writes ~2 MB at 400 KB/s: several seconds
        with trio.fail_after(60):
            while log.first_dirty_offset is None:
                started = time.monotonic()
                await produce(ctx, "t", keyed_set(range(3), b"late"))
                latencies.append(time.monotonic() - started)
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    assert len(latencies) > 20, "the cleaning was not throttled"
    assert max(latencies) < 1.0, latencies
    got = values_by_key(log)
    assert {got[b"key-%d" % k][1] for k in range(3, 100)} == {b"r7."}
    assert {got[b"key-%d" % k][1] for k in range(3)} == {b"lat"}
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)


async def test_shutdown_stops_a_cleaning_in_its_worker_thread(tmp_path):
    ctx = await open_context(config(tmp_path, log_cleaner_io_max_bytes_per_second=50_000))
    await ctx.create_topic("t", 1, {**COMPACT, "segment.bytes": "300000"})
    for round_ in range(6):
        await produce(ctx, "t", keyed_set(range(100), b"r%d" % round_, 1000))
    ctx.get_log("t", 0).roll()
    async with trio.open_nursery() as nursery:
        broker_cleaner.start(ctx, nursery)
        await trio.sleep(0.5)  # the cleaning is under way (it would take ~30 s)
        started = time.monotonic()
        nursery.cancel_scope.cancel()
    assert time.monotonic() - started < 5
    directory = ctx.get_log("t", 0).directory
    assert not [n for n in os.listdir(directory) if n.endswith(".cleaned")]
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)


async def test_disabled_cleaner_starts_no_thread(tmp_path):
    for props in ({"log_cleaner_enable": "false"}, {"log_cleaner_threads": 0}):
        ctx = await open_context(config(tmp_path, **props))
        async with trio.open_nursery() as nursery:
            assert broker_cleaner.start(ctx, nursery) == []
        await trio.to_thread.run_sync(ctx.log_manager.shutdown)


def test_cleaner_properties_and_topic_configs():
    c = BrokerConfig.from_properties([("log.dirs", "/tmp/x")])
    assert c.log_cleaner_enable and c.log_cleaner_threads == 1
    assert c.log_cleaner_backoff_ms == 15000
    assert c.log_cleaner_dedupe_buffer_size == 134217728
    assert c.log_cleaner_io_max_bytes_per_second == 1.7976931348623157e308
    t = c.topic_config()
    assert (t.cleanup_policy, t.min_cleanable_dirty_ratio, t.delete_retention_ms) == (
        "delete",
        0.5,
        86400000,
    )
    assert (t.min_compaction_lag_ms, t.max_compaction_lag_ms) == (0, 2**63 - 1)
    c = BrokerConfig.from_properties(
        [
            ("log.dirs", "/tmp/x"),
            ("log.cleaner.min.cleanable.ratio", "0.1"),
            ("log.cleaner.delete.retention.ms", "1000"),
            ("log.cleaner.min.compaction.lag.ms", "5"),
            ("log.cleaner.max.compaction.lag.ms", "60000"),
            ("log.cleaner.io.max.bytes.per.second", "1e6"),
        ]
    )
    t = c.topic_config({"cleanup.policy": "compact,delete"})
    log_config = t.log_config()
    assert log_config.compact and log_config.delete
    assert (log_config.min_cleanable_dirty_ratio, log_config.delete_retention_ms) == (0.1, 1000)
    assert (log_config.min_compaction_lag_ms, log_config.max_compaction_lag_ms) == (5, 60000)
    assert c.log_cleaner_io_max_bytes_per_second == 1e6
    for key, value in (
        ("log.cleaner.min.cleanable.ratio", "1.5"),
        ("log.cleaner.io.max.bytes.per.second", "fast"),
        ("log.cleaner.threads", "-1"),
    ):
        with pytest.raises(ConfigError, match=key):
            BrokerConfig.from_properties([("log.dirs", "/tmp/x"), (key, value)])
    with pytest.raises(ConfigError, match="min.compaction.lag.ms"):
        c.topic_config({"min.compaction.lag.ms": "70000"})
