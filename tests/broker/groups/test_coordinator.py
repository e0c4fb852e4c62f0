"""The trio coordinator on a real BrokerContext with real storage: commits durable across
restarts, offset expiry, rebalances and session timeouts on trio timers, shutdown, and the
handlers driven through real protocol frames (ClientConnection -> ServerConnection)."""

from __future__ import annotations

import os
import struct
import threading
from contextlib import asynccontextmanager

import pytest
import trio
from trio.testing import wait_all_tasks_blocked

from broker import slices, workers
from broker.config import BrokerConfig
from broker.groups import OFFSETS_TOPIC, setup
from broker.groups import handlers as group_handlers
from broker.groups.coordinator import GroupOffsets
from broker.groups.handlers import GROUP_HANDLERS
from broker.groups.offsets import OffsetCache
from broker.groups.store import load_offsets
from broker.server import Server, open_context
from protocol.api import ApiKey
from protocol.connection import ClientConnection, ServerConnection
from protocol.errors import ErrorCode as E
from protocol.records import iter_deep
from storage.cleaner import Cleaner
from tests.broker.test_server import other_task_turns

RANGE = [("range", b"meta")]


def make_config(log_dir, **props) -> BrokerConfig:
    pairs = [
        ("listeners", "PLAINTEXT://127.0.0.1:9092"),
        ("log.dirs", str(log_dir)),
        ("group.min.session.timeout.ms", "1000"),
        ("group.initial.rebalance.delay.ms", "0"),
    ]
    pairs += [(k.replace("_", "."), str(v)) for k, v in props.items()]
    return BrokerConfig.from_properties(pairs)


@asynccontextmanager
async def running(log_dir, *, clock=None, clean=True, topics=(("t", 4),), **props):
    """A broker context with the coordinator started; topics created; storage shut down at
    exit (clean=False leaves it as a crash would: no flush, no clean-shutdown marker)."""
    ctx = await open_context(make_config(log_dir, **props))
    if clock is not None:
        ctx.clock = clock
    for name, n in topics:
        if ctx.topics.get(name) is None:
            await ctx.create_topic(name, n)
    async with trio.open_nursery() as nursery:
        coordinator = await setup(ctx, nursery)
        ctx.coordinator = coordinator
        try:
            yield ctx, coordinator
        finally:
            nursery.cancel_scope.cancel()
    if clean:
        ctx.log_manager.shutdown()
    else:
        for log in ctx.log_manager.all_logs():
            log.close()


def fetched(c, group, partitions):
    """The PartitionOffsets of one OffsetFetch (the group error must be NONE)."""
    error, answers = c.fetch_group_offsets(group, partitions)
    assert error is E.NONE
    return [po for _, _, po in answers]


def trio_ms() -> int:
    return int(trio.current_time() * 1000)


async def join(c, member_id="", *, client="c", session=10_000, rebalance=30_000, group="g"):
    return await c.join(
        group,
        member_id,
        client_id=client,
        client_host="",
        session_timeout_ms=session,
        rebalance_timeout_ms=rebalance,
        protocol_type="consumer",
        protocols=RANGE,
    )


# ---- offsets ----------------------------------------------------------------------------------


@pytest.mark.parametrize("clean", [True, False])
async def test_commits_survive_restart(tmp_path, clean):
    entries = [("t", 0, 10, "m0", -1), ("t", 1, 11, None, -1), ("t", 3, 13, "ü" * 20, -1)]
    async with running(tmp_path, clean=clean) as (ctx, c):
        assert await c.commit_offsets("g", "", -1, None, entries) == [E.NONE] * 3
        assert await c.commit_offsets("g", "", -1, None, [("t", 0, 20, "m0b", -1)]) == [E.NONE]
        assert ctx.topics.get(OFFSETS_TOPIC).config.cleanup_policy == "compact"
    async with running(tmp_path) as (ctx, c):
        got = fetched(c, "g", [("t", 0), ("t", 1), ("t", 2), ("t", 3)])
        assert [(p.offset, p.metadata, p.error) for p in got] == [
            (20, "m0b", E.NONE),
            (11, "", E.NONE),
            (-1, "", E.NONE),
            (13, "ü" * 20, E.NONE),
        ]
        assert c.list_groups() == (E.NONE, [("g", "")])
        assert c.describe("g")[1].state == "Empty"


async def test_commit_errors(tmp_path):
    async with running(tmp_path) as (ctx, c):
        res = await c.commit_offsets(
            "g",
            "",
            -1,
            None,
            [
                ("nope", 0, 1, None, -1),
                ("t", 4, 1, None, -1),
                ("t", -1, 1, None, -1),
                ("t", 0, 1, "x" * 4097, -1),
                ("t", 1, 1, "x" * 4096, -1),
            ],
        )
        assert res == [E.UNKNOWN_TOPIC_OR_PARTITION] * 3 + [E.OFFSET_METADATA_TOO_LARGE, E.NONE]
        # a group with members refuses commits from outside the generation
        r = await join(c, group="m")
        assert r.error is E.NONE
        assert await c.commit_offsets("m", r.member_id, 1, None, [("t", 0, 1, None, -1)]) == [
            E.REBALANCE_IN_PROGRESS
        ]  # CompletingRebalance
        assert (await c.sync("m", 1, r.member_id, {r.member_id: b"a"})).error is E.NONE
        assert await c.commit_offsets("m", r.member_id, 0, None, [("t", 0, 1, None, -1)]) == [
            E.ILLEGAL_GENERATION
        ]
        assert await c.commit_offsets("m", "who", 1, None, [("t", 0, 1, None, -1)]) == [
            E.UNKNOWN_MEMBER_ID
        ]
        assert await c.commit_offsets("new", "x", 3, None, [("t", 0, 1, None, -1)]) == [
            E.ILLEGAL_GENERATION
        ]
        assert await c.commit_offsets("m", r.member_id, 1, None, [("t", 0, 7, None, -1)]) == [
            E.NONE
        ]
        assert fetched(c, "m", [("t", 0)])[0].offset == 7
        assert fetched(c, "g", [("t", 0)])[0].offset == -1  # refused ones not stored


async def test_offsets_expire_and_empty_group_goes_away(tmp_path):
    now = [1_700_000_000_000]
    async with running(tmp_path, clock=lambda: now[0]) as (ctx, c):
        # v2 retention_time 5000 ms for one group, the default (1 day) for another
        assert await c.commit_offsets("short", "", -1, 5000, [("t", 0, 1, "a", -1)]) == [E.NONE]
        assert await c.commit_offsets("long", "", -1, None, [("t", 0, 2, "b", -1)]) == [E.NONE]
        # v1's explicit commit timestamp moves the expiry: 0 + 1 day, long past
        assert await c.commit_offsets("old", "", -1, None, [("t", 1, 3, "", 0)]) == [E.NONE]
        now[0] += 4999
        assert await c.expire_offsets(now[0]) == 1  # "old" only
        now[0] += 1
        assert await c.expire_offsets(now[0]) == 1  # "short": at its expire timestamp
        assert fetched(c, "short", [("t", 0)])[0].offset == -1
        assert fetched(c, "long", [("t", 0)])[0].offset == 2
        assert sorted(c.list_groups()[1]) == [("long", "")]
        assert c.describe("short")[1].state == "Dead"
    async with running(tmp_path, clock=lambda: now[0]) as (ctx, c):
        # the tombstones were durable too
        assert fetched(c, "short", [("t", 0)])[0].offset == -1
        assert fetched(c, "old", [("t", 1)])[0].offset == -1
        assert fetched(c, "long", [("t", 0)])[0].offset == 2


async def test_offsets_of_an_emptied_group_expire_from_when_it_emptied(tmp_path):
    now = [1_700_000_000_000]
    day = 24 * 3600 * 1000
    async with running(tmp_path, clock=lambda: now[0]) as (ctx, c):
        a = await join(c, client="a")
        await c.sync("g", 1, a.member_id, {})
        assert await c.commit_offsets("g", a.member_id, 1, None, [("t", 0, 5, "", -1)]) == [E.NONE]
        now[0] += 2 * day  # a member keeps the group's offsets alive (not a subscription)
        c.heartbeat("g", a.member_id, 1)
        assert await c.expire_offsets(now[0]) == 0
        await c.leave("g", [(a.member_id, None)])
        assert c.describe("g")[1].state == "Empty"
        now[0] += day - 1
        assert await c.expire_offsets(now[0]) == 0
    async with running(tmp_path, clock=lambda: now[0]) as (ctx, c):
        # the time it emptied came back with its group record
        now[0] += 1
        assert await c.expire_offsets(now[0]) == 1
        assert c.describe("g")[1].state == "Dead"
    async with running(tmp_path, clock=lambda: now[0]) as (ctx, c):
        assert c.list_groups()[1] == []  # the group record's tombstone was written


# ---- membership on trio timers -----------------------------------------------------------------


async def test_rebalance_and_session_timeout_on_timers(tmp_path, autojump_clock):
    async with running(tmp_path, clock=trio_ms) as (ctx, c):
        a = await join(c, client="a")
        assert (a.error, a.generation_id, a.leader_id) == (E.NONE, 1, a.member_id)
        assert (await c.sync("g", 1, a.member_id, {a.member_id: b"all"})).assignment == b"all"
        results = {}

        async def join_b():
            results["b"] = await join(c, client="b", session=3000)

        async with trio.open_nursery() as n:
            n.start_soon(join_b)
            await trio.sleep(1)
            assert "b" not in results  # parked until a rejoins
            assert c.heartbeat("g", a.member_id, 1) is E.REBALANCE_IN_PROGRESS
            a2 = await join(c, a.member_id)
        b = results["b"]
        assert a2.generation_id == b.generation_id == 2
        assert {m.member_id for m in a2.members} == {a.member_id, b.member_id}
        syncs = {}

        async def sync_b():
            syncs["b"] = await c.sync("g", 2, b.member_id, {})

        async with trio.open_nursery() as n:
            n.start_soon(sync_b)
            await trio.sleep(0.5)
            assert "b" not in syncs
            await c.sync("g", 2, a.member_id, {a.member_id: b"A", b.member_id: b"B"})
        assert syncs["b"].assignment == b"B"
        # b goes silent; a heartbeats every second; b's 3 s session ends and a must rejoin
        t0 = trio.current_time()
        while c.heartbeat("g", a.member_id, 2) is E.NONE:
            await trio.sleep(1)
            assert trio.current_time() - t0 < 10
        assert 3 <= trio.current_time() - t0 <= 4
        assert c.describe("g")[1].state == "PreparingRebalance"
        a3 = await join(c, a.member_id)
        assert (a3.generation_id, [(m.member_id, m.metadata) for m in a3.members]) == (
            3,
            [(a.member_id, b"meta")],
        )


async def test_rebalance_timeout_on_timer(tmp_path, autojump_clock):
    async with running(tmp_path, clock=trio_ms) as (ctx, c):
        a = await join(c, client="a", session=60_000, rebalance=60_000)
        await c.sync("g", 1, a.member_id, {})
        t0 = trio.current_time()
        b = await join(c, client="b", session=60_000, rebalance=5_000)
        # a never rejoins: the rebalance ends at the group's rebalance timeout (a's 60 s)
        assert trio.current_time() - t0 == pytest.approx(60, abs=0.01)
        assert (b.generation_id, b.leader_id, [m.member_id for m in b.members]) == (
            2,
            b.member_id,
            [b.member_id],
        )


async def test_shutdown_answers_parked_requests(tmp_path):
    async with running(tmp_path) as (ctx, c):
        a = await join(c, client="a")
        await c.sync("g", 1, a.member_id, {})
        results = {}

        async def join_b():
            results["b"] = await join(c, client="b")

        async with trio.open_nursery() as n:
            n.start_soon(join_b)
            await wait_all_tasks_blocked()
            assert "b" not in results  # parked until the rebalance ends
            Server(ctx).begin_shutdown()  # what SIGTERM does
        assert results["b"].error is E.NOT_COORDINATOR_FOR_GROUP
        assert c.heartbeat("g", a.member_id, 1) is E.GROUP_COORDINATOR_NOT_AVAILABLE
        assert c.list_groups()[0] is E.GROUP_COORDINATOR_NOT_AVAILABLE


# ---- handlers through real frames --------------------------------------------------------------


class Wire:
    """Encode a request like a client, decode it like the broker, run the handler, encode the
    response like the broker and decode it like the client."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.client = ClientConnection(client_id="wire-test")
        self.server = ServerConnection()

    async def __call__(self, key: ApiKey, version: int, body: dict):
        _, frame = self.client.request(key, version, body)
        (request,) = list(self.server.receive_data(frame))
        response_body = await GROUP_HANDLERS[key](self.ctx, request)
        (response,) = list(self.client.receive_data(self.server.send(request, response_body)))
        return response.body


@pytest.fixture(params=["on the loop", "beside"])
def offset_fetch_built(request, monkeypatch):
    """Runs a test with OffsetFetch answers built on the loop, then all built beside it."""
    if request.param == "beside":
        monkeypatch.setattr(group_handlers, "BUILT_BESIDE_PARTITIONS", 0)
    return request.param


async def test_handlers_over_the_wire(tmp_path, offset_fetch_built):
    async with running(tmp_path) as (ctx, c):
        wire = Wire(ctx)
        r = await wire(ApiKey.FIND_COORDINATOR, 0, {"key": "g"})
        assert (r.error_code, r.node_id, r.host, r.port) == (0, 0, "127.0.0.1", 9092)
        r = await wire(
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
        assert r.error_code == 0 and r.member_id.startswith("wire-test-")
        member, gen = r.member_id, r.generation_id
        assert [(x.member_id, x.metadata) for x in r.members] == [(member, b"m")]
        r = await wire(
            ApiKey.SYNC_GROUP,
            0,
            {
                "group_id": "g",
                "generation_id": gen,
                "member_id": member,
                "assignments": [{"member_id": member, "assignment": b"asg"}],
            },
        )
        assert (r.error_code, r.assignment) == (0, b"asg")
        r = await wire(
            ApiKey.HEARTBEAT, 0, {"group_id": "g", "generation_id": gen, "member_id": member}
        )
        assert r.error_code == 0
        for version, extra in [
            (1, {"generation_id_or_member_epoch": gen, "member_id": member}),
            (
                2,
                {
                    "generation_id_or_member_epoch": gen,
                    "member_id": member,
                    "retention_time_ms": -1,
                },
            ),
        ]:
            part = {
                "partition_index": 2,
                "committed_offset": 100 + version,
                "committed_metadata": f"v{version}",
            }
            if version == 1:
                part["commit_timestamp"] = -1
            r = await wire(
                ApiKey.OFFSET_COMMIT,
                version,
                {
                    "group_id": "g",
                    **extra,
                    "topics": [
                        {"name": "t", "partitions": [part]},
                        {"name": "zz", "partitions": [dict(part, partition_index=0)]},
                    ],
                },
            )
            assert [
                (t.name, [(p.partition_index, p.error_code) for p in t.partitions])
                for t in r.topics
            ] == [("t", [(2, 0)]), ("zz", [(0, 3)])]
        # v0 commits belong to groups without membership: refused while g has members
        r = await wire(
            ApiKey.OFFSET_COMMIT,
            0,
            {
                "group_id": "g",
                "topics": [
                    {
                        "name": "t",
                        "partitions": [
                            {
                                "partition_index": 2,
                                "committed_offset": 1,
                                "committed_metadata": None,
                            }
                        ],
                    }
                ],
            },
        )
        assert r.topics[0].partitions[0].error_code == E.UNKNOWN_MEMBER_ID
        for version in (0, 1):
            r = await wire(
                ApiKey.OFFSET_FETCH,
                version,
                {
                    "group_id": "g",
                    "topics": [
                        {"name": "t", "partition_indexes": [2, 3]},
                        {"name": "zz", "partition_indexes": [0]},
                    ],
                },
            )
            got = [
                (
                    t.name,
                    [
                        (p.partition_index, p.committed_offset, p.metadata, p.error_code)
                        for p in t.partitions
                    ],
                )
                for t in r.topics
            ]
            assert got == [
                ("t", [(2, 102, "v2", 0), (3, -1, "", 0)]),
                ("zz", [(0, -1, "", 3 if version == 0 else 0)]),
            ]
        r = await wire(ApiKey.DESCRIBE_GROUPS, 0, {"groups": ["g", "missing"]})
        g, missing = r.groups
        assert (g.error_code, g.group_state, g.protocol_type, g.protocol_data) == (
            0,
            "Stable",
            "consumer",
            "range",
        )
        assert [
            (m.member_id, m.client_id, m.member_metadata, m.member_assignment) for m in g.members
        ] == [(member, "wire-test", b"m", b"asg")]
        assert (missing.error_code, missing.group_state, list(missing.members)) == (0, "Dead", [])
        r = await wire(ApiKey.LIST_GROUPS, 0, {})
        assert (r.error_code, [(x.group_id, x.protocol_type) for x in r.groups]) == (
            0,
            [("g", "consumer")],
        )
        r = await wire(ApiKey.LEAVE_GROUP, 0, {"group_id": "g", "member_id": member})
        assert r.error_code == 0
        r = await wire(ApiKey.LEAVE_GROUP, 0, {"group_id": "g", "member_id": member})
        assert r.error_code == E.UNKNOWN_MEMBER_ID
        r = await wire(
            ApiKey.JOIN_GROUP,
            1,
            {
                "group_id": "g",
                "session_timeout_ms": 10,
                "rebalance_timeout_ms": 10,
                "member_id": "",
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b"m"}],
            },
        )
        assert r.error_code == E.INVALID_SESSION_TIMEOUT


async def test_handlers_before_the_coordinator_started(tmp_path):
    ctx = await open_context(make_config(tmp_path))
    try:
        wire = Wire(ctx)
        r = await wire(ApiKey.FIND_COORDINATOR, 0, {"key": "g"})
        assert r.error_code == E.GROUP_COORDINATOR_NOT_AVAILABLE
        r = await wire(
            ApiKey.OFFSET_COMMIT,
            2,
            {
                "group_id": "g",
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "retention_time_ms": -1,
                "topics": [
                    {
                        "name": "t",
                        "partitions": [
                            {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}
                        ],
                    }
                ],
            },
        )
        assert r.topics[0].partitions[0].error_code == 15
        r = await wire(
            ApiKey.JOIN_GROUP,
            0,
            {
                "group_id": "g",
                "session_timeout_ms": 10_000,
                "member_id": "",
                "protocol_type": "consumer",
                "protocols": [],
            },
        )
        assert r.error_code == 15
    finally:
        ctx.log_manager.shutdown()
    assert not os.path.exists(os.path.join(tmp_path, f"{OFFSETS_TOPIC}-0"))


async def test_shutdown_begun_during_start_up_leaves_the_coordinator_inactive(tmp_path):
    ctx = await open_context(make_config(tmp_path))
    Server(ctx).begin_shutdown()  # no coordinator yet: nothing to stop
    try:
        async with trio.open_nursery() as nursery:
            c = await setup(ctx, nursery)
        assert not c.active
        assert (await join(c)).error is E.GROUP_COORDINATOR_NOT_AVAILABLE
    finally:
        ctx.log_manager.shutdown()


async def test_offsets_topic_with_retention_is_repaired(tmp_path):
    from structlog.testing import capture_logs

    ctx = await open_context(make_config(tmp_path))
    # e.g. made by an older version, or its registry entry rebuilt with broker defaults
    await ctx.create_topic(OFFSETS_TOPIC, 1)
    ctx.log_manager.shutdown()
    with capture_logs() as logs:
        async with running(tmp_path) as (ctx, c):
            assert await c.commit_offsets("g", "", -1, None, [("t", 0, 5, "", -1)]) == [E.NONE]
            topic = ctx.topics.get(OFFSETS_TOPIC)
            assert (topic.config.retention_ms, topic.config.retention_bytes) == (-1, -1)
            assert topic.config.cleanup_policy == "compact"
            log = ctx.get_log(OFFSETS_TOPIC, 0)
            assert (log.config.retention_ms, log.config.retention_bytes) == (-1, -1)
    warnings = [
        e
        for e in logs
        if e["log_level"] == "warning" and "offsets topic had time or size retention" in e["event"]
    ]
    assert len(warnings) == 1 and warnings[0]["retention_ms"] == 7 * 24 * 3600 * 1000
    with capture_logs() as logs:  # persisted: the next start finds nothing to repair
        async with running(tmp_path) as (ctx, c):
            assert ctx.topics.get(OFFSETS_TOPIC).config.retention_ms == -1
            assert [p.offset for p in fetched(c, "g", [("t", 0)])] == [5]
    assert not [e for e in logs if "retention" in e["event"]]


async def test_offset_metadata_max_bytes_is_configurable(tmp_path):
    async with running(tmp_path, offset_metadata_max_bytes=10) as (ctx, c):
        got = await c.commit_offsets(
            "g", "", -1, None, [("t", 0, 1, "x" * 10, -1), ("t", 1, 1, "é" * 6, -1)]
        )
        assert got == [E.NONE, E.OFFSET_METADATA_TOO_LARGE]  # 12 UTF-8 bytes > 10


# ---- compaction of the offsets log ------------------------------------------------------------


async def commit_many(c, n: int, group: str = "g") -> dict[int, int]:
    last = {}
    for i in range(n):
        p = i % 4
        assert await c.commit_offsets(group, "", -1, None, [("t", p, i, "meta", -1)]) == [E.NONE]
        last[p] = i
    return last


# ---- group records: stored, replayed, cleaned -----------------------------------------------


async def static_join(c, instance, member_id="", *, client="c", session=10_000):
    return await c.join(
        "g",
        member_id,
        group_instance_id=instance,
        client_id=client,
        client_host="/10.0.0.1",
        session_timeout_ms=session,
        rebalance_timeout_ms=30_000,
        protocol_type="consumer",
        protocols=RANGE,
    )


async def stable_pair(c):
    """Group "g": static member "ia" and dynamic "b", Stable at generation 2."""
    results = {}
    a = await static_join(c, "ia", client="a")
    await c.sync("g", 1, a.member_id, {a.member_id: b"A1"})

    async def join_b():
        results["b"] = await join(c, client="b")

    async with trio.open_nursery() as n:
        n.start_soon(join_b)
        await wait_all_tasks_blocked()
        results["a"] = await static_join(c, "ia", a.member_id, client="a")
    a, b = results["a"], results["b"]
    assert a.generation_id == b.generation_id == 2
    leader = a if a.leader_id == a.member_id else b
    follower = b if leader is a else a
    async with trio.open_nursery() as n:
        n.start_soon(c.sync, "g", 2, follower.member_id, {})
        await wait_all_tasks_blocked()
        got = await c.sync("g", 2, leader.member_id, {a.member_id: b"A", b.member_id: b"B"})
    assert got.error is E.NONE
    return a, b


@pytest.mark.parametrize("clean", [True, False])
async def test_groups_come_back_after_a_restart(tmp_path, clean):
    async with running(tmp_path, clean=clean) as (ctx, c):
        a, b = await stable_pair(c)
        before = c.describe("g")[1]
        assert before.state == "Stable"
    async with running(tmp_path) as (ctx, c):
        after = c.describe("g")[1]
        assert after == before  # same members, ids, hosts, metadata and assignments
        group = c.machine.get("g")
        assert (group.generation_id, group.leader_id) == (2, a.leader_id)
        # the dynamic member simply goes on heartbeating with its old id and generation
        assert c.heartbeat("g", b.member_id, 2) is E.NONE
        # the static member restarted meanwhile: it rejoins with no member id, no rebalance
        again = await static_join(c, "ia", client="a")
        assert again.error is E.NONE and again.generation_id == 2
        assert again.member_id != a.member_id
        assert c.heartbeat("g", a.member_id, 2, "ia") is E.FENCED_INSTANCE_ID
        got = await c.sync("g", 2, again.member_id, {}, group_instance_id="ia")
        assert (got.error, got.assignment) == (E.NONE, b"A")
        assert c.describe("g")[1].state == "Stable"
    async with running(tmp_path) as (ctx, c):  # the replaced id was stored too
        ids = {m.member_id for m in c.describe("g")[1].members}
        assert ids == {again.member_id, b.member_id}


async def test_members_that_do_not_come_back_are_expired_after_a_restart(tmp_path, autojump_clock):
    async with running(tmp_path, clock=trio_ms) as (ctx, c):
        a, b = await stable_pair(c)
    async with running(tmp_path, clock=trio_ms) as (ctx, c):
        await trio.sleep(10.001)  # neither heartbeats: both sessions (10 s) end
        s = c.describe("g")[1]
        assert (s.state, s.members) == ("Empty", ())
        assert c.machine.get("g").generation_id == 3
    async with running(tmp_path, clock=trio_ms) as (ctx, c):
        assert c.describe("g")[1].state == "Empty"  # the emptied group was stored


async def test_offsets_and_groups_survive_the_log_cleaner(tmp_path):
    async with running(tmp_path) as (ctx, c):
        a, b = await stable_pair(c)
        before = c.describe("g")[1]
        last = await commit_many(c, 200, "simple")
        async with ctx.locked_log(OFFSETS_TOPIC, 0) as log:
            records_before = log.log_end_offset - log.log_start_offset
            log.roll()  # the cleaner never touches the active segment
            assert Cleaner(1 << 20).clean(log, ctx.clock(), force=True) is not None
            cache, groups = OffsetCache(), {}
            kept = load_offsets(log, cache, groups=groups, topic=OFFSETS_TOPIC, partition=0)
        assert records_before > 200 and kept == len(cache) + len(groups) == 4 + 1
    async with running(tmp_path, clean=False) as (ctx, c):  # a crash after the cleaning
        assert c.describe("g")[1] == before
        got = fetched(c, "simple", [("t", p) for p in range(4)])
        assert [(p.offset, p.metadata) for p in got] == [(last[p], "meta") for p in range(4)]


async def test_delete_groups_and_offsets(tmp_path):
    async with running(tmp_path) as (ctx, c):
        a, b = await stable_pair(c)
        entries = [("t", 0, 1, "", -1), ("t", 1, 2, "", -1)]
        assert await c.commit_offsets("g", b.member_id, 2, None, entries) == [E.NONE] * 2
        assert await c.commit_offsets("simple", "", -1, None, entries) == [E.NONE] * 2
        assert await c.delete_groups(["g", "simple", "nope", "simple"]) == [
            ("g", E.NON_EMPTY_GROUP),
            ("simple", E.NONE),
            ("nope", E.GROUP_ID_NOT_FOUND),
        ]
        # "g" subscribes to nothing it can parse (b"meta"): every topic counts as subscribed
        assert await c.delete_offsets("g", [("t", 0)]) == (
            E.NONE,
            [("t", 0, E.GROUP_SUBSCRIBED_TO_TOPIC)],
        )
        await c.leave("g", [(b.member_id, None), ("", "ia")])
        assert c.describe("g")[1].state == "Empty"
        assert await c.delete_offsets("g", [("t", 0)]) == (E.NONE, [("t", 0, E.NONE)])
        assert fetched(c, "g", [("t", 0), ("t", 1)])[1].offset == 2
        assert await c.delete_offsets("nope", [("t", 0)]) == (E.GROUP_ID_NOT_FOUND, [])
        assert await c.delete_groups(["g"]) == [("g", E.NONE)]
        assert c.list_groups() == (E.NONE, [])
    async with running(tmp_path) as (ctx, c):
        assert c.list_groups() == (E.NONE, [])
        assert [p.offset for p in fetched(c, "g", [("t", 0), ("t", 1)])] == [-1, -1]
        assert [p.offset for p in fetched(c, "simple", [("t", 0), ("t", 1)])] == [-1, -1]


async def test_require_stable_fetch_during_a_commit(tmp_path):
    async with running(tmp_path) as (ctx, c):
        assert await c.commit_offsets("g", "", -1, None, [("t", 0, 1, "", -1)]) == [E.NONE]
        seen = {}

        async def fetch_while_committing():
            await wait_all_tasks_blocked()
            seen["stable"] = c.fetch_group_offsets("g", [("t", 0)], require_stable=True)
            seen["plain"] = c.fetch_group_offsets("g", [("t", 0)])

        async with trio.open_nursery() as n:
            n.start_soon(fetch_while_committing)
            await c.commit_offsets("g", "", -1, None, [("t", 0, 2, "", -1)])
        ((_, _, stable),) = seen["stable"][1]
        ((_, _, plain),) = seen["plain"][1]
        assert stable.error is E.UNSTABLE_OFFSET_COMMIT
        assert (plain.error, plain.offset) == (E.NONE, 1)
        assert fetched(c, "g", [("t", 0)])[0].offset == 2


async def test_a_large_offset_fetch_is_built_beside_the_loop_from_one_moment(tmp_path, monkeypatch):
    """OffsetFetch for BUILT_BESIDE_PARTITIONS partitions or more is answered from a copy of
    the group's offsets taken at once, built in a worker thread: a commit landing while it is
    built does not show in it, the next fetch sees it."""
    monkeypatch.setattr(group_handlers, "BUILT_BESIDE_PARTITIONS", 3)
    built_in: list[str] = []
    real_answers = GroupOffsets.answers

    def answers(self, partitions):
        built_in.append(threading.current_thread().name)
        return real_answers(self, partitions)

    monkeypatch.setattr(GroupOffsets, "answers", answers)
    async with running(tmp_path) as (ctx, c):
        commits = [("t", p, 10 + p, "", -1) for p in range(4)]
        assert await c.commit_offsets("g", "", -1, None, commits) == [E.NONE] * 4
        taken = c.group_offsets("g")
        assert await c.commit_offsets("g", "", -1, None, [("t", 0, 99, "", -1)]) == [E.NONE]
        assert [po.offset for _, _, po in taken.answers(None)] == [10, 11, 12, 13]
        wire = Wire(ctx)
        for topics, offsets in (
            ([{"name": "t", "partition_indexes": [0, 1]}], [99, 11]),  # below: on the loop
            (None, [99, 11, 12, 13]),
        ):
            r = await wire(
                ApiKey.OFFSET_FETCH, 8, {"groups": [{"group_id": "g", "topics": topics}]}
            )
            got = [p.committed_offset for t in r.groups[0].topics for p in t.partitions]
            assert got == offsets
    loop_thread = threading.current_thread().name
    assert built_in[0] == loop_thread  # the copy read in the test itself
    assert built_in[1] == loop_thread and built_in[2] != loop_thread


async def test_a_commit_of_many_partitions_lets_other_tasks_in(tmp_path, monkeypatch):
    """Checking a commit's partitions yields to other tasks between slices (10,000 of them
    held the event loop about 80 ms in one piece); every offset is committed."""

    async def inline(fn, *args, **kw):  # a worker thread's call would let the other task run
        return fn(*args)

    monkeypatch.setattr(slices, "SLICE_S", 0.0)
    async with running(tmp_path, topics=(("t", 8),)) as (ctx, c):
        monkeypatch.setattr(workers, "run_sync", inline)
        commits = [("t", p, p, "", -1) for p in range(8)]
        async with other_task_turns() as turns_so_far:
            assert await c.commit_offsets("g", "", -1, None, commits) == [E.NONE] * 8
            turns = turns_so_far()
        assert [po.offset for po in fetched(c, "g", [("t", p) for p in range(8)])] == list(range(8))
    assert turns >= 7, turns  # a turn between each two partitions


# ---- the newer versions through real frames ----------------------------------------------------


def consumer_subscription(*topics: str) -> bytes:
    """ConsumerProtocol subscription v0 (kafka-python's layout)."""
    out = b"\x00\x00" + len(topics).to_bytes(4, "big")
    for t in topics:
        out += len(t).to_bytes(2, "big") + t.encode()
    return out + b"\xff\xff\xff\xff"


async def test_find_coordinator_versions(tmp_path):
    async with running(tmp_path) as (ctx, c):
        wire = Wire(ctx)
        r = await wire(ApiKey.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
        assert (r.error_code, r.error_message, r.node_id, r.port) == (0, "NONE", 0, 9092)
        # no transaction coordinator yet (a broker still starting): retriable, as Kafka answers
        r = await wire(ApiKey.FIND_COORDINATOR, 2, {"key": "tx", "key_type": 1})
        assert (r.error_code, r.node_id) == (E.GROUP_COORDINATOR_NOT_AVAILABLE, -1)
        r = await wire(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["a", "b"]})
        assert [(x.key, x.error_code, x.node_id, x.host, x.port) for x in r.coordinators] == [
            ("a", 0, 0, "127.0.0.1", 9092),
            ("b", 0, 0, "127.0.0.1", 9092),
        ]
        r = await wire(ApiKey.FIND_COORDINATOR, 5, {"key_type": 2, "coordinator_keys": ["s"]})
        assert r.coordinators[0].error_code == E.INVALID_REQUEST
        r = await wire(ApiKey.FIND_COORDINATOR, 6, {"key_type": 2, "coordinator_keys": ["s"]})
        assert r.coordinators[0].error_code == E.GROUP_COORDINATOR_NOT_AVAILABLE
        r = await wire(ApiKey.FIND_COORDINATOR, 6, {"key_type": 9, "coordinator_keys": ["s"]})
        assert r.coordinators[0].error_code == E.INVALID_REQUEST


def join_body(member_id="", instance=None, metadata=b"m", **kw):
    return {
        "group_id": "g",
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 30_000,
        "member_id": member_id,
        "group_instance_id": instance,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": metadata}],
        **kw,
    }


async def test_membership_apis_at_their_latest_versions(tmp_path):
    async with running(tmp_path) as (ctx, c):
        wire = Wire(ctx)
        sub = consumer_subscription("t")
        # KIP-394: a dynamic member's first JoinGroup v4+ only gets a member id
        r = await wire(ApiKey.JOIN_GROUP, 9, join_body(metadata=sub, reason="first"))
        assert (r.error_code, r.generation_id) == (E.MEMBER_ID_REQUIRED, -1)
        assert r.member_id.startswith("wire-test-") and r.protocol_name is None
        member = r.member_id
        r = await wire(ApiKey.JOIN_GROUP, 9, join_body(member, metadata=sub))
        assert (r.error_code, r.generation_id, r.protocol_type, r.protocol_name) == (
            0,
            1,
            "consumer",
            "range",
        )
        assert (r.leader, r.skip_assignment) == (member, False)
        assert [(m.member_id, m.group_instance_id, m.metadata) for m in r.members] == [
            (member, None, sub)
        ]
        # JoinGroup v6 (flexible, before nullable protocol names) answers errors with ""
        r = await wire(ApiKey.JOIN_GROUP, 6, join_body("ghost"))
        assert (r.error_code, r.protocol_name) == (E.UNKNOWN_MEMBER_ID, "")
        # SyncGroup v5 must name the protocol type and name
        sync_body = {
            "group_id": "g",
            "generation_id": 1,
            "member_id": member,
            "assignments": [{"member_id": member, "assignment": b"asg"}],
        }
        r = await wire(ApiKey.SYNC_GROUP, 5, sync_body)
        assert r.error_code == E.INCONSISTENT_GROUP_PROTOCOL
        r = await wire(
            ApiKey.SYNC_GROUP, 5, dict(sync_body, protocol_type="consumer", protocol_name="range")
        )
        assert (r.error_code, r.protocol_type, r.protocol_name, r.assignment) == (
            0,
            "consumer",
            "range",
            b"asg",
        )
        r = await wire(
            ApiKey.HEARTBEAT, 4, {"group_id": "g", "generation_id": 1, "member_id": member}
        )
        assert r.error_code == 0
        # a static member (v5+) joins without MEMBER_ID_REQUIRED
        static = {}

        async def join_static():
            static["r"] = await wire(ApiKey.JOIN_GROUP, 7, join_body(instance="inst", metadata=sub))

        async with trio.open_nursery() as n:
            n.start_soon(join_static)
            await wait_all_tasks_blocked()
            r = await wire(ApiKey.JOIN_GROUP, 9, join_body(member, metadata=sub))
        s = static["r"]
        assert (s.error_code, s.generation_id) == (0, 2) and s.member_id.startswith("inst-")
        assert {(m.member_id, m.group_instance_id) for m in r.members} == {
            (member, None),
            (s.member_id, "inst"),
        }
        # DescribeGroups v5 shows the instance id and, when asked, the allowed operations
        r = await wire(
            ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["g"], "include_authorized_operations": True}
        )
        (g,) = r.groups
        assert g.group_state == "CompletingRebalance"
        assert {(m.member_id, m.group_instance_id) for m in g.members} == {
            (member, None),
            (s.member_id, "inst"),
        }
        assert g.authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)
        r = await wire(ApiKey.DESCRIBE_GROUPS, 4, {"groups": ["g"]})
        assert r.groups[0].authorized_operations == -(2**31)
        # ListGroups v4/v5 filter by state and type
        r = await wire(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})
        assert [(x.group_id, x.group_state, x.group_type) for x in r.groups] == [
            ("g", "CompletingRebalance", "classic")
        ]
        r = await wire(ApiKey.LIST_GROUPS, 4, {"states_filter": ["Stable", "Empty"]})
        assert r.groups == []
        r = await wire(ApiKey.LIST_GROUPS, 5, {"types_filter": ["consumer"]})
        assert r.groups == []
        # LeaveGroup v3+: a batch, one answer each; v0-v2: one error at the top
        r = await wire(
            ApiKey.LEAVE_GROUP,
            5,
            {
                "group_id": "g",
                "members": [
                    {"member_id": "", "group_instance_id": "inst", "reason": "bye"},
                    {"member_id": "ghost", "group_instance_id": None},
                ],
            },
        )
        assert r.error_code == 0
        assert [(m.member_id, m.group_instance_id, m.error_code) for m in r.members] == [
            ("", "inst", 0),
            ("ghost", None, E.UNKNOWN_MEMBER_ID),
        ]
        r = await wire(ApiKey.LEAVE_GROUP, 2, {"group_id": "g", "member_id": "ghost"})
        assert r.error_code == E.UNKNOWN_MEMBER_ID
        r = await wire(ApiKey.LEAVE_GROUP, 2, {"group_id": "g", "member_id": member})
        assert r.error_code == 0
        r = await wire(ApiKey.LIST_GROUPS, 4, {"states_filter": ["empty"]})
        assert [(x.group_id, x.group_state) for x in r.groups] == [("g", "Empty")]


async def test_offset_apis_at_their_latest_versions(tmp_path, offset_fetch_built):
    async with running(tmp_path, topics=(("t", 2), ("u", 1))) as (ctx, c):
        wire = Wire(ctx)

        def commit(version, group, parts, **kw):
            return wire(
                ApiKey.OFFSET_COMMIT,
                version,
                {
                    "group_id": group,
                    "generation_id_or_member_epoch": -1,
                    "member_id": "",
                    "topics": [
                        {
                            "name": t,
                            "partitions": [
                                {
                                    "partition_index": p,
                                    "committed_offset": o,
                                    "committed_leader_epoch": 7,
                                    "committed_metadata": None,
                                }
                                for p, o in ps
                            ],
                        }
                        for t, ps in parts.items()
                    ],
                    **kw,
                },
            )

        r = await commit(9, "a", {"t": [(0, 10), (1, 11)], "u": [(0, 12)], "x": [(0, 1)]})
        assert [(t.name, [p.error_code for p in t.partitions]) for t in r.topics] == [
            ("t", [0, 0]),
            ("u", [0]),
            ("x", [3]),
        ]
        r = await commit(4, "b", {"t": [(0, 20)]}, retention_time_ms=60_000)
        assert r.topics[0].partitions[0].error_code == 0
        # v2+: a null topic list is every committed partition
        r = await wire(ApiKey.OFFSET_FETCH, 2, {"group_id": "a", "topics": None})
        assert r.error_code == 0
        got = {
            (t.name, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
            for t in r.topics
            for p in t.partitions
        }
        assert got == {("t", 0): (10, "", 0), ("t", 1): (11, "", 0), ("u", 0): (12, "", 0)}
        # v5+ carry the leader epoch; v7 require_stable; v6 is flexible
        for version in (5, 6, 7):
            r = await wire(
                ApiKey.OFFSET_FETCH,
                version,
                {
                    "group_id": "a",
                    "topics": [{"name": "t", "partition_indexes": [0]}],
                    "require_stable": True,
                },
            )
            p = r.topics[0].partitions[0]
            assert (p.committed_offset, p.committed_leader_epoch) == (10, 7)
        # v8+: several groups in one request, null topics per group
        r = await wire(
            ApiKey.OFFSET_FETCH,
            9,
            {
                "groups": [
                    {"group_id": "a", "topics": [{"name": "u", "partition_indexes": [0]}]},
                    {"group_id": "b", "topics": None},
                    {"group_id": "none", "topics": None},
                ]
            },
        )
        assert [
            (
                g.group_id,
                g.error_code,
                [(t.name, [p.committed_offset for p in t.partitions]) for t in g.topics],
            )
            for g in r.groups
        ] == [("a", 0, [("u", [12])]), ("b", 0, [("t", [20])]), ("none", 0, [])]
        # v4's retention gave "b" its own expiry: a version-1 record with no leader epoch
        assert c.offsets.get("b", "t", 0).expire_timestamp_ms is not None
        # OffsetDelete: unknown partitions, then the rest
        r = await wire(
            ApiKey.OFFSET_DELETE,
            0,
            {
                "group_id": "a",
                "topics": [
                    {"name": "t", "partitions": [{"partition_index": 0}, {"partition_index": 5}]},
                    {"name": "x", "partitions": [{"partition_index": 0}]},
                ],
            },
        )
        assert r.error_code == 0
        assert [
            (t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in r.topics
        ] == [
            ("t", [(0, 0), (5, 3)]),
            ("x", [(0, 3)]),
        ]
        r = await wire(ApiKey.OFFSET_DELETE, 0, {"group_id": "nope", "topics": []})
        assert (r.error_code, r.topics) == (E.GROUP_ID_NOT_FOUND, [])
        # DeleteGroups
        r = await wire(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["a", "b", "nope"]})
        assert [(x.group_id, x.error_code) for x in r.results] == [
            ("a", 0),
            ("b", 0),
            ("nope", E.GROUP_ID_NOT_FOUND),
        ]
        r = await wire(ApiKey.OFFSET_FETCH, 3, {"group_id": "a", "topics": None})
        assert (r.error_code, r.topics) == (0, [])


async def test_a_tombstone_that_could_not_be_written_is_retried(tmp_path, monkeypatch):
    import errno

    from broker.groups import coordinator as coordinator_module

    async with running(tmp_path) as (ctx, c):
        a = await join(c, client="a")
        await c.sync("g", 1, a.member_id, {})
        await c.leave("g", [(a.member_id, None)])
        real = coordinator_module.append_records

        def full_disk(log, settings, records, now, **kw):
            if any(v is None for _, v in records):
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(log, settings, records, now, **kw)

        monkeypatch.setattr(coordinator_module, "append_records", full_disk)
        assert await c.delete_groups(["g"]) == [("g", E.NONE)]  # no offsets: only the tombstone
        assert "g" in c.group_records  # not written
        await c.expire_offsets(ctx.clock())
        assert "g" in c.group_records  # the disk is still full
        monkeypatch.setattr(coordinator_module, "append_records", real)
        await c.expire_offsets(ctx.clock())
        assert "g" not in c.group_records
    async with running(tmp_path) as (ctx, c):
        assert c.list_groups() == (E.NONE, [])


# ---- record versions (inter.broker.protocol.version) -------------------------------------------


def stored_versions(log) -> list[tuple[str, int]]:
    """("group" | "offset", value version) of every non-tombstone record in the offsets log."""
    raw = log.read(log.log_start_offset, 1 << 20, min_one_message=True).read_bytes()
    out = []
    for m in iter_deep(raw):
        if m.value is not None:
            kind = "group" if struct.unpack_from(">h", m.key)[0] == 2 else "offset"
            out.append((kind, struct.unpack_from(">h", m.value)[0]))
    return out


@pytest.mark.parametrize(
    "props, group_version, offset_version",
    [
        ({"inter_broker_protocol_version": "0.10.0", "log_message_format_version": "0.10.0"}, 0, 1),
        ({"inter_broker_protocol_version": "2.0"}, 1, 1),
        ({"inter_broker_protocol_version": "2.1-IV0"}, 2, 2),
        ({"inter_broker_protocol_version": "2.2"}, 2, 3),
        ({}, 3, 3),
    ],
)
async def test_records_are_written_at_the_inter_broker_protocol_versions(
    tmp_path, props, group_version, offset_version
):
    async with running(tmp_path, **props) as (ctx, c):
        a = await join(c, client="a", session=10_000, rebalance=10_000)
        assert (await c.sync("g", 1, a.member_id, {a.member_id: b"A"})).error is E.NONE
        commits = [("t", 0, 10, "m", -1)]
        assert await c.commit_offsets("g", a.member_id, 1, None, commits) == [E.NONE]
        # a commit with its own retention (OffsetCommit v2-v4) is v1 at every version
        own = [("t", 1, 11, "", -1)]
        assert await c.commit_offsets("g", a.member_id, 1, 60_000, own) == [E.NONE]
        before = c.describe("g")[1]
        async with ctx.locked_log(OFFSETS_TOPIC, 0) as log:
            assert stored_versions(log) == [
                ("group", group_version),
                ("offset", offset_version),
                ("offset", 1),
            ]
    async with running(tmp_path, **props) as (ctx, c):  # replayed from those versions
        assert c.describe("g")[1] == before
        assert c.heartbeat("g", a.member_id, 1) is E.NONE
        got = fetched(c, "g", [("t", 0), ("t", 1)])
        assert [(p.offset, p.metadata) for p in got] == [(10, "m"), (11, "")]


async def test_static_membership_needs_inter_broker_protocol_2_3(tmp_path):
    """KafkaApis: below 2.3-IV0 the group records cannot hold a group.instance.id, so JoinGroup,
    SyncGroup, Heartbeat and OffsetCommit of a static member answer UNSUPPORTED_VERSION."""
    member = {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": "i"}
    async with running(tmp_path, inter_broker_protocol_version="2.2-IV1") as (ctx, c):
        wire = Wire(ctx)
        r = await wire(ApiKey.JOIN_GROUP, 5, join_body(instance="i"))
        assert (r.error_code, r.member_id, r.generation_id) == (E.UNSUPPORTED_VERSION, "", -1)
        r = await wire(ApiKey.SYNC_GROUP, 3, dict(member, assignments=[]))
        assert r.error_code == E.UNSUPPORTED_VERSION
        r = await wire(ApiKey.HEARTBEAT, 3, member)
        assert r.error_code == E.UNSUPPORTED_VERSION
        commit = {
            "group_id": "g",
            "generation_id_or_member_epoch": 1,
            "member_id": "m",
            "group_instance_id": "i",
            "topics": [
                {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5}]}
            ],
        }
        r = await wire(ApiKey.OFFSET_COMMIT, 7, commit)
        assert r.topics[0].partitions[0].error_code == E.UNSUPPORTED_VERSION
        assert len(c.offsets) == 0 and c.list_groups() == (E.NONE, [])
        # dynamic members are served as usual (KIP-394 first)
        r = await wire(ApiKey.JOIN_GROUP, 5, join_body())
        assert r.error_code == E.MEMBER_ID_REQUIRED
    async with running(tmp_path, inter_broker_protocol_version="2.3-IV0") as (ctx, c):
        r = await Wire(ctx)(ApiKey.JOIN_GROUP, 5, join_body(instance="i"))
        assert (r.error_code, r.generation_id) == (E.NONE, 1)
