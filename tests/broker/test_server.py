"""In-process tests of the trio glue: sendfile responses, partition-lock atomicity, long poll."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import AsyncIterator, Callable

import pytest
import trio
import trio.testing
from trio.testing import wait_all_tasks_blocked

from broker.config import BrokerConfig
from broker.groups import OFFSETS_TOPIC
from broker.groups import setup as setup_groups
from broker.handlers import HANDLERS, release_fetch_body
from broker.server import open_context, send_response
from broker.streams import PlainSocketStream
from broker.topics import REGISTRY_FILE
from protocol import ApiKey, FileRegion, MessageSetBuilder, Request, RequestHeader, iter_deep
from protocol.schemas import decode_request_body, encode_request_body


def request(api_key: ApiKey, version: int, body: dict) -> Request:
    """A decoded request as the server sees it (built through the real schema)."""
    raw = encode_request_body(api_key, version, body)
    return Request(
        RequestHeader(api_key, version, 1, "test"),
        decode_request_body(api_key, version, raw, 0, len(raw)),
    )


async def test_send_response_streams_file_regions_with_sendfile(tmp_path):
    data = os.urandom(3 * 1024 * 1024)  # far beyond the socket buffers: sendfile hits EAGAIN
    path = tmp_path / "segment"
    path.write_bytes(b"junk" + data + b"tail")
    fd = os.open(path, os.O_RDONLY)
    a, b = socket.socketpair()
    try:
        sender = PlainSocketStream(a)
        receiver = PlainSocketStream(b)
        received = bytearray()

        async def slow_reader():
            while len(received) < 2 + len(data) + 3:
                await wait_all_tasks_blocked()  # the sender waits on a full socket: EAGAIN
                received.extend(await receiver.receive_some(65536))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow_reader)
            await send_response(sender, [b"he", FileRegion(fd, 4, len(data)), b"end"])
        assert bytes(received) == b"he" + data + b"end"
    finally:
        os.close(fd)
        a.close()
        b.close()


async def test_small_file_regions_are_sent_inline_and_a_short_file_is_an_error(tmp_path):
    """Regions up to INLINE_REGION_BYTES are read into the one send, larger ones sent by
    sendfile; over TCP the bytes arrive identical and in order either way."""
    import pytest

    from broker.server import INLINE_REGION_BYTES, SendfileError

    small, large = os.urandom(100), os.urandom(INLINE_REGION_BYTES + 1)
    path = tmp_path / "segment"
    path.write_bytes(small + large)
    fd = os.open(path, os.O_RDONLY)
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen()
    client = trio.socket.socket()
    try:
        await client.connect(listener.getsockname())
        server, _ = await listener.accept()
        sender = PlainSocketStream.take(trio.SocketStream(server))
        receiver = trio.SocketStream(client)
        expected = b"h" + small + b"m" + large + b"t" + small
        received = bytearray()

        async def read_all():
            while len(received) < len(expected):
                received.extend(await receiver.receive_some(1 << 20))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_all)
            await send_response(
                sender,
                [
                    b"h",
                    FileRegion(fd, 0, 100),
                    b"m",
                    FileRegion(fd, 100, len(large)),
                    b"t",
                    FileRegion(fd, 0, 100),
                ],
            )
        assert bytes(received) == expected
        with pytest.raises(SendfileError):
            await send_response(sender, [FileRegion(fd, len(small) + len(large) - 10, 20)])
        await sender.aclose()
    finally:
        os.close(fd)
        listener.close()
        client.close()


def config(tmp_path, **props) -> BrokerConfig:
    pairs = [("log.dirs", str(tmp_path)), ("listeners", "PLAINTEXT://127.0.0.1:0")]
    return BrokerConfig.from_properties(
        pairs + [(k.replace("_", "."), str(v)) for k, v in props.items()]
    )


def message_set(n: int, tag: bytes) -> bytes:
    builder = MessageSetBuilder()
    for i in range(n):
        builder.append(tag + b"-%d" % i, timestamp=1_700_000_000_000 + i)
    return builder.build()


def produce_body(topic: str, record_set: bytes) -> dict:
    return {
        "acks": -1,
        "timeout_ms": 1000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": record_set}]}],
    }


async def test_concurrent_produces_get_disjoint_contiguous_offsets(tmp_path):
    ctx = await open_context(config(tmp_path, log_segment_bytes=4096))
    await ctx.create_topic("t", 1)
    produce = HANDLERS[ApiKey.PRODUCE]
    bases: dict[int, int] = {}

    async def one(i: int):
        body = await produce(
            ctx, request(ApiKey.PRODUCE, 2, produce_body("t", message_set(3, b"p%d" % i)))
        )
        part = body["responses"][0]["partition_responses"][0]
        assert part["error_code"] == 0
        bases[i] = part["base_offset"]

    async with trio.open_nursery() as nursery:
        for i in range(40):
            nursery.start_soon(one, i)
    assert sorted(bases.values()) == list(range(0, 120, 3))

    fetch = HANDLERS[ApiKey.FETCH]
    values: dict[int, bytes] = {}
    while len(values) < 120:  # a read stops at a segment's end, as in Kafka
        body = await fetch(
            ctx,
            request(
                ApiKey.FETCH,
                10,
                {
                    "replica_id": -1,
                    "max_wait_ms": 0,
                    "min_bytes": 0,
                    "max_bytes": 1 << 20,
                    "topics": [
                        {
                            "topic": "t",
                            "partitions": [
                                {
                                    "partition": 0,
                                    "fetch_offset": len(values),
                                    "partition_max_bytes": 1 << 20,
                                }
                            ],
                        }
                    ],
                },
            ),
        )
        region = body["responses"][0]["partitions"][0]["records"]
        assert isinstance(region, FileRegion)  # no conversion or zstd check: zero-copy path
        raw = os.pread(region.source, region.length, region.position)
        release_fetch_body(body)
        values.update((m.offset, m.value) for m in iter_deep(raw))
    for i, base in bases.items():  # each producer's messages are contiguous and intact
        assert [values.get(base + j) for j in range(3)] == [b"p%d-%d" % (i, j) for j in range(3)]
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)


async def test_long_poll_waits_for_min_bytes_and_wakes_on_append(tmp_path):
    ctx = await open_context(config(tmp_path))
    await ctx.create_topic("t", 1)
    fetch, produce = HANDLERS[ApiKey.FETCH], HANDLERS[ApiKey.PRODUCE]
    fetch_request = request(
        ApiKey.FETCH,
        10,
        {
            "replica_id": -1,
            "max_wait_ms": 60000,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "topics": [
                {
                    "topic": "t",
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                    ],
                }
            ],
        },
    )
    result = {}

    async def poll():
        result["body"] = await fetch(ctx, fetch_request)
        result["at"] = trio.current_time()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(poll)
        await wait_all_tasks_blocked()
        assert "body" not in result  # nothing yet: still waiting
        appended_at = trio.current_time()
        await produce(ctx, request(ApiKey.PRODUCE, 2, produce_body("t", message_set(1, b"x"))))
    assert result["at"] - appended_at < 5
    region = result["body"]["responses"][0]["partitions"][0]["records"]
    assert region.length > 0
    release_fetch_body(result["body"])
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)


async def test_flush_messages_1_is_fsynced_off_the_event_loop_before_the_answer(
    tmp_path, monkeypatch
):
    """Small produces are appended on the trio thread unless the append would fsync: with
    flush.messages=1 every acks=-1 answer comes after an fsync made in a worker thread; a
    default topic's small produce fsyncs nothing."""
    ctx = await open_context(config(tmp_path))
    await ctx.create_topic("durable", 1, {"flush.messages": "1"})
    await ctx.create_topic("plain", 1, {})
    fsync_threads = []
    real_fsync = os.fsync
    monkeypatch.setattr(
        os,
        "fsync",
        lambda fd: (fsync_threads.append(threading.current_thread()), real_fsync(fd))[1],
    )
    produce = HANDLERS[ApiKey.PRODUCE]
    for i in range(3):
        body = await produce(
            ctx, request(ApiKey.PRODUCE, 2, produce_body("durable", message_set(2, b"d%d" % i)))
        )
        assert body["responses"][0]["partition_responses"][0]["error_code"] == 0
        log = ctx.get_log("durable", 0)
        assert log.recovery_point == log.log_end_offset == 2 * (i + 1)  # on disk when answered
    assert fsync_threads and threading.main_thread() not in fsync_threads
    before = len(fsync_threads)
    body = await produce(
        ctx, request(ApiKey.PRODUCE, 2, produce_body("plain", message_set(2, b"p")))
    )
    assert body["responses"][0]["partition_responses"][0]["error_code"] == 0
    assert len(fsync_threads) == before and ctx.get_log("plain", 0).recovery_point == 0
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)


async def test_a_response_the_broker_cannot_encode_is_logged_as_its_own_bug(tmp_path):
    """A handler's body that does not fit the response schema is this side's fault: the
    connection closes with an internal-error line, not a "bad request" blaming the client."""
    from structlog.testing import capture_logs

    from broker.server import Server
    from protocol import ClientConnection

    ctx = await open_context(config(tmp_path))

    async def broken_metadata(ctx, request):
        return {"brokers": "not a list"}

    server = Server(ctx, {**HANDLERS, ApiKey.METADATA: broken_metadata})
    served, peer = await _connected_pair()
    client = ClientConnection(client_id="t")
    with capture_logs() as logs:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.handle_connection, served)
            await peer.send_all(client.request(ApiKey.METADATA, 1, {"topics": []})[1])
            assert await peer.receive_some(100) == b""  # closed without an answer
            await peer.aclose()
    events = {e["event"]: e for e in logs}
    assert "closing connection after an internal error" in events
    assert "closing connection after a bad request" not in events
    assert "BodyEncodeError" in events["connection closed"]["reason"]
    ctx.log_manager.shutdown()


async def test_a_topic_is_listed_only_once_every_partition_log_exists(tmp_path):
    """Metadata must not name a partition that answers UNKNOWN_TOPIC_OR_PARTITION: Burrow 1.2.1
    asked ListOffsets for such a partition of a topic being created and then crashed on the
    partition without an offset. The registry file has the topic before its logs (crash
    repair), the registry clients see only after them."""
    ctx = await open_context(config(tmp_path))
    real_create_log = ctx.log_manager.create_log
    reached, release = threading.Event(), threading.Event()

    def slow_create_log(topic, partition, log_config=None):
        if partition == 1:
            reached.set()
            release.wait(30)
        return real_create_log(topic, partition, log_config)

    ctx.log_manager.create_log = slow_create_log
    metadata = HANDLERS[ApiKey.METADATA]

    async def listed() -> list[tuple[str, int]]:
        body = await metadata(ctx, request(ApiKey.METADATA, 1, {"topics": None}))
        return [(t["name"], len(t["partitions"])) for t in body["topics"]]

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ctx.create_topic, "t", 2)
        try:
            await trio.to_thread.run_sync(reached.wait, 30)
            assert ctx.topics.get("t") is None and await listed() == []
            assert '"t"' in (tmp_path / REGISTRY_FILE).read_text()
        finally:
            release.set()
    assert await listed() == [("t", 2)]
    ctx.log_manager.shutdown()


async def _connected_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    """(server side, client side) of a loopback TCP connection (handle_connection reads the
    peer's address)."""
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen()
    client = trio.socket.socket()
    await client.connect(listener.getsockname())
    server, _ = await listener.accept()
    listener.close()
    return trio.SocketStream(server), trio.SocketStream(client)


def _long_poll(topic: str, max_wait_ms: int) -> dict:
    return {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "topics": [
            {
                "topic": topic,
                "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1000}],
            }
        ],
    }


async def test_idle_limit_counts_only_waiting_for_bytes(tmp_path, autojump_clock):
    """connections.max.idle.ms closes a connection that sends nothing for that long (checked
    every tenth of it); a request served for longer (a fetch long poll) is answered, and the
    limit counts again from then."""
    from structlog.testing import capture_logs

    from broker.server import Server
    from protocol import ClientConnection

    ctx = await open_context(config(tmp_path, connections_max_idle_ms=1000))
    await ctx.create_topic("t", 1)
    server = Server(ctx)
    client = ClientConnection(client_id="t")
    with capture_logs() as logs:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.close_idle_connections)
            idle_side, idle_peer = await _connected_pair()
            nursery.start_soon(server.handle_connection, idle_side)
            polling_side, peer = await _connected_pair()
            nursery.start_soon(server.handle_connection, polling_side)
            start = trio.current_time()
            await peer.send_all(client.request(ApiKey.FETCH, 4, _long_poll("t", 5000))[1])
            answer = await peer.receive_some(1 << 16)  # one small frame, sent in one piece
            answered = trio.current_time()
            assert await idle_peer.receive_some(100) == b""  # closed while the poll waits
            assert await peer.receive_some(100) == b""
            closed = trio.current_time()
            nursery.cancel_scope.cancel()
    [response] = client.receive_data(answer)
    assert response.body["responses"][0]["partitions"][0]["error_code"] == 0
    assert 5 <= answered - start < 5.5  # the whole long poll, not cut at 1 s
    assert 1 <= closed - answered <= 1.1 + 1e-9
    reasons = [e["reason"] for e in logs if e["event"] == "connection closed"]
    assert reasons == ["idle for 1000 ms", "idle for 1000 ms"]
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)


async def test_bytes_arriving_as_the_broker_stops_are_not_served(tmp_path):
    """A connection waiting for bytes ends at shutdown. When its bytes arrive in that same
    moment it closes without serving them: nothing appended, nothing answered, never a request
    cancelled halfway."""
    import pytest

    from broker.security.session import Session
    from broker.server import Server
    from protocol import ClientConnection

    ctx = await open_context(config(tmp_path))
    await ctx.create_topic("t", 1)
    server = Server(ctx)
    from_client, to_client = trio.testing.MemoryReceiveStream(), trio.testing.MemorySendStream()
    session = Session(server.security, ctx.config.listeners[0], "test", "127.0.0.1")
    produce = ClientConnection(client_id="t").request(
        ApiKey.PRODUCE, 2, produce_body("t", message_set(1, b"x"))
    )[1]
    reasons = []

    async def serve():
        stream = trio.StapledStream(to_client, from_client)
        reasons.append(await server._serve(stream, {}, set(), session))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        await wait_all_tasks_blocked()
        from_client.put_data(produce)  # wakes the connection: it runs after this task yields
        server.begin_shutdown()
    assert reasons == ["broker shutting down"]
    with pytest.raises(trio.WouldBlock):  # nothing was sent
        to_client.get_data_nowait()
    assert ctx.get_log("t", 0).log_end_offset == 0
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)


async def test_pipelined_requests_let_other_connections_in(tmp_path, monkeypatch):
    """A read can complete a thousand small pipelined requests; served back to back they held
    the event loop for all of them (a small produce is about 60 µs of it). With the serving
    slice at zero the connection yields after every request, and each answer still comes in
    order."""
    from broker import slices
    from broker.server import Server
    from protocol import ClientConnection

    monkeypatch.setattr(slices, "SLICE_S", 0.0)
    ctx = await open_context(config(tmp_path))
    server = Server(ctx)
    served, client_side = await _connected_pair()
    client = ClientConnection(client_id="pipeliner")
    count = 200

    def frames() -> bytes:
        return b"".join(client.request(ApiKey.API_VERSIONS, 2, {})[1] for _ in range(count))

    passes = 0
    answers = []

    async def other_task() -> None:  # a step a scheduler pass, as another connection's task
        nonlocal passes
        while True:
            passes += 1
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.handle_connection, served)
        await client_side.send_all(frames())  # the first, to have the connection going
        with trio.fail_after(10):
            while len(answers) < count:
                answers += list(client.receive_data(await client_side.receive_some(1 << 20)))
        started = passes
        nursery.start_soon(other_task)
        await client_side.send_all(frames())
        got = 0
        with trio.fail_after(10):
            while got < count:
                got += len(list(client.receive_data(await client_side.receive_some(1 << 20))))
        nursery.cancel_scope.cancel()
    assert all(a.body.error_code == 0 for a in answers)
    # Served in one read without yielding, the other task would have run a handful of times.
    assert passes - started >= count // 2, passes - started
    ctx.log_manager.shutdown()


def _metadata_request(topics: list[str] | None) -> dict:
    return {"topics": None if topics is None else [{"name": t} for t in topics]}


def _metadata_listed(body) -> list[tuple[str, int]]:
    return sorted((t.name, len(t.partitions)) for t in body.topics)


def _log_dirs_request(topics: list[str] | None) -> dict:
    listed = (
        None if topics is None else [{"topic": t, "partitions": list(range(29))} for t in topics]
    )
    return {"topics": listed}


def _log_dirs_listed(body) -> list[tuple[str, int]]:
    return sorted((t.name, len(t.partitions)) for r in body.results for t in r.topics)


# The listing tests' topics: "small" alone (29 partitions), then "large" (30) beside it.
_LISTED_PARTITIONS = {"small": 29, "large": 30}


def _named(topics: list[str] | None) -> list[str]:
    return ["small"] if topics is not None else ["large", "small"]


def _fetch_request(topics: list[str] | None) -> dict:
    listed = [
        {
            "topic": t,
            "partitions": [
                {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1024}
                for p in range(_LISTED_PARTITIONS[t])
            ],
        }
        for t in _named(topics)
    ]
    return {"max_wait_ms": 0, "min_bytes": 0, "topics": listed}


def _fetch_listed(body) -> list[tuple[str, int]]:
    return sorted((t.topic, len(t.partitions)) for t in body.responses)


def _offset_commit_request(topics: list[str] | None) -> dict:
    return {
        "group_id": "listing",
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": [
            {
                "name": t,
                "partitions": [
                    {"partition_index": p, "committed_offset": 0}
                    for p in range(_LISTED_PARTITIONS[t])
                ],
            }
            for t in _named(topics)
        ],
    }


def _offset_commit_listed(body) -> list[tuple[str, int]]:
    assert all(p.error_code == 0 for t in body.topics for p in t.partitions)
    return sorted((t.name, len(t.partitions)) for t in body.topics)


def _offset_fetch_request(topics: list[str] | None) -> dict:
    listed = [
        {"name": t, "partition_indexes": list(range(_LISTED_PARTITIONS[t]))} for t in _named(topics)
    ]
    return {"groups": [{"group_id": "listing", "topics": listed}]}


def _offset_fetch_listed(body) -> list[tuple[str, int]]:
    return sorted((t.name, len(t.partitions)) for g in body.groups for t in g.topics)


@pytest.mark.parametrize(
    "api_key, version, request_body, listed_in",
    [
        (ApiKey.METADATA, 12, _metadata_request, _metadata_listed),
        (ApiKey.DESCRIBE_LOG_DIRS, 4, _log_dirs_request, _log_dirs_listed),
        (ApiKey.FETCH, 12, _fetch_request, _fetch_listed),
        (ApiKey.OFFSET_COMMIT, 8, _offset_commit_request, _offset_commit_listed),
        (ApiKey.OFFSET_FETCH, 8, _offset_fetch_request, _offset_fetch_listed),
    ],
)
async def test_a_large_partition_listing_is_encoded_beside_the_loop(
    tmp_path, monkeypatch, api_key, version, request_body, listed_in
):
    """An answer listing ENCODED_BESIDE_PARTITIONS partitions (Metadata, DescribeLogDirs,
    Fetch, OffsetCommit, OffsetFetch) is encoded off the loop's thread; the answer is the same
    either way."""
    from broker import server as server_module
    from broker.server import Server
    from protocol import ClientConnection

    monkeypatch.setattr(server_module, "ENCODED_BESIDE_PARTITIONS", 30)
    encoded_in: list[str] = []
    real_send_chunks = server_module.ServerConnection.send_chunks

    def send_chunks(self, request, body):  # send() encodes through it too
        encoded_in.append(threading.current_thread().name)
        return real_send_chunks(self, request, body)

    monkeypatch.setattr(server_module.ServerConnection, "send_chunks", send_chunks)
    ctx = await open_context(config(tmp_path))
    await ctx.create_topic("small", 29)
    server = Server(ctx)
    served, client_side = await _connected_pair()
    client = ClientConnection(client_id="listing")
    loop_thread = threading.current_thread().name
    listed = []
    async with trio.open_nursery() as nursery:
        ctx.coordinator = await setup_groups(ctx, nursery)
        nursery.start_soon(server.handle_connection, served)
        for topics in (["small"], None):  # 29 partitions, then 29 + 30
            if topics is None:
                await ctx.create_topic("large", 30)
            frame = client.request(api_key, version, request_body(topics))[1]
            await client_side.send_all(frame)
            with trio.fail_after(10):
                answers = []
                while not answers:
                    answers = list(client.receive_data(await client_side.receive_some(1 << 20)))
            topics = listed_in(answers[0].body)  # less the group coordinator's own topic
            listed.append([(name, count) for name, count in topics if name != OFFSETS_TOPIC])
        nursery.cancel_scope.cancel()
    assert listed == [[("small", 29)], [("large", 30), ("small", 29)]]
    assert encoded_in[0] == loop_thread and encoded_in[1] != loop_thread
    ctx.log_manager.shutdown()


async def test_a_large_request_is_decoded_beside_the_loop(tmp_path, monkeypatch):
    """A request frame of DECODED_BESIDE_BYTES or more is decoded off the loop's thread (a
    Fetch naming 10,000 partitions took about 12 ms to decode); smaller ones on it, and both
    are answered."""
    from broker import server as server_module
    from broker.server import Server
    from protocol import ClientConnection
    from protocol import connection as connection_module

    monkeypatch.setattr(server_module, "DECODED_BESIDE_BYTES", 1000)
    decoded_in: list[str] = []
    real_decode = connection_module._decode_request

    def decode(*args):
        decoded_in.append(threading.current_thread().name)
        return real_decode(*args)

    monkeypatch.setattr(connection_module, "_decode_request", decode)
    ctx = await open_context(config(tmp_path))
    await ctx.create_topic("t", 1)
    server = Server(ctx)
    served, client_side = await _connected_pair()
    client = ClientConnection(client_id="large")
    small = {"topics": [{"name": "t"}]}
    large = {"topics": [{"name": "t"}] + [{"name": f"absent-{i}"} for i in range(100)]}
    answers = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.handle_connection, served)
        for body in (small, large):
            frame = client.request(ApiKey.METADATA, 12, body)[1]
            await client_side.send_all(frame)
            with trio.fail_after(10):
                got = []
                while not got:
                    got = list(client.receive_data(await client_side.receive_some(1 << 20)))
            answers += got
        nursery.cancel_scope.cancel()
    assert [len(a.body.topics) for a in answers] == [1, 101]
    loop_thread = threading.current_thread().name
    assert decoded_in[0] == loop_thread and decoded_in[1] != loop_thread
    ctx.log_manager.shutdown()


@contextlib.asynccontextmanager
async def other_task_turns() -> AsyncIterator[Callable[[], int]]:
    """Runs another task beside the body, as another connection's, and yields a function
    giving how many turns it has had since the body started."""
    passes = 0

    async def other_task() -> None:
        nonlocal passes
        while True:
            passes += 1
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other_task)
        await trio.lowlevel.checkpoint()  # the other task is running
        started = passes
        yield lambda: passes - started
        nursery.cancel_scope.cancel()


def _metadata_topics(answer: dict) -> list[tuple[str, int]]:
    return sorted((t["name"], len(t["partitions"])) for t in answer["topics"])


def _log_dirs_topics(answer: dict) -> list[tuple[str, int]]:
    return sorted((t["name"], len(t["partitions"])) for r in answer["results"] for t in r["topics"])


def _fetch_topics(answer: dict) -> list[tuple[str, int]]:
    release_fetch_body(answer)
    return sorted((t["topic"], len(t["partitions"])) for t in answer["responses"])


def _fetch_every_partition() -> dict:
    topics = [
        {"topic": f"t{i}", "partitions": [{"partition": p, "fetch_offset": 0} for p in range(2)]}
        for i in range(5)
    ]
    return {"max_wait_ms": 0, "min_bytes": 0, "topics": topics}


@pytest.mark.parametrize(
    "api_key, version, body, listed_in, turns",
    [
        (ApiKey.METADATA, 12, {"topics": None}, _metadata_topics, 4),  # between two topics
        (ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None}, _log_dirs_topics, 9),  # and partitions
        (ApiKey.FETCH, 12, _fetch_every_partition(), _fetch_topics, 9),  # as DescribeLogDirs
    ],
)
async def test_an_answer_for_every_partition_is_built_in_slices(
    tmp_path, monkeypatch, api_key, version, body, listed_in, turns
):
    """Building a Metadata, DescribeLogDirs or Fetch answer for every partition yields to
    other tasks between slices (at 10,000 partitions they held the event loop about 9, 100
    and 80 ms in one piece); the answer is whole."""
    from broker import slices, workers

    async def inline(fn, *args, **kw):  # a worker thread's call would let the other task run
        return fn(*args)

    monkeypatch.setattr(slices, "SLICE_S", 0.0)
    ctx = await open_context(config(tmp_path))
    monkeypatch.setattr(workers, "run_sync", inline)
    for i in range(5):
        await ctx.create_topic(f"t{i}", 2)
    async with other_task_turns() as turns_so_far:
        answer = await HANDLERS[api_key](ctx, request(api_key, version, body))
        during = turns_so_far()
    assert listed_in(answer) == [(f"t{i}", 2) for i in range(5)]
    assert during >= turns, during
    ctx.log_manager.shutdown()
