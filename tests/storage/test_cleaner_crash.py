"""Crashes inside cleaning (storage.killpoints) and the swap recovery at the next start
(storage/swap.py): a group of segments is either all old or all new, never a mix."""

from __future__ import annotations

import io
import os
import shutil

import pytest

from protocol.compression import Codec
from storage import Log, killpoints, swap
from storage.cleaner import Cleaner
from storage.dump import dump_file
from storage.layout import LOG_SUFFIX, SWAP_SUFFIX, segment_path
from tests.storage.test_cleaner import MIB, append, latest, open_log, read_all


class Crash(Exception):
    """A kill -9 at a kill point."""


def crash_at(monkeypatch, point: str, nth: int = 1) -> list[str]:
    seen: list[str] = []

    def reached(name: str) -> None:
        seen.append(name)
        if name == point and seen.count(point) == nth:
            raise Crash(point)

    monkeypatch.setattr(killpoints, "reached", reached)
    return seen


def build(tmp_path, clock) -> Log:
    log = open_log(tmp_path, clock, segment_bytes=700, index_interval_bytes=50)
    for i in range(40):
        codec = (Codec.NONE, Codec.GZIP)[i % 2]
        append(log, clock, [(b"k%d" % (i % 6), b"v%d" % i), (b"t%d" % (i % 4), None)], codec=codec)
    log.roll()
    return log


def reopen(log: Log, clock) -> Log:
    log.abandon()  # nothing more is written: the process is gone
    return Log(log.directory, log.config, clock=clock, recovery_point=0, needs_recovery=True)


def check_consistent(log: Log, before: list, after: list) -> None:
    """Every record left is the record stored at that offset before, every record the clean
    result keeps is there, the latest value of each key is the same, the files verify."""
    got = read_all(log)
    by_offset = {r[0]: r for r in before}
    assert all(by_offset[r[0]] == r for r in got)
    assert {r[0] for r in after} <= {r[0] for r in got}
    assert latest(got) == latest(before)
    out = io.StringIO()
    for s in log.segments:
        for path in (s.log_path, s.offset_index.path, s.time_index.path):
            assert dump_file(path, deep=True, verify=True, out=out, err=out) == 0, out.getvalue()
    leftovers = [
        n for n in os.listdir(log.directory) if n.endswith((".cleaned", ".swap", ".replaces"))
    ]
    assert leftovers == []


@pytest.mark.parametrize("point", killpoints.CLEANING_POINTS)
@pytest.mark.parametrize("nth", [1, 2])
def test_a_crash_at_any_kill_point_leaves_old_or_new_segments(
    tmp_path, clock, monkeypatch, point, nth
):
    if point == "checkpoint" and nth == 2:
        pytest.skip("a cleaning reaches its checkpoint once")
    log = build(tmp_path / "a", clock)
    twin_dir = str(tmp_path / "b" / "topic-0")
    shutil.copytree(log.directory, twin_dir)
    twin = Log(twin_dir, log.config, clock=clock, needs_recovery=False)
    before = read_all(log)
    Cleaner(MIB).clean(twin, clock.now, force=True)
    after = read_all(twin)
    assert len(after) < len(before)

    seen = crash_at(monkeypatch, point, nth)
    with pytest.raises(Crash):
        Cleaner(MIB).clean(log, clock.now, force=True)
    monkeypatch.setattr(killpoints, "reached", lambda name: None)
    committed = seen.count("log-swapped")
    log = reopen(log, clock)
    check_consistent(log, before, after)
    # a swap committed before the crash was completed: the first group is the twin's
    first, second = twin.segments[0].base_offset, twin.segments[1].base_offset
    in_first = [r for r in read_all(log) if first <= r[0] < second]
    if committed:
        assert in_first == [r for r in after if first <= r[0] < second]
    elif nth == 1:
        assert in_first == [r for r in before if first <= r[0] < second]
    # cleaning again from here reaches the same result as the cleaning never interrupted
    Cleaner(MIB).clean(log, clock.now, force=True)
    assert latest(read_all(log)) == latest(after)
    check_consistent(log, before, after)


def test_recovery_completes_a_committed_swap_and_is_idempotent(tmp_path, clock, monkeypatch):
    log = build(tmp_path, clock)
    before = read_all(log)
    crash_at(monkeypatch, "replaced-deleted")
    with pytest.raises(Crash):
        Cleaner(MIB).clean(log, clock.now, force=True)
    directory = log.directory
    log.abandon()
    base = log.segments[0].base_offset
    assert os.path.exists(segment_path(directory, base, LOG_SUFFIX) + SWAP_SUFFIX)
    # recovery interrupted after its first rename, then run again
    calls = []
    real_replace = os.replace

    def failing_replace(src, dst):
        calls.append(src)
        if len(calls) == 2:
            raise Crash("during recovery")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(Crash):
        swap.recover(directory)
    monkeypatch.setattr(os, "replace", real_replace)
    log = Log(directory, log.config, clock=clock, needs_recovery=True)
    check_consistent(log, before, [])
    assert len(read_all(log)) < len(before)


def test_a_manifest_less_swap_left_by_kafka_is_completed_by_kafkas_rule(tmp_path, clock):
    log = build(tmp_path, clock)
    twin_dir = str(tmp_path / "twin" / "topic-0")
    shutil.copytree(log.directory, twin_dir)
    twin = Log(twin_dir, log.config, clock=clock, needs_recovery=False)
    Cleaner(MIB).clean(twin, clock.now, force=True)
    first = twin.segments[0]
    twin.close()
    before = read_all(log)
    log.close()
    # Kafka's state after renaming its cleaned segment to .swap, before deleting the old one
    for suffix in (".log", ".index", ".timeindex"):
        shutil.copy(
            segment_path(twin_dir, first.base_offset, suffix),
            segment_path(log.directory, first.base_offset, suffix) + SWAP_SUFFIX,
        )
    log = Log(log.directory, log.config, clock=clock, needs_recovery=True)
    check_consistent(log, before, [])
    assert log.segments[0].size == first.size
