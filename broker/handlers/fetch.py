"""Fetch v0-v3 with long polling and zero-copy sends.

A fetch that finds fewer than ``min_bytes`` waits until ``max_wait_time`` for an append to any of
its partitions (trio events registered before reading, so no append is missed), then reads
again. Data that needs no conversion is returned as FileRegions over a duplicated file
descriptor, which the connection loop sends with os.sendfile and then closes (:func:`release`):
the duplicate keeps the bytes readable even if retention deletes the segment meanwhile.
v0/v1 requests get magic-0 bytes (down-converted in the worker thread).
"""
from __future__ import annotations

import os

import structlog
import trio

from broker.context import BrokerContext
from protocol.api import FileRegion, Request
from protocol.errors import ErrorCode
from protocol.records import convert, iter_shallow
from storage import OffsetOutOfRangeError

log = structlog.get_logger(__name__)

INT_MAX = 2**31 - 1


def _read(log_, offset: int, max_bytes: int, min_one: bool, down_convert: bool):
    """Worker thread, under the partition lock: (high_watermark, record_set) where record_set is
    bytes or a FileRegion owning a dup()ed descriptor."""
    return _records(log_.read(offset, max_bytes, min_one_message=min_one), down_convert)


def _records(data, down_convert: bool):
    """:func:`_read`'s answer for FetchData already found."""
    if data.length == 0:
        return data.high_watermark, b""
    if down_convert:
        raw = data.read_bytes()
        if any(e.magic != 0 for e in iter_shallow(raw)):
            raw = convert(raw, 0)
        return data.high_watermark, raw
    return data.high_watermark, FileRegion(os.dup(data.fileno), data.position, data.length)


def release(body: dict) -> None:
    """Close the descriptors of every FileRegion in a fetch response body (idempotent)."""
    for topic in body["responses"]:
        for part in topic["partition_responses"]:
            region = part["record_set"]
            if isinstance(region, FileRegion):
                part["record_set"] = b""
                os.close(region.source)


async def _read_all(ctx: BrokerContext, request: Request) -> tuple[dict, int, bool]:
    """One pass over the requested partitions: (body, bytes found, any partition error)."""
    body = request.body
    version = request.header.api_version
    remaining = body.max_bytes if version >= 3 else INT_MAX
    min_one = version >= 3  # KIP-74: the first message is returned even if over the limits
    total, errored = 0, False
    responses = []
    out = {"responses": responses}
    if version >= 1:
        out["throttle_time_ms"] = 0
    try:
        for topic in body.topics:
            parts = []
            responses.append({"topic": topic.topic, "partition_responses": parts})
            for p in topic.partitions:
                error, hw, records = await _read_partition(
                    ctx, topic.topic, p.partition, p.fetch_offset,
                    min(p.max_bytes, remaining), min_one, version <= 1)
                size = records.length if isinstance(records, FileRegion) else len(records)
                if size:
                    min_one = False
                    total += size
                    if version >= 3:
                        remaining = max(0, remaining - size)
                errored = errored or error != ErrorCode.NONE
                parts.append({"partition_header": {"partition": p.partition,
                                                   "error_code": int(error),
                                                   "high_watermark": hw},
                              "record_set": records})
    except BaseException:
        release(out)
        raise
    return out, total, errored


async def _read_partition(ctx, topic: str, partition: int, offset: int, max_bytes: int,
                          min_one: bool, down_convert: bool):
    log_ = ctx.get_log(topic, partition)
    if log_ is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, b""
    if max_bytes < 0:
        return ErrorCode.INVALID_FETCH_SIZE, -1, b""
    async with ctx.partition(topic, partition).lock:
        if ctx.get_log(topic, partition) is not log_:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, b""
        try:
            if max_bytes == 0 and not min_one:
                return ErrorCode.NONE, log_.high_watermark, b""
            # A consumer at the tail (or at the log end) is answered from memory: no thread.
            data = log_.read_cached(offset, max_bytes, min_one_message=min_one)
            if data is not None and (data.length == 0 or not down_convert):
                hw, records = _records(data, down_convert)
            else:
                hw, records = await trio.to_thread.run_sync(
                    _read, log_, offset, max_bytes, min_one, down_convert)
        except OffsetOutOfRangeError as exc:
            log.info("fetch offset out of range", topic=topic, partition=partition,
                     offset=offset, reason=str(exc))
            return ErrorCode.OFFSET_OUT_OF_RANGE, log_.high_watermark, b""
        except Exception as exc:
            log.error("fetch read failed", topic=topic, partition=partition, offset=offset,
                      error=repr(exc), action="check the log dir's disk and dump-log --verify")
            return ErrorCode.UNKNOWN_SERVER_ERROR, -1, b""
    return ErrorCode.NONE, hw, records


async def handle_fetch(ctx: BrokerContext, request: Request) -> dict:
    body = request.body
    deadline = trio.current_time() + max(0, body.max_wait_time) / 1000
    keys = {(t.topic, p.partition) for t in body.topics for p in t.partitions}
    while True:
        event = trio.Event()
        states = [ctx.partition(*key) for key in keys if ctx.get_log(*key) is not None]
        for state in states:
            state.waiters.add(event)
        try:
            out, total, errored = await _read_all(ctx, request)
            if (total >= body.min_bytes or errored or ctx.stopping
                    or trio.current_time() >= deadline):
                return out
            release(out)
            with trio.move_on_at(deadline):
                await event.wait()
        finally:
            for state in states:
                state.waiters.discard(event)
