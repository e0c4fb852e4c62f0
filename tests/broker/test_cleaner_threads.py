"""The broker's log cleaner threads (broker/cleaner.py) over a real BrokerContext: compacted
topics produced through the Produce handler are cleaned, the checkpoint file follows, two
threads clean two logs at once, each cleaning's log line tells what the files show, the
partition stays writable while a (throttled) cleaning runs, and the properties parse."""

from __future__ import annotations

import glob
import itertools
import os
import threading
import time

import pytest
import trio
from structlog.testing import capture_logs

from broker import cleaner as broker_cleaner
from broker.config import BrokerConfig, ConfigError
from broker.handlers import HANDLERS
from broker.server import open_context
from protocol.api import ApiKey
from protocol.records import MessageSetBuilder, iter_deep
from protocol.validator import TopicSettings, validate_produce
from storage.checkpoint import cleaner_checkpoint_path, read_checkpoint
from storage import killpoints
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


async def test_two_cleaner_threads_clean_two_logs_at_once(tmp_path, monkeypatch):
    ctx = await open_context(config(tmp_path, log_cleaner_threads=2, log_cleaner_backoff_ms=50))
    topics = ("a", "b")
    for topic in topics:
        await ctx.create_topic(topic, 1, COMPACT)
        for round_ in range(5):
            await produce(ctx, topic, keyed_set(range(40), b"r%d" % round_))
        ctx.get_log(topic, 0).roll()
    # Each cleaning, once its first segment is read, waits for the other to get as far: with
    # one cleaning at a time the barrier breaks after its timeout and the cleaning fails.
    both_cleaning = threading.Barrier(2, timeout=30)
    arrivals = itertools.count()

    def reached(point: str) -> None:
        if point == "cleaning" and next(arrivals) < 2:
            both_cleaning.wait()

    monkeypatch.setattr(killpoints, "reached", reached)
    with capture_logs() as logs:
        async with trio.open_nursery() as nursery:
            assert len(broker_cleaner.start(ctx, nursery)) == 2
            with trio.fail_after(60):
                while len([e for e in logs if e["event"] == "cleaned log"]) < 2:
                    assert not both_cleaning.broken, "the two cleanings did not overlap"
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
    events = [
        (e["event"], e["topic"]) for e in logs if e["event"] in ("cleaning log", "cleaned log")
    ]
    first_end = events.index(next(e for e in events if e[0] == "cleaned log"))
    assert sorted(events[:first_end]) == [("cleaning log", t) for t in topics], events
    assert sorted(events[first_end:]) == [("cleaned log", t) for t in topics], events
    ends = {(t, 0): ctx.get_log(t, 0).log_end_offset for t in topics}
    for topic in topics:
        got = values_by_key(ctx.get_log(topic, 0))
        assert {k: v for k, (_, v) in got.items()} == {b"key-%d" % k: b"r4." for k in range(40)}
    assert read_checkpoint(cleaner_checkpoint_path(str(tmp_path))) == ends
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)


def segment_files(log) -> dict[int, tuple[int, int]]:
    """The partition's segments on disk: base offset -> (.log size, messages in it)."""
    out = {}
    for path in glob.glob(os.path.join(log.directory, "*.log")):
        with open(path, "rb") as f:
            data = f.read()
        out[int(os.path.basename(path)[:-4])] = (len(data), len(list(iter_deep(data))))
    return out


async def test_the_cleaning_log_line_says_what_the_files_show(tmp_path):
    """bytes/segments/messages before are those of the segments below the dirty section's end
    (the already clean ones too: Kafka rewrites them with the dirty ones), after those that
    replaced them; the throughput counts those bytes and the dirty ones mapped first."""
    ctx = await open_context(config(tmp_path))
    await ctx.create_topic("t", 1, {**COMPACT, "segment.bytes": "50000"})
    log = ctx.get_log("t", 0)
    first_dirty = 0
    for cleaning in range(2):
        for round_ in range(8):
            await produce(ctx, "t", keyed_set(range(100), b"c%dr%d" % (cleaning, round_), 300))
        log.roll()
        end = log.log_end_offset
        before = {b: v for b, v in segment_files(log).items() if b < end}
        dirty_bytes = sum(size for b, (size, _) in before.items() if b >= first_dirty)
        started = time.monotonic()
        with capture_logs() as logs:
            result = await broker_cleaner.clean_filthiest(ctx, Cleaner(1 << 20))
        took = time.monotonic() - started
        assert result is not None and result.end_offset == end
        after = {b: v for b, v in segment_files(log).items() if b < end}
        [line] = [e for e in logs if e["event"] == "cleaned log"]
        assert line["dirty_section"] == f"[{first_dirty}, {end})"
        assert (line["segments_before"], line["segments_after"]) == (len(before), len(after))
        assert line["bytes_before"] == sum(size for size, _ in before.values())
        assert line["bytes_after"] == sum(size for size, _ in after.values())
        # the second time, the 100 values the first cleaning kept are read again
        assert line["messages_before"] == sum(n for _, n in before.values()) == 800 + 100 * cleaning
        assert line["messages_after"] == sum(n for _, n in after.values()) == 100
        # seconds are rounded to 1 ms, MB/s to 0.01: bounds, not a tolerance
        seconds, mb = line["seconds"], (line["bytes_before"] + dirty_bytes) / (1 << 20)
        assert 0 < seconds <= took + 0.0005
        slowest = mb / (seconds + 0.0005) - 0.005
        fastest = mb / (seconds - 0.0005) + 0.005 if seconds > 0.0005 else float("inf")
        assert slowest <= line["mb_per_second"] <= fastest, (line, mb)
        first_dirty = end
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
        while not ctx.log_manager.cleaning.in_progress(("t", 0)):  # under way (it takes ~30 s)
            await trio.sleep(0.01)
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
