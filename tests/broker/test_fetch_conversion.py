"""Fetch down-conversion beside the loop (issue #33): a Fetch v2 reader's conversion runs outside
the partition lock in num.io.threads' pool, so a produce to the same partition is answered
while it is in progress, and no more conversions run at once than the pool allows. The
conversion is lazy (KIP-283): the handler converts the first chunk, the rest is converted as
the answer is sent (tests/broker/test_lazy_down_conversion.py drives that over a socket)."""

from __future__ import annotations

import os
import threading

import pytest
import trio
from kafka.record.memory_records import MemoryRecords
from trio.testing import wait_all_tasks_blocked

from broker import workers
from broker.config import BrokerConfig
from broker.handlers import HANDLERS, release_fetch_body
from broker.handlers import fetch as fetch_module
from broker.server import open_context
from protocol import ApiKey, MessageSetBuilder, Request, RequestHeader
from protocol.records import Codec
from protocol.schemas import decode_request_body, encode_request_body


def request(api_key: ApiKey, version: int, body: dict) -> Request:
    raw = encode_request_body(api_key, version, body)
    return Request(
        RequestHeader(api_key, version, 1, "test"),
        decode_request_body(api_key, version, raw, 0, len(raw)),
    )


def config(tmp_path, **props) -> BrokerConfig:
    pairs = [("log.dirs", str(tmp_path)), ("listeners", "PLAINTEXT://127.0.0.1:0")]
    return BrokerConfig.from_properties(pairs + list(props.items()))


def batch(n: int, tag: bytes, codec: Codec = Codec.LZ4) -> bytes:
    builder = MessageSetBuilder(magic=2, codec=codec)
    for i in range(n):
        builder.append(tag + b"-%d" % i, key=b"k%d" % i, timestamp=1_700_000_000_000 + i)
    return builder.build()


async def produce(ctx, topic: str, partition: int, records: bytes) -> int:
    body = {
        "acks": 1,
        "timeout_ms": 1000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": records}]}
        ],
    }
    answer = await HANDLERS[ApiKey.PRODUCE](ctx, request(ApiKey.PRODUCE, 3, body))
    part = answer["responses"][0]["partition_responses"][0]
    assert part["error_code"] == 0
    return part["base_offset"]


async def fetch_v2(ctx, topic: str, partition: int) -> bytes:
    """The partition's records as a Fetch v2 answer sends them: every converted piece."""
    part = await fetch(ctx, topic, partition, 2)
    assert part["error_code"] == 0
    region = part["records"]
    assert isinstance(region.source, fetch_module.ConvertingSource)
    pieces = []
    while piece := await trio.to_thread.run_sync(region.source.next_piece):
        pieces.append(piece)
    release_fetch_body({"responses": [{"partitions": [part]}]})
    raw = b"".join(pieces)
    assert len(raw) == region.length
    return raw


async def fetch(ctx, topic: str, partition: int, version: int) -> dict:
    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": partition, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                ],
            }
        ],
    }
    answer = await HANDLERS[ApiKey.FETCH](ctx, request(ApiKey.FETCH, version, body))
    return answer["responses"][0]["partitions"][0]


def kafka_python_read(raw: bytes) -> list[tuple]:
    """(offset, key, value, magic) of every message, as kafka-python's consumer reads them."""
    records, out = MemoryRecords(raw), []
    while records.has_next():
        batch = records.next_batch()
        out += [(r.offset, r.key, r.value, batch.magic) for r in batch]
    return out


class GatedConvert:
    """fetch's LazyDownConversion (its first chunk converted when made), held in its worker
    thread until ``release`` is set; counts how many conversions are inside at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.inside = self.most = 0
        self.entered = trio.Semaphore(0, max_value=100)
        self.token = trio.lowlevel.current_trio_token()

    @classmethod
    def installed(cls, monkeypatch) -> GatedConvert:
        """A gate put in place of fetch's LazyDownConversion for the test."""
        gate = cls()
        monkeypatch.setattr(
            fetch_module, "LazyDownConversion_unpatched", fetch_module.LazyDownConversion,
            raising=False,
        )  # fmt: skip
        monkeypatch.setattr(fetch_module, "LazyDownConversion", gate)
        return gate

    def __call__(self, *args):
        with self.lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
        trio.from_thread.run_sync(self.entered.release, trio_token=self.token)
        try:
            self.release.wait(60)
            return fetch_module.LazyDownConversion_unpatched(*args)
        finally:
            with self.lock:
                self.inside -= 1


async def test_a_produce_to_the_partition_is_answered_while_its_conversion_runs(
    tmp_path, monkeypatch
):
    ctx = await open_context(config(tmp_path))
    await ctx.create_topic("t", 1)
    await produce(ctx, "t", 0, batch(500, b"old"))
    gate = GatedConvert.installed(monkeypatch)
    converted: dict[str, bytes] = {}

    async def old_reader():
        converted["raw"] = await fetch_v2(ctx, "t", 0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(old_reader)
        await gate.entered.acquire()  # the conversion is in progress, held in its thread
        assert await produce(ctx, "t", 0, batch(3, b"new", Codec.NONE)) == 500
        assert gate.inside == 1 and "raw" not in converted
        gate.release.set()
    got = kafka_python_read(converted["raw"])
    assert got == [(i, b"k%d" % i, b"old-%d" % i, 1) for i in range(500)]
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)


@pytest.mark.parametrize(("io_threads", "cores"), [(2, 8), (8, 2)])
async def test_no_more_conversions_run_at_once_than_num_io_threads_or_cores(
    tmp_path, monkeypatch, io_threads, cores
):
    """At most num.io.threads conversions at once, and at most one per core: more only queue
    for the GIL ahead of the event loop (broker/workers.py conversion_threads)."""
    monkeypatch.setattr(workers, "usable_cores", lambda: cores)
    ctx = await open_context(config(tmp_path, **{"num.io.threads": str(io_threads)}))
    await ctx.create_topic("t", 5)
    for p in range(5):
        await produce(ctx, "t", p, batch(50, b"p%d" % p))
    gate = GatedConvert.installed(monkeypatch)
    answers: dict[int, bytes] = {}

    async def reader(p: int):
        answers[p] = await fetch_v2(ctx, "t", p)

    async with trio.open_nursery() as nursery:
        for p in range(5):
            nursery.start_soon(reader, p)
        for _ in range(2):
            await gate.entered.acquire()
        # The other three read their data (in trio's own threads), then queue for the pool.
        while ctx.io_threads.statistics().tasks_waiting < 3:
            await wait_all_tasks_blocked()
            await trio.sleep(0.01)
        assert ctx.io_threads.statistics().borrowed_tokens == 2
        assert gate.inside == 2 and not answers
        gate.release.set()
    assert gate.most == 2
    for p in range(5):
        assert kafka_python_read(answers[p]) == [
            (i, b"k%d" % i, b"p%d-%d" % (p, i), 1) for i in range(50)
        ]
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)


async def test_altering_num_io_threads_resizes_the_pool(tmp_path, monkeypatch):
    """IncrementalAlterConfigs sets num.io.threads cluster-wide, as Kafka allows at run time;
    the next conversions run that many at once."""
    monkeypatch.setattr(workers, "usable_cores", lambda: 8)
    ctx = await open_context(config(tmp_path, **{"num.io.threads": "1"}))
    await ctx.create_topic("t", 4)
    for p in range(4):
        await produce(ctx, "t", p, batch(10, b"p%d" % p))
    alter = {
        "resources": [
            {
                "resource_type": 4,
                "resource_name": "",
                "configs": [{"name": "num.io.threads", "config_operation": 0, "value": "3"}],
            }
        ],
        "validate_only": False,
    }
    answer = await HANDLERS[ApiKey.INCREMENTAL_ALTER_CONFIGS](
        ctx, request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, alter)
    )
    assert answer["responses"][0]["error_code"] == 0
    gate = GatedConvert.installed(monkeypatch)
    with trio.fail_after(60):  # a pool left at 1 would hold the other two back
        await _three_at_once(ctx, gate)
    assert gate.most == 3
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)


async def _three_at_once(ctx, gate: GatedConvert) -> None:
    async with trio.open_nursery() as nursery:
        for p in range(4):
            nursery.start_soon(fetch_v2, ctx, "t", p)
        for _ in range(3):
            await gate.entered.acquire()
        while ctx.io_threads.statistics().tasks_waiting < 1:
            await wait_all_tasks_blocked()
            await trio.sleep(0.01)
        assert gate.inside == 3
        gate.release.set()


async def test_zstd_data_is_refused_below_fetch_v10_and_read_from_it(tmp_path):
    """KIP-110: v0-v3 readers (converted) and v4-v9 readers (as stored) get
    UNSUPPORTED_COMPRESSION_TYPE for zstd batches, v10 reads them."""
    ctx = await open_context(config(tmp_path))
    await ctx.create_topic("t", 1)
    await produce(ctx, "t", 0, batch(5, b"z", Codec.ZSTD))
    for version in (2, 9):
        part = await fetch(ctx, "t", 0, version)
        assert (part["error_code"], part["records"]) == (76, b"")
        assert part["high_watermark"] == 5
    part = await fetch(ctx, "t", 0, 10)
    assert part["error_code"] == 0
    region = part["records"]
    raw = os.pread(region.source, region.length, region.position)
    release_fetch_body({"responses": [{"partitions": [part]}]})
    assert [(r[0], r[2]) for r in kafka_python_read(raw)] == [(i, b"z-%d" % i) for i in range(5)]
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)
