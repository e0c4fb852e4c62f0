"""A failed append leaves the log exactly as it was: injected errors at every write and fsync.

One append that rolls a segment, writes index entries and flushes (flush.messages=1) makes a
fixed sequence of pwrite / write / fsync calls through storage/syscalls.py, the fault-injection
seam. For each call in turn the fault is injected there (ENOSPC, EIO, EDQUOT; a write lands half
its bytes first, as on a disk that fills mid-write): the append must raise that OSError, the log
must read as before with no torn bytes on disk (``chronolog dump-log --verify`` passes), and once
the fault is gone the same set appends, survives a clean and an unclean reopen.

Then EIO at every write and fsync of a whole day in a log's life (appends, scheduled flushes,
retention, file removal, checkpoints, truncation, shutdown): after the failure and a restart with
recovery, every acknowledged message that retention did not remove is there, densely, and the
files verify.
"""

from __future__ import annotations

import errno
import os

import pytest

from protocol.records import iter_deep
from storage import Log, LogConfig, LogManager, Maintenance
from storage import syscalls
from storage.dump import main as dump_log
from tests.storage.helpers import validated

CALLS = ("pwrite", "write", "fsync")
CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=1, flush_messages=1)


class Faults:
    """Counts the storage layer's write and fsync calls through its fault-injection seam
    (storage/syscalls.py); raises ``error`` at call ``fail_at``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        self.fail_at: int | None = None
        self.error = errno.ENOSPC
        for name in CALLS:
            real = getattr(syscalls, name)
            monkeypatch.setattr(syscalls, name, self._wrap(name, real))

    def _wrap(self, name, real):
        def call(fd, *args):
            self.calls.append(name)
            if self.fail_at is not None and len(self.calls) - 1 == self.fail_at:
                if name != "fsync":  # the disk fills mid-write: half the bytes land first
                    data, *position = args
                    real(fd, bytes(data)[: len(data) // 2], *position)
                raise OSError(self.error, os.strerror(self.error))
            return real(fd, *args)

        return call


def contents(log: Log) -> list[tuple[int, bytes | None]]:
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        msgs = [m for m in iter_deep(log.read(offset, 1 << 20).read_bytes()) if m.offset >= offset]
        out += [(m.offset, m.value) for m in msgs]
        offset = msgs[-1].offset + 1
    return out


def on_disk_matches(log: Log) -> None:
    """No torn tail: each segment file is exactly as long as the log thinks, and every file
    passes dump-log --verify (index entries against the .log)."""
    for segment in log.segments:
        assert os.path.getsize(segment.log_path) == segment.size, segment
    files = sorted(os.path.join(log.directory, f) for f in os.listdir(log.directory))
    assert dump_log(["--verify", *[f for f in files if f.endswith((".log", ".index"))]]) == 0


def prepared_log(path, clock) -> Log:
    log = Log(str(path), CONFIG, clock=clock)
    for i in range(5):
        log.append(validated(log, [1000 + i, 2000 + i], value_size=40))
    return log


def victim(log: Log):
    """A set whose append rolls (it does not fit the active segment), indexes and flushes."""
    return validated(log, [5000, 5001, 5002], value_size=150)


def test_the_victim_append_exercises_every_call_site(tmp_path, clock, monkeypatch):
    log = prepared_log(tmp_path / "t-0", clock)
    faults = Faults(monkeypatch)
    result = log.append(victim(log))
    assert result.rolled is not None and result.synced
    assert set(faults.calls) == set(CALLS), faults.calls


def _count_calls(tmp_path, clock, monkeypatch) -> int:
    log = prepared_log(tmp_path / "count-0", clock)
    with monkeypatch.context() as m:
        faults = Faults(m)
        log.append(victim(log))
    log.close()
    return len(faults.calls)


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EIO, errno.EDQUOT])
def test_a_fault_at_any_call_leaves_the_log_as_it_was(tmp_path, clock, monkeypatch, error):
    total = _count_calls(tmp_path, clock, monkeypatch)
    assert total >= 5
    for k in range(total):
        log = prepared_log(tmp_path / f"k{k}-0", clock)
        before, end = contents(log), log.log_end_offset
        records = victim(log)
        with monkeypatch.context() as m:
            faults = Faults(m)
            faults.error, faults.fail_at = error, k
            with pytest.raises(OSError) as raised:
                log.append(records)
        assert raised.value.errno == error, f"call {k} ({faults.calls[k]})"
        assert log.log_end_offset == end, f"call {k} ({faults.calls[k]})"
        assert contents(log) == before, f"call {k} ({faults.calls[k]})"
        on_disk_matches(log)

        # The disk is healthy again: the same set appends where it would have.
        log.append(victim(log))
        after = contents(log)
        assert after[: len(before)] == before
        assert [o for o, _ in after[len(before) :]] == [end, end + 1, end + 2]
        on_disk_matches(log)
        log.close()
        for needs_recovery in (True, False):
            reopened = Log(log.directory, CONFIG, clock=clock, needs_recovery=needs_recovery)
            assert contents(reopened) == after
            reopened.close()


# -- every write and fsync of a day in a log's life ---------------------------------------------
LIFE_CONFIG = LogConfig(
    segment_bytes=700,
    index_interval_bytes=1,
    flush_messages=3,
    flush_ms=0,
    retention_bytes=1500,
    file_delete_delay_ms=0,
)


def a_day_in_the_life(manager, acked: list, clock) -> None:
    """Appends that roll, index and flush, a scheduled flush, retention with file removal, a
    checkpoint, a truncation and a clean shutdown: every storage write and fsync site. Appends
    that return are recorded in ``acked`` as (offset, value)."""
    log = manager.create_log("life", 0)
    for i in range(8):
        records = validated(log, [1000 + i, 900 + i], value_size=60 + i)
        log.append(records)
        acked += [(m.offset, m.value) for m in iter_deep(bytes(records.buffer))]
        clock.advance(10)
        manager.run(Maintenance.FLUSH, log, clock())
    manager.run(Maintenance.RETENTION, log, clock())
    manager.run(Maintenance.DELETE_FILES, log, clock())
    manager.checkpoint_recovery_points()
    records = validated(log, [5000], value_size=30)
    log.append(records)
    log.truncate_to(records.first_offset)  # as a follower would; nothing acked is cut
    manager.shutdown()


def test_eio_at_any_write_or_fsync_loses_nothing_acknowledged(tmp_path, clock, monkeypatch):
    def run(root, fail_at=None):
        manager = LogManager([str(root)], lambda topic: LIFE_CONFIG, clock)
        manager.startup()
        acked: list = []
        with monkeypatch.context() as m:
            faults = Faults(m)
            faults.error, faults.fail_at = errno.EIO, fail_at
            try:
                a_day_in_the_life(manager, acked, clock)
            except OSError as exc:
                assert fail_at is not None and exc.errno == errno.EIO
                for log in manager.all_logs():  # what a broker does with a failed dir
                    log.abandon()
        return acked, faults.calls

    _, calls = run(tmp_path / "count")
    assert set(calls) == set(CALLS) and len(calls) > 20
    clean = LogManager([str(tmp_path / "count")], lambda topic: LIFE_CONFIG, clock)
    clean.startup()
    retained_from = clean.get_log("life", 0).log_start_offset  # where retention moved it
    clean.shutdown()
    assert retained_from > 0
    for k in range(len(calls)):
        root = tmp_path / f"k{k}"
        acked, _ = run(root, fail_at=k)
        manager = LogManager([str(root)], lambda topic: LIFE_CONFIG, clock)
        manager.startup()  # recovery, as after a restart on a repaired disk
        log = manager.get_log("life", 0)
        kept = contents(log)
        # Retention ran or it did not; nothing else may move the log start.
        assert log.log_start_offset in (0, retained_from), f"call {k} ({calls[k]})"
        survivors = [entry for entry in acked if entry[0] >= log.log_start_offset]
        assert kept[: len(survivors)] == survivors, f"call {k} ({calls[k]})"
        assert [o for o, _ in kept] == list(range(log.log_start_offset, log.log_end_offset))
        files = sorted(
            str(p) for p in (root / "life-0").iterdir() if p.suffix in (".log", ".index")
        )
        assert dump_log(["--verify", *files]) == 0, f"call {k} ({calls[k]})"
        manager.shutdown()
