"""The log start offset (KIP-107, DeleteRecords): what reads, offset lookups, retention and
truncation do with it, and its checkpoint across clean restarts, unreadable files, topic
deletion and a kill -9."""

from __future__ import annotations

import os
import textwrap

import pytest

from protocol.records import iter_deep
from storage import Log, LogConfig, LogManager, OffsetOutOfRangeError
from tests.storage.helpers import run_killed, validated


def open_log(tmp_path, clock, **kw):
    config = LogConfig(retention_ms=-1, file_delete_delay_ms=0)
    return Log(str(tmp_path / "t-0"), config, clock=clock, needs_recovery=False, **kw)


def segmented(tmp_path, clock, sizes=(3, 3, 3), tail=2):
    """A log with one segment per size (timestamps = offsets * 10) and an active tail."""
    log = open_log(tmp_path, clock)
    for n in sizes:
        log.append(validated(log, [10 * (log.log_end_offset + i) for i in range(n)]))
        log.roll()
    log.append(validated(log, [10 * (log.log_end_offset + i) for i in range(tail)]))
    return log


def offsets(log, start):
    data = log.read(start, 1 << 20).read_bytes()
    return [m.offset for m in iter_deep(data) if m.offset >= start]


def test_reads_and_lookups_follow_the_log_start_offset(tmp_path, clock):
    log = segmented(tmp_path, clock)  # segments 0-2, 3-5, 6-8, active 9-10
    assert log.increment_log_start_offset(4) is True
    assert (log.log_start_offset, log.first_segment_base) == (4, 0)
    with pytest.raises(OffsetOutOfRangeError) as info:
        log.read(3, 1000)
    assert info.value.log_start_offset == 4
    assert log.read_cached(3, 1000) is None
    assert offsets(log, 4)[:2] == [4, 5]
    assert log.offset_for_timestamp(-2).offset == 4  # ListOffsets earliest
    # the first message with timestamp >= 0 at or after the log start
    assert log.offset_for_timestamp(0) == (40, 4)
    assert log.offset_for_timestamp(55) == (60, 6)
    assert log.legacy_offsets_before(-2, 10) == [4]
    assert log.increment_log_start_offset(2) is False  # never backwards
    assert log.log_start_offset == 4
    with pytest.raises(OffsetOutOfRangeError, match="larger than the high watermark 11"):
        log.increment_log_start_offset(12)
    assert log.increment_log_start_offset(11) is True  # everything: the high watermark
    assert log.read(11, 1000).length == 0


def test_whole_segments_below_it_are_deleted_by_retention(tmp_path, clock):
    log = segmented(tmp_path, clock)
    log.increment_log_start_offset(7)
    assert log.delete_expired_segments(clock.now) == 2  # 0-2 and 3-5; 6-8 holds 7
    assert [s.base_offset for s in log.segments] == [6, 9]
    assert log.log_start_offset == 7
    assert log.delete_expired_segments(clock.now) == 0
    log.increment_log_start_offset(log.log_end_offset)
    assert log.delete_expired_segments(clock.now) == 1
    assert [s.base_offset for s in log.segments] == [9]  # the active segment stays
    assert (log.log_start_offset, log.log_end_offset) == (11, 11)
    log.append(validated(log, [5]))
    assert offsets(log, 11) == [11]


def test_truncation_keeps_the_start_at_or_below_the_end(tmp_path, clock):
    log = segmented(tmp_path, clock)
    log.increment_log_start_offset(8)
    log.truncate_to(7)  # within the first segment: partial truncation, Kafka's min()
    assert (log.log_start_offset, log.log_end_offset) == (7, 7)
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)


def test_reopened_with_a_start_beyond_the_recovered_end_restarts_empty(tmp_path, clock):
    log = segmented(tmp_path, clock)
    directory = log.directory
    log.close()
    again = Log(directory, log.config, clock=clock, needs_recovery=False, log_start_offset=5)
    assert (again.log_start_offset, again.log_end_offset) == (5, 11)
    assert offsets(again, 5)[:1] == [5]
    again.close()
    lost = Log(directory, log.config, clock=clock, needs_recovery=True, log_start_offset=40)
    assert (lost.log_start_offset, lost.log_end_offset) == (40, 40)
    assert [s.base_offset for s in lost.segments] == [40]
    lost.append(validated(lost, [1]))
    assert offsets(lost, 40) == [40]


def manager(tmp_path, clock):
    config = LogConfig(retention_ms=-1, file_delete_delay_ms=0)
    return LogManager([str(tmp_path / "d1")], lambda topic: config, clock)


def test_checkpoint_survives_clean_restart_and_unreadable_file_falls_back(tmp_path, clock):
    m = manager(tmp_path, clock)
    m.startup()
    log = m.create_log("t", 0)
    log.append(validated(log, [1, 2, 3, 4]))
    other = m.create_log("u", 0)
    other.append(validated(other, [1]))
    log.increment_log_start_offset(3)
    m.checkpoint_log_start_offsets()
    path = tmp_path / "d1" / "log-start-offset-checkpoint"
    assert path.read_text().splitlines() == ["0", "1", "t 0 3"]  # only moved ones, as Kafka
    m.shutdown()
    m = manager(tmp_path, clock)
    m.startup()
    assert m.get_log("t", 0).log_start_offset == 3
    assert m.get_log("u", 0).log_start_offset == 0
    m.shutdown()
    path.write_text("garbage\n")
    m = manager(tmp_path, clock)
    m.startup()
    assert m.get_log("t", 0).log_start_offset == 0
    m.shutdown()


@pytest.mark.parametrize(
    "delete",
    [lambda m: m.delete_topic("t"), lambda m: m.delete_log("t", 0)],
    ids=["delete_topic", "delete_log"],
)
def test_deleting_a_log_forgets_its_start_offset(tmp_path, clock, delete):
    m = manager(tmp_path, clock)
    m.startup()
    log = m.create_log("t", 0)
    log.append(validated(log, [1, 2, 3]))
    log.increment_log_start_offset(2)
    m.checkpoint_log_start_offsets()
    delete(m)
    assert (tmp_path / "d1" / "log-start-offset-checkpoint").read_text().splitlines() == [
        "0",
        "0",
    ]
    fresh = m.create_log("t", 0)  # created again under the same name: starts at 0
    fresh.append(validated(fresh, [1]))
    m.shutdown()
    m = manager(tmp_path, clock)
    m.startup()
    assert (m.get_log("t", 0).log_start_offset, m.get_log("t", 0).log_end_offset) == (0, 1)
    m.shutdown()


_KILLED = textwrap.dedent(
    """
    import os, signal, sys
    from storage import LogConfig, LogManager
    from tests.storage.helpers import Clock, validated

    log_dir = sys.argv[1]
    config = LogConfig(retention_ms=-1, file_delete_delay_ms=0, segment_bytes=300)
    m = LogManager([log_dir], lambda topic: config, Clock())
    m.startup()
    log = m.create_log("t", 0)
    for i in range(20):
        log.append(validated(log, [i]))
    log.flush()
    log.increment_log_start_offset(13)
    m.checkpoint_log_start_offsets()
    print(len(log.segments), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_start_offset_survives_kill_9(tmp_path, clock):
    log_dir = tmp_path / "d1"
    assert (
        int(run_killed(_KILLED, str(log_dir))[-1]) > 3
    )  # several segments, so 13 lies past the first one
    assert not os.path.exists(log_dir / ".kafka_cleanshutdown")
    m = manager(tmp_path, clock)
    m.startup()  # unclean: recovery runs, the checkpointed start holds
    log = m.get_log("t", 0)
    assert (log.log_start_offset, log.log_end_offset) == (13, 20)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(12, 1000)
    assert offsets(log, 13)[0] == 13
    assert log.delete_expired_segments(clock.now) > 0  # the segments wholly below 13 go
    assert log.first_segment_base <= 13 < log.segments[1].base_offset
    m.shutdown()
