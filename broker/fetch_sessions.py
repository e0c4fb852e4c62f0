"""Incremental fetch sessions (KIP-227), as Kafka 3.9's FetchSession.scala keeps them: a pure
cache with an injected clock; the Fetch handler drives it.

A consumer with many partitions otherwise names every one of them in every Fetch, and the broker
answers for each, which costs broker CPU per partition per request (bench/NOTES.md). In a session the client sends only the partitions whose fetch
position changed, and the broker answers only for partitions with news.

Request metadata (Fetch v7+ ``session_id``, ``session_epoch``):

=========  =====  =========================================================================
id         epoch  meaning
=========  =====  =========================================================================
0          -1     sessionless full fetch (every client before v7, and librdkafka)
any        -1     full fetch; the named session (if any) is closed, no new one
any        0      full fetch; the named session (if any) is closed, a new one is created
                  when the cache has room (its id is in the response; 0 if none)
id         n > 0  incremental: ``n`` must be the session's epoch (else
                  INVALID_FETCH_SESSION_EPOCH; an unknown id gives FETCH_SESSION_ID_NOT_FOUND);
                  the request's partitions are added or updated, ``forgotten_topics_data``
                  removed; every partition of the session is read, and the response holds
                  only those with records, a changed high watermark or log start offset, or
                  an error. A session left empty is closed.
=========  =====  =========================================================================

A session created at v13+ uses topic ids and cannot be continued below v13 (nor the reverse):
FETCH_SESSION_TOPIC_ID_ERROR. Partitions that returned records move to the end of the session's
order, so under max_bytes every partition gets its turn (Kafka does the same).

The cache holds at most ``max.incremental.fetch.session.cache.slots`` sessions (0 disables
sessions). When it is full a new session may evict the least recently used one if that has been
idle for EVICTION_MS, or else the smallest one if the new one has more partitions.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable, NamedTuple

from protocol.errors import ErrorCode

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EVICTION_MS = 120_000
_INT32_MAX = 2**31 - 1

# (topic id, partition) in sessions using topic ids, else (topic name, partition)
Key = tuple[uuid.UUID | str | None, int]


@dataclass(slots=True)
class Wanted:
    """One partition a fetch reads, and how (from the request, or kept by the session).
    ``topic`` is None for a topic id the broker does not know."""

    topic: str | None
    topic_id: uuid.UUID
    partition: int
    fetch_offset: int
    max_bytes: int
    # The leader epoch the client knows (Fetch v9+, KIP-320); checked in a cluster only.
    leader_epoch: int = -1


class Answer(NamedTuple):
    """What the handler read for one partition."""

    error: ErrorCode
    high_watermark: int
    log_start_offset: int
    records_size: int


@dataclass(slots=True)
class _Cached:
    wanted: Wanted
    high_watermark: int = -1  # last sent, -1 after an error so the partition is sent again
    log_start_offset: int = -1

    def must_respond(self, answer: Answer) -> bool:
        """Kafka's CachedPartition.maybeUpdateResponseData, updating what was last sent."""
        respond = answer.records_size > 0
        if answer.high_watermark != self.high_watermark:
            respond, self.high_watermark = True, answer.high_watermark
        if answer.log_start_offset != self.log_start_offset:
            respond, self.log_start_offset = True, answer.log_start_offset
        if answer.error != ErrorCode.NONE:
            respond, self.high_watermark = True, -1
        return respond


@dataclass(eq=False)
class _Session:
    id: int
    uses_topic_ids: bool
    partitions: dict[Key, _Cached]
    created_ms: int
    last_used_ms: int
    epoch: int = 1  # the epoch the next incremental request must carry


def _key(wanted: Wanted, uses_topic_ids: bool) -> Key:
    return (wanted.topic_id if uses_topic_ids else wanted.topic, wanted.partition)


@dataclass
class FetchContext:
    """One Fetch request's view of the cache: which partitions to read (``wanted``), and, once
    read, which to answer and with which session id (:meth:`respond`). ``error`` not NONE: a
    session error; the answer is that error alone, with no partitions."""

    cache: FetchSessionCache
    wanted: list[Wanted]
    error: ErrorCode = ErrorCode.NONE
    create_session: bool = False
    uses_topic_ids: bool = False
    session: _Session | None = None
    _responded: bool = field(default=False, repr=False)

    def respond(self, answers: list[Answer]) -> tuple[int, list[int]]:
        """(session id for the response, indexes into ``wanted`` to include), given the answer
        for each wanted partition; updates the session. Call once, for the response sent."""
        assert not self._responded, "a fetch context answers once"
        self._responded = True
        everything = list(range(len(self.wanted)))
        if self.error != ErrorCode.NONE:
            return INVALID_SESSION_ID, []
        if self.session is not None:
            return self.session.id, self._incremental(answers)
        if self.create_session:
            return self.cache.create(self.wanted, answers, self.uses_topic_ids), everything
        return INVALID_SESSION_ID, everything

    def _incremental(self, answers: list[Answer]) -> list[int]:
        session = self.session
        assert session is not None, "respond() calls this only for an incremental session"
        chosen = []
        moved = []
        for index, (wanted, answer) in enumerate(zip(self.wanted, answers)):
            key = _key(wanted, session.uses_topic_ids)
            cached = session.partitions[key]
            if cached.must_respond(answer):
                chosen.append(index)
                if answer.records_size > 0:
                    moved.append(key)
        for key in moved:  # round robin: partitions that returned data go last
            session.partitions[key] = session.partitions.pop(key)
        return chosen


class FetchSessionCache:
    """The broker's fetch sessions; see the module docstring. Not thread-safe: the trio thread
    alone uses it. ``clock`` gives milliseconds."""

    def __init__(
        self, max_slots: int, clock: Callable[[], int], *, rng: random.Random | None = None
    ) -> None:
        self.max_slots = max_slots
        self._clock = clock
        self._rng = rng or random.Random()
        self._sessions: dict[int, _Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def context(
        self,
        version: int,
        session_id: int,
        epoch: int,
        wanted: list[Wanted],
        forgotten: Iterable[Wanted],
    ) -> FetchContext:
        """The context of one Fetch request (Kafka's FetchManager.newContext)."""
        uses_topic_ids = version >= 13
        if version < 7:
            return FetchContext(self, wanted)
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self._sessions.pop(session_id, None)
            return FetchContext(
                self,
                wanted,
                create_session=(epoch == INITIAL_EPOCH and self.max_slots > 0),
                uses_topic_ids=uses_topic_ids,
            )
        session = self._sessions.get(session_id)
        if session is None:
            return FetchContext(self, [], ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext(self, [], ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return FetchContext(self, [], ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        for w in wanted:
            key = _key(w, uses_topic_ids)
            cached = session.partitions.get(key)
            if cached is None:
                session.partitions[key] = _Cached(w)
            else:
                cached.wanted = w
        for w in forgotten:
            session.partitions.pop(_key(w, uses_topic_ids), None)
        if not session.partitions:
            del self._sessions[session.id]
            return FetchContext(self, wanted)
        session.last_used_ms = self._clock()
        session.epoch = 1 if session.epoch == _INT32_MAX else session.epoch + 1
        return FetchContext(
            self,
            [c.wanted for c in session.partitions.values()],
            uses_topic_ids=uses_topic_ids,
            session=session,
        )

    def create(self, wanted: list[Wanted], answers: list[Answer], uses_topic_ids: bool) -> int:
        """A new session holding ``wanted`` as just answered; its id, or 0 when the cache is
        full and nothing may be evicted (the client then goes on with full fetches)."""
        now = self._clock()
        if len(self._sessions) >= self.max_slots and not self._evict(len(wanted), now):
            return INVALID_SESSION_ID
        session_id = self._rng.randint(1, _INT32_MAX)
        while session_id in self._sessions:
            session_id = self._rng.randint(1, _INT32_MAX)
        partitions = {}
        for w, a in zip(wanted, answers):
            cached = _Cached(w)
            cached.must_respond(a)  # records what this first response sends
            partitions[_key(w, uses_topic_ids)] = cached
        self._sessions[session_id] = _Session(session_id, uses_topic_ids, partitions, now, now)
        return session_id

    def _evict(self, size: int, now: int) -> bool:
        if not self._sessions:
            return False
        stale = min(self._sessions.values(), key=lambda s: s.last_used_ms)
        if now - stale.last_used_ms > EVICTION_MS:
            del self._sessions[stale.id]
            return True
        smallest = min(self._sessions.values(), key=lambda s: (len(s.partitions), s.id))
        if len(smallest.partitions) < size:
            del self._sessions[smallest.id]
            return True
        return False
