"""broker/background.py: periodic storage work walks the logs in slices, and every log of every
slice gets its work, against a real broker context (files in tmp_path, no sockets)."""

from __future__ import annotations

from broker import background
from broker.handlers import HANDLERS
from broker.server import open_context
from protocol import ApiKey
from storage import Maintenance
from tests.broker.test_server import config, message_set, request

PARTITIONS = 7


async def test_every_slice_of_logs_is_flushed(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(background, "MAINTENANCE_SLICE", 3)  # 3 + 3 + 1
    ctx = await open_context(config(tmp_path))
    try:
        await ctx.create_topic("t", PARTITIONS, {"flush.ms": "0"})
        await ctx.create_topic("quiet", 2)  # nothing written: nothing to flush
        data = [{"index": p, "records": message_set(3, b"p%d" % p)} for p in range(PARTITIONS)]
        body = {
            "acks": 1,
            "timeout_ms": 1000,
            "topic_data": [{"name": "t", "partition_data": data}],
        }
        answer = await HANDLERS[ApiKey.PRODUCE](ctx, request(ApiKey.PRODUCE, 2, body))
        assert [p["error_code"] for p in answer["responses"][0]["partition_responses"]] == [0] * 7
        logs = [ctx.get_log("t", p) for p in range(PARTITIONS)]
        assert all(log.unflushed_messages == 3 for log in logs)

        assert await background.maintain(ctx, Maintenance.FLUSH) == PARTITIONS
        assert all(log.unflushed_messages == 0 for log in logs)
        assert await background.maintain(ctx, Maintenance.FLUSH) == 0
    finally:
        ctx.log_manager.shutdown()
