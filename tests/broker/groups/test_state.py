"""The pure group state machine (Kafka 3.9's classic coordinator): every transition, every
timeout, with a fake clock (plain integers passed as now_ms) and group records completed by
hand (``store``) as the coordinator's writer would."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings, strategies as st

from broker.groups.offsets import GroupRecord, MemberRecord
from broker.groups.state import (
    DEAD_GROUP,
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    ExpiryPolicy,
    Group,
    GroupMachine,
    GroupOverview,
    GroupState,
    IllegalGroupTransitionError,
    JoinMember,
    JoinResult,
    LeaveMember,
    SyncResult,
    WriteKind,
    parse_subscription_topics,
)
from protocol.errors import ErrorCode as E

RANGE = [("range", b"r-meta")]
SESSION = 10_000
REBALANCE = 30_000
S = GroupState


class Waiter:
    """A named parked request; the tests collect what the machine delivers to it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Waiter({self.name})"


def make_machine(**kw) -> GroupMachine:
    counter = itertools.count(1)
    return GroupMachine(
        min_session_timeout_ms=6000,
        max_session_timeout_ms=300000,
        new_member_id=lambda prefix: f"{prefix}-{next(counter)}",
        **kw,
    )


def join(
    m: GroupMachine,
    member_id: str = "",
    *,
    group: str = "g",
    client: str = "c",
    now: int = 0,
    protocols=RANGE,
    session: int = SESSION,
    rebalance: int = REBALANCE,
    ptype: str = "consumer",
    instance: str | None = None,
    require_known: bool = False,
    skip: bool = False,
) -> tuple[Waiter, dict]:
    w = Waiter(f"join-{client}-{member_id}")
    out = m.join(
        group,
        member_id,
        group_instance_id=instance,
        require_known_member_id=require_known,
        support_skipping_assignment=skip,
        client_id=client,
        client_host="/127.0.0.1",
        session_timeout_ms=session,
        rebalance_timeout_ms=rebalance,
        protocol_type=ptype,
        protocols=protocols,
        now_ms=now,
        waiter=w,
    )
    return w, dict(out)


def sync(
    m: GroupMachine,
    member_id: str,
    generation: int,
    assignments=None,
    *,
    group: str = "g",
    now: int = 0,
    instance: str | None = None,
    complete: bool = True,
) -> tuple[Waiter, dict]:
    """SyncGroup; with ``complete`` the group records it queued are stored at once."""
    w = Waiter(f"sync-{member_id}")
    out = dict(
        m.sync(
            group,
            generation,
            member_id,
            assignments or {},
            group_instance_id=instance,
            now_ms=now,
            waiter=w,
        )
    )
    if complete:
        out.update(store(m, now))
    return w, out


def store(m: GroupMachine, now: int = 0, error: E = E.NONE) -> dict:
    """Complete every queued group write with ``error``; what became ready."""
    out: dict = {}
    while writes := m.take_writes():
        for w in writes:
            out.update(m.store_completed(w.seq, error, now))
    return out


def two_members_completing() -> tuple[GroupMachine, str, str]:
    """Group "g" in CompletingRebalance at generation 2: a joined alone, b joined, a rejoined;
    a leads."""
    m = make_machine()
    wa, out = join(m, client="a")
    a = out[wa].member_id
    wb, _ = join(m, client="b")
    _, out = join(m, a)
    return m, a, out[wb].member_id


def stable_group(m: GroupMachine, n: int, now: int = 0, instances=None) -> list[str]:
    """Build a Stable group of n members (joined one after another, like real clients)."""
    ids: list[str] = []
    inst = instances or [None] * n
    w, out = join(m, client="c0", now=now, instance=inst[0])
    ids.append(out[w].member_id)
    for i in range(1, n):
        w_new, out = join(m, client=f"c{i}", now=now, instance=inst[i])
        assert w_new not in out  # parked until the others rejoin
        waiters = {w_new: None}
        for j, mid in enumerate(ids):
            w_old, more = join(m, mid, client="x", now=now, instance=inst[j])
            out.update(more)
            waiters[w_old] = mid
        assert set(out) == set(waiters)
        ids.append(out[w_new].member_id)
    g = m.get("g")
    assert g.state is S.COMPLETING_REBALANCE
    leader = g.leader_id
    w, out = sync(m, leader, g.generation_id, {mid: mid.encode() for mid in ids}, now=now)
    assert out[w] == SyncResult(E.NONE, leader.encode(), "consumer", "range")
    assert g.state is S.STABLE
    return ids


# ---- JoinGroup validation ------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error",
    [
        (dict(group=""), E.INVALID_GROUP_ID),
        (dict(session=5999), E.INVALID_SESSION_TIMEOUT),
        (dict(session=300001), E.INVALID_SESSION_TIMEOUT),
        (dict(protocols=[]), E.INCONSISTENT_GROUP_PROTOCOL),
        (dict(ptype=""), E.INCONSISTENT_GROUP_PROTOCOL),
    ],
)
def test_join_rejects_bad_requests(kwargs, error):
    m = make_machine()
    w, out = join(m, **kwargs)
    assert out == {w: JoinResult(error, "")}
    assert m.groups == {}


def test_join_with_member_id_to_unknown_group_is_unknown_member():
    m = make_machine()
    w, out = join(m, "ghost")
    assert out == {w: JoinResult(E.UNKNOWN_MEMBER_ID, "ghost")}
    assert m.get("g") is None


def test_join_with_unknown_member_id_to_existing_group():
    m = make_machine()
    stable_group(m, 1)
    w, out = join(m, "ghost")
    assert out[w] == JoinResult(E.UNKNOWN_MEMBER_ID, "ghost")


def test_join_inconsistent_protocol_type_and_protocols():
    m = make_machine()
    stable_group(m, 1)
    w, out = join(m, ptype="connect")
    assert out[w].error is E.INCONSISTENT_GROUP_PROTOCOL
    w, out = join(m, protocols=[("roundrobin", b"")])
    assert out[w].error is E.INCONSISTENT_GROUP_PROTOCOL
    assert m.get("g").state is S.STABLE


# ---- Empty -> PreparingRebalance -> CompletingRebalance -> Stable -------------------------


def test_first_member_joins_and_becomes_leader_at_once():
    m = make_machine()
    w, out = join(m, client="alpha", now=100)
    res = out[w]
    assert res == JoinResult(
        E.NONE,
        "alpha-1",
        1,
        "consumer",
        "range",
        "alpha-1",
        (JoinMember("alpha-1", None, b"r-meta"),),
    )
    g = m.get("g")
    assert g.state is S.COMPLETING_REBALANCE and g.state_timestamp_ms == 100
    assert g.protocol_type == "consumer"
    assert g.members["alpha-1"].expires_at_ms == 100 + SESSION
    assert g.sync_deadline_ms == 100 + REBALANCE


def test_leader_sync_is_answered_only_once_the_group_record_is_stored():
    m = make_machine()
    wa, out = join(m, client="a", now=5)
    a = out[wa].member_id
    wb, _ = join(m, client="b", now=5)
    wa2, out = join(m, a, now=5)
    b = out[wb].member_id
    assert out[wa2].members == (JoinMember(a, None, b"r-meta"), JoinMember(b, None, b"r-meta"))
    assert out[wb].members == () and out[wb].leader_id == a
    ws, out = sync(m, b, 2, now=6, complete=False)
    assert out == {}  # parked
    wl, out = sync(m, a, 2, {a: b"A", b: b"B", "stranger": b"S"}, now=7, complete=False)
    assert out == {}  # the record is not stored yet
    (write,) = m.take_writes()
    assert (write.group_id, write.generation_id, write.kind) == ("g", 2, WriteKind.SYNC)
    assert write.record == GroupRecord(
        "consumer",
        2,
        "range",
        a,
        5,
        (
            MemberRecord(a, None, "a", "/127.0.0.1", REBALANCE, SESSION, b"r-meta", b"A"),
            MemberRecord(b, None, "b", "/127.0.0.1", REBALANCE, SESSION, b"r-meta", b"B"),
        ),
    )
    assert m.get("g").state is S.COMPLETING_REBALANCE
    out = dict(m.store_completed(write.seq, E.NONE, 8))
    assert out == {
        ws: SyncResult(E.NONE, b"B", "consumer", "range"),
        wl: SyncResult(E.NONE, b"A", "consumer", "range"),
    }
    assert m.get("g").state is S.STABLE


def test_failed_group_record_sends_everyone_back_to_rejoin():
    m, a, b = two_members_completing()
    ws, _ = sync(m, b, 2, complete=False)
    wl, _ = sync(m, a, 2, {a: b"A", b: b"B"}, complete=False)
    out = store(m, 10, E.NOT_COORDINATOR_FOR_GROUP)
    assert out == {
        ws: SyncResult(E.NOT_COORDINATOR_FOR_GROUP),
        wl: SyncResult(E.NOT_COORDINATOR_FOR_GROUP),
    }
    g = m.get("g")
    assert g.state is S.PREPARING_REBALANCE and all(x.assignment == b"" for x in g.members.values())


def test_stored_record_of_an_old_generation_changes_nothing():
    m, a, b = two_members_completing()
    sync(m, a, 2, {a: b"A"}, complete=False)
    join(m, client="c")  # a new member: generation 2 is over
    assert store(m) == {}
    assert m.get("g").state is S.PREPARING_REBALANCE


def test_follower_sync_after_stable_gets_its_assignment_at_once():
    m = make_machine()
    a, b = stable_group(m, 2)
    g = m.get("g")
    follower = b if g.leader_id == a else a
    w, out = sync(m, follower, 2, now=50)
    assert out[w] == SyncResult(E.NONE, follower.encode(), "consumer", "range")
    assert g.members[follower].expires_at_ms == 50 + SESSION


def test_leader_assignment_missing_a_member_gives_it_empty_bytes():
    m, a, b = two_members_completing()
    ws, _ = sync(m, b, 2, complete=False)
    wl, out = sync(m, a, 2, {a: b"A"})
    assert out[ws] == SyncResult(E.NONE, b"", "consumer", "range")


def test_sync_errors():
    m = make_machine()
    (a,) = stable_group(m, 1)
    assert sync(m, a, 1, group="")[1].popitem()[1] == SyncResult(E.INVALID_GROUP_ID)
    assert sync(m, a, 1, group="nope")[1].popitem()[1] == SyncResult(E.UNKNOWN_MEMBER_ID)
    assert sync(m, "ghost", 1)[1].popitem()[1] == SyncResult(E.UNKNOWN_MEMBER_ID)
    assert sync(m, a, 7)[1].popitem()[1] == SyncResult(E.ILLEGAL_GENERATION)
    w = Waiter("typed")
    out = m.sync("g", 1, a, {}, protocol_type="connect", now_ms=0, waiter=w)
    assert out == [(w, SyncResult(E.INCONSISTENT_GROUP_PROTOCOL))]
    out = m.sync("g", 1, a, {}, protocol_type="consumer", protocol="rr", now_ms=0, waiter=w)
    assert out == [(w, SyncResult(E.INCONSISTENT_GROUP_PROTOCOL))]
    out = m.sync("g", 1, a, {}, protocol_type="consumer", protocol="range", now_ms=0, waiter=w)
    assert out[0][1].error is E.NONE
    join(m, client="new")  # -> PreparingRebalance
    assert sync(m, a, 1)[1].popitem()[1] == SyncResult(E.REBALANCE_IN_PROGRESS)


# ---- rebalances triggered by members ------------------------------------------------------


def test_new_member_triggers_rebalance_that_waits_for_existing_members():
    m = make_machine()
    (a,) = stable_group(m, 1, now=0)
    g = m.get("g")
    wb, out = join(m, client="b", now=1000, rebalance=60_000)
    assert out == {}
    assert g.state is S.PREPARING_REBALANCE
    assert g.join_deadline_ms == 1000 + 60_000
    # the old member learns through its heartbeat, which also keeps it alive
    assert m.heartbeat("g", a, 1, now_ms=5000) is E.REBALANCE_IN_PROGRESS
    assert g.members[a].expires_at_ms == 5000 + SESSION
    wa, out = join(m, a, now=6000)
    assert set(out) == {wa, wb}
    assert out[wa].generation_id == out[wb].generation_id == 2
    assert g.state is S.COMPLETING_REBALANCE


def test_rebalance_timeout_drops_dynamic_members_that_did_not_rejoin():
    m = make_machine()
    (a,) = stable_group(m, 1, now=0)
    wb, _ = join(m, client="b", now=1000, rebalance=20_000)
    g = m.get("g")
    # the group's rebalance timeout is the largest member's (a: 30s)
    assert g.join_deadline_ms == 1000 + REBALANCE
    # a keeps heartbeating (so its session stays alive) but never rejoins
    for t in range(4000, 31_000, 3000):
        m.heartbeat("g", a, 1, now_ms=t)
        assert m.expire(t) == []
    assert m.next_deadline() == 31_000
    out = dict(m.expire(31_000))
    res = out[wb]
    assert res.error is E.NONE and res.generation_id == 2 and res.leader_id == res.member_id
    assert list(g.members) == [res.member_id]
    assert res.members == (JoinMember(res.member_id, None, b"r-meta"),)


def test_rebalance_completes_early_when_straggler_session_expires():
    m = make_machine()
    (a,) = stable_group(m, 1, now=0)
    wb, _ = join(m, client="b", now=1000)
    # a stops heartbeating: its session (10s from its SyncGroup at 0) ends first
    assert m.next_deadline() == SESSION
    assert m.expire(SESSION - 1) == []
    out = dict(m.expire(SESSION))
    assert out[wb].error is E.NONE and out[wb].generation_id == 2
    assert a not in m.get("g").members


def test_session_timeout_in_stable_group_removes_member_and_rebalances():
    m = make_machine()
    a, b = stable_group(m, 2, now=0)
    g = m.get("g")
    m.heartbeat("g", a, 2, now_ms=8000)
    assert m.next_deadline() == SESSION  # b's
    assert m.expire(SESSION - 1) == []
    assert m.expire(SESSION) == []  # nobody is parked; b is just gone
    assert list(g.members) == [a]
    assert g.state is S.PREPARING_REBALANCE
    assert m.heartbeat("g", a, 2, now_ms=SESSION + 1) is E.REBALANCE_IN_PROGRESS
    wa, out = join(m, a, now=SESSION + 2)
    assert out[wa].generation_id == 3
    assert g.state is S.COMPLETING_REBALANCE


def test_heartbeat_keeps_member_alive():
    m = make_machine()
    (a,) = stable_group(m, 1, now=0)
    for t in range(5000, 100_000, 5000):
        assert m.heartbeat("g", a, 1, now_ms=t) is E.NONE
        assert m.expire(t) == []
    assert m.next_deadline() == 95_000 + SESSION


def test_members_that_never_send_sync_group_are_removed_after_the_rebalance_timeout():
    m = make_machine()
    wa, out = join(m, client="a", now=0)
    a = out[wa].member_id
    wb, _ = join(m, client="b", now=0)
    _, out = join(m, a, now=0)
    b = out[wb].member_id
    g = m.get("g")
    assert g.pending_sync == {a, b} and g.sync_deadline_ms == REBALANCE
    ws, _ = sync(m, b, 2, now=1000, complete=False)  # follower parked, never expires
    for t in range(3000, REBALANCE, 3000):
        m.heartbeat("g", a, 2, now_ms=t)  # a stays alive but never syncs
        assert m.expire(t) == []
    out = dict(m.expire(REBALANCE))
    # the leader never sent SyncGroup: it is dropped and the follower must rejoin
    assert out == {ws: SyncResult(E.REBALANCE_IN_PROGRESS)}
    assert list(g.members) == [b] and g.leader_id == b
    assert g.state is S.PREPARING_REBALANCE
    wb2, out = join(m, b, now=REBALANCE + 1)
    assert out[wb2].generation_id == 3 and out[wb2].leader_id == b


def test_a_parked_new_member_gives_up_after_five_minutes():
    m = make_machine()
    stable_group(m, 1, now=0)
    wb, _ = join(m, client="b", now=0, session=6000, rebalance=400_000)
    a = m.get("g").leader_id
    # a keeps the group alive by heartbeating; the rebalance waits for its rejoin
    for t in range(3000, NEW_MEMBER_JOIN_TIMEOUT_MS, 3000):
        m.heartbeat("g", a, 1, now_ms=t)
        assert m.expire(t) == []
    out = dict(m.expire(NEW_MEMBER_JOIN_TIMEOUT_MS))
    assert out == {wb: JoinResult(E.UNKNOWN_MEMBER_ID, "")}
    assert list(m.get("g").members) == [a]


def test_leave_triggers_rebalance_and_last_leave_empties_group_and_stores_it():
    m = make_machine()
    a, b = stable_group(m, 2)
    g = m.get("g")
    err, answers, out = m.leave("g", [(b, None)], now_ms=10)
    assert (err, answers, out) == (E.NONE, [LeaveMember(b, None)], [])
    assert g.state is S.PREPARING_REBALANCE and g.leader_id == a
    wa, out = join(m, a, now=20)
    assert out[wa].generation_id == 3
    sync(m, a, 3, {a: b"all"}, now=25)
    err, _, out = m.leave("g", [(a, None)], now_ms=30)
    assert err is E.NONE
    assert g.state is S.EMPTY and g.generation_id == 4 and g.protocol is None
    assert g.leader_id is None and g.state_timestamp_ms == 30
    (write,) = m.take_writes()
    assert write.kind is WriteKind.EMPTY
    assert write.record == GroupRecord("consumer", 4, None, None, 30, ())
    assert m.heartbeat("g", a, 4, now_ms=40) is E.UNKNOWN_MEMBER_ID
    assert m.describe("g").state == "Empty"


def test_leave_in_batches_and_unknown_members():
    m = make_machine()
    assert m.leave("", [("x", None)], now_ms=0) == (E.INVALID_GROUP_ID, [], [])
    assert m.leave("g", [("x", None), ("", "i")], now_ms=0) == (
        E.NONE,
        [LeaveMember("x", None, E.UNKNOWN_MEMBER_ID), LeaveMember("", "i", E.UNKNOWN_MEMBER_ID)],
        [],
    )
    a, b, c = stable_group(m, 3, instances=[None, "ib", "ic"])
    err, answers, _ = m.leave("g", [(a, None), ("x", None), ("", "ib"), (c, "ib")], now_ms=0)
    assert err is E.NONE
    assert answers == [
        LeaveMember(a, None, E.NONE),
        LeaveMember("x", None, E.UNKNOWN_MEMBER_ID),
        LeaveMember("", "ib", E.NONE),  # administrative removal by instance id
        LeaveMember(c, "ib", E.UNKNOWN_MEMBER_ID),  # ib is gone now
    ]
    assert list(m.get("g").members) == [c]
    err, answers, _ = m.leave("g", [("other", "ic")], now_ms=0)
    assert answers == [LeaveMember("other", "ic", E.FENCED_INSTANCE_ID)]


def test_leave_while_parked_answers_the_parked_join():
    m = make_machine()
    (a,) = stable_group(m, 1)
    wb, _ = join(m, client="b")
    b = next(mid for mid in m.get("g").members if mid != a)
    err, _, out = m.leave("g", [(b, None)], now_ms=0)
    assert err is E.NONE
    assert out == [(wb, JoinResult(E.UNKNOWN_MEMBER_ID, ""))]
    # a is now the only one not rejoined: the rebalance waits for it alone
    wa, out = join(m, a)
    assert dict(out)[wa].members == (JoinMember(a, None, b"r-meta"),)


def test_new_member_during_completing_rebalance_restarts_rebalance():
    m, a, b = two_members_completing()
    ws, _ = sync(m, b, 2, complete=False)
    wc, out = join(m, client="c")
    assert out == {ws: SyncResult(E.REBALANCE_IN_PROGRESS)}
    g = m.get("g")
    assert g.state is S.PREPARING_REBALANCE and not g.pending_sync and g.sync_deadline_ms is None


def test_rejoin_same_metadata_during_completing_rebalance_returns_current_generation():
    m, a, b = two_members_completing()
    w, out = join(m, b)
    assert out[w] == JoinResult(E.NONE, b, 2, "consumer", "range", a, ())
    w, out = join(m, a)
    assert [x.member_id for x in out[w].members] == [a, b]
    assert m.get("g").state is S.COMPLETING_REBALANCE
    # changed metadata forces a rebalance
    w, out = join(m, b, protocols=[("range", b"new")])
    assert out == {}
    assert m.get("g").state is S.PREPARING_REBALANCE


def test_rejoin_in_stable_group():
    m = make_machine()
    a, b = stable_group(m, 2)
    g = m.get("g")
    leader, follower = (a, b) if g.leader_id == a else (b, a)
    w, out = join(m, follower)
    assert out[w] == JoinResult(E.NONE, follower, 2, "consumer", "range", leader, ())
    assert g.state is S.STABLE
    w, out = join(m, follower, protocols=[("range", b"changed")])
    assert out == {} and g.state is S.PREPARING_REBALANCE
    wl, out = join(m, leader)
    assert out[wl].generation_id == 3
    assert {x.member_id: x.metadata for x in out[wl].members}[follower] == b"changed"
    sync(m, leader, 3)
    wl, out = join(m, leader)  # the leader's JoinGroup always rebalances
    assert out == {} and g.state is S.PREPARING_REBALANCE


def test_duplicate_join_supersedes_the_parked_one():
    m = make_machine()
    a, b = stable_group(m, 2)
    w1, out = join(m, a, protocols=[("range", b"1")])
    assert out == {}
    w2, out = join(m, a, protocols=[("range", b"2")])
    assert out == {w1: JoinResult(E.REBALANCE_IN_PROGRESS, a)}
    wb, out = join(m, b)
    assert set(out) == {w2, wb}


def test_duplicate_sync_supersedes_the_parked_one():
    m, a, b = two_members_completing()
    s1, _ = sync(m, b, 2, complete=False)
    s2, out = sync(m, b, 2, complete=False)
    assert out == {s1: SyncResult(E.REBALANCE_IN_PROGRESS)}
    _, out = sync(m, a, 2, {b: b"B"})
    assert out[s2] == SyncResult(E.NONE, b"B", "consumer", "range")


# ---- KIP-394: member id required ----------------------------------------------------------


def test_member_id_required_then_join_with_it():
    m = make_machine()
    w, out = join(m, client="k", require_known=True, now=0)
    assert out == {w: JoinResult(E.MEMBER_ID_REQUIRED, "k-1")}
    g = m.get("g")
    assert g.state is S.EMPTY and g.pending_members == {"k-1": SESSION}
    assert m.overview() == [GroupOverview("g", "", "Empty")]
    w, out = join(m, "k-1", client="k", require_known=True, now=5)
    assert out[w].error is E.NONE and out[w].member_id == "k-1" and out[w].generation_id == 1
    assert g.pending_members == {}


def test_pending_member_holds_the_rebalance_until_it_joins_or_expires():
    m = make_machine()
    (a,) = stable_group(m, 1)
    wp, out = join(m, client="p", require_known=True, now=0)
    pending = out[wp].member_id
    wb, _ = join(m, client="b", now=0)  # an old-protocol member: rebalance starts
    wa, out = join(m, a, now=1)
    assert out == {}  # the pending member has not joined yet
    out = dict(m.expire(SESSION))  # it never comes back
    assert set(out) == {wa, wb} and out[wa].generation_id == 2
    assert pending not in m.get("g").pending_members
    w, out = join(m, pending, client="p", now=SESSION + 1)
    assert out[w].error is E.UNKNOWN_MEMBER_ID


def test_pending_member_can_leave():
    m = make_machine()
    w, out = join(m, client="p", require_known=True)
    pending = out[w].member_id
    assert m.leave("g", [(pending, None)], now_ms=0)[1] == [LeaveMember(pending, None)]
    assert m.get("g").pending_members == {}


# ---- KIP-345: static membership ------------------------------------------------------------


def test_static_member_gets_an_id_prefixed_by_its_instance_id_without_member_id_required():
    m = make_machine()
    w, out = join(m, client="c", instance="inst", require_known=False)
    assert out[w].error is E.NONE and out[w].member_id == "inst-1"
    assert m.get("g").static_members == {"inst": "inst-1"}


def test_static_member_rejoining_a_stable_group_needs_no_rebalance():
    m = make_machine()
    a, b = stable_group(m, 2, instances=["ia", "ib"])
    g = m.get("g")
    leader = g.leader_id
    follower = b if leader == a else a
    finst = "ib" if follower == b else "ia"
    # the follower restarts: it has forgotten its member id
    w, out = join(m, client="again", instance=finst, now=100)
    assert out == {}  # waits for its group record
    new_id = g.static_members[finst]
    assert new_id != follower and follower not in g.members
    (write,) = m.take_writes()
    assert write.kind is WriteKind.STATIC_REJOIN and write.generation_id == 2
    assert {x.member_id for x in write.record.members} == {leader, new_id}
    out = dict(m.store_completed(write.seq, E.NONE, 101))
    assert out == {w: JoinResult(E.NONE, new_id, 2, "consumer", "range", leader, ())}
    assert g.state is S.STABLE and g.generation_id == 2
    assert g.members[new_id].assignment == follower.encode()
    # the old id is fenced
    assert (
        m.heartbeat("g", follower, 2, now_ms=102, group_instance_id=finst) is E.FENCED_INSTANCE_ID
    )
    assert m.heartbeat("g", new_id, 2, now_ms=102, group_instance_id=finst) is E.NONE
    ws, out = sync(m, new_id, 2, instance=finst)
    assert out[ws].assignment == follower.encode()


def test_static_leader_rejoin_with_skip_assignment_v9():
    m = make_machine()
    a, b = stable_group(m, 2, instances=["ia", "ib"])
    g = m.get("g")
    leader_inst = "ia" if g.leader_id == a else "ib"
    w, _ = join(m, client="c", instance=leader_inst, skip=True)
    new_id = g.static_members[leader_inst]
    res = store(m)[w]
    assert res.skip_assignment and res.leader_id == new_id and len(res.members) == 2
    assert g.state is S.STABLE


def test_static_rejoin_whose_record_cannot_be_stored_is_reverted():
    m = make_machine()
    (a,) = stable_group(m, 1, instances=["ia"])
    w, _ = join(m, client="c", instance="ia", session=20_000)
    g = m.get("g")
    out = store(m, 5, E.NOT_COORDINATOR_FOR_GROUP)
    assert out == {w: JoinResult(E.NOT_COORDINATOR_FOR_GROUP, "", 1, "consumer", "range", a)}
    assert list(g.members) == [a] and g.static_members == {"ia": a}
    assert g.members[a].session_timeout_ms == SESSION
    assert m.heartbeat("g", a, 1, group_instance_id="ia", now_ms=6) is E.NONE


def test_static_rejoin_fences_the_old_instances_parked_request():
    m = make_machine()
    a, b = stable_group(m, 2, instances=["ia", "ib"])
    w_old, _ = join(m, a, instance="ia", protocols=[("range", b"changed")])
    w_new, out = join(m, client="c2", instance="ia")
    assert out[w_old] == JoinResult(E.FENCED_INSTANCE_ID, a)


def test_static_member_missing_a_rebalance_is_kept_until_its_session_expires():
    m = make_machine()
    a, b = stable_group(m, 2, instances=["ia", None])
    g = m.get("g")
    wc, _ = join(m, client="c", now=1000)
    wb, _ = join(m, b, now=1000)
    # a (static) heartbeats but never rejoins; the rebalance completes at its timeout
    # without dropping it
    for t in range(4000, 1000 + REBALANCE, 4000):
        assert m.heartbeat("g", a, 2, group_instance_id="ia", now_ms=t) is E.REBALANCE_IN_PROGRESS
        assert m.expire(t) == []
    out = dict(m.expire(1000 + REBALANCE))
    assert set(out) == {wc, wb}
    assert a in g.members and g.state is S.COMPLETING_REBALANCE
    leader_view = next(r for r in out.values() if r.members)
    assert {x.member_id for x in leader_view.members} == {a, b, out[wc].member_id}
    assert {x.group_instance_id for x in leader_view.members} == {"ia", None}
    # its session then runs out (it was rescheduled when the join completed)
    m.heartbeat("g", b, 3, now_ms=1000 + REBALANCE + SESSION - 1)
    m.heartbeat("g", out[wc].member_id, 3, now_ms=1000 + REBALANCE + SESSION - 1)
    m.expire(1000 + REBALANCE + SESSION)
    assert a not in g.members and g.static_members == {}
    assert g.state is S.PREPARING_REBALANCE


def test_join_with_wrong_member_id_for_an_instance_is_fenced():
    m = make_machine()
    (a,) = stable_group(m, 1, instances=["ia"])
    w, out = join(m, "someone-else", instance="ia")
    assert out[w].error is E.FENCED_INSTANCE_ID  # ia is a's
    w, out = join(m, a, instance="ib")
    assert out[w].error is E.UNKNOWN_MEMBER_ID  # unknown instance
    assert m.get("g").state is S.STABLE


# ---- initial rebalance delay and group size ------------------------------------------------


def test_initial_rebalance_delay_waits_for_more_members():
    m = make_machine(initial_rebalance_delay_ms=3000)
    wa, out = join(m, client="a", now=0)
    assert out == {}
    g = m.get("g")
    assert g.join_deadline_ms == 3000
    wb, _ = join(m, client="b", now=1000)
    assert m.expire(2999) == []
    assert m.expire(3000) == []  # b arrived during the delay: wait once more
    assert g.join_deadline_ms == 6000
    out = dict(m.expire(6000))
    assert set(out) == {wa, wb} and out[wa].generation_id == 1
    assert len(next(r for r in out.values() if r.members).members) == 2


def test_initial_delay_is_bounded_by_the_rebalance_timeout():
    m = make_machine(initial_rebalance_delay_ms=3000)
    join(m, client="a", now=0, rebalance=5000)
    g = m.get("g")
    now = 0
    for i in range(10):
        if g.state is not S.PREPARING_REBALANCE:
            break
        join(m, client=f"x{i}", now=now, rebalance=5000)
        now = g.join_deadline_ms
        m.expire(now)
    assert g.state is S.COMPLETING_REBALANCE and now <= 3000 + 5000


def test_group_max_size():
    m = make_machine(max_size=2)
    stable_group(m, 2)
    w, out = join(m, client="third")
    assert out[w] == JoinResult(E.GROUP_MAX_SIZE_REACHED, "")
    assert len(m.get("g").members) == 2


# ---- heartbeat and commit checks in every state -------------------------------------------


def test_heartbeat_errors_by_state():
    m = make_machine()
    assert m.heartbeat("", "x", 0, now_ms=0) is E.INVALID_GROUP_ID
    assert m.heartbeat("g", "x", 0, now_ms=0) is E.UNKNOWN_MEMBER_ID
    wa, out = join(m, client="a")
    a = out[wa].member_id
    assert m.heartbeat("g", a, 1, now_ms=0) is E.NONE  # CompletingRebalance (Kafka 3.9)
    assert m.heartbeat("g", "x", 1, now_ms=0) is E.UNKNOWN_MEMBER_ID
    sync(m, a, 1)
    assert m.heartbeat("g", a, 0, now_ms=0) is E.ILLEGAL_GENERATION
    assert m.heartbeat("g", "x", 1, now_ms=0) is E.UNKNOWN_MEMBER_ID
    assert m.heartbeat("g", a, 1, now_ms=0) is E.NONE
    join(m, client="b")
    assert m.heartbeat("g", a, 0, now_ms=0) is E.ILLEGAL_GENERATION
    assert m.heartbeat("g", a, 1, now_ms=0) is E.REBALANCE_IN_PROGRESS


def test_commit_checks_by_state():
    m = make_machine()
    assert m.check_commit("g", "", 5, now_ms=0) is E.ILLEGAL_GENERATION
    assert m.get("g") is None
    assert m.check_commit("g", "", -1, now_ms=0) is E.NONE
    assert m.get("g").state is S.EMPTY
    assert m.check_commit("g", "", -1, now_ms=0) is E.NONE
    assert m.check_commit("g", "x", 0, now_ms=0) is E.UNKNOWN_MEMBER_ID
    wa, out = join(m, client="a")
    a = out[wa].member_id
    assert m.check_commit("g", a, 1, now_ms=0) is E.REBALANCE_IN_PROGRESS
    sync(m, a, 1)
    assert m.check_commit("g", a, 1, now_ms=7000) is E.NONE
    assert m.get("g").members[a].expires_at_ms == 7000 + SESSION
    assert m.check_commit("g", a, 0, now_ms=0) is E.ILLEGAL_GENERATION
    assert m.check_commit("g", "x", 1, now_ms=0) is E.UNKNOWN_MEMBER_ID
    assert m.check_commit("g", "", -1, now_ms=0) is E.UNKNOWN_MEMBER_ID
    assert m.check_commit("g", a, 1, group_instance_id="nope", now_ms=0) is E.UNKNOWN_MEMBER_ID
    join(m, client="b")  # PreparingRebalance: the previous generation may still commit
    assert m.check_commit("g", a, 1, now_ms=0) is E.NONE


# ---- DeleteGroups, OffsetDelete, ListGroups, expiry policy --------------------------------


def test_delete_and_offset_delete_verdicts():
    m = make_machine()
    assert m.check_delete("g") is E.GROUP_ID_NOT_FOUND
    assert m.check_offset_delete("g", ["t"]) == (E.GROUP_ID_NOT_FOUND, set())
    sub = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\xff\xff\xff\xff"
    w, out = join(m, client="a", protocols=[("range", sub)])
    a = out[w].member_id
    sync(m, a, 1)
    assert m.check_delete("g") is E.NON_EMPTY_GROUP
    assert m.check_offset_delete("g", ["t", "u"]) == (E.NONE, {"t"})
    assert not m.remove_group("g")
    m.leave("g", [(a, None)], now_ms=0)
    store(m)
    assert m.check_delete("g") is E.NONE and m.check_offset_delete("g", ["t"]) == (E.NONE, set())
    g = m.get("g")
    assert m.remove_group("g")
    assert g.state is S.DEAD and m.get("g") is None
    (write,) = m.take_writes()
    assert write.kind is WriteKind.TOMBSTONE and write.record is None
    # a group that never had a generation leaves no tombstone
    m.check_commit("offsets-only", "", -1, now_ms=0)
    assert m.remove_group("offsets-only") and m.take_writes() == []


def test_offset_delete_of_a_non_consumer_group_with_members():
    m = make_machine()
    w, out = join(m, ptype="connect")
    assert m.check_offset_delete("g", ["t"]) == (E.NON_EMPTY_GROUP, set())


def test_list_groups_filters():
    m = make_machine()
    stable_group(m, 1)
    m.check_commit("offsets-only", "", -1, now_ms=0)
    assert m.overview() == [
        GroupOverview("g", "consumer", "Stable"),
        GroupOverview("offsets-only", "", "Empty"),
    ]
    assert [g.group_id for g in m.overview(states=["stable"])] == ["g"]
    assert [g.group_id for g in m.overview(states=["EMPTY", "Dead"])] == ["offsets-only"]
    assert len(m.overview(types=["Classic"])) == 2
    assert m.overview(types=["consumer"]) == []


def test_expiry_policy_by_state():
    m = make_machine()
    assert m.expiry_policy("unknown") == ExpiryPolicy(None)
    m.check_commit("simple", "", -1, now_ms=0)
    assert m.expiry_policy("simple") == ExpiryPolicy(None)
    sub = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\xff\xff\xff\xff"
    w, out = join(m, client="a", protocols=[("range", sub)], now=10)
    a = out[w].member_id
    assert m.expiry_policy("g") is None  # rebalancing
    sync(m, a, 1, now=20)
    assert m.expiry_policy("g") == ExpiryPolicy(None, frozenset({"t"}))
    m.leave("g", [(a, None)], now_ms=30)
    assert m.expiry_policy("g") == ExpiryPolicy(30)


def test_parse_subscription_topics():
    sub = b"\x00\x01" + b"\x00\x00\x00\x02" + b"\x00\x01a" + b"\x00\x02bc" + b"rest-ignored"
    assert parse_subscription_topics(sub) == ["a", "bc"]
    for bad in (b"", b"\x00\x00\x00\x00\x00\x02\x00\x05ab", b"\xff\xff\x00\x00\x00\x00"):
        with pytest.raises(ValueError):
            parse_subscription_topics(bad)


# ---- loading a stored group ----------------------------------------------------------------


def test_load_group_restores_a_stable_group_whose_sessions_start_now():
    record = GroupRecord(
        "consumer",
        5,
        "range",
        "m2",
        1000,
        (
            MemberRecord("m1", "i1", "c1", "/h1", 40000, 10000, b"s1", b"a1"),
            MemberRecord("m2", None, "c2", "/h2", 30000, 20000, b"s2", b"a2"),
        ),
    )
    m = make_machine()
    g = m.load_group("g", record, 50_000)
    assert (g.state, g.generation_id, g.protocol, g.leader_id) == (S.STABLE, 5, "range", "m2")
    assert g.static_members == {"i1": "m1"}
    s = m.describe("g")
    assert [(x.member_id, x.metadata, x.assignment) for x in s.members] == [
        ("m1", b"s1", b"a1"),
        ("m2", b"s2", b"a2"),
    ]
    assert m.next_deadline() == 60_000
    # the static member comes back under a new id: no rebalance
    w, _ = join(m, client="c1", instance="i1", protocols=[("range", b"s1")], now=51_000)
    out = store(m, 51_000)
    assert out[w].generation_id == 5 and g.state is S.STABLE
    # the dynamic one never does: its session runs out and the group rebalances
    m.heartbeat("g", g.static_members["i1"], 5, group_instance_id="i1", now_ms=65_000)
    m.expire(70_000)
    assert "m2" not in g.members and g.state is S.PREPARING_REBALANCE


def test_load_empty_group():
    m = make_machine()
    g = m.load_group("g", GroupRecord("consumer", 9, None, None, 777, ()), 0)
    assert (g.state, g.generation_id, g.state_timestamp_ms) == (S.EMPTY, 9, 777)
    assert m.expiry_policy("g") == ExpiryPolicy(777)
    w, out = join(m, client="a")
    assert out[w].generation_id == 10


@pytest.mark.parametrize(
    "src, dst",
    [
        (S.EMPTY, S.STABLE),
        (S.EMPTY, S.COMPLETING_REBALANCE),
        (S.STABLE, S.EMPTY),
        (S.STABLE, S.COMPLETING_REBALANCE),
        (S.COMPLETING_REBALANCE, S.EMPTY),
        (S.PREPARING_REBALANCE, S.STABLE),
        (S.DEAD, S.PREPARING_REBALANCE),
    ],
)
def test_illegal_transitions_raise(src, dst):
    g = Group("g", state=src)
    with pytest.raises(IllegalGroupTransitionError, match=f"from {src.value} to {dst.value}"):
        g.transition_to(dst, 0)


@pytest.mark.parametrize("src", list(GroupState))
def test_any_state_may_die(src):
    g = Group("g", state=src)
    g.transition_to(S.DEAD, 0)
    assert g.state is S.DEAD


def test_describe_and_dead_group():
    m = make_machine()
    assert m.describe("g") == DEAD_GROUP
    a, b = stable_group(m, 2, instances=["ia", None])
    s = m.describe("g")
    assert (s.state, s.protocol_type, s.protocol) == ("Stable", "consumer", "range")
    assert {(x.member_id, x.group_instance_id, x.assignment) for x in s.members} == {
        (a, "ia", a.encode()),
        (b, None, b.encode()),
    }
    join(m, client="c")
    s = m.describe("g")
    assert (s.state, s.protocol) == ("PreparingRebalance", "")
    assert all(x.metadata == b"" and x.assignment == b"" for x in s.members)


# ---- a random workload: invariants hold and no request is ever left hanging ---------------

OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["join", "join394", "static", "rejoin", "sync", "hb", "leave", "store", "fail", "tick"]
        ),
        st.integers(0, 3),
        st.integers(0, 12_000),
    ),
    max_size=50,
)


@settings(max_examples=500, deadline=None)
@given(OPS, st.sampled_from([0, 3000]))
def test_random_workload_invariants(ops, delay):
    m = make_machine(initial_rebalance_delay_ms=delay)
    now = 0
    parked: set[Waiter] = set()
    answered: set[Waiter] = set()
    pending_ids: list[str] = []

    def take(out):
        for w, _ in out:
            assert w not in answered, f"{w} answered twice"
            answered.add(w)
            parked.discard(w)

    for n, (op, who, dt) in enumerate(ops):
        now += dt
        g = m.get("g")
        ids = list(g.members) if g else []
        mid = ids[who % len(ids)] if ids else ""
        w = Waiter(f"{op}{n}")
        if op in ("join", "join394", "static") or (op == "rejoin" and (mid or pending_ids)):
            member = ""
            if op == "rejoin":
                member = mid or pending_ids.pop()
            out = m.join(
                "g",
                member,
                group_instance_id=f"i{who}" if op == "static" else None,
                require_known_member_id=op == "join394",
                client_id=f"c{who}",
                client_host="h",
                session_timeout_ms=SESSION,
                rebalance_timeout_ms=REBALANCE,
                protocol_type="consumer",
                protocols=RANGE,
                now_ms=now,
                waiter=w,
            )
            parked.add(w)
            for _, r in out:
                if r.error is E.MEMBER_ID_REQUIRED:
                    pending_ids.append(r.member_id)
            take(out)
        elif op == "sync" and mid:
            parked.add(w)
            take(m.sync("g", g.generation_id, mid, {}, now_ms=now, waiter=w))
        elif op == "hb" and mid:
            m.heartbeat("g", mid, g.generation_id, now_ms=now)
        elif op == "leave" and mid:
            take(m.leave("g", [(mid, None)], now_ms=now)[2])
        elif op in ("store", "fail"):
            for write in m.take_writes():
                error = E.NONE if op == "store" else E.NOT_COORDINATOR_FOR_GROUP
                take(m.store_completed(write.seq, error, now))
        take(m.expire(now))
        g = m.get("g")
        if g is None:
            continue
        assert (g.leader_id is None) == (not g.members)
        assert g.leader_id is None or g.leader_id in g.members
        if g.state is S.EMPTY:
            assert not g.members
        elif not g.members:  # while an initial delay runs out or pending members may join
            assert g.state is S.PREPARING_REBALANCE and g.join_deadline_ms is not None
            assert g.initial_delay is not None or g.pending_members
        assert set(g.static_members.values()) <= set(g.members)
        assert g.pending_sync <= set(g.members)
        waiting = {
            x
            for mem in g.members.values()
            for x in (mem.join_waiter, mem.sync_waiter)
            if x is not None
        }
        # every parked request is held by a member of the group: nothing hangs forever
        assert parked == waiting
        if g.state is S.PREPARING_REBALANCE:
            assert g.join_deadline_ms is not None and m.next_deadline() is not None
        if g.state is S.STABLE:
            # only a static member replacing itself waits (for its group record) in Stable
            assert all(
                mem.join_waiter is None or mem.group_instance_id is not None
                for mem in g.members.values()
            )
            assert all(mem.sync_waiter is None for mem in g.members.values())
        for mem in g.members.values():
            # a member that waits for nothing always has a session running
            assert mem.awaiting or mem.expires_at_ms is not None


def test_abandon_all_answers_every_parked_request():
    m = make_machine()
    wa, out = join(m, client="a")
    a = out[wa].member_id
    wb, _ = join(m, client="b")  # parked join (PreparingRebalance)
    m2, x, y = two_members_completing()
    ws, _ = sync(m2, y, 2, complete=False)  # parked sync (CompletingRebalance)
    assert m.abandon_all(E.NOT_COORDINATOR_FOR_GROUP) == [
        (wb, JoinResult(E.NOT_COORDINATOR_FOR_GROUP, "b-2"))
    ]
    assert m2.abandon_all(E.NOT_COORDINATOR_FOR_GROUP) == [
        (ws, SyncResult(E.NOT_COORDINATOR_FOR_GROUP))
    ]
    assert m.abandon_all(E.NOT_COORDINATOR_FOR_GROUP) == []
    assert a in m.get("g").members
