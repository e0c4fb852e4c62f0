"""The consumer-group membership state machine (Kafka 3.9's classic GroupCoordinator), as pure
code.

No I/O, no clock, no trio: every call gets ``now_ms``; requests that must wait (JoinGroup,
SyncGroup) park an opaque *waiter* chosen by the caller, and every call returns the ``Delivery``
list of (waiter, result) pairs that became ready, the caller's own included. Group-metadata
records to persist are queued as :class:`GroupWrite` (drain with :meth:`GroupMachine.take_writes`,
write them in order, report each with :meth:`GroupMachine.store_completed`); the broker's trio
layer (coordinator.py) does that, turns waiters into events and runs ``expire`` at
``next_deadline()``.

States and transitions (GroupMetadata.scala's validPreviousStates)::

    Empty --join--> PreparingRebalance --all joined / rebalance timeout--> CompletingRebalance
    CompletingRebalance --leader SyncGroup, record stored--> Stable
    CompletingRebalance | Stable --join, leave, session expiry--> PreparingRebalance
    PreparingRebalance --nobody left at completion--> Empty
    any --group removed (deleted, or Empty with no offsets left)--> Dead

As Kafka 3.9: KIP-394 (a JoinGroup v4+ without a member id gets MEMBER_ID_REQUIRED and a pending
member id), KIP-345 static members (group.instance.id: kept across a rebalance they miss,
replaced without a rebalance when they rejoin a Stable group), group.initial.rebalance.delay.ms
for the first rebalance of an Empty group, group.max.size, pending-sync expiry (members that do
not send SyncGroup within the rebalance timeout are removed), and a leader's assignment made
visible only once the generation's group record is stored.

Departures, all so that no request hangs: a parked JoinGroup/SyncGroup whose member is removed
(LeaveGroup, expiry) is answered UNKNOWN_MEMBER_ID instead of never; a parked request superseded
by a second one from the same member is answered REBALANCE_IN_PROGRESS; a JoinGroup naming a
pending member id together with a group.instance.id (Kafka: IllegalStateException) is answered
UNKNOWN_MEMBER_ID.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from broker.groups.offsets import GroupRecord, MemberRecord
from protocol.errors import ErrorCode

# A new member's JoinGroup is answered within this long even if the rebalance never completes
# (GroupCoordinator.NewMemberJoinTimeoutMs): the client retries if it is still there.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
CONSUMER_PROTOCOL_TYPE = "consumer"
CLASSIC_GROUP_TYPE = "classic"
UNKNOWN_MEMBER_ID = ""


class GroupState(Enum):
    """A group's state; the value is the name DescribeGroups and ListGroups report."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalGroupTransitionError(RuntimeError):
    """Raised when code asks a group for a transition Kafka's state machine forbids: a bug in
    this package, never a client's fault."""


@dataclass(frozen=True)
class JoinMember:
    """One member as the leader's JoinGroup response lists it."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinResult:
    """The JoinGroup answer. ``members`` is filled for the leader only. Errors carry generation
    -1 and no protocol, as Kafka's JoinGroupResult(memberId, error)."""

    error: ErrorCode
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader_id: str = ""
    members: tuple[JoinMember, ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True)
class SyncResult:
    """The SyncGroup answer: this member's assignment (empty on error)."""

    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol: str | None = None


Delivery = tuple[Hashable, "JoinResult | SyncResult"]


@dataclass(frozen=True)
class MemberSummary:
    """One member as DescribeGroups shows it; metadata/assignment only when the group is Stable."""

    member_id: str
    group_instance_id: str | None
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


@dataclass(frozen=True)
class GroupOverview:
    """One group as ListGroups shows it."""

    group_id: str
    protocol_type: str
    state: str
    group_type: str = CLASSIC_GROUP_TYPE


@dataclass(frozen=True)
class LeaveMember:
    """One LeaveGroup entry and its answer."""

    member_id: str
    group_instance_id: str | None
    error: ErrorCode = ErrorCode.NONE


class WriteKind(Enum):
    """Why a group record is written (decides what :meth:`GroupMachine.store_completed` does)."""

    SYNC = "generation assignment"
    EMPTY = "group emptied"
    STATIC_REJOIN = "static member replaced"
    TOMBSTONE = "group removed"


@dataclass(frozen=True)
class GroupWrite:
    """A group-metadata record for ``__consumer_offsets``: ``record`` None is a tombstone.
    ``seq`` identifies it to :meth:`GroupMachine.store_completed`."""

    seq: int
    group_id: str
    generation_id: int
    kind: WriteKind
    record: GroupRecord | None


@dataclass(frozen=True)
class ExpiryPolicy:
    """How a group's committed offsets expire (GroupMetadata.removeExpiredOffsets): measured
    from ``base_ms`` (the time the group became Empty) when set, else from each commit's
    timestamp; offsets of ``keep_topics`` (topics a Stable consumer group subscribes to) never
    expire."""

    base_ms: int | None
    keep_topics: frozenset[str] = frozenset()


@dataclass
class Member:
    """A member's registration; mutated only by :class:`GroupMachine`.

    ``expires_at_ms`` is the scheduled heartbeat expiration (Kafka's DelayedHeartbeat), None
    when none is scheduled. A member awaiting a JoinGroup or SyncGroup answer satisfies it,
    unless it is new (it then has NEW_MEMBER_JOIN_TIMEOUT_MS to complete its first join)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    join_waiter: Hashable | None = None
    sync_waiter: Hashable | None = None
    is_new: bool = False
    expires_at_ms: int | None = None

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
    def awaiting(self) -> bool:
        return self.join_waiter is not None or self.sync_waiter is not None


@dataclass(frozen=True)
class _InitialDelay:
    """The group's rebalance is in group.initial.rebalance.delay.ms (InitialDelayedJoin)."""

    delay_ms: int
    remaining_ms: int


@dataclass
class Group:
    """One group's membership and state (Kafka's GroupMetadata)."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int | None = None
    generation_id: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    pending_members: dict[str, int] = field(default_factory=dict)  # member id -> expiry
    pending_sync: set[str] = field(default_factory=set)
    join_deadline_ms: int | None = None
    initial_delay: _InitialDelay | None = None
    new_member_added: bool = False
    sync_deadline_ms: int | None = None
    subscribed_topics: frozenset[str] | None = None

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise IllegalGroupTransitionError(
                f"group {self.group_id!r} cannot move from {self.state.value} to "
                f"{target.value}; allowed from "
                f"{sorted(s.value for s in _VALID_PREVIOUS[target])}"
            )
        self.state = target
        self.state_timestamp_ms = now_ms

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def add(self, member: Member) -> None:
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync.discard(member_id)
        return member

    def replace_static_member(
        self, instance_id: str, old_id: str, new_id: str, out: list[Delivery]
    ) -> Member:
        """Give the static member ``old_id`` the id ``new_id``; its parked requests are fenced."""
        member = self.members.pop(old_id)
        if member.join_waiter is not None:
            out.append((member.join_waiter, JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_id)))
            member.join_waiter = None
        if member.sync_waiter is not None:
            out.append((member.sync_waiter, SyncResult(ErrorCode.FENCED_INSTANCE_ID)))
            member.sync_waiter = None
        member.member_id = new_id
        self.members[new_id] = member
        if self.is_leader(old_id):
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        self.static_members[instance_id] = new_id
        return member

    def candidate_protocols(self) -> frozenset[str]:
        """Protocols every member supports."""
        sets = [m.protocol_names for m in self.members.values()]
        return frozenset.intersection(*sets) if sets else frozenset()

    def supports_protocols(self, protocol_type: str, names: frozenset[str]) -> bool:
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        return self.protocol_type == protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        """Each member votes for its favourite common protocol; most votes wins, ties going to
        the leader's preference order (Kafka leaves ties to hash order)."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best = max(votes.values())
        leader = self.members.get(self.leader_id) if self.leader_id else None
        order = [n for n, _ in leader.protocols] if leader else sorted(votes)
        return next(name for name in order if votes.get(name) == best)

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(
            m.join_waiter is not None for m in self.members.values()
        )

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.join_waiter is not None)

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def current_member_metadata(self) -> tuple[JoinMember, ...]:
        assert self.protocol is not None
        return tuple(
            JoinMember(mid, m.group_instance_id, m.metadata_for(self.protocol))
            for mid, m in self.members.items()
        )

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """The topics a consumer group's members subscribe to, None when not known (not the
        consumer protocol, no protocol chosen, or a subscription that does not parse)."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or not self.members or not self.protocol:
            return None
        topics: set[str] = set()
        try:
            for m in self.members.values():
                topics.update(parse_subscription_topics(m.metadata_for(self.protocol)))
        except ValueError:
            return None
        return frozenset(topics)

    def is_subscribed_to(self, topic: str) -> bool:
        return self.subscribed_topics is None or topic in self.subscribed_topics

    def record(self, assignments: Mapping[str, bytes]) -> GroupRecord:
        """The group-metadata record value for this group with these assignments."""
        return GroupRecord(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=self.protocol,
            leader=self.leader_id,
            current_state_timestamp=(
                -1 if self.state_timestamp_ms is None else self.state_timestamp_ms
            ),
            members=tuple(
                MemberRecord(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout=m.rebalance_timeout_ms,
                    session_timeout=m.session_timeout_ms,
                    subscription=m.metadata_for(self.protocol or ""),
                    assignment=bytes(assignments.get(m.member_id, b"")),
                )
                for m in self.members.values()
            ),
        )

    def summary(self) -> GroupSummary:
        if self.state is GroupState.STABLE:
            assert self.protocol is not None
            members = tuple(
                MemberSummary(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata_for(self.protocol),
                    m.assignment,
                )
                for m in self.members.values()
            )
            return GroupSummary(self.state.value, self.protocol_type or "", self.protocol, members)
        members = tuple(
            MemberSummary(m.member_id, m.group_instance_id, m.client_id, m.client_host, b"", b"")
            for m in self.members.values()
        )
        return GroupSummary(self.state.value, self.protocol_type or "", "", members)


def parse_subscription_topics(buf: bytes) -> list[str]:
    """The topics of a ConsumerProtocol subscription (int16 version, [STRING topic], ...: the
    version-0 prefix every version shares). Raises ValueError when ``buf`` is not one."""
    try:
        (version, count) = struct.unpack_from(">hi", buf, 0)
        if version < 0 or count < 0:
            raise ValueError(f"version {version}, {count} topics")
        pos, topics = 6, []
        for _ in range(count):
            (n,) = struct.unpack_from(">h", buf, pos)
            if n < 0 or pos + 2 + n > len(buf):
                raise ValueError(f"topic name of {n} bytes at byte {pos} overruns the buffer")
            topics.append(bytes(buf[pos + 2 : pos + 2 + n]).decode())
            pos += 2 + n
        return topics
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"not a consumer subscription: {exc}") from None


def random_member_id(prefix: str) -> str:
    """Kafka's member id: the group instance id (static) or client id, a dash, a random UUID."""
    return f"{prefix}-{uuid.uuid4()}"


_StoreCallback = Callable[[ErrorCode, int, list["Delivery"]], None]


class GroupMachine:
    """Every group this coordinator owns, and the rules for JoinGroup, SyncGroup, Heartbeat,
    LeaveGroup, DeleteGroups and the commit checks. Pure: time comes in as ``now_ms``; waiters
    are opaque; group records to store come out of :meth:`take_writes`.

    ``min_session_timeout_ms``/``max_session_timeout_ms``, ``initial_rebalance_delay_ms`` and
    ``max_size`` are group.min/max.session.timeout.ms, group.initial.rebalance.delay.ms and
    group.max.size. ``new_member_id(prefix)`` makes member ids (injectable for tests).
    """

    def __init__(
        self,
        *,
        min_session_timeout_ms: int = 6000,
        max_session_timeout_ms: int = 300000,
        initial_rebalance_delay_ms: int = 0,
        max_size: int = 2**31 - 1,
        new_member_id: Callable[[str], str] = random_member_id,
    ) -> None:
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.max_size = max_size
        self._new_member_id = new_member_id
        self.groups: dict[str, Group] = {}
        self._writes: list[GroupWrite] = []
        self._store_callbacks: dict[int, _StoreCallback] = {}
        self._seq = 0

    # ---- lookups -------------------------------------------------------------------------

    def get(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    def ensure_group(self, group_id: str) -> Group:
        """The group, created Empty if unknown (a group that only stores offsets)."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        return group

    def describe(self, group_id: str) -> GroupSummary:
        group = self.groups.get(group_id)
        return group.summary() if group is not None else DEAD_GROUP

    def overview(
        self, states: Iterable[str] = (), types: Iterable[str] = ()
    ) -> list[GroupOverview]:
        """ListGroups' answer: every group, filtered by state names and group types (case
        insensitive; an empty filter keeps all). Every group here is a classic group."""
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        if wanted_types and CLASSIC_GROUP_TYPE not in wanted_types:
            return []
        return [
            GroupOverview(g.group_id, g.protocol_type or "", g.state.value)
            for g in self.groups.values()
            if not wanted_states or g.state.value.lower() in wanted_states
        ]

    def expiry_policy(self, group_id: str) -> ExpiryPolicy | None:
        """How the group's offsets expire now, None when they must not (a group with members
        that is rebalancing, or not a consumer group, or whose subscriptions are unknown)."""
        group = self.groups.get(group_id)
        if group is None or group.protocol_type is None:
            return ExpiryPolicy(None)
        if group.state is GroupState.EMPTY:
            return ExpiryPolicy(group.state_timestamp_ms)
        if (
            group.protocol_type == CONSUMER_PROTOCOL_TYPE
            and group.subscribed_topics is not None
            and group.state is GroupState.STABLE
        ):
            return ExpiryPolicy(None, group.subscribed_topics)
        return None

    # ---- persistence -----------------------------------------------------------------------

    def take_writes(self) -> list[GroupWrite]:
        """The group records queued since the last call, oldest first. Write them in this
        order and report each with :meth:`store_completed`."""
        writes, self._writes = self._writes, []
        return writes

    def store_completed(self, seq: int, error: ErrorCode, now_ms: int) -> list[Delivery]:
        """A queued write was stored (``error`` NONE) or failed; returns what became ready."""
        out: list[Delivery] = []
        callback = self._store_callbacks.pop(seq, None)
        if callback is not None:
            callback(error, now_ms, out)
        return out

    def _store(
        self,
        group: Group,
        kind: WriteKind,
        assignments: Mapping[str, bytes] | None,
        callback: _StoreCallback | None = None,
    ) -> None:
        self._seq += 1
        record = None if assignments is None else group.record(assignments)
        self._writes.append(
            GroupWrite(self._seq, group.group_id, group.generation_id, kind, record)
        )
        if callback is not None:
            self._store_callbacks[self._seq] = callback

    def load_group(self, group_id: str, record: GroupRecord, now_ms: int) -> Group:
        """Restore a group from its last group-metadata record (replay at start-up): Stable
        with its members and assignments, or Empty. Every member's session starts now."""
        group = Group(
            group_id,
            state=GroupState.STABLE if record.members else GroupState.EMPTY,
            state_timestamp_ms=(
                None if record.current_state_timestamp == -1 else record.current_state_timestamp
            ),
            generation_id=record.generation,
            protocol_type=record.protocol_type or None,
            protocol=record.protocol,
            leader_id=record.leader,
        )
        for m in record.members:
            member = Member(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                session_timeout_ms=m.session_timeout,
                rebalance_timeout_ms=m.rebalance_timeout,
                protocol_type=record.protocol_type,
                protocols=((record.protocol or "", bytes(m.subscription)),),
                assignment=bytes(m.assignment),
                expires_at_ms=now_ms + m.session_timeout,
            )
            group.add(member)
        group.leader_id = record.leader if record.leader in group.members else group.leader_id
        group.subscribed_topics = group.compute_subscribed_topics()
        self.groups[group_id] = group
        if len(group.members) > self.max_size:
            self._prepare_rebalance(group, now_ms, [])
        return group

    # ---- JoinGroup -----------------------------------------------------------------------

    def join(
        self,
        group_id: str,
        member_id: str,
        *,
        group_instance_id: str | None = None,
        require_known_member_id: bool = False,
        support_skipping_assignment: bool = False,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        now_ms: int,
        waiter: Hashable,
    ) -> list[Delivery]:
        """Handle JoinGroup; ``waiter`` is answered now or when the rebalance completes.
        ``require_known_member_id`` is KIP-394 (JoinGroup v4+ of a dynamic member);
        ``support_skipping_assignment`` is JoinGroup v9's SkipAssignment."""
        protocols = tuple((name, bytes(meta)) for name, meta in protocols)
        if not group_id:
            return [(waiter, JoinResult(ErrorCode.INVALID_GROUP_ID, member_id))]
        if not (self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms):
            return [(waiter, JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id))]
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(group_id)
        created = group is None
        if group is None:
            if not is_unknown:
                return [(waiter, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))]
            group = self.ensure_group(group_id)
        out: list[Delivery] = []
        names = frozenset(name for name, _ in protocols)

        def add_member(new_member_id: str, instance_id: str | None) -> None:
            self._add_member_and_rebalance(
                group,
                new_member_id,
                instance_id,
                client_id,
                client_host,
                session_timeout_ms,
                rebalance_timeout_ms,
                protocol_type,
                protocols,
                waiter,
                now_ms,
                out,
            )

        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            out.append((waiter, JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, UNKNOWN_MEMBER_ID)))
        elif not group.supports_protocols(protocol_type, names):
            out.append(
                (
                    waiter,
                    JoinResult(
                        ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                        UNKNOWN_MEMBER_ID if is_unknown else member_id,
                    ),
                )
            )
        elif is_unknown:
            new_id = self._new_member_id(group_instance_id or client_id)
            if group_instance_id is not None:
                old_id = group.static_members.get(group_instance_id)
                if old_id is not None:
                    self._update_static_member_and_rebalance(
                        group,
                        old_id,
                        new_id,
                        group_instance_id,
                        protocols,
                        rebalance_timeout_ms,
                        session_timeout_ms,
                        waiter,
                        support_skipping_assignment,
                        now_ms,
                        out,
                    )
                else:
                    add_member(new_id, group_instance_id)
            elif require_known_member_id:
                group.pending_members[new_id] = now_ms + session_timeout_ms
                out.append((waiter, JoinResult(ErrorCode.MEMBER_ID_REQUIRED, new_id)))
            else:
                add_member(new_id, None)
        elif member_id in group.pending_members:
            if group_instance_id is not None:
                out.append((waiter, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)))
            else:
                add_member(member_id, None)
        else:
            error = self._validate_member(group, member_id, group_instance_id)
            if error is not None:
                out.append((waiter, JoinResult(error, member_id)))
            else:
                self._current_member_join(
                    group,
                    group.members[member_id],
                    protocols,
                    rebalance_timeout_ms,
                    session_timeout_ms,
                    waiter,
                    now_ms,
                    out,
                )
        if created and not group.members and not group.pending_members:
            del self.groups[group_id]  # a refused first JoinGroup leaves no empty group behind
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group, now_ms, out)
        return out

    def _accept_joining_member(self, group: Group, member_id: str) -> bool:
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.state is GroupState.PREPARING_REBALANCE:
            member = group.members.get(member_id)
            return (
                member is not None and member.join_waiter is not None
            ) or group.num_awaiting_join() < self.max_size
        return member_id in group.members or len(group.members) < self.max_size

    @staticmethod
    def _validate_member(
        group: Group, member_id: str, group_instance_id: str | None
    ) -> ErrorCode | None:
        """Kafka's validateCurrentMember: the instance id (if any) must map to ``member_id``,
        and the member must be in the group."""
        if group_instance_id is not None:
            current = group.static_members.get(group_instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    def _current_result(self, group: Group, member_id: str, leader_view: bool) -> JoinResult:
        return JoinResult(
            ErrorCode.NONE,
            member_id,
            group.generation_id,
            group.protocol_type,
            group.protocol,
            group.leader_id or "",
            group.current_member_metadata() if leader_view else (),
        )

    def _current_member_join(
        self,
        group: Group,
        member: Member,
        protocols: tuple[tuple[str, bytes], ...],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        waiter: Hashable,
        now_ms: int,
        out: list[Delivery],
    ) -> None:
        state = group.state
        update = True
        if state is GroupState.COMPLETING_REBALANCE and member.matches(protocols):
            # A lost JoinGroup response: answer with the current generation.
            update = False
            leader = group.is_leader(member.member_id)
            out.append((waiter, self._current_result(group, member.member_id, leader)))
        elif (
            state is GroupState.STABLE
            and not group.is_leader(member.member_id)
            and member.matches(protocols)
        ):
            # A follower rejoining without change goes on to SyncGroup.
            update = False
            out.append((waiter, self._current_result(group, member.member_id, False)))
        elif state in (GroupState.EMPTY, GroupState.DEAD):
            update = False
            out.append((waiter, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id)))
        if update:
            self._update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms)
            self._park_join(member, waiter, out)
            self._maybe_prepare_rebalance(group, now_ms, out)

    @staticmethod
    def _update_member(
        member: Member,
        protocols: tuple[tuple[str, bytes], ...],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
    ) -> None:
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms

    @staticmethod
    def _park_join(member: Member, waiter: Hashable, out: list[Delivery]) -> None:
        if member.join_waiter is not None:
            out.append(
                (member.join_waiter, JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
            )
        member.join_waiter = waiter

    def _add_member_and_rebalance(
        self,
        group: Group,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: tuple[tuple[str, bytes], ...],
        waiter: Hashable,
        now_ms: int,
        out: list[Delivery],
    ) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            protocol_type=protocol_type,
            protocols=protocols,
            join_waiter=waiter,
            is_new=True,
            expires_at_ms=now_ms + NEW_MEMBER_JOIN_TIMEOUT_MS,
        )
        if group.state is GroupState.PREPARING_REBALANCE and group.generation_id == 0:
            group.new_member_added = True
        group.add(member)
        self._maybe_prepare_rebalance(group, now_ms, out)

    def _update_static_member_and_rebalance(
        self,
        group: Group,
        old_id: str,
        new_id: str,
        instance_id: str,
        protocols: tuple[tuple[str, bytes], ...],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        waiter: Hashable,
        support_skipping_assignment: bool,
        now_ms: int,
        out: list[Delivery],
    ) -> None:
        """A known static member joins with an unknown member id: it takes over its old
        registration under a new id (the old id is fenced). In a Stable group whose protocol
        would not change there is no rebalance: the group record is stored with the new id and
        the member gets the current generation."""
        current_leader = group.leader_id or ""
        member = group.replace_static_member(instance_id, old_id, new_id, out)
        member.expires_at_ms = now_ms + member.session_timeout_ms
        old = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        self._update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms)
        member.join_waiter = waiter
        if group.state is GroupState.STABLE:
            if group.protocol != group.select_protocol():
                self._maybe_prepare_rebalance(group, now_ms, out)
                return
            assignments = {mid: m.assignment for mid, m in group.members.items()}
            generation = group.generation_id

            def stored(error: ErrorCode, at_ms: int, out: list[Delivery]) -> None:
                if error is not ErrorCode.NONE:
                    # Revert: the old id keeps the registration, the new one is refused.
                    if member.member_id != new_id or group.members.get(new_id) is not member:
                        return
                    member.join_waiter = None
                    self._update_member(member, *old)
                    group.replace_static_member(instance_id, new_id, old_id, out)
                    member.expires_at_ms = at_ms + member.session_timeout_ms
                    out.append(
                        (
                            waiter,
                            JoinResult(
                                error,
                                UNKNOWN_MEMBER_ID,
                                generation,
                                group.protocol_type,
                                group.protocol,
                                current_leader,
                            ),
                        )
                    )
                    return
                if member.join_waiter is not waiter:
                    return  # answered meanwhile (fenced, or a rebalance completed)
                member.join_waiter = None
                if support_skipping_assignment:
                    leader = group.is_leader(new_id)
                    result = JoinResult(
                        ErrorCode.NONE,
                        new_id,
                        group.generation_id,
                        group.protocol_type,
                        group.protocol,
                        group.leader_id or "",
                        group.current_member_metadata() if leader else (),
                        skip_assignment=leader,
                    )
                else:
                    # The old leader id, so that a leader does not run a trivial assignment a
                    # Stable group would not broadcast.
                    result = JoinResult(
                        ErrorCode.NONE,
                        new_id,
                        group.generation_id,
                        group.protocol_type,
                        group.protocol,
                        current_leader,
                    )
                out.append((waiter, result))

            self._store(group, WriteKind.STATIC_REJOIN, assignments, stored)
        elif group.state is GroupState.COMPLETING_REBALANCE:
            self._prepare_rebalance(group, now_ms, out)
        # PreparingRebalance: the member now awaits the join like the others.

    # ---- SyncGroup -----------------------------------------------------------------------

    def sync(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        assignments: Mapping[str, bytes],
        *,
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol: str | None = None,
        now_ms: int,
        waiter: Hashable,
    ) -> list[Delivery]:
        """Handle SyncGroup; followers wait for the leader's assignment, and everyone for the
        generation's group record to be stored."""
        if not group_id:
            return [(waiter, SyncResult(ErrorCode.INVALID_GROUP_ID))]
        group = self.groups.get(group_id)
        if group is None:
            return [(waiter, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))]
        if group.state is GroupState.DEAD:
            return [(waiter, SyncResult(ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE))]
        error = self._validate_member(group, member_id, group_instance_id)
        if error is None:
            if generation_id != group.generation_id:
                error = ErrorCode.ILLEGAL_GENERATION
            elif (protocol_type is not None and protocol_type != group.protocol_type) or (
                protocol is not None and protocol != group.protocol
            ):
                error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if error is not None:
            return [(waiter, SyncResult(error))]
        if group.state is GroupState.EMPTY:
            return [(waiter, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))]
        if group.state is GroupState.PREPARING_REBALANCE:
            return [(waiter, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))]
        member = group.members[member_id]
        out: list[Delivery] = []
        group.pending_sync.discard(member_id)
        if group.state is GroupState.STABLE:
            self._maybe_complete_pending_sync(group)
            member.expires_at_ms = now_ms + member.session_timeout_ms
            out.append(
                (
                    waiter,
                    SyncResult(
                        ErrorCode.NONE, member.assignment, group.protocol_type, group.protocol
                    ),
                )
            )
            return out
        # CompletingRebalance
        if member.sync_waiter is not None:
            out.append((member.sync_waiter, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)))
        member.sync_waiter = waiter
        self._maybe_complete_pending_sync(group)
        if group.is_leader(member_id):
            full = {mid: bytes(assignments.get(mid, b"")) for mid in group.members}
            generation = group.generation_id

            def stored(error: ErrorCode, at_ms: int, out: list[Delivery]) -> None:
                if not (
                    group.state is GroupState.COMPLETING_REBALANCE
                    and group.generation_id == generation
                ):
                    return  # another member joined meanwhile: this generation is over
                if error is not ErrorCode.NONE:
                    self._reset_and_propagate(group, error, at_ms, out)
                    self._maybe_prepare_rebalance(group, at_ms, out)
                    return
                for mid, m in group.members.items():
                    m.assignment = full.get(mid, b"")
                self._propagate(group, ErrorCode.NONE, at_ms, out)
                group.transition_to(GroupState.STABLE, at_ms)

            self._store(group, WriteKind.SYNC, full, stored)
        return out

    # ---- Heartbeat / LeaveGroup ------------------------------------------------------------

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        *,
        group_instance_id: str | None = None,
        now_ms: int,
    ) -> ErrorCode:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state is GroupState.DEAD:
            return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE
        error = self._validate_member(group, member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state is GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        member = group.members[member_id]
        member.expires_at_ms = now_ms + member.session_timeout_ms
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(
        self, group_id: str, members: Sequence[tuple[str, str | None]], *, now_ms: int
    ) -> tuple[ErrorCode, list[LeaveMember], list[Delivery]]:
        """Handle LeaveGroup for (member id, group instance id) entries: a top-level error,
        one answer per entry, and what became ready. A member id "" with an instance id
        removes that static member (administrative removal)."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, [], []
        group = self.groups.get(group_id)
        if group is None:
            return (
                ErrorCode.NONE,
                [LeaveMember(m, i, ErrorCode.UNKNOWN_MEMBER_ID) for m, i in members],
                [],
            )
        if group.state is GroupState.DEAD:
            return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE, [], []
        out: list[Delivery] = []
        answers = []
        for member_id, instance_id in members:
            if member_id == UNKNOWN_MEMBER_ID:
                current = group.static_members.get(instance_id) if instance_id else None
                if current is None:
                    error = ErrorCode.UNKNOWN_MEMBER_ID
                else:
                    self._remove_member(group, group.members[current], now_ms, out)
                    error = ErrorCode.NONE
            elif member_id in group.pending_members:
                self._remove_pending(group, member_id, now_ms, out)
                error = ErrorCode.NONE
            else:
                found = self._validate_member(group, member_id, instance_id)
                if found is None:
                    self._remove_member(group, group.members[member_id], now_ms, out)
                error = found or ErrorCode.NONE
            answers.append(LeaveMember(member_id, instance_id, error))
        return ErrorCode.NONE, answers, out

    # ---- OffsetCommit / DeleteGroups / OffsetDelete -----------------------------------------

    def check_commit(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        *,
        group_instance_id: str | None = None,
        now_ms: int,
    ) -> ErrorCode:
        """May this member commit offsets now (validateOffsetCommit + doCommitOffsets)? A
        generation < 0 means a group that only stores offsets (no membership); such a group is
        created Empty if unknown."""
        group = self.groups.get(group_id)
        if group is None:
            if generation_id < 0:
                self.ensure_group(group_id)
                return ErrorCode.NONE
            return ErrorCode.ILLEGAL_GENERATION
        if group.state is GroupState.DEAD:
            return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.state is GroupState.EMPTY:
            return ErrorCode.NONE
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = self._validate_member(group, member_id, group_instance_id)
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        elif group.state is not GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        member = group.members.get(member_id)
        if member is not None:
            member.expires_at_ms = now_ms + member.session_timeout_ms
        return ErrorCode.NONE

    def check_txn_commit(
        self, group_id: str, member_id: str, generation_id: int, group_instance_id: str | None
    ) -> ErrorCode:
        """May a transactional producer commit offsets for this group (TxnOffsetCommit,
        KIP-447)? A member id, instance id or generation, when sent, must be the group's
        current ones, so a zombie of an earlier generation is fenced; without them (v0-v2
        clients) anything is accepted. An unknown group is created Empty, as Kafka does."""
        group = self.groups.get(group_id)
        if group is None:
            self.ensure_group(group_id)
            return ErrorCode.NONE
        if group.state is GroupState.DEAD:
            return ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE
        if member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = self._validate_member(group, member_id, group_instance_id)
            if error is not None:
                return error
        if generation_id >= 0 and generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def check_delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups' verdict for one group, without deleting it."""
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.state is not GroupState.EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        return ErrorCode.NONE

    def check_offset_delete(
        self, group_id: str, topics: Iterable[str]
    ) -> tuple[ErrorCode, set[str]]:
        """OffsetDelete's verdict: a group error, or NONE and the topics whose offsets may not
        be deleted because a member of a rebalancing or Stable consumer group subscribes."""
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND, set()
        if group.state is GroupState.EMPTY:
            return ErrorCode.NONE, set()
        if group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            return ErrorCode.NONE, {t for t in topics if group.is_subscribed_to(t)}
        return ErrorCode.NON_EMPTY_GROUP, set()

    def remove_group(self, group_id: str) -> bool:
        """Drop an Empty group (deleted, or its offsets are gone): it becomes Dead, and a
        tombstone for its group record is queued if it ever had a generation. False if the
        group is not Empty."""
        group = self.groups.get(group_id)
        if group is None or group.state is not GroupState.EMPTY:
            return False
        group.transition_to(GroupState.DEAD, group.state_timestamp_ms or 0)
        del self.groups[group_id]
        if group.generation_id > 0:
            self._store(group, WriteKind.TOMBSTONE, None)
        return True

    # ---- timers -----------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        """The earliest time at which :meth:`expire` has something to do, or None."""
        deadlines = []
        for group in self.groups.values():
            for d in (group.join_deadline_ms, group.sync_deadline_ms):
                if d is not None:
                    deadlines.append(d)
            deadlines.extend(group.pending_members.values())
            deadlines.extend(
                m.expires_at_ms for m in group.members.values() if m.expires_at_ms is not None
            )
        return min(deadlines, default=None)

    def expire(self, now_ms: int) -> list[Delivery]:
        """Run every timer due at ``now_ms``: pending members and sessions that expired,
        rebalance and initial delays, members that never sent SyncGroup."""
        out: list[Delivery] = []
        for group in list(self.groups.values()):
            for pending, deadline in list(group.pending_members.items()):
                if now_ms >= deadline:
                    self._remove_pending(group, pending, now_ms, out)
            for member in list(group.members.values()):
                if (
                    group.members.get(member.member_id) is member
                    and member.expires_at_ms is not None
                    and now_ms >= member.expires_at_ms
                ):
                    if member.awaiting and not member.is_new:
                        member.expires_at_ms = None  # satisfied while it waits
                    else:
                        self._remove_member(group, member, now_ms, out)
            if (
                group.state is GroupState.PREPARING_REBALANCE
                and group.join_deadline_ms is not None
                and now_ms >= group.join_deadline_ms
            ):
                self._on_join_deadline(group, now_ms, out)
            if group.sync_deadline_ms is not None and now_ms >= group.sync_deadline_ms:
                self._on_sync_deadline(group, now_ms, out)
        return out

    def abandon_all(self, error: ErrorCode) -> list[Delivery]:
        """Answer every parked JoinGroup/SyncGroup with ``error`` (coordinator shutting down:
        Kafka answers NOT_COORDINATOR so clients look for the coordinator again)."""
        out: list[Delivery] = []
        for group in self.groups.values():
            for m in group.members.values():
                if m.join_waiter is not None:
                    out.append((m.join_waiter, JoinResult(error, m.member_id)))
                if m.sync_waiter is not None:
                    out.append((m.sync_waiter, SyncResult(error)))
                m.join_waiter = m.sync_waiter = None
        self._store_callbacks.clear()
        return out

    # ---- internals ------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: Group, now_ms: int, out: list[Delivery]) -> None:
        if group.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]:
            self._prepare_rebalance(group, now_ms, out)

    def _prepare_rebalance(self, group: Group, now_ms: int, out: list[Delivery]) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            # Members waiting for an assignment that will never come must rejoin.
            self._reset_and_propagate(group, ErrorCode.REBALANCE_IN_PROGRESS, now_ms, out)
        group.pending_sync.clear()
        group.sync_deadline_ms = None
        delay = self.initial_rebalance_delay_ms
        if group.state is GroupState.EMPTY and delay > 0:
            group.initial_delay = _InitialDelay(delay, max(group.rebalance_timeout_ms() - delay, 0))
            group.join_deadline_ms = now_ms + delay
        else:
            group.initial_delay = None
            group.join_deadline_ms = now_ms + group.rebalance_timeout_ms()
        group.transition_to(GroupState.PREPARING_REBALANCE, now_ms)
        self._try_complete_join(group, now_ms, out)

    def _reset_and_propagate(
        self, group: Group, error: ErrorCode, now_ms: int, out: list[Delivery]
    ) -> None:
        for m in group.members.values():
            m.assignment = b""
        self._propagate(group, error, now_ms, out)

    @staticmethod
    def _propagate(group: Group, error: ErrorCode, now_ms: int, out: list[Delivery]) -> None:
        ok = error is ErrorCode.NONE
        for m in group.members.values():
            if m.sync_waiter is not None:
                out.append(
                    (
                        m.sync_waiter,
                        SyncResult(
                            error,
                            m.assignment,
                            group.protocol_type if ok else None,
                            group.protocol if ok else None,
                        ),
                    )
                )
                m.sync_waiter = None
                m.expires_at_ms = now_ms + m.session_timeout_ms

    def _remove_member(
        self, group: Group, member: Member, now_ms: int, out: list[Delivery]
    ) -> None:
        if member.join_waiter is not None:
            out.append((member.join_waiter, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, "")))
        if member.sync_waiter is not None:
            out.append((member.sync_waiter, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)))
        member.join_waiter = member.sync_waiter = None
        group.remove(member.member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, now_ms, out)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group, now_ms, out)

    def _remove_pending(
        self, group: Group, member_id: str, now_ms: int, out: list[Delivery]
    ) -> None:
        group.remove(member_id)
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group, now_ms, out)

    def _try_complete_join(self, group: Group, now_ms: int, out: list[Delivery]) -> None:
        if group.initial_delay is None and group.has_all_members_joined():
            self._complete_join(group, now_ms, out)

    def _on_join_deadline(self, group: Group, now_ms: int, out: list[Delivery]) -> None:
        delay = group.initial_delay
        if delay is not None and group.new_member_added and delay.remaining_ms != 0:
            # More members arrived during the initial delay: wait once more for stragglers.
            group.new_member_added = False
            group.initial_delay = _InitialDelay(
                min(self.initial_rebalance_delay_ms, delay.remaining_ms),
                max(delay.remaining_ms - delay.delay_ms, 0),
            )
            group.join_deadline_ms = now_ms + group.initial_delay.delay_ms
            return
        self._complete_join(group, now_ms, out)

    def _complete_join(self, group: Group, now_ms: int, out: list[Delivery]) -> None:
        group.join_deadline_ms = None
        group.initial_delay = None
        for failed in [
            m
            for m in group.members.values()
            if m.join_waiter is None and m.group_instance_id is None
        ]:
            group.remove(failed.member_id)
        if group.members and not self._elect_joined_leader(group):
            # Nobody rejoined (only absent static members left): wait another rebalance
            # timeout while their sessions run out.
            group.join_deadline_ms = now_ms + group.rebalance_timeout_ms()
            return
        group.generation_id += 1
        group.pending_sync.clear()
        group.sync_deadline_ms = None
        if not group.members:
            group.protocol = None
            group.subscribed_topics = None
            group.transition_to(GroupState.EMPTY, now_ms)
            self._store(group, WriteKind.EMPTY, {})
            return
        group.protocol = group.select_protocol()
        group.subscribed_topics = group.compute_subscribed_topics()
        group.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        leader_view = group.current_member_metadata()
        for m in group.members.values():
            if m.join_waiter is not None:
                out.append(
                    (
                        m.join_waiter,
                        JoinResult(
                            ErrorCode.NONE,
                            m.member_id,
                            group.generation_id,
                            group.protocol_type,
                            group.protocol,
                            group.leader_id or "",
                            leader_view if group.is_leader(m.member_id) else (),
                        ),
                    )
                )
                m.join_waiter = None
            m.expires_at_ms = now_ms + m.session_timeout_ms
            m.is_new = False
            group.pending_sync.add(m.member_id)
        group.sync_deadline_ms = now_ms + group.rebalance_timeout_ms()

    @staticmethod
    def _elect_joined_leader(group: Group) -> bool:
        """Keep the leader if it rejoined, else pick a member that did; False if none did."""
        leader = group.members.get(group.leader_id) if group.leader_id else None
        if leader is None:
            return False
        if leader.join_waiter is not None:
            return True
        joined = next((mid for mid, m in group.members.items() if m.join_waiter is not None), None)
        if joined is None:
            return False
        group.leader_id = joined
        return True

    @staticmethod
    def _maybe_complete_pending_sync(group: Group) -> None:
        if not group.pending_sync:
            group.sync_deadline_ms = None

    def _on_sync_deadline(self, group: Group, now_ms: int, out: list[Delivery]) -> None:
        group.sync_deadline_ms = None
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        if not group.pending_sync:
            return
        for member_id in list(group.pending_sync):
            member = group.members.get(member_id)
            if member is not None:
                if member.join_waiter is not None:
                    out.append((member.join_waiter, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, "")))
                if member.sync_waiter is not None:
                    out.append((member.sync_waiter, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)))
                member.join_waiter = member.sync_waiter = None
            group.remove(member_id)
        self._prepare_rebalance(group, now_ms, out)
