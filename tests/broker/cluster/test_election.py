"""The controller's pure decisions (broker/cluster/election.py), checked against the rules they
implement: property tests over random assignments, ISRs and live sets, and the cases Kafka's
tools reach (kafka-leader-election.sh, kafka-reassign-partitions.sh)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.cluster import election
from broker.cluster.election import NO_LEADER, Election, ShutdownStep
from broker.cluster.zk import LeaderIsr, TopicAssignment
from protocol.errors import ErrorCode

BROKERS = st.integers(min_value=1, max_value=6)


@st.composite
def partitions(draw):
    """(replicas, state, live): a replica list, a state whose leader and ISR are replicas (or
    leader -1), and any set of live brokers."""
    replicas = tuple(draw(st.lists(BROKERS, min_size=1, max_size=5, unique=True)))
    isr = tuple(r for r in replicas if draw(st.booleans())) or replicas[:1]
    leader = draw(st.sampled_from((*isr, NO_LEADER)))
    state = LeaderIsr(leader, draw(st.integers(0, 100)), isr, 3, 7)
    live = frozenset(draw(st.sets(BROKERS)))
    return replicas, state, live


@given(partitions(), st.sets(BROKERS), st.booleans())
def test_elect_follows_kafkas_leader_selection(partition, exclude, unclean):
    replicas, state, live = partition
    new, how = election.elect(replicas, state, live, exclude, unclean)
    usable = [r for r in replicas if r in live and r not in exclude]
    in_sync = [r for r in usable if r in state.isr]
    if in_sync:
        # the first in-sync usable replica of the assignment; the ISR loses only the gone
        assert how == Election.IN_SYNC and new.leader == in_sync[0]
        assert new.isr == tuple(r for r in state.isr if r in live and r not in exclude)
    elif usable and unclean:
        assert how == Election.UNCLEAN and new.leader == usable[0] and new.isr == (usable[0],)
    elif state.leader == NO_LEADER:
        assert how == Election.UNCHANGED and new == state
    else:
        # offline: no leader, the ISR kept so that one of its members can come back to lead
        assert how == Election.OFFLINE and new.leader == NO_LEADER and new.isr == state.isr
    if how != Election.UNCHANGED:
        assert new.leader_epoch == state.leader_epoch + 1
    assert (new.controller_epoch, new.zk_version) == (state.controller_epoch, state.zk_version)


@given(partitions(), st.sets(BROKERS))
def test_first_state_leads_from_a_live_replica_not_shutting_down(partition, shutting_down):
    replicas, _, live = partition
    state = election.start(replicas, live, shutting_down, epoch=5)
    alive = [r for r in replicas if r in live]
    if not alive:
        assert state is None
        return
    assert state is not None and state.leader_epoch == 0 and state.controller_epoch == 5
    preferred = [r for r in alive if r not in shutting_down] or alive
    assert state.leader == preferred[0] and state.isr == tuple(preferred)


@given(partitions(), st.sets(BROKERS))
def test_followers_leave_the_isr_but_never_empty_it(partition, gone):
    _, state, _ = partition
    new = election.without_followers(state, gone)
    if state.leader in gone or state.leader == NO_LEADER:
        assert new is None
        return
    kept = tuple(r for r in state.isr if r not in gone)
    if kept == state.isr:
        assert new is None
    else:
        assert new is not None and new.isr == kept and state.leader in kept
        assert new.leader_epoch == state.leader_epoch + 1


@given(partitions(), BROKERS)
def test_controlled_shutdown_moves_leadership_to_another_in_sync_replica(partition, broker_id):
    replicas, state, live = partition
    live = live | {broker_id}
    step, new = election.controlled_shutdown(replicas, state, broker_id, live, {broker_id})
    if state.leader == broker_id:
        others = [r for r in replicas if r in state.isr and r in live and r != broker_id]
        if others:
            assert step == ShutdownStep.MOVE_LEADER and new is not None
            assert new.leader == others[0] and broker_id not in new.isr
        else:
            assert (step, new) == (ShutdownStep.LEAD_ALONE, None)
    else:
        assert step == ShutdownStep.LEAVE_ISR
        if broker_id in state.isr and len(state.isr) > 1:
            assert new is not None and broker_id not in new.isr and new.leader == state.leader
        else:
            assert new is None


def test_preferred_election_answers_as_kafka_does():
    state = LeaderIsr(2, 4, (2, 1), 1)
    chosen = election.elect_on_request(0, (1, 2), state, {1, 2})
    assert chosen == LeaderIsr(1, 5, (2, 1), 1)
    assert election.elect_on_request(0, (2, 1), state, {1, 2}) == (
        ErrorCode.ELECTION_NOT_NEEDED,
        None,
    )
    assert election.elect_on_request(0, (1, 2), LeaderIsr(2, 4, (2,), 1), {1, 2}) == (
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        "preferred replica 1 is not alive and in sync",
    )


def test_unclean_election_prefers_an_isr_member_and_needs_a_live_replica():
    offline = LeaderIsr(NO_LEADER, 4, (3,), 1)
    assert election.elect_on_request(1, (1, 2, 3), offline, {2, 3}) == LeaderIsr(3, 5, (3,), 1)
    assert election.elect_on_request(1, (1, 2, 3), offline, {1, 2}) == LeaderIsr(1, 5, (1,), 1)
    assert election.elect_on_request(1, (1, 2), offline, {3}) == (
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        "no live replica",
    )
    assert election.elect_on_request(1, (1, 2), LeaderIsr(2, 4, (2,), 1), {2})[0] == (
        ErrorCode.ELECTION_NOT_NEEDED
    )


@given(
    st.lists(BROKERS, min_size=1, max_size=4, unique=True),
    st.lists(BROKERS, min_size=1, max_size=4, unique=True),
)
def test_a_reassignment_started_then_completed_ends_on_its_target(current, target):
    current, target = tuple(current), tuple(target)
    live = set(range(1, 7))
    topic = TopicAssignment("t", None, {0: current, 1: (1,)})
    move = election.start_reassignment(topic, 0, target, live)
    if target == current:
        assert move == (ErrorCode.NONE, None)
        return
    assert isinstance(move, election.ReassignmentStart)
    # while moving: target first, then the replicas leaving; partition 1 untouched
    assert move.replicas == target + tuple(r for r in current if r not in target)
    assert set(move.removing) == set(current) - set(target)
    assert set(move.adding) == set(target) - set(current)
    assert move.assignment.partitions[1] == (1,)
    assert election.ongoing_reassignments({"t": move.assignment}, None) == {
        ("t", 0): (move.replicas, move.adding, move.removing)
    }
    # not complete until every target replica is in the ISR
    leader = current[0]
    lagging = LeaderIsr(leader, 2, current, 1)
    if not set(target) <= set(current):
        assert election.complete_reassignment(move.assignment, 0, lagging, live) is None
    caught_up = LeaderIsr(leader, 2, move.replicas, 1)
    done = election.complete_reassignment(move.assignment, 0, caught_up, live)
    assert done is not None
    state, finished, removed = done
    assert finished.partitions == {0: target, 1: (1,)}
    assert not finished.adding and not finished.removing
    assert state.leader in target and set(state.isr) == set(target)
    assert state.leader == (leader if leader in target else target[0])
    assert set(removed) == set(current) - set(target)
    assert election.ongoing_reassignments({"t": finished}, None) == {}


def test_a_cancelled_reassignment_goes_back_to_the_replicas_before_it():
    topic = TopicAssignment("t", None, {0: (1, 2)})
    move = election.start_reassignment(topic, 0, (3, 4), {1, 2, 3, 4})
    assert isinstance(move, election.ReassignmentStart)
    back = election.start_reassignment(move.assignment, 0, None, {1, 2, 3, 4})
    assert isinstance(back, election.ReassignmentStart) and back.replicas[:2] == (1, 2)
    assert election.start_reassignment(topic, 0, None, {1, 2}) == (
        ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
        None,
    )


def test_reassignment_targets_are_refused_as_kafka_refuses_them():
    topic = TopicAssignment("t", None, {0: (1, 2)})
    assert election.start_reassignment(topic, 0, (1, 1), {1, 2}) == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "replicas [1, 1] are empty or repeat a broker",
    )
    assert election.start_reassignment(topic, 0, (1, 9), {1, 2}) == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "replicas [1, 9] name brokers that are not alive",
    )


def test_a_new_replication_factor_is_refused_when_the_request_disallows_it():
    """AlterPartitionReassignments v1 (KIP-860): with allow_replication_factor_change false a
    target of another size is refused with Kafka 4.1's error and message, after the replica
    checks; one of the same size moves, and a cancellation goes back whatever its size."""
    live = {1, 2, 3, 4}
    topic = TopicAssignment("t", None, {0: (1, 2)})
    for target, size in (((1, 2, 3), 3), ((3,), 1)):
        assert election.start_reassignment(topic, 0, target, live, allow_rf_change=False) == (
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"The replication factor is changed from 2 to {size}",
        )
    assert election.start_reassignment(topic, 0, (1, 1, 2), live, allow_rf_change=False) == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "replicas [1, 1, 2] are empty or repeat a broker",
    )
    move = election.start_reassignment(topic, 0, (3, 4), live, allow_rf_change=False)
    assert isinstance(move, election.ReassignmentStart) and move.adding == (3, 4)
    # while (1, 2) -> (3, 4) is under way the factor is still the original 2
    again = election.start_reassignment(move.assignment, 0, (4,), live, allow_rf_change=False)
    assert again == (
        ErrorCode.INVALID_REPLICATION_FACTOR,
        "The replication factor is changed from 2 to 1",
    )
    back = election.start_reassignment(move.assignment, 0, None, live, allow_rf_change=False)
    assert isinstance(back, election.ReassignmentStart)
