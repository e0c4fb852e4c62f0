"""The pure group state machine: every transition, every timeout, with a fake clock (plain
integers passed as now_ms)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings, strategies as st

from broker.groups.state import (
    DEAD_GROUP,
    Group,
    GroupMachine,
    GroupState,
    IllegalGroupTransitionError,
    JoinResult,
    SyncResult,
)
from protocol.errors import ErrorCode as E

RANGE = [("range", b"r-meta")]
SESSION = 10_000
REBALANCE = 30_000


class Waiter:
    """A named parked request; the tests collect what the machine delivers to it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Waiter({self.name})"


def make_machine() -> GroupMachine:
    counter = itertools.count(1)
    return GroupMachine(
        min_session_timeout_ms=6000,
        max_session_timeout_ms=300000,
        new_member_id=lambda client: f"{client}-{next(counter)}",
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
) -> tuple[Waiter, dict]:
    w = Waiter(f"join-{client}-{member_id}")
    out = m.join(
        group,
        member_id,
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
) -> tuple[Waiter, dict]:
    w = Waiter(f"sync-{member_id}")
    out = m.sync(group, generation, member_id, assignments or {}, now_ms=now, waiter=w)
    return w, dict(out)


def two_members_awaiting_sync() -> tuple[GroupMachine, str, str]:
    """Group "g" in AwaitingSync at generation 2: a joined alone, b joined, a rejoined; a leads."""
    m = make_machine()
    wa, out = join(m, client="a")
    a = out[wa].member_id
    wb, _ = join(m, client="b")
    _, out = join(m, a)
    return m, a, out[wb].member_id


def stable_group(m: GroupMachine, n: int, now: int = 0) -> list[str]:
    """Build a Stable group of n members (joined one after another, like real clients)."""
    ids: list[str] = []
    w, out = join(m, client="c0", now=now)
    ids.append(out[w].member_id)
    for i in range(1, n):
        w_new, out = join(m, client=f"c{i}", now=now)
        assert w_new not in out  # parked until the others rejoin
        waiters = {w_new: None}
        for mid in ids:
            w_old, more = join(m, mid, client="x", now=now)
            out.update(more)
            waiters[w_old] = mid
        assert set(out) == set(waiters)
        ids.append(out[w_new].member_id)
    g = m.get("g")
    assert g.state is GroupState.AWAITING_SYNC
    leader = g.leader_id
    w, out = sync(m, leader, g.generation_id, {mid: mid.encode() for mid in ids}, now=now)
    assert out[w] == SyncResult(E.NONE, leader.encode())
    assert g.state is GroupState.STABLE
    return ids


# ---- JoinGroup validation ------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error",
    [
        (dict(group=""), E.INVALID_GROUP_ID),
        (dict(session=5999), E.INVALID_SESSION_TIMEOUT),
        (dict(session=300001), E.INVALID_SESSION_TIMEOUT),
        (dict(protocols=[]), E.INCONSISTENT_GROUP_PROTOCOL),
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
    assert out[w].error is E.UNKNOWN_MEMBER_ID


def test_join_inconsistent_protocol_type_and_protocols():
    m = make_machine()
    stable_group(m, 1)
    w, out = join(m, ptype="connect")
    assert out[w].error is E.INCONSISTENT_GROUP_PROTOCOL
    w, out = join(m, protocols=[("roundrobin", b"")])
    assert out[w].error is E.INCONSISTENT_GROUP_PROTOCOL
    assert m.get("g").state is GroupState.STABLE


# ---- Empty -> PreparingRebalance -> AwaitingSync -> Stable --------------------------------


def test_first_member_joins_and_becomes_leader_at_once():
    m = make_machine()
    w, out = join(m, client="alpha", now=100)
    res = out[w]
    assert res == JoinResult(E.NONE, "alpha-1", 1, "range", "alpha-1", (("alpha-1", b"r-meta"),))
    g = m.get("g")
    assert g.state is GroupState.AWAITING_SYNC
    assert g.protocol_type == "consumer"
    assert g.members["alpha-1"].last_heartbeat_ms == 100


def test_leader_sync_makes_group_stable_and_followers_get_their_assignment():
    m = make_machine()
    a, b = stable_group(m, 2)
    g = m.get("g")
    assert g.generation_id == 2
    # a follower syncing after Stable gets its assignment at once
    follower = b if g.leader_id == a else a
    w, out = sync(m, follower, 2)
    assert out[w] == SyncResult(E.NONE, follower.encode())


def test_follower_sync_waits_for_leader():
    m = make_machine()
    wa, out = join(m, client="a")
    a = out[wa].member_id
    wb, out = join(m, client="b")
    assert out == {}
    wa2, out = join(m, a)
    b = out[wb].member_id
    assert out[wa2].members == ((a, b"r-meta"), (b, b"r-meta"))
    assert out[wb].members == ()
    assert out[wb].leader_id == a
    ws, out = sync(m, b, 2)
    assert out == {}  # parked
    wl, out = sync(m, a, 2, {a: b"A", b: b"B", "stranger": b"S"})
    assert out == {ws: SyncResult(E.NONE, b"B"), wl: SyncResult(E.NONE, b"A")}
    assert m.get("g").state is GroupState.STABLE


def test_leader_assignment_missing_a_member_gives_it_empty_bytes():
    m, a, b = two_members_awaiting_sync()
    ws, _ = sync(m, b, 2)
    wl, out = sync(m, a, 2, {a: b"A"})
    assert out[ws] == SyncResult(E.NONE, b"")


def test_sync_errors():
    m = make_machine()
    (a,) = stable_group(m, 1)
    assert sync(m, a, 1, group="nope")[1].popitem()[1] == SyncResult(E.UNKNOWN_MEMBER_ID)
    assert sync(m, "ghost", 1)[1].popitem()[1] == SyncResult(E.UNKNOWN_MEMBER_ID)
    assert sync(m, a, 7)[1].popitem()[1] == SyncResult(E.ILLEGAL_GENERATION)
    join(m, client="new")  # -> PreparingRebalance
    assert sync(m, a, 1)[1].popitem()[1] == SyncResult(E.REBALANCE_IN_PROGRESS)


# ---- rebalances triggered by members ------------------------------------------------------


def test_new_member_triggers_rebalance_that_waits_for_existing_members():
    m = make_machine()
    (a,) = stable_group(m, 1, now=0)
    g = m.get("g")
    wb, out = join(m, client="b", now=1000, rebalance=60_000)
    assert out == {}
    assert g.state is GroupState.PREPARING_REBALANCE
    assert g.rebalance_deadline_ms == 1000 + 60_000
    # the old member learns through its heartbeat, which also keeps it alive
    assert m.heartbeat("g", a, 1, now_ms=5000) is E.REBALANCE_IN_PROGRESS
    assert g.members[a].last_heartbeat_ms == 5000
    wa, out = join(m, a, now=6000)
    assert set(out) == {wa, wb}
    assert out[wa].generation_id == out[wb].generation_id == 2
    assert g.state is GroupState.AWAITING_SYNC


def test_rebalance_timeout_drops_members_that_did_not_rejoin():
    m = make_machine()
    (a,) = stable_group(m, 1, now=0)
    wb, _ = join(m, client="b", now=1000, session=SESSION, rebalance=20_000)
    g = m.get("g")
    # the group's rebalance timeout is the largest member's (a: 30s)
    assert g.rebalance_deadline_ms == 1000 + REBALANCE
    # a keeps heartbeating (so its session stays alive) but never rejoins
    for t in range(4000, 31_000, 3000):
        m.heartbeat("g", a, 1, now_ms=t)
        assert m.expire(t) == []
    assert m.next_deadline() == 31_000
    out = dict(m.expire(31_000))
    res = out[wb]
    assert res.error is E.NONE and res.generation_id == 2 and res.leader_id == res.member_id
    assert list(g.members) == [res.member_id]
    assert res.members == ((res.member_id, b"r-meta"),)


def test_rebalance_completes_early_when_straggler_session_expires():
    m = make_machine()
    (a,) = stable_group(m, 1, now=0)
    wb, _ = join(m, client="b", now=1000)
    # a stops heartbeating: its session (10s from the last heartbeat at 0) ends first
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
    assert g.state is GroupState.PREPARING_REBALANCE
    assert m.heartbeat("g", a, 2, now_ms=SESSION + 1) is E.REBALANCE_IN_PROGRESS
    wa, out = join(m, a, now=SESSION + 2)
    assert out[wa].generation_id == 3
    assert g.state is GroupState.AWAITING_SYNC


def test_heartbeat_keeps_member_alive():
    m = make_machine()
    (a,) = stable_group(m, 1, now=0)
    for t in range(5000, 100_000, 5000):
        assert m.heartbeat("g", a, 1, now_ms=t) is E.NONE
        assert m.expire(t) == []
    assert m.next_deadline() == 95_000 + SESSION


def test_member_awaiting_sync_does_not_expire_but_one_that_never_syncs_does():
    m = make_machine()
    wa, out = join(m, client="a", now=0)
    a = out[wa].member_id
    wb, _ = join(m, client="b", now=0)
    _, out = join(m, a, now=0)
    b = out[wb].member_id
    ws, _ = sync(m, b, 2, now=1000)  # follower parked, kept alive
    assert m.next_deadline() == SESSION  # only the leader (a) can expire
    out = dict(m.expire(SESSION))
    # the leader never sent SyncGroup: it is dropped and the follower must rejoin
    assert out == {ws: SyncResult(E.REBALANCE_IN_PROGRESS)}
    g = m.get("g")
    assert list(g.members) == [b] and g.leader_id == b
    assert g.state is GroupState.PREPARING_REBALANCE
    wb2, out = join(m, b, now=SESSION + 1)
    assert out[wb2].generation_id == 3 and out[wb2].leader_id == b


def test_leave_triggers_rebalance_and_last_leave_empties_group():
    m = make_machine()
    a, b = stable_group(m, 2)
    g = m.get("g")
    err, out = m.leave("g", b, now_ms=10)
    assert err is E.NONE and out == []
    assert g.state is GroupState.PREPARING_REBALANCE and g.leader_id == a
    wa, out = join(m, a, now=20)
    assert out[wa].generation_id == 3
    sync(m, a, 3, {a: b"all"})
    err, out = m.leave("g", a, now_ms=30)
    assert err is E.NONE
    assert g.state is GroupState.EMPTY and g.generation_id == 4 and g.protocol is None
    assert g.leader_id is None
    assert m.heartbeat("g", a, 4, now_ms=40) is E.UNKNOWN_MEMBER_ID
    assert m.describe("g").state == "Empty"


def test_leave_unknown():
    m = make_machine()
    assert m.leave("g", "x", now_ms=0) == (E.UNKNOWN_MEMBER_ID, [])
    stable_group(m, 1)
    assert m.leave("g", "x", now_ms=0) == (E.UNKNOWN_MEMBER_ID, [])


def test_leave_while_parked_answers_the_parked_join():
    m = make_machine()
    (a,) = stable_group(m, 1)
    wb, _ = join(m, client="b")
    b = next(mid for mid in m.get("g").members if mid != a)
    err, out = m.leave("g", b, now_ms=0)
    assert err is E.NONE
    assert out == [(wb, JoinResult(E.UNKNOWN_MEMBER_ID, b))]
    # a is now the only one not rejoined: the rebalance waits for it alone
    wa, out = join(m, a)
    assert dict(out)[wa].members == ((a, b"r-meta"),)


def test_new_member_during_awaiting_sync_restarts_rebalance():
    m, a, b = two_members_awaiting_sync()
    ws, _ = sync(m, b, 2)
    wc, out = join(m, client="c")
    assert out == {ws: SyncResult(E.REBALANCE_IN_PROGRESS)}
    assert m.get("g").state is GroupState.PREPARING_REBALANCE


def test_rejoin_same_metadata_during_awaiting_sync_returns_current_generation():
    m, a, b = two_members_awaiting_sync()
    w, out = join(m, b)
    assert out[w] == JoinResult(E.NONE, b, 2, "range", a, ())
    w, out = join(m, a)
    assert out[w].members == ((a, b"r-meta"), (b, b"r-meta"))
    assert m.get("g").state is GroupState.AWAITING_SYNC
    # changed metadata forces a rebalance
    w, out = join(m, b, protocols=[("range", b"new")])
    assert out == {}
    assert m.get("g").state is GroupState.PREPARING_REBALANCE


def test_rejoin_in_stable_group():
    m = make_machine()
    a, b = stable_group(m, 2)
    g = m.get("g")
    leader, follower = (a, b) if g.leader_id == a else (b, a)
    w, out = join(m, follower)
    assert out[w] == JoinResult(E.NONE, follower, 2, "range", leader, ())
    assert g.state is GroupState.STABLE
    w, out = join(m, follower, protocols=[("range", b"changed")])
    assert out == {} and g.state is GroupState.PREPARING_REBALANCE
    wl, out = join(m, leader)
    assert out[wl].generation_id == 3
    assert dict(out[wl].members)[follower] == b"changed"
    sync(m, leader, 3)
    wl, out = join(m, leader)  # the leader's JoinGroup always rebalances
    assert out == {} and g.state is GroupState.PREPARING_REBALANCE


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
    m, a, b = two_members_awaiting_sync()
    s1, _ = sync(m, b, 2)
    s2, out = sync(m, b, 2)
    assert out == {s1: SyncResult(E.REBALANCE_IN_PROGRESS)}
    _, out = sync(m, a, 2, {b: b"B"})
    assert out[s2] == SyncResult(E.NONE, b"B")


# ---- heartbeat and commit checks in every state -------------------------------------------


def test_heartbeat_errors_by_state():
    m = make_machine()
    assert m.heartbeat("g", "x", 0, now_ms=0) is E.UNKNOWN_MEMBER_ID
    wa, out = join(m, client="a")
    a = out[wa].member_id
    assert m.heartbeat("g", a, 1, now_ms=0) is E.REBALANCE_IN_PROGRESS  # AwaitingSync
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
    assert m.get("g").state is GroupState.EMPTY
    assert m.check_commit("g", "", -1, now_ms=0) is E.NONE
    assert m.check_commit("g", "x", 0, now_ms=0) is E.UNKNOWN_MEMBER_ID
    wa, out = join(m, client="a")
    a = out[wa].member_id
    assert m.check_commit("g", a, 1, now_ms=0) is E.REBALANCE_IN_PROGRESS
    sync(m, a, 1)
    assert m.check_commit("g", a, 1, now_ms=7000) is E.NONE
    assert m.get("g").members[a].last_heartbeat_ms == 7000
    assert m.check_commit("g", a, 0, now_ms=0) is E.ILLEGAL_GENERATION
    assert m.check_commit("g", "x", 1, now_ms=0) is E.UNKNOWN_MEMBER_ID
    assert m.check_commit("g", "", -1, now_ms=0) is E.UNKNOWN_MEMBER_ID
    join(m, client="b")  # PreparingRebalance: the previous generation may still commit
    assert m.check_commit("g", a, 1, now_ms=0) is E.NONE


# ---- protocol selection, describe, list, removal, transitions -----------------------------


def test_protocol_selection_votes():
    m = make_machine()
    wa, out = join(m, client="a", protocols=[("rr", b"a"), ("range", b"a2")])
    a = out[wa].member_id
    assert out[wa].protocol == "rr"
    sync(m, a, 1)
    wb, _ = join(m, client="b", protocols=[("range", b"b"), ("rr", b"b2")])
    wc, _ = join(m, client="c", protocols=[("range", b"c"), ("sticky", b"")])
    _, out = join(m, a, protocols=[("rr", b"a"), ("range", b"a2")])
    # candidates = {range} (c lacks rr): everyone votes range
    assert out[wb].protocol == "range"
    assert dict(out[next(iter(w for w in out if out[w].members))].members) == {
        a: b"a2",
        out[wb].member_id: b"b",
        out[wc].member_id: b"c",
    }


def test_protocol_tie_goes_to_leader_preference():
    m = make_machine()
    wa, out = join(m, client="a", protocols=[("x", b""), ("y", b"")])
    a = out[wa].member_id
    sync(m, a, 1)
    wb, _ = join(m, client="b", protocols=[("y", b""), ("x", b"")])
    _, out = join(m, a, protocols=[("x", b""), ("y", b"")])
    assert out[wb].protocol == "x"


def test_describe_and_list():
    m = make_machine()
    assert m.describe("g") == DEAD_GROUP
    a, b = stable_group(m, 2)
    s = m.describe("g")
    assert (s.state, s.protocol_type, s.protocol) == ("Stable", "consumer", "range")
    assert {(x.member_id, x.metadata, x.assignment) for x in s.members} == {
        (a, b"r-meta", a.encode()),
        (b, b"r-meta", b.encode()),
    }
    assert all(x.client_host == "/127.0.0.1" for x in s.members)
    join(m, client="c")
    s = m.describe("g")
    assert (s.state, s.protocol) == ("PreparingRebalance", "")
    assert all(x.metadata == b"" and x.assignment == b"" for x in s.members)
    m.check_commit("offsets-only", "", -1, now_ms=0)
    assert m.overview() == [("g", "consumer"), ("offsets-only", "")]


def test_remove_group_only_when_empty():
    m = make_machine()
    (a,) = stable_group(m, 1)
    assert not m.remove_group("g")
    m.leave("g", a, now_ms=0)
    g = m.get("g")
    assert m.remove_group("g")
    assert g.state is GroupState.DEAD and m.get("g") is None
    assert not m.remove_group("g")


@pytest.mark.parametrize(
    "src, dst",
    [
        (GroupState.EMPTY, GroupState.STABLE),
        (GroupState.EMPTY, GroupState.AWAITING_SYNC),
        (GroupState.STABLE, GroupState.EMPTY),
        (GroupState.STABLE, GroupState.AWAITING_SYNC),
        (GroupState.AWAITING_SYNC, GroupState.EMPTY),
        (GroupState.PREPARING_REBALANCE, GroupState.STABLE),
        (GroupState.DEAD, GroupState.PREPARING_REBALANCE),
    ],
)
def test_illegal_transitions_raise(src, dst):
    g = Group("g", state=src)
    with pytest.raises(IllegalGroupTransitionError, match=f"from {src.value} to {dst.value}"):
        g.transition_to(dst)


@pytest.mark.parametrize("src", list(GroupState))
def test_any_state_may_die(src):
    g = Group("g", state=src)
    g.transition_to(GroupState.DEAD)
    assert g.state is GroupState.DEAD


# ---- a random workload: invariants hold and no request is ever left hanging ---------------

OPS = st.lists(
    st.tuples(
        st.sampled_from(["join", "rejoin", "sync", "hb", "leave", "tick"]),
        st.integers(0, 3),
        st.integers(0, 12_000),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_random_workload_invariants(ops):
    m = make_machine()
    now = 0
    parked: set[Waiter] = set()
    answered: set[Waiter] = set()

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
        if op == "join" or (op == "rejoin" and mid):
            out = m.join(
                "g",
                "" if op == "join" else mid,
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
            take(out)
        elif op == "sync" and mid:
            parked.add(w)
            take(m.sync("g", g.generation_id, mid, {}, now_ms=now, waiter=w))
        elif op == "hb" and mid:
            m.heartbeat("g", mid, g.generation_id, now_ms=now)
        elif op == "leave" and mid:
            take(m.leave("g", mid, now_ms=now)[1])
        take(m.expire(now))
        g = m.get("g")
        if g is None:
            continue
        assert (g.leader_id is None) == (not g.members)
        assert g.leader_id is None or g.leader_id in g.members
        assert (g.state is GroupState.EMPTY) == (not g.members)
        waiting = {
            x
            for mem in g.members.values()
            for x in (mem.join_waiter, mem.sync_waiter)
            if x is not None
        }
        # every parked request is held by a member of the group: nothing hangs forever
        assert parked == waiting
        if g.state is GroupState.PREPARING_REBALANCE:
            assert g.rebalance_deadline_ms is not None and m.next_deadline() is not None
        if g.state is GroupState.STABLE:
            assert all(
                mem.join_waiter is None and mem.sync_waiter is None for mem in g.members.values()
            )


def test_abandon_all_answers_every_parked_request():
    m = make_machine()
    wa, out = join(m, client="a")
    a = out[wa].member_id
    wb, _ = join(m, client="b")  # parked join (PreparingRebalance)
    m2 = make_machine()
    w1, out = join(m2, client="x", group="h")
    x = out[w1].member_id
    wy, _ = join(m2, client="y", group="h")
    _, out = join(m2, x, group="h")
    y = out[wy].member_id
    ws, _ = sync(m2, y, 2, group="h")  # parked sync (AwaitingSync)
    assert m.abandon_all(E.NOT_COORDINATOR_FOR_GROUP) == [
        (wb, JoinResult(E.NOT_COORDINATOR_FOR_GROUP, "b-2"))
    ]
    assert m2.abandon_all(E.NOT_COORDINATOR_FOR_GROUP) == [
        (ws, SyncResult(E.NOT_COORDINATOR_FOR_GROUP))
    ]
    assert m.abandon_all(E.NOT_COORDINATOR_FOR_GROUP) == []
    assert a in m.get("g").members
