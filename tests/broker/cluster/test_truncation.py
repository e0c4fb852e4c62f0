"""A follower's truncation by leader epochs (broker/cluster/fetcher.py truncation_target, with
KIP-279's extra rounds) against brute force: for any history two replicas can have, the rounds
end exactly where the logs part (the longest common prefix, comparing each offset's epoch)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.cluster.fetcher import truncation_target
from storage.leader_epoch import LeaderEpochCache

_dirs = itertools.count()


def cache(tmp_path_factory, epochs: list[int], current: int | None = None) -> LeaderEpochCache:
    """A cache built as appends build it: each run of equal epochs starts that epoch; a
    leader's ``current`` epoch starts at its log end even with nothing written in it."""
    c = LeaderEpochCache(str(tmp_path_factory.mktemp(f"epochs{next(_dirs)}")))
    for offset, epoch in enumerate(epochs):
        if offset == 0 or epoch != epochs[offset - 1]:
            c.assign(epoch, offset)
    if current is not None:
        c.assign(current, len(epochs))
    return c


@st.composite
def histories(draw):
    """(common prefix, leader's suffix, follower's suffix, leader's current epoch), as epochs per
    offset: an epoch's entries are one leader's sequence, so the two suffixes share no epoch,
    at most one continues the prefix's last epoch, and the leader's epoch is the newest."""
    runs = draw(st.lists(st.integers(1, 3), max_size=4))
    prefix, epoch = [], 0
    for length in runs:
        prefix += [epoch] * length
        epoch += draw(st.integers(1, 2))
    last = prefix[-1] if prefix else None
    pool = list(range(epoch, epoch + 8))
    draw(st.randoms()).shuffle(pool)
    follower_epochs = sorted(pool[: draw(st.integers(0, 3))])
    leader_epochs = sorted(pool[4 : 4 + draw(st.integers(0, 3))])
    continues = (
        draw(st.sampled_from(["none", "leader", "follower"])) if last is not None else "none"
    )
    if continues == "leader":
        leader_epochs = [last] + leader_epochs
    elif continues == "follower":
        follower_epochs = [last] + follower_epochs
    follower = [e for e in follower_epochs for _ in range(draw(st.integers(1, 3)))]
    leader = [e for e in leader_epochs for _ in range(draw(st.integers(1, 3)))]
    current = max([epoch + 8, *leader, *follower]) + 1
    return prefix, leader, follower, current


@settings(max_examples=300, deadline=None)
@given(history=histories())
def test_rounds_end_where_the_logs_part(tmp_path_factory, history):
    prefix, leader_suffix, follower_suffix, current = history
    leader_log = prefix + leader_suffix
    follower_log = prefix + follower_suffix
    leader = cache(tmp_path_factory, leader_log, current)
    mine = cache(tmp_path_factory, follower_log)
    common = 0
    while (
        common < min(len(leader_log), len(follower_log))
        and leader_log[common] == follower_log[common]
    ):
        common += 1
    hw = 0  # what the fallback truncates to: nothing is known to be committed
    leo = len(follower_log)
    for _ in range(20):
        asked = mine.latest_epoch
        if asked < 0:
            target, complete = hw, True
        else:
            answer = leader.end_offset_for(asked, len(leader_log))
            target, complete, _ = truncation_target(mine, leo, answer.epoch, answer.end_offset)
            target = hw if target is None else target
        leo = min(leo, target)
        mine.truncate_from_end(leo)
        if complete:
            break
    else:
        raise AssertionError("truncation did not converge")
    assert leo == common, (prefix, leader_suffix, follower_suffix, current)
