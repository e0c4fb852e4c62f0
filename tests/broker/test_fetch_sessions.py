"""The fetch session cache (KIP-227) against Kafka 3.9's FetchSession rules, with a fake clock."""

from __future__ import annotations

import random
import uuid

from broker.fetch_sessions import EVICTION_MS, Answer, FetchSessionCache, Wanted
from protocol.errors import ErrorCode

NONE = ErrorCode.NONE
TOPIC_ID = uuid.UUID(int=7)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def wanted(partition: int, offset: int = 0, topic: str = "t") -> Wanted:
    return Wanted(topic, TOPIC_ID, partition, offset, 1 << 20)


def quiet(hw: int = 5, start: int = 0) -> Answer:
    return Answer(NONE, hw, start, 0)


def open_session(cache, partitions, version=12):
    context = cache.context(version, 0, 0, [wanted(p) for p in partitions], [])
    session_id, chosen = context.respond([quiet() for _ in partitions])
    assert chosen == list(range(len(partitions)))
    return session_id


def test_sessionless_requests_never_create_sessions():
    cache = FetchSessionCache(10, Clock())
    for version, epoch in ((6, 0), (12, -1)):
        context = cache.context(version, 0, epoch, [wanted(0)], [])
        assert context.respond([quiet()]) == (0, [0])
    assert len(cache) == 0


def test_incremental_fetch_reads_the_session_and_answers_only_news():
    cache = FetchSessionCache(10, Clock(), rng=random.Random(1))
    session_id = open_session(cache, [0, 1, 2])
    assert session_id > 0 and len(cache) == 1
    # epoch 1, nothing named: every partition of the session is read
    context = cache.context(12, session_id, 1, [], [])
    assert [w.partition for w in context.wanted] == [0, 1, 2]
    answers = [quiet(), Answer(NONE, 5, 0, 100), quiet(hw=6)]  # 1 has records, 2 a new hw
    assert context.respond(answers) == (session_id, [1, 2])
    # the client moves partition 1 on; partition 1 went last (it returned data)
    context = cache.context(12, session_id, 2, [wanted(1, offset=9)], [])
    assert [(w.partition, w.fetch_offset) for w in context.wanted] == [(0, 0), (2, 0), (1, 9)]
    assert context.respond([quiet(), quiet(hw=6), quiet()]) == (session_id, [])
    # an error is always answered, and the partition is answered again once it clears
    context = cache.context(12, session_id, 3, [], [])
    failed = Answer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, 0)
    assert context.respond([failed, quiet(hw=6), quiet()]) == (session_id, [0])
    context = cache.context(12, session_id, 4, [], [])
    assert context.respond([quiet(), quiet(hw=6), quiet()]) == (session_id, [0])


def test_forgotten_partitions_leave_and_an_empty_session_closes():
    cache = FetchSessionCache(10, Clock())
    session_id = open_session(cache, [0, 1])
    context = cache.context(12, session_id, 1, [], [wanted(0)])
    assert [w.partition for w in context.wanted] == [1]
    context.respond([quiet()])
    context = cache.context(12, session_id, 2, [], [wanted(1)])
    assert context.session is None and len(cache) == 0  # sessionless from here
    assert cache.context(12, session_id, 3, [], []).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_session_errors():
    cache = FetchSessionCache(10, Clock())
    session_id = open_session(cache, [0])
    assert cache.context(12, session_id, 5, [], []).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert cache.context(13, session_id, 1, [], []).error == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    assert (
        cache.context(12, session_id + 1, 1, [], []).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    )
    error = cache.context(12, session_id + 1, 1, [], [])
    assert error.wanted == [] and error.respond([]) == (0, [])
    # a full request naming the session closes it; epoch 0 opens another
    context = cache.context(12, session_id, 0, [wanted(0)], [])
    new_id, _ = context.respond([quiet()])
    assert new_id not in (0, session_id) and len(cache) == 1
    cache.context(12, new_id, -1, [wanted(0)], []).respond([quiet()])
    assert len(cache) == 0


def test_sessions_keyed_by_topic_id_from_v13():
    cache = FetchSessionCache(10, Clock())
    session_id = open_session(cache, [0], version=13)
    renamed = Wanted(None, TOPIC_ID, 0, 4, 1 << 20)  # same id, name unknown: the same partition
    context = cache.context(13, session_id, 1, [renamed], [])
    assert [(w.topic, w.fetch_offset) for w in context.wanted] == [(None, 4)]
    assert cache.context(12, session_id, 2, [], []).error == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR


def test_a_full_cache_evicts_stale_then_smaller_sessions_else_declines():
    clock = Clock()
    cache = FetchSessionCache(2, clock)
    small = open_session(cache, [0])
    clock.now += 1
    big = open_session(cache, [0, 1, 2])
    assert open_session(cache, [0]) == 0  # full, nothing smaller, nothing stale: declined
    bigger = open_session(cache, [0, 1, 2, 3])  # evicts the smallest
    assert (
        bigger and cache.context(12, small, 1, [], []).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    )
    clock.now += EVICTION_MS + 1
    cache.context(12, bigger, 1, [], []).respond([quiet()] * 4)  # bigger stays in use
    assert open_session(cache, [0])  # big was idle too long: evicted
    assert cache.context(12, big, 1, [], []).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert FetchSessionCache(0, clock).context(12, 0, 0, [wanted(0)], []).create_session is False
