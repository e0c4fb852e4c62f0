"""LogManager: start-up over several log dirs, placement, deletion, periodic work, shutdown."""

from __future__ import annotations

import os

import pytest
from structlog.testing import capture_logs

from tests.storage.helpers import validated
from protocol.records import iter_deep
from storage import InvalidTopicError, LogConfig, LogManager, LogNotFoundError, Maintenance

DAY = 86_400_000


def manager(tmp_path, clock, dirs=("d1", "d2"), config=None):
    config = config or LogConfig()
    return LogManager([str(tmp_path / d) for d in dirs], lambda topic: config, clock)


def test_new_logs_go_to_the_dir_with_fewest_partitions(tmp_path, clock):
    m = manager(tmp_path, clock, dirs=("d1", "d2", "d3"))
    m.startup()
    for p in range(6):
        m.create_log("t", p)
    counts = {d: len(os.listdir(tmp_path / d)) for d in ("d1", "d2", "d3")}
    assert counts == {"d1": 2, "d2": 2, "d3": 2}
    assert m.create_log("t", 0) is m.get_log("t", 0)
    assert m.get_log("t", 9) is None
    assert m.topics() == {"t": 6}


@pytest.mark.parametrize("topic", ["", "..", "bad/name", "x" * 250, "spaces here"])
def test_bad_topic_names_are_refused(tmp_path, clock, topic):
    m = manager(tmp_path, clock)
    m.startup()
    with pytest.raises(InvalidTopicError):
        m.create_log(topic, 0)
    assert m.all_logs() == []


def test_shutdown_then_startup_is_clean(tmp_path, clock):
    m = manager(tmp_path, clock)
    m.startup()
    for p in range(3):
        log = m.create_log("orders", p)
        log.append(validated(log, [p, p + 1]))
    m.shutdown()
    for d in ("d1", "d2"):
        assert os.path.exists(tmp_path / d / ".kafka_cleanshutdown")
        assert os.path.exists(tmp_path / d / "recovery-point-offset-checkpoint")
    cp = sorted((tmp_path / "d1" / "recovery-point-offset-checkpoint").read_text().splitlines())
    assert "orders 0 2" in cp
    m2 = manager(tmp_path, clock)
    with capture_logs() as logs:
        m2.startup()
    assert sum(e["event"] == "clean shutdown marker found: no recovery needed" for e in logs) == 2
    assert not any(e["event"] == "log recovered after unclean shutdown" for e in logs)
    assert not os.path.exists(tmp_path / "d1" / ".kafka_cleanshutdown")
    assert m2.topics() == {"orders": 3}
    log = m2.get_log("orders", 2)
    assert [m.timestamp for m in iter_deep(log.read(0, 1000).read_bytes())] == [2, 3]
    assert log.recovery_point == 2


def test_unclean_start_recovers_from_checkpointed_recovery_point(tmp_path, clock):
    m = manager(tmp_path, clock, dirs=("d1",))
    m.startup()
    log = m.create_log("t", 0)
    log.append(validated(log, [1]))
    log.flush()
    m.checkpoint_recovery_points()
    log.append(validated(log, [2]))
    path, size = log.active_segment.log_path, log.active_segment.size
    os.truncate(path, size - 1)  # crash: torn last set, no clean shutdown
    m2 = manager(tmp_path, clock, dirs=("d1",))
    with capture_logs() as logs:
        m2.startup()
    line = [e for e in logs if e["event"] == "log recovered after unclean shutdown"][0]
    assert line["recovery_point"] == 1 and line["truncated_bytes"] > 0
    assert m2.get_log("t", 0).log_end_offset == 1


def test_unreadable_checkpoint_recovers_from_zero(tmp_path, clock):
    m = manager(tmp_path, clock, dirs=("d1",))
    m.startup()
    log = m.create_log("t", 0)
    log.append(validated(log, [1]))
    m.shutdown()
    (tmp_path / "d1" / "recovery-point-offset-checkpoint").write_text("garbage")
    m2 = manager(tmp_path, clock, dirs=("d1",))
    with capture_logs() as logs:
        m2.startup()
    assert any(e["event"].startswith("recovery point checkpoint unreadable") for e in logs)
    line = [e for e in logs if e["event"] == "log recovered after unclean shutdown"][0]
    assert line["recovery_point"] == 0
    assert m2.get_log("t", 0).log_end_offset == 1


def test_delete_topic_removes_its_directories(tmp_path, clock):
    m = manager(tmp_path, clock)
    m.startup()
    m.create_log("gone", 0)
    m.create_log("gone", 1)
    m.create_log("kept", 0)
    assert m.delete_topic("gone") == 2
    assert m.topics() == {"kept": 1}
    left = sorted(os.listdir(tmp_path / "d1") + os.listdir(tmp_path / "d2"))
    assert left == ["kept-0"]
    with pytest.raises(LogNotFoundError, match="'gone'"):
        m.delete_topic("gone")


def test_startup_removes_interrupted_deletions_and_ignores_strangers(tmp_path, clock):
    (tmp_path / "d1" / "t-0.abc123-delete").mkdir(parents=True)
    (tmp_path / "d1" / "lost+found").mkdir()
    m = manager(tmp_path, clock, dirs=("d1",))
    m.startup()
    assert sorted(os.listdir(tmp_path / "d1")) == ["lost+found"]
    assert m.all_logs() == []


def test_periodic_work_retention_flush_and_deleted_files(tmp_path, clock):
    config = LogConfig(retention_ms=DAY, flush_ms=1000, file_delete_delay_ms=5000)
    m = manager(tmp_path, clock, dirs=("d1",), config=config)
    m.startup()
    log = m.create_log("t", 0)
    log.append(validated(log, [clock.now - 2 * DAY]))
    log.roll()
    log.append(validated(log, [clock.now]))
    idle = m.create_log("t", 1)

    def run_due(task):
        return {key: m.run(task, log, clock.now) for key, log in m.due(task, clock.now)}

    assert run_due(Maintenance.FLUSH) == {}  # not yet flush.ms old
    clock.advance(1000)
    assert run_due(Maintenance.FLUSH) == {("t", 0): 1} and log.recovery_point == 2
    assert run_due(Maintenance.FLUSH) == {}
    assert run_due(Maintenance.RETENTION) == {("t", 0): 1, ("t", 1): 0}
    assert any(n.endswith(".deleted") for n in os.listdir(log.directory))
    assert run_due(Maintenance.DELETE_FILES) == {}  # file.delete.delay.ms not passed
    clock.advance(5000)
    assert run_due(Maintenance.DELETE_FILES) == {("t", 0): 1}
    assert not any(n.endswith(".deleted") for n in os.listdir(log.directory))
    assert idle.log_end_offset == 0


def test_idle_partitions_hold_no_file_descriptors(tmp_path, clock):
    m = manager(tmp_path, clock)
    m.startup()
    for p in range(50):
        log = m.create_log("idle", p)
        log.append(validated(log, [p]))
        log.roll()
        log.append(validated(log, [p]))
    m.shutdown()
    before = len(os.listdir("/proc/self/fd"))
    m2 = manager(tmp_path, clock)
    m2.startup()
    assert len(os.listdir("/proc/self/fd")) - before <= 2
    for log in m2.all_logs():  # inactive segments' indexes are not loaded
        first = log.segments[0]
        assert not first.offset_index.is_loaded and not first.time_index.is_loaded
    log = m2.get_log("idle", 7)
    assert [m.offset for m in iter_deep(log.read(0, 1000).read_bytes())] == [0]
    assert log.segments[0].offset_index.is_loaded
    m2.shutdown()
