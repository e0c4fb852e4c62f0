"""The controller's decisions about one partition, as pure functions (Kafka's
PartitionLeaderSelectors and the reassignment steps of KafkaController).

No I/O, no trio, no logging: each function takes what the controller knows (the assignment's
replicas, the partition's ``LeaderIsr``, the live brokers) and returns the state to write, or
why there is none. broker/cluster/controller.py reads ZooKeeper, calls these, writes the result
(fenced by its epoch) and tells the brokers.

Every change of leader or ISR decided here increments the leader epoch (Kafka 0.10.1); the
controller epoch and znode version of a returned state are the controller's to set.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum

from broker.cluster.zk import LeaderIsr, TopicAssignment
from protocol.errors import ErrorCode

NO_LEADER = -1
PREFERRED_ELECTION = 0  # ElectLeaders' election_type (KIP-460); 1 is unclean

Key = tuple[str, int]
# An answer to one partition of a request: (error, message or None).
Outcome = tuple[ErrorCode, str | None]


class Election(Enum):
    """How :func:`elect` chose, for the controller's log."""

    IN_SYNC = "in-sync"  # an ISR member leads: nothing acknowledged is lost
    UNCLEAN = "unclean"  # a replica outside the ISR leads: what only the ISR had is lost
    OFFLINE = "offline"  # nobody can lead: leader -1 until an ISR member returns
    UNCHANGED = "unchanged"  # already offline, still nobody


def start(
    replicas: Sequence[int], live: Collection[int], shutting_down: Collection[int], epoch: int
) -> LeaderIsr | None:
    """A new partition's first state (Kafka's NewPartition -> OnlinePartition): leader the
    first live replica not shutting down (else any live one), ISR every such replica, leader
    epoch 0; None while no replica is alive."""
    usable = [r for r in replicas if r in live and r not in shutting_down]
    if not usable:
        usable = [r for r in replicas if r in live]
    if not usable:
        return None
    return LeaderIsr(usable[0], 0, tuple(usable), epoch)


def elect(
    replicas: Sequence[int],
    state: LeaderIsr,
    live: Collection[int],
    exclude: Collection[int] = frozenset(),
    unclean: bool = False,
) -> tuple[LeaderIsr, Election]:
    """A new state for a partition whose leader is gone (or must move off ``exclude``): the
    first usable replica of the assignment that is in the ISR; else, with ``unclean``, the
    first usable replica alone in the ISR; else no leader with the ISR kept."""
    usable = [r for r in replicas if r in live and r not in exclude]
    in_isr = [r for r in usable if r in state.isr]
    if in_isr:
        isr = tuple(r for r in state.isr if r in live and r not in exclude)
        new = replace(state, leader=in_isr[0], leader_epoch=state.leader_epoch + 1, isr=isr)
        return new, Election.IN_SYNC
    if usable and unclean:
        new = replace(
            state, leader=usable[0], leader_epoch=state.leader_epoch + 1, isr=(usable[0],)
        )
        return new, Election.UNCLEAN
    if state.leader == NO_LEADER:
        return state, Election.UNCHANGED
    return replace(state, leader=NO_LEADER, leader_epoch=state.leader_epoch + 1), Election.OFFLINE


def needs_leader(state: LeaderIsr, live: Collection[int], shutting_down: Collection[int]) -> bool:
    """True when the partition's leader is gone or shutting down."""
    return state.leader not in live or state.leader in shutting_down


def without_followers(state: LeaderIsr, gone: Collection[int]) -> LeaderIsr | None:
    """The state with followers in ``gone`` out of the ISR, as long as one member stays; None
    when nothing changes (or the leader itself is gone: :func:`elect` handles that)."""
    if state.leader in gone or state.leader == NO_LEADER:
        return None
    isr = tuple(r for r in state.isr if r not in gone)
    if isr == state.isr or not isr:
        return None
    return replace(state, isr=isr, leader_epoch=state.leader_epoch + 1)


class ShutdownStep(Enum):
    """What a controlled shutdown does to one partition of the broker going away."""

    MOVE_LEADER = "move leader"  # another live ISR member leads
    LEAD_ALONE = "lead alone"  # nobody in sync to take over: it leads until it goes
    LEAVE_ISR = "leave isr"  # a follower: out of the ISR (if others stay) and stopped


def controlled_shutdown(
    replicas: Sequence[int],
    state: LeaderIsr,
    broker_id: int,
    live: Collection[int],
    shutting_down: Collection[int],
) -> tuple[ShutdownStep, LeaderIsr | None]:
    """Kafka's KafkaController.shutdownBroker for one partition ``broker_id`` holds a replica
    of: the step and the state to write (None: nothing to write)."""
    if state.leader == broker_id:
        others = [r for r in replicas if r in state.isr and r in live and r not in shutting_down]
        if not others:
            return ShutdownStep.LEAD_ALONE, None
        isr = tuple(r for r in state.isr if r != broker_id)
        new = replace(state, leader=others[0], leader_epoch=state.leader_epoch + 1, isr=isr)
        return ShutdownStep.MOVE_LEADER, new
    if broker_id in state.isr and len(state.isr) > 1:
        isr = tuple(r for r in state.isr if r != broker_id)
        return ShutdownStep.LEAVE_ISR, replace(state, isr=isr, leader_epoch=state.leader_epoch + 1)
    return ShutdownStep.LEAVE_ISR, None


def elect_on_request(
    election_type: int, replicas: Sequence[int], state: LeaderIsr, live: Collection[int]
) -> LeaderIsr | Outcome:
    """ElectLeaders (KIP-460) for one partition: preferred makes the first replica of the
    assignment leader when it is alive and in sync; unclean gives a leaderless partition a live
    replica (an ISR member first). The state to write, or the answer when there is none."""
    if election_type == PREFERRED_ELECTION:
        preferred = replicas[0]
        if state.leader == preferred:
            return ErrorCode.ELECTION_NOT_NEEDED, None
        if preferred not in live or preferred not in state.isr:
            return (
                ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                f"preferred replica {preferred} is not alive and in sync",
            )
        return replace(state, leader=preferred, leader_epoch=state.leader_epoch + 1)
    if state.leader in live:
        return ErrorCode.ELECTION_NOT_NEEDED, None
    alive = [r for r in replicas if r in live]
    if not alive:
        return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, "no live replica"
    leader = next((r for r in alive if r in state.isr), alive[0])
    isr = state.isr if leader in state.isr else (leader,)
    return replace(state, leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr)


@dataclass(frozen=True)
class ReassignmentStart:
    """A reassignment to write: the topic's new assignment (replicas = target + current, with
    adding and removing) for one partition."""

    assignment: TopicAssignment
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


def start_reassignment(
    assignment: TopicAssignment,
    partition: int,
    target: Sequence[int] | None,
    live: Collection[int],
    allow_rf_change: bool = True,
) -> ReassignmentStart | Outcome:
    """AlterPartitionReassignments (KIP-455) for one partition: move it to ``target`` (None:
    cancel, back to the replicas before the reassignment). The replica set becomes target +
    current until :func:`complete_reassignment`; the answer instead when nothing is to move
    (NONE when it is already there) or the target is refused, as Kafka 4.1 refuses it: after
    the replica checks, a new replication factor when ``allow_rf_change`` is False (KIP-860)."""
    current = assignment.partitions[partition]
    adding = assignment.adding.get(partition, ())
    original = tuple(r for r in current if r not in adding)
    cancel = target is None
    if target is None:
        if not adding and not assignment.removing.get(partition):
            return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None
        target = original
    target = tuple(target)
    if not target or len(set(target)) != len(target):
        return (
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"replicas {list(target)} are empty or repeat a broker",
        )
    if any(b not in live for b in target):
        return (
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"replicas {list(target)} name brokers that are not alive",
        )
    if not allow_rf_change and not cancel and len(target) != len(original):
        return (
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"The replication factor is changed from {len(original)} to {len(target)}",
        )
    if target == current and not adding:
        return ErrorCode.NONE, None
    full = target + tuple(r for r in current if r not in target)
    new_adding = tuple(r for r in target if r not in original)
    removing = tuple(r for r in full if r not in target)
    new = replace(
        assignment,
        partitions={**assignment.partitions, partition: full},
        adding={**assignment.adding, partition: new_adding},
        removing={**assignment.removing, partition: removing},
    )
    return ReassignmentStart(new, full, new_adding, removing)


def complete_reassignment(
    assignment: TopicAssignment, partition: int, state: LeaderIsr, live: Collection[int]
) -> tuple[LeaderIsr, TopicAssignment, tuple[int, ...]] | None:
    """Once every target replica of a reassigned partition is alive and in the ISR: the state
    (led from the target, the leader moved if it is to go, the removed replicas out of the
    ISR), the assignment without the reassignment, and the replicas to delete. None while the
    partition is not being reassigned or a target replica is not yet in sync."""
    if partition not in assignment.adding and partition not in assignment.removing:
        return None  # not being reassigned (a reorder has both entries, empty)
    removing = assignment.removing.get(partition, ())
    target = tuple(r for r in assignment.partitions[partition] if r not in removing)
    if any(r not in state.isr or r not in live for r in target):
        return None
    leader = state.leader if state.leader in target and state.leader in live else target[0]
    isr = tuple(r for r in state.isr if r in target)
    new = replace(state, leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr)
    done = replace(
        assignment,
        partitions={**assignment.partitions, partition: target},
        adding={k: v for k, v in assignment.adding.items() if k != partition},
        removing={k: v for k, v in assignment.removing.items() if k != partition},
    )
    return new, done, removing


def ongoing_reassignments(
    assignments: Mapping[str, TopicAssignment], keys: Collection[Key] | None
) -> dict[Key, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
    """ListPartitionReassignments: {(topic, partition): (replicas, adding, removing)} of every
    partition being reassigned (of ``keys`` only, when given)."""
    ongoing = {}
    for name, assignment in assignments.items():
        for p in sorted(set(assignment.adding) | set(assignment.removing)):
            if keys is None or (name, p) in keys:
                ongoing[(name, p)] = (
                    assignment.partitions[p],
                    assignment.adding.get(p, ()),
                    assignment.removing.get(p, ()),
                )
    return ongoing
