"""LogManager with a log dir that fails (KIP-112): taken offline, the others served."""

from __future__ import annotations

import errno

import pytest

from protocol.records import iter_deep
from storage import LogClosedError, LogConfig, LogManager
from tests.storage.helpers import validated


def manager(tmp_path, clock, dirs=("d1", "d2")):
    return LogManager([str(tmp_path / d) for d in dirs], lambda topic: LogConfig(), clock)


def test_a_dir_that_fails_at_runtime_goes_offline_and_its_logs_are_abandoned(tmp_path, clock):
    m = manager(tmp_path, clock)
    m.startup()
    logs = {p: m.create_log("t", p) for p in range(4)}
    for p, log in logs.items():
        log.append(validated(log, [p]))
    bad = m.log_dir_of("t", 0)
    on_bad = m.partitions_in(bad)
    assert on_bad == [("t", 0), ("t", 2)]

    assert m.mark_offline(bad, OSError(errno.EIO, "Input/output error")) == on_bad
    assert m.mark_offline(bad, OSError(errno.EIO, "again")) == []  # once
    for p in range(4):
        offline = ("t", p) in on_bad
        assert m.is_offline("t", p) is offline
        assert (m.get_log("t", p) is None) is offline
    with pytest.raises(LogClosedError):
        logs[0].read(0, 100)
    assert m.log_dir_of("t", 0) == bad  # still known to be there
    # New logs go to the healthy dir; its logs keep working; shutdown reports the offline dir.
    assert m.log_dir_of(*("t", 9)) is None
    m.create_log("t", 9)
    assert m.log_dir_of("t", 9) != bad
    log = m.get_log("t", 1)
    log.append(validated(log, [7]))
    assert [x.offset for x in iter_deep(log.read(0, 1 << 20).read_bytes())] == [0, 1]
    assert m.shutdown() == [bad]


def test_a_dir_unreadable_at_start_up_is_offline_and_the_others_load(tmp_path, clock):
    m = manager(tmp_path, clock)
    m.startup()
    for p in range(2):
        log = m.create_log("t", p)
        log.append(validated(log, [p]))
    assert m.shutdown() == []
    (tmp_path / "d2").rename(tmp_path / "moved")
    (tmp_path / "d2").write_bytes(b"not a directory")  # makedirs/listdir fail: ENOTDIR

    again = manager(tmp_path, clock)
    again.startup()
    assert list(again.offline_dirs) == [str(tmp_path / "d2")]
    assert again.get_log("t", 0) is not None and not again.is_offline("t", 0)
    # What the unreadable dir held is unknown: any partition not found elsewhere may be in it,
    # so the broker must not create an empty copy of it elsewhere.
    assert again.is_offline("t", 1) and again.is_offline("other", 0)


def test_start_up_fails_only_when_no_log_dir_can_be_used(tmp_path, clock):
    for d in ("d1", "d2"):
        (tmp_path / d).write_bytes(b"")
    with pytest.raises(OSError, match="every log dir is offline"):
        manager(tmp_path, clock).startup()
