"""broker/log_limit.py: a repeated line is written once per key per interval, with how many
were left out since."""

from __future__ import annotations

from broker import log_limit
from broker.log_limit import OncePerInterval


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_once_per_interval_counts_what_it_left_out() -> None:
    clock = Clock()
    limit = OncePerInterval(10.0, clock)
    assert limit.admit(("t", 3)) == 0
    assert [limit.admit(("t", 3)) for _ in range(5)] == [None] * 5
    clock.now += 9.9
    assert limit.admit(("t", 3)) is None
    clock.now += 0.1
    assert limit.admit(("t", 3)) == 6  # the six left out since the first line
    assert limit.admit(("t", 3)) is None
    clock.now += 10
    assert limit.admit(("t", 3)) == 1


def test_keys_are_apart() -> None:
    limit = OncePerInterval(10.0, Clock())
    assert limit.admit(("a", 3)) == 0
    assert limit.admit(("b", 3)) == 0
    assert limit.admit(("a", 87)) == 0
    assert limit.admit(("a", 3)) is None


def test_memory_is_bounded(monkeypatch) -> None:
    monkeypatch.setattr(log_limit, "MAX_KEYS", 3)
    limit = OncePerInterval(10.0, Clock())
    for name in "abc":
        assert limit.admit(name) == 0
    assert limit.admit("d") == 0  # a fourth key starts the counts over
    assert len(limit._last) == 1
    assert limit.admit("a") == 0
