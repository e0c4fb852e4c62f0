"""The consumer-group membership state machine (Kafka 0.10.1 GroupCoordinator), as pure code.

No I/O, no clock, no trio: every call gets ``now_ms``; requests that must wait for a rebalance
(JoinGroup, SyncGroup) park an opaque *waiter* chosen by the caller, and every call returns the
``Delivery`` list of (waiter, result) pairs that became ready, the caller's own included. The
broker's trio layer (coordinator.py) turns waiters into events and runs ``expire`` at
``next_deadline()``.

States and transitions (Kafka's GroupMetadata.validPreviousStates)::

    Empty --join--> PreparingRebalance --all joined / rebalance timeout--> AwaitingSync
    AwaitingSync --leader SyncGroup--> Stable
    AwaitingSync | Stable --join, leave, session expiry--> PreparingRebalance
    PreparingRebalance --nobody left at completion--> Empty
    any --group removed (no members, no offsets)--> Dead

Departures from Kafka 0.10.1, all so that no request hangs: a parked JoinGroup/SyncGroup whose
member is removed (LeaveGroup, expiry) is answered UNKNOWN_MEMBER_ID instead of never; a parked
request superseded by a second one from the same member is answered REBALANCE_IN_PROGRESS; a
heartbeat during PreparingRebalance refreshes the session (as Kafka 0.10.2 does).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from protocol.errors import ErrorCode


class GroupState(Enum):
    """A group's state; the value is the name DescribeGroups reports."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    AWAITING_SYNC = "AwaitingSync"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.EMPTY, GroupState.STABLE, GroupState.AWAITING_SYNC}
    ),
    GroupState.AWAITING_SYNC: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.AWAITING_SYNC}),
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalGroupTransitionError(RuntimeError):
    """Raised when code asks a group for a transition Kafka's state machine forbids: a bug in
    this package, never a client's fault."""


@dataclass(frozen=True)
class JoinResult:
    """The JoinGroup answer. ``members`` (member id, metadata of the chosen protocol) is filled
    for the leader only. Errors carry generation 0 and empty protocol/leader, as Kafka's."""

    error: ErrorCode
    member_id: str
    generation_id: int = 0
    protocol: str = ""
    leader_id: str = ""
    members: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True)
class SyncResult:
    """The SyncGroup answer: this member's assignment (empty on error)."""

    error: ErrorCode
    assignment: bytes = b""


Delivery = tuple[Hashable, "JoinResult | SyncResult"]


@dataclass(frozen=True)
class MemberSummary:
    """One member as DescribeGroups shows it; metadata/assignment only when the group is Stable."""

    member_id: str
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupSummary:
    """One group as DescribeGroups shows it (Kafka's GroupSummary)."""

    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberSummary, ...]


DEAD_GROUP = GroupSummary(GroupState.DEAD.value, "", "", ())


@dataclass
class Member:
    """A member's registration; mutated only by :class:`GroupMachine`."""

    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    join_waiter: Hashable | None = None
    sync_waiter: Hashable | None = None
    last_heartbeat_ms: int = 0

    @property
    def protocol_names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.protocols)

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise IllegalGroupTransitionError(
            f"member {self.member_id} does not support the group's protocol {protocol!r}"
        )

    def matches(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        return tuple((n, bytes(m)) for n, m in protocols) == self.protocols

    def vote(self, candidates: frozenset[str]) -> str:
        """This member's most preferred protocol among ``candidates``."""
        return next(name for name, _ in self.protocols if name in candidates)

    @property
    def kept_alive(self) -> bool:
        """A member with a parked JoinGroup or SyncGroup cannot heartbeat, so it never expires."""
        return self.join_waiter is not None or self.sync_waiter is not None

    @property
    def session_deadline_ms(self) -> int:
        return self.last_heartbeat_ms + self.session_timeout_ms


@dataclass
class Group:
    """One group's membership and state (Kafka's GroupMetadata)."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    rebalance_deadline_ms: int | None = None

    def transition_to(self, target: GroupState) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise IllegalGroupTransitionError(
                f"group {self.group_id!r} cannot move from {self.state.value} to "
                f"{target.value}; allowed from "
                f"{sorted(s.value for s in _VALID_PREVIOUS[target])}"
            )
        self.state = target

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member

    def remove(self, member_id: str) -> Member:
        member = self.members.pop(member_id)
        if member_id == self.leader_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def candidate_protocols(self) -> frozenset[str]:
        """Protocols every member supports."""
        sets = [m.protocol_names for m in self.members.values()]
        return frozenset.intersection(*sets) if sets else frozenset()

    def supports_protocols(self, names: frozenset[str]) -> bool:
        return not self.members or bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        """Each member votes for its favourite common protocol; most votes wins, ties going to
        the leader's preference order (Kafka leaves ties to hash order)."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best = max(votes.values())
        leader = self.members[self.leader_id] if self.leader_id else None
        order = [n for n, _ in leader.protocols] if leader else sorted(votes)
        return next(name for name in order if votes.get(name) == best)

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if m.join_waiter is None]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def leader_member_metadata(self) -> tuple[tuple[str, bytes], ...]:
        assert self.protocol is not None
        return tuple((mid, m.metadata_for(self.protocol)) for mid, m in self.members.items())

    def summary(self) -> GroupSummary:
        if self.state is GroupState.STABLE:
            assert self.protocol is not None
            members = tuple(
                MemberSummary(
                    m.member_id,
                    m.client_id,
                    m.client_host,
                    m.metadata_for(self.protocol),
                    m.assignment,
                )
                for m in self.members.values()
            )
            return GroupSummary(self.state.value, self.protocol_type or "", self.protocol, members)
        members = tuple(
            MemberSummary(m.member_id, m.client_id, m.client_host, b"", b"")
            for m in self.members.values()
        )
        return GroupSummary(self.state.value, self.protocol_type or "", "", members)


def random_member_id(client_id: str) -> str:
    """Kafka's member id: the client id, a dash and a random UUID."""
    return f"{client_id}-{uuid.uuid4()}"


UNKNOWN_MEMBER_ID = ""


class GroupMachine:
    """Every group this coordinator owns, and the rules for JoinGroup, SyncGroup, Heartbeat,
    LeaveGroup and the commit checks. Pure: time comes in as ``now_ms``; waiters are opaque.

    ``min_session_timeout_ms``/``max_session_timeout_ms`` are group.min/max.session.timeout.ms.
    ``new_member_id(client_id)`` makes member ids (injectable for tests).
    """

    def __init__(
        self,
        *,
        min_session_timeout_ms: int = 6000,
        max_session_timeout_ms: int = 300000,
        new_member_id: Callable[[str], str] = random_member_id,
    ) -> None:
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self._new_member_id = new_member_id
        self.groups: dict[str, Group] = {}

    # ---- lookups -------------------------------------------------------------------------

    def get(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    def ensure_group(self, group_id: str) -> Group:
        """The group, created Empty if unknown (offsets loaded from the log need one)."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        return group

    def describe(self, group_id: str) -> GroupSummary:
        group = self.groups.get(group_id)
        return group.summary() if group is not None else DEAD_GROUP

    def overview(self) -> list[tuple[str, str]]:
        """(group id, protocol type) of every live group, ListGroups' answer."""
        return [(g.group_id, g.protocol_type or "") for g in self.groups.values()]

    def remove_group(self, group_id: str) -> bool:
        """Drop an Empty group (its offsets are gone): it becomes Dead. False if not Empty."""
        group = self.groups.get(group_id)
        if group is None or group.state is not GroupState.EMPTY:
            return False
        group.transition_to(GroupState.DEAD)
        del self.groups[group_id]
        return True

    # ---- JoinGroup -----------------------------------------------------------------------

    def join(
        self,
        group_id: str,
        member_id: str,
        *,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        now_ms: int,
        waiter: Hashable,
    ) -> list[Delivery]:
        """Handle JoinGroup; ``waiter`` is answered now or when the rebalance completes."""
        protocols = tuple((name, bytes(meta)) for name, meta in protocols)
        if not group_id:
            return [(waiter, JoinResult(ErrorCode.INVALID_GROUP_ID, member_id))]
        if not (self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms):
            return [(waiter, JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id))]
        if not protocols:
            # Kafka would crash computing candidate protocols; a member must support one.
            return [(waiter, JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))]
        group = self.groups.get(group_id)
        if group is None:
            if member_id != UNKNOWN_MEMBER_ID:
                return [(waiter, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))]
            group = self.ensure_group(group_id)

        names = frozenset(name for name, _ in protocols)
        if group.state is not GroupState.EMPTY and (
            group.protocol_type != protocol_type or not group.supports_protocols(names)
        ):
            return [(waiter, JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))]
        if member_id != UNKNOWN_MEMBER_ID and member_id not in group.members:
            return [(waiter, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))]

        out: list[Delivery] = []
        state = group.state
        if member_id == UNKNOWN_MEMBER_ID:
            member = Member(
                member_id=self._new_member_id(client_id),
                client_id=client_id,
                client_host=client_host,
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                protocol_type=protocol_type,
                protocols=protocols,
                join_waiter=waiter,
            )
            group.add(member)
            self._maybe_prepare_rebalance(group, now_ms, out)
        else:
            member = group.members[member_id]
            current = state in (GroupState.STABLE, GroupState.AWAITING_SYNC)
            is_follower_no_change = (
                current
                and member.matches(protocols)
                and (state is GroupState.AWAITING_SYNC or member_id != group.leader_id)
            )
            if is_follower_no_change:
                # A lost JoinGroup response, or a follower rejoining without change: answer
                # with the current generation so it can go on to SyncGroup.
                members = group.leader_member_metadata() if member_id == group.leader_id else ()
                out.append(
                    (
                        waiter,
                        JoinResult(
                            ErrorCode.NONE,
                            member_id,
                            group.generation_id,
                            group.protocol or "",
                            group.leader_id or "",
                            members,
                        ),
                    )
                )
            else:
                self._supersede(member, out)
                member.protocols = protocols
                member.join_waiter = waiter
                self._maybe_prepare_rebalance(group, now_ms, out)
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group, now_ms, out)
        return out

    # ---- SyncGroup -----------------------------------------------------------------------

    def sync(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        assignments: Mapping[str, bytes],
        *,
        now_ms: int,
        waiter: Hashable,
    ) -> list[Delivery]:
        """Handle SyncGroup; followers wait for the leader's assignment."""
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return [(waiter, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))]
        if generation_id != group.generation_id:
            return [(waiter, SyncResult(ErrorCode.ILLEGAL_GENERATION))]
        member = group.members[member_id]
        if group.state is GroupState.PREPARING_REBALANCE:
            return [(waiter, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))]
        if group.state is GroupState.STABLE:
            member.last_heartbeat_ms = now_ms
            return [(waiter, SyncResult(ErrorCode.NONE, member.assignment))]
        # AwaitingSync (Empty and Dead groups have no members, handled above)
        out: list[Delivery] = []
        if member.sync_waiter is not None:
            out.append((member.sync_waiter, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)))
        member.sync_waiter = waiter
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = bytes(assignments.get(m.member_id, b""))
            group.transition_to(GroupState.STABLE)
            self._propagate_assignment(group, ErrorCode.NONE, now_ms, out)
        return out

    # ---- Heartbeat / LeaveGroup ------------------------------------------------------------

    def heartbeat(
        self, group_id: str, member_id: str, generation_id: int, *, now_ms: int
    ) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None or group.state in (GroupState.EMPTY, GroupState.DEAD):
            return ErrorCode.UNKNOWN_MEMBER_ID
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state is GroupState.AWAITING_SYNC:
            return ErrorCode.REBALANCE_IN_PROGRESS
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        member.last_heartbeat_ms = now_ms
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(
        self, group_id: str, member_id: str, *, now_ms: int
    ) -> tuple[ErrorCode, list[Delivery]]:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID, []
        out: list[Delivery] = []
        self._on_member_failure(group, group.members[member_id], now_ms, out)
        return ErrorCode.NONE, out

    # ---- OffsetCommit -----------------------------------------------------------------------

    def check_commit(
        self, group_id: str, member_id: str, generation_id: int, *, now_ms: int
    ) -> ErrorCode:
        """May this member commit offsets now? A generation < 0 means a group that only
        stores offsets (no membership); such a group is created Empty if unknown."""
        group = self.groups.get(group_id)
        if group is None:
            if generation_id < 0:
                self.ensure_group(group_id)
                return ErrorCode.NONE
            return ErrorCode.ILLEGAL_GENERATION
        if generation_id < 0 and group.state is GroupState.EMPTY:
            return ErrorCode.NONE
        if group.state is GroupState.AWAITING_SYNC:
            return ErrorCode.REBALANCE_IN_PROGRESS
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        member.last_heartbeat_ms = now_ms
        return ErrorCode.NONE

    # ---- timers -----------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        """The earliest time at which :meth:`expire` has something to do, or None."""
        deadlines = []
        for group in self.groups.values():
            if group.rebalance_deadline_ms is not None:
                deadlines.append(group.rebalance_deadline_ms)
            deadlines.extend(
                m.session_deadline_ms for m in group.members.values() if not m.kept_alive
            )
        return min(deadlines, default=None)

    def expire(self, now_ms: int) -> list[Delivery]:
        """Remove members whose session timed out, finish rebalances whose timeout passed."""
        out: list[Delivery] = []
        for group in list(self.groups.values()):
            for member in list(group.members.values()):
                if (
                    member.member_id in group.members
                    and not member.kept_alive
                    and now_ms >= member.session_deadline_ms
                ):
                    self._on_member_failure(group, member, now_ms, out)
            if (
                group.state is GroupState.PREPARING_REBALANCE
                and group.rebalance_deadline_ms is not None
                and now_ms >= group.rebalance_deadline_ms
            ):
                self._complete_join(group, now_ms, out)
        return out

    def abandon_all(self, error: ErrorCode) -> list[Delivery]:
        """Answer every parked JoinGroup/SyncGroup with ``error`` (coordinator shutting down:
        Kafka answers NOT_COORDINATOR_FOR_GROUP so clients look for the coordinator again)."""
        out: list[Delivery] = []
        for group in self.groups.values():
            for m in group.members.values():
                if m.join_waiter is not None:
                    out.append((m.join_waiter, JoinResult(error, m.member_id)))
                if m.sync_waiter is not None:
                    out.append((m.sync_waiter, SyncResult(error)))
                m.join_waiter = m.sync_waiter = None
        return out

    # ---- internals ------------------------------------------------------------------------

    @staticmethod
    def _supersede(member: Member, out: list[Delivery]) -> None:
        if member.join_waiter is not None:
            out.append(
                (member.join_waiter, JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
            )
            member.join_waiter = None

    def _maybe_prepare_rebalance(self, group: Group, now_ms: int, out: list[Delivery]) -> None:
        if group.state not in (GroupState.STABLE, GroupState.AWAITING_SYNC, GroupState.EMPTY):
            return
        if group.state is GroupState.AWAITING_SYNC:
            # Followers waiting for an assignment that will never come must rejoin.
            for m in group.members.values():
                m.assignment = b""
            self._propagate_assignment(group, ErrorCode.REBALANCE_IN_PROGRESS, now_ms, out)
        group.transition_to(GroupState.PREPARING_REBALANCE)
        group.rebalance_deadline_ms = now_ms + group.rebalance_timeout_ms()
        self._try_complete_join(group, now_ms, out)

    def _propagate_assignment(
        self, group: Group, error: ErrorCode, now_ms: int, out: list[Delivery]
    ) -> None:
        for m in group.members.values():
            if m.sync_waiter is not None:
                out.append((m.sync_waiter, SyncResult(error, m.assignment)))
                m.sync_waiter = None
                m.last_heartbeat_ms = now_ms

    def _on_member_failure(
        self, group: Group, member: Member, now_ms: int, out: list[Delivery]
    ) -> None:
        group.remove(member.member_id)
        if member.join_waiter is not None:
            out.append(
                (member.join_waiter, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id))
            )
        if member.sync_waiter is not None:
            out.append((member.sync_waiter, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)))
        member.join_waiter = member.sync_waiter = None
        if group.state in (GroupState.STABLE, GroupState.AWAITING_SYNC):
            self._maybe_prepare_rebalance(group, now_ms, out)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group, now_ms, out)

    def _try_complete_join(self, group: Group, now_ms: int, out: list[Delivery]) -> None:
        if not group.not_yet_rejoined():
            self._complete_join(group, now_ms, out)

    def _complete_join(self, group: Group, now_ms: int, out: list[Delivery]) -> None:
        for failed in group.not_yet_rejoined():
            group.remove(failed.member_id)
        group.rebalance_deadline_ms = None
        group.generation_id += 1
        if not group.members:
            group.protocol = None
            group.transition_to(GroupState.EMPTY)
            return
        group.protocol = group.select_protocol()
        group.transition_to(GroupState.AWAITING_SYNC)
        leader_view = group.leader_member_metadata()
        for m in group.members.values():
            out.append(
                (
                    m.join_waiter,
                    JoinResult(
                        ErrorCode.NONE,
                        m.member_id,
                        group.generation_id,
                        group.protocol,
                        group.leader_id or "",
                        leader_view if m.member_id == group.leader_id else (),
                    ),
                )
            )
            m.join_waiter = None
            m.last_heartbeat_ms = now_ms
