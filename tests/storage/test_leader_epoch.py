"""LeaderEpochCache (leader-epoch-checkpoint) against a brute-force model, and its file."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.leader_epoch import (
    LEADER_EPOCH_CHECKPOINT,
    UNDEFINED_EPOCH,
    CorruptEpochCheckpointError,
    EpochEndOffset,
    EpochEntry,
    LeaderEpochCache,
)


def test_file_format_is_kafkas(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    assert not cache.assign(-1, 0)
    assert cache.assign(0, 0)
    assert cache.assign(3, 17)
    assert not cache.assign(3, 20)  # the same epoch, later: nothing new
    text = (tmp_path / LEADER_EPOCH_CHECKPOINT).read_text()
    assert text == "0\n2\n0 0\n3 17\n"
    again = LeaderEpochCache(str(tmp_path))
    again.load()
    assert again.entries == [EpochEntry(0, 0), EpochEntry(3, 17)]


def test_no_file_until_an_epoch_is_known(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    cache.load()
    assert not cache.truncate_from_end(10) and not cache.truncate_from_start(5)
    assert not os.path.exists(tmp_path / LEADER_EPOCH_CHECKPOINT)
    assert cache.latest_epoch == UNDEFINED_EPOCH


@pytest.mark.parametrize(
    "text",
    ["1\n0\n", "0\n2\n0 0\n", "0\n1\nx 0\n", "0\n2\n3 10\n2 20\n", "0\n1\n-1 0\n", ""],
)
def test_malformed_files_are_refused(tmp_path, text):
    (tmp_path / LEADER_EPOCH_CHECKPOINT).write_text(text)
    with pytest.raises(CorruptEpochCheckpointError):
        LeaderEpochCache(str(tmp_path)).load()


def test_end_offsets_as_kafka_answers_them(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    for epoch, start in [(1, 0), (2, 10), (5, 30)]:
        cache.assign(epoch, start)
    leo = 42
    assert cache.end_offset_for(5, leo) == EpochEndOffset(5, 42)
    assert cache.end_offset_for(2, leo) == EpochEndOffset(2, 30)
    assert cache.end_offset_for(3, leo) == EpochEndOffset(2, 30)  # floor epoch, next start
    assert cache.end_offset_for(0, leo) == EpochEndOffset(0, 0)  # below the first: its start
    assert cache.end_offset_for(6, leo) == EpochEndOffset(-1, -1)  # above every epoch
    assert cache.end_offset_for(-1, leo) == EpochEndOffset(-1, -1)


def test_assign_drops_contradicted_entries(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    for epoch, start in [(1, 0), (2, 10), (3, 20)]:
        cache.assign(epoch, start)
    cache.assign(4, 15)  # a new leader at 15 (the log was truncated there): epochs 2@10 stays
    assert cache.entries == [EpochEntry(1, 0), EpochEntry(2, 10), EpochEntry(4, 15)]


def test_truncations(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    for epoch, start in [(1, 0), (2, 10), (3, 20)]:
        cache.assign(epoch, start)
    assert cache.truncate_from_start(12)
    assert cache.entries == [EpochEntry(2, 12), EpochEntry(3, 20)]
    assert cache.truncate_from_end(20)
    assert cache.entries == [EpochEntry(2, 12)]
    loaded = LeaderEpochCache(str(tmp_path))
    loaded.load()
    assert loaded.entries == cache.entries


def _model_end_offset(entries, requested, leo):
    """Brute force: the epochs as offset ranges."""
    if requested < 0 or not entries:
        return (-1, -1)
    if entries[-1][0] == requested:
        return (requested, leo)
    later = [e for e in entries if e[0] > requested]
    if not later:
        return (-1, -1)
    earlier = [e for e in entries if e[0] <= requested]
    return ((earlier[-1][0] if earlier else requested), later[0][1])


ops = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), st.integers(0, 8), st.integers(0, 60)),
        st.tuples(st.just("end"), st.integers(0, 60), st.just(0)),
        st.tuples(st.just("start"), st.integers(0, 60), st.just(0)),
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(ops=ops, asks=st.lists(st.integers(-1, 10), max_size=8))
def test_against_a_model(tmp_path_factory, ops, asks):
    directory = tmp_path_factory.mktemp("epochs")
    cache = LeaderEpochCache(str(directory))
    model: list[tuple[int, int]] = []
    for op, a, b in ops:
        if op == "assign":
            if not (model and model[-1][0] == a and model[-1][1] <= b):
                model = [e for e in model if e[0] < a and e[1] < b] + [(a, b)]
            cache.assign(a, b)
        elif op == "end":
            model = [e for e in model if e[1] < a]
            cache.truncate_from_end(a)
        else:
            before = [e for e in model if e[1] <= a]
            if before:
                model = [(before[-1][0], a)] + [e for e in model if e[1] > a]
            cache.truncate_from_start(a)
        assert [tuple(e) for e in cache.entries] == model
    leo = 70
    for epoch in asks:
        assert tuple(cache.end_offset_for(epoch, leo)) == _model_end_offset(model, epoch, leo)
    reloaded = LeaderEpochCache(str(directory))
    reloaded.load()
    assert [tuple(e) for e in reloaded.entries] == model
