"""A produce's partitions are answered without a wait where none is needed
(broker/handlers/produce.py ``_produce_now``): the same answers and the same logs as the full
path, which still takes whatever would wait (a held lock, a failing disk, the first
LogAppendTime, an append that fsyncs). Real broker contexts on files, no sockets."""

from __future__ import annotations

import errno
import os
import tempfile
from typing import Any

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.handlers import HANDLERS
from broker.handlers import produce
from broker.server import open_context
from protocol import ApiKey
from protocol import recordbatch as rb
from protocol.errors import ErrorCode as E
from storage import syscalls
from tests.broker.test_server import config, request

NOW = 1_700_000_000_000


def batch(values: int, *, pid: int = -1, sequence: int = -1, corrupt: bool = False) -> bytes:
    spec = rb.BatchSpec(
        producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=sequence
    )
    out = bytearray(
        rb.build_batch(spec, [(i, NOW + i, None, b"v%d" % i, ()) for i in range(values)])
    )
    if corrupt:
        out[-1] ^= 0xFF  # the CRC no longer matches
    return bytes(out)


def produce_request(version: int, writes: list[tuple[str, int, bytes]]) -> Any:
    topics: dict[str, list[dict]] = {}
    for name, partition, records in writes:
        topics.setdefault(name, []).append({"index": partition, "records": records})
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 1000,
        "topic_data": [{"name": n, "partition_data": parts} for n, parts in topics.items()],
    }
    return request(ApiKey.PRODUCE, version, body)


async def context(path: str):
    ctx = await open_context(config(path))
    ctx.clock = lambda: NOW
    await ctx.create_topic("create", 2)
    await ctx.create_topic("append", 2, {"message.timestamp.type": "LogAppendTime"})
    await ctx.create_topic("synced", 1, {"flush.messages": "1"})
    return ctx


def stored(ctx) -> dict[tuple[str, int], bytes]:
    logs = {}
    for name in ("create", "append", "synced"):
        for p in range(ctx.topics.get(name).partitions):
            log = ctx.get_log(name, p)
            logs[name, p] = log.read(0, 1 << 20).read_bytes() if log.log_end_offset else b""
    return logs


write = st.tuples(
    st.sampled_from(["create", "append", "synced", "missing", "__consumer_offsets"]),
    st.integers(0, 2),
    st.integers(1, 5),  # records
    st.sampled_from([None, 0, 1, 2, 3]),  # None: no producer id; else the batch's sequence
    st.booleans(),  # corrupt
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    requests=st.lists(
        st.tuples(st.sampled_from([3, 9]), st.lists(write, min_size=1, max_size=4)),
        min_size=1,
        max_size=6,
    )
)
def test_answers_and_logs_equal_the_full_paths(monkeypatch, requests):
    """Any sequence of produces (unknown and internal topics, partitions out of range,
    corrupt batches, an idempotent producer's batches in and out of order and retried,
    LogAppendTime, appends that fsync) is answered and stored exactly as with every partition
    taken by the full path."""

    async def run(fast: bool) -> tuple[list[dict], dict]:
        with tempfile.TemporaryDirectory() as path, monkeypatch.context() as patch:
            if not fast:
                patch.setattr(produce, "_produce_now", lambda *args: None)
            ctx = await context(path)
            answers = []
            for version, writes in requests:
                req = produce_request(
                    version,
                    [
                        (name, p, batch(n, pid=7 if seq is not None else -1,
                                        sequence=-1 if seq is None else seq, corrupt=bad))
                        for name, p, n, seq, bad in writes
                    ],
                )  # fmt: skip
                answers.append(await HANDLERS[ApiKey.PRODUCE](ctx, req))
            logs = stored(ctx)
            ctx.log_manager.shutdown()
            return answers, logs

    assert trio.run(run, True) == trio.run(run, False)


async def test_a_partition_whose_lock_is_held_is_produced_once_it_is_free(tmp_path):
    ctx = await context(str(tmp_path))
    lock = ctx.partition("create", 0).lock
    answers: list[dict] = []

    async def send() -> None:
        req = produce_request(9, [("create", 0, batch(2))])
        answers.append(await HANDLERS[ApiKey.PRODUCE](ctx, req))

    await lock.acquire()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(send)
        await trio.testing.wait_all_tasks_blocked()
        assert answers == [] and ctx.get_log("create", 0).log_end_offset == 0
        lock.release()
    (part,) = answers[0]["responses"][0]["partition_responses"]
    assert (part["error_code"], part["base_offset"]) == (E.NONE, 0)
    assert ctx.get_log("create", 0).log_end_offset == 2
    ctx.log_manager.shutdown()


async def test_a_full_disk_is_answered_as_before_and_nothing_is_stored(tmp_path, monkeypatch):
    """The write fails on the fast path; the full path tries once more, answers
    KAFKA_STORAGE_ERROR and records the partition as failing; once space is back the next
    produce gets offset 0."""
    ctx = await context(str(tmp_path))
    writes = []

    def full(fd: int, data: Any, position: int) -> int:
        writes.append(position)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patch:
        patch.setattr(syscalls, "pwrite", full)
        answer = await HANDLERS[ApiKey.PRODUCE](ctx, produce_request(9, [("create", 0, batch(3))]))
    (part,) = answer["responses"][0]["partition_responses"]
    assert part["error_code"] == E.KAFKA_STORAGE_ERROR
    assert "No space left on device" in part["error_message"]
    assert len(writes) == 2  # the fast path's, then the full path's
    assert ctx.partition("create", 0).append_failure is not None
    assert ctx.get_log("create", 0).log_end_offset == 0
    answer = await HANDLERS[ApiKey.PRODUCE](ctx, produce_request(9, [("create", 0, batch(3))]))
    (part,) = answer["responses"][0]["partition_responses"]
    assert (part["error_code"], part["base_offset"]) == (E.NONE, 0)
    assert ctx.partition("create", 0).append_failure is None
    ctx.log_manager.shutdown()
