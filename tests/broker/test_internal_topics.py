"""The seams between the broker and its group coordinator: the internal topic
``__consumer_offsets`` (no client produce, no creation by Metadata or CreateTopics, reported as
internal), and the peer host reaching JoinGroup over a real TCP connection."""

from __future__ import annotations

import os

import pytest
import trio

from broker.context import INTERNAL_TOPICS, kafka_host_string
from broker.errors import CloseConnectionError
from broker.groups import OFFSETS_TOPIC, setup
from broker.handlers import HANDLERS
from broker.server import Server, open_context
from protocol import ApiKey, MessageSetBuilder
from protocol.connection import ClientConnection
from protocol.errors import ErrorCode as E
from protocol.schemas import decode_response_body, encode_response_body
from tests.broker.test_server import config, request


def message_set(n: int) -> bytes:
    builder = MessageSetBuilder()
    for i in range(n):
        builder.append(b"v%d" % i, key=b"k", timestamp=1_700_000_000_000)
    return builder.build()


def produce_body(acks: int, *topics: str) -> dict:
    return {
        "acks": acks,
        "timeout_ms": 1000,
        "topic_data": [
            {"name": t, "partition_data": [{"index": 0, "records": message_set(2)}]} for t in topics
        ],
    }


async def metadata(ctx, version: int, topics):
    wanted = None if topics is None else [{"name": t} for t in topics]
    return await HANDLERS[ApiKey.METADATA](
        ctx, request(ApiKey.METADATA, version, {"topics": wanted})
    )


def test_offsets_topic_is_the_internal_topic():
    assert OFFSETS_TOPIC in INTERNAL_TOPICS


@pytest.mark.parametrize(
    "ip, shown",
    [
        ("127.0.0.1", "/127.0.0.1"),
        ("::1", "/0:0:0:0:0:0:0:1"),
        ("::ffff:10.1.2.3", "/10.1.2.3"),
        ("fe80::a:1%eth0", "/fe80:0:0:0:0:0:a:1%eth0"),
        ("2001:db8::", "/2001:db8:0:0:0:0:0:0"),
    ],
)
def test_peer_host_is_rendered_like_javas_inet_address(ip, shown):
    assert kafka_host_string(ip) == shown


async def test_produce_to_offsets_topic_is_refused_and_nothing_is_stored(tmp_path):
    ctx = await open_context(config(tmp_path))
    await ctx.create_topic("t", 1)
    async with trio.open_nursery() as nursery:
        ctx.coordinator = await setup(ctx, nursery)
        assert await ctx.coordinator.commit_offsets("g", "", -1, None, [("t", 0, 7, "", -1)]) == [
            E.NONE
        ]
        offsets_log = ctx.get_log(OFFSETS_TOPIC, 0)
        end = offsets_log.log_end_offset
        produce = HANDLERS[ApiKey.PRODUCE]
        for version in (0, 1, 2):
            body = await produce(
                ctx, request(ApiKey.PRODUCE, version, produce_body(-1, OFFSETS_TOPIC, "t"))
            )
            got = [
                (
                    r["name"],
                    r["partition_responses"][0]["error_code"],
                    r["partition_responses"][0]["base_offset"],
                )
                for r in body["responses"]
            ]
            assert got == [(OFFSETS_TOPIC, E.INVALID_TOPIC_EXCEPTION, -1), ("t", 0, 2 * version)]
        with pytest.raises(CloseConnectionError):  # acks=0: closing is the only answer
            await produce(ctx, request(ApiKey.PRODUCE, 2, produce_body(0, OFFSETS_TOPIC)))
        assert offsets_log.log_end_offset == end
        assert [p.offset for p in ctx.coordinator.fetch_offsets("g", [("t", 0)])] == [7]
        nursery.cancel_scope.cancel()
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)


async def test_offsets_topic_is_created_only_by_the_coordinator(tmp_path):
    ctx = await open_context(config(tmp_path, auto_create_topics_enable="true"))
    for version in (0, 1, 2):
        body = await metadata(ctx, version, [OFFSETS_TOPIC])
        (entry,) = body["topics"]
        assert (entry["name"], entry["error_code"], entry["partitions"]) == (
            OFFSETS_TOPIC,
            E.LEADER_NOT_AVAILABLE,
            [],
        )
    created = await HANDLERS[ApiKey.CREATE_TOPICS](
        ctx,
        request(
            ApiKey.CREATE_TOPICS,
            0,
            {
                "topics": [
                    {
                        "name": OFFSETS_TOPIC,
                        "num_partitions": 1,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [],
                    }
                ],
                "timeout_ms": 1000,
            },
        ),
    )
    assert [(t["name"], t["error_code"]) for t in created["topics"]] == [
        (OFFSETS_TOPIC, E.INVALID_REQUEST)
    ]
    assert ctx.topics.get(OFFSETS_TOPIC) is None
    assert not os.path.exists(tmp_path / f"{OFFSETS_TOPIC}-0")
    # ordinary topics are still auto-created
    body = await metadata(ctx, 1, ["plain"])
    assert body["topics"][0]["error_code"] == E.LEADER_NOT_AVAILABLE
    assert ctx.topics.get("plain") is not None

    async with trio.open_nursery() as nursery:
        ctx.coordinator = await setup(ctx, nursery)
        topic = ctx.topics.get(OFFSETS_TOPIC)
        assert (
            topic.config.cleanup_policy,
            topic.config.retention_ms,
            topic.config.retention_bytes,
        ) == ("compact", -1, -1)
        body = await metadata(ctx, 1, None)  # all topics
        flags = {e["name"]: (e["error_code"], e["is_internal"]) for e in body["topics"]}
        assert flags == {OFFSETS_TOPIC: (0, True), "plain": (0, False)}
        v0 = await metadata(ctx, 0, [OFFSETS_TOPIC])
        assert v0["topics"][0]["error_code"] == 0
        # Metadata v0 has no is_internal on the wire: a v0 client reads the default, false.
        raw = encode_response_body(ApiKey.METADATA, 0, v0)
        assert (
            decode_response_body(ApiKey.METADATA, 0, raw, 0, len(raw)).topics[0].is_internal
            is False
        )
        nursery.cancel_scope.cancel()
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)


async def test_join_group_over_tcp_records_the_peer_host(tmp_path):
    ctx = await open_context(config(tmp_path))
    server = Server(ctx)
    async with trio.open_nursery() as nursery:
        ctx.coordinator = await setup(ctx, nursery)
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        await nursery.start(trio.serve_listeners, server.handle_connection, listeners)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        client = ClientConnection(client_id="peer-test")

        async def call(key, version, body):
            _, frame = client.request(key, version, body)
            await stream.send_all(frame)
            while True:
                for response in client.receive_data(await stream.receive_some(65536)):
                    return response.body

        with trio.fail_after(10):
            joined = await call(
                ApiKey.JOIN_GROUP,
                0,
                {
                    "group_id": "g",
                    "session_timeout_ms": 10_000,
                    "member_id": "",
                    "protocol_type": "consumer",
                    "protocols": [{"name": "range", "metadata": b"m"}],
                },
            )
            assert joined.error_code == 0
            described = await call(ApiKey.DESCRIBE_GROUPS, 0, {"groups": ["g"]})
        (member,) = described.groups[0].members
        assert (member.member_id, member.client_id, member.client_host) == (
            joined.member_id,
            "peer-test",
            "/127.0.0.1",
        )
        await stream.aclose()
        nursery.cancel_scope.cancel()
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)
