"""Moving a partition's log to another log dir (storage/replica_move.py, LogManager's moves):
rounds of copying while appends, rolls and truncations go on, the swap, and what a start-up
makes of a move a crash interrupted."""

from __future__ import annotations

import os

import pytest

from protocol.records import iter_deep
from storage import LogConfig, LogManager, killpoints
from tests.storage.helpers import validated


def manager(tmp_path, clock, config=None):
    config = config or LogConfig(segment_bytes=4096)
    return LogManager([str(tmp_path / "d1"), str(tmp_path / "d2")], lambda topic: config, clock)


def timestamps(log):
    """Every record's timestamp, read a segment at a time as a consumer would."""
    found, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        records = list(iter_deep(log.read(offset, 1 << 30).read_bytes()))
        found += [m.timestamp for m in records if m.offset >= offset]
        offset = records[-1].offset + 1
    return found


def test_a_move_copies_appends_made_meanwhile_then_swaps(tmp_path, clock):
    m = manager(tmp_path, clock)
    m.startup()
    log = m.create_log("t", 0)
    d1, d2 = m.log_dirs
    assert m.log_dir_of("t", 0) == d1
    for i in range(50):  # several segments of 4 KiB
        log.append(validated(log, [i * 10 + j for j in range(10)], value_size=40))
    future = m.start_future("t", 0, d2)
    assert future.copy_round(log, 10_000) > 0
    assert future.remaining > 0  # the budget left some for the next rounds
    while future.remaining:
        future.copy_round(log, 10_000)
    log.append(validated(log, [9000, 9001]))  # appends go on between rounds
    log.roll()
    log.append(validated(log, [9002]))
    future.copy_round(log, 1 << 30)
    log.append(validated(log, [9003]))  # the final round copies this
    expected = timestamps(log)
    moved, doomed = m.swap_in_future("t", 0)
    assert os.path.isdir(doomed) and doomed.endswith("-delete")
    m.remove_replaced(moved, doomed)
    assert moved is m.get_log("t", 0) and moved is not log
    assert m.log_dir_of("t", 0) == d2
    assert os.listdir(d1) and "t-0" not in os.listdir(d1)
    assert timestamps(moved) == expected
    assert m.future_of("t", 0) is None
    moved.append(validated(moved, [9004]))
    m.shutdown()
    again = manager(tmp_path, clock)
    again.startup()
    assert again.log_dir_of("t", 0) == d2
    assert timestamps(again.get_log("t", 0)) == [*expected, 9004]


def test_a_truncation_during_a_move_starts_the_copy_over(tmp_path, clock):
    m = manager(tmp_path, clock)
    m.startup()
    log = m.create_log("t", 0)
    for i in range(5):
        log.append(validated(log, [i]))
    future = m.start_future("t", 0, m.log_dirs[1])
    future.copy_round(log, 1 << 30)
    log.truncate_to(2)
    log.append(validated(log, [70, 71, 72]))  # the .log regrows past its copied size
    moved, _ = m.swap_in_future("t", 0)
    assert timestamps(moved) == [0, 1, 70, 71, 72]


def test_restart_discards_an_unfinished_future_and_lists_the_move(tmp_path, clock):
    m = manager(tmp_path, clock)
    m.startup()
    log = m.create_log("t", 0)
    log.append(validated(log, [1, 2, 3]))
    future = m.start_future("t", 0, m.log_dirs[1])
    future.copy_round(log, 1 << 30)
    m.shutdown()  # the future dir stays, as after a kill -9
    assert os.path.isdir(future.directory)
    again = manager(tmp_path, clock)
    again.startup()
    assert not os.path.exists(future.directory)
    assert again.interrupted_moves == {("t", 0): again.log_dirs[1]}
    assert again.log_dir_of("t", 0) == again.log_dirs[0]
    assert timestamps(again.get_log("t", 0)) == [1, 2, 3]


class Killed(Exception):
    pass


@pytest.mark.parametrize("point", ["move-renamed", "move-old-renamed"])
def test_a_crash_after_the_rename_keeps_the_moved_copy(tmp_path, clock, monkeypatch, point):
    m = manager(tmp_path, clock)
    m.startup()
    log = m.create_log("t", 0)
    log.append(validated(log, [1, 2, 3]))
    future = m.start_future("t", 0, m.log_dirs[1])
    future.copy_round(log, 1 << 30)

    def reached(at):
        if at == point:
            raise Killed(at)

    monkeypatch.setattr(killpoints, "reached", reached)
    with pytest.raises(Killed):
        m.swap_in_future("t", 0)
    again = manager(tmp_path, clock)
    again.startup()
    assert again.log_dir_of("t", 0) == again.log_dirs[1]
    assert not any(name.startswith("t-0") for name in os.listdir(again.log_dirs[0]))
    assert not os.path.exists(os.path.join(again.log_dirs[1], "t-0", ".moved-here"))
    assert timestamps(again.get_log("t", 0)) == [1, 2, 3]


def test_a_partition_created_later_goes_to_its_preferred_dir(tmp_path, clock):
    m = manager(tmp_path, clock)
    m.startup()
    m.create_log("other", 0)  # d1 now holds one partition, so d2 would be chosen anyway...
    m.create_log("other", 1)  # ...but not now
    m.set_preferred_dir("t", 0, m.log_dirs[0])
    m.create_log("t", 0)
    assert m.log_dir_of("t", 0) == m.log_dirs[0]


def test_the_moved_log_keeps_its_high_watermark_start_and_cleaner_offset(tmp_path, clock):
    m = manager(tmp_path, clock)
    m.startup()
    log = m.create_log("t", 0)
    for i in range(6):
        log.append(validated(log, [i]))
    log.update_high_watermark(5)  # a replicated partition: offset 5 not yet committed
    log.increment_log_start_offset(2)
    log.first_dirty_offset = 4
    future = m.start_future("t", 0, m.log_dirs[1])
    future.copy_round(log, 1 << 30)
    moved, doomed = m.swap_in_future("t", 0)
    m.remove_replaced(moved, doomed)
    assert (moved.high_watermark, moved.log_start_offset) == (5, 2)
    assert moved.first_dirty_offset == 4
    cleaner = (tmp_path / "d2" / "cleaner-offset-checkpoint").read_text()
    assert "t 0 4" in cleaner.splitlines()
    starts = (tmp_path / "d2" / "log-start-offset-checkpoint").read_text()
    assert "t 0 2" in starts.splitlines()


def test_a_target_dir_going_offline_stops_the_move(tmp_path, clock):
    m = manager(tmp_path, clock)
    m.startup()
    log = m.create_log("t", 0)
    log.append(validated(log, [1, 2]))
    future = m.start_future("t", 0, m.log_dirs[1])
    future.copy_round(log, 1 << 30)
    m.mark_offline(m.log_dirs[1], OSError(5, "Input/output error"))
    assert m.future_of("t", 0) is None and m.futures_in(m.log_dirs[1]) == []
    assert m.get_log("t", 0) is log and timestamps(log) == [1, 2]


def test_segments_deleted_by_retention_during_a_move_are_dropped_from_the_copy(tmp_path, clock):
    m = manager(tmp_path, clock)
    m.startup()
    log = m.create_log("t", 0)
    for i in range(50):
        log.append(validated(log, [i * 10 + j for j in range(10)], value_size=40))
    future = m.start_future("t", 0, m.log_dirs[1])
    future.copy_round(log, 10_000)  # part of it
    log.increment_log_start_offset(300)
    assert log.delete_segments_before(300, clock()) > 0
    assert log.remove_deleted_files(clock() + 10**9) > 0  # gone from the disk
    while future.copy_round(log, 10_000) or future.remaining:
        pass
    expected = timestamps(log)
    moved, doomed = m.swap_in_future("t", 0)
    m.remove_replaced(moved, doomed)
    assert moved.log_start_offset == 300 and timestamps(moved) == expected
    assert moved.first_segment_base == log.first_segment_base > 0
    assert not [n for n in os.listdir(moved.directory) if n.endswith(".deleted")]
