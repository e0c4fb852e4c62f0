"""The active segment's index entries are written at flush, roll and close, not as they are made:
a written partition holds one descriptor (its .log), and a kill -9 that leaves the index files
behind their logs loses no look-up, since recovery rebuilds them from the recovery point and
everything below it was written and fsynced first."""

from __future__ import annotations

import collections
import os
import shutil
import textwrap
from pathlib import Path

from protocol.records import first_offset, iter_deep, iter_shallow
from storage import Log, LogConfig, LogManager, TimestampOffset
from storage.dump import main as dump_log
from tests.storage.helpers import run_killed, validated

BASE_TS = 1_700_000_000_000
KILLED_CONFIG = dict(segment_bytes=3000, index_interval_bytes=100, retention_ms=-1)


def held_files(root: Path) -> collections.Counter[str]:
    """The suffixes of the files under ``root`` that this process holds a descriptor on."""
    held: collections.Counter[str] = collections.Counter()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:  # the descriptor listdir itself used
            continue
        if target.startswith(str(root)):
            held[os.path.splitext(target)[1]] += 1
    return held


def test_200_written_partitions_hold_200_descriptors_not_600(tmp_path, clock):
    config = LogConfig(index_interval_bytes=1)
    logs = [
        Log(str(tmp_path / f"t-{p}"), config, clock=clock, needs_recovery=False) for p in range(200)
    ]
    for log in logs:
        for i in range(3):
            log.append(validated(log, [BASE_TS + i]))
    assert all(log.active_segment.offset_index.entries == 2 for log in logs)
    assert held_files(tmp_path) == {".log": 200}
    for log in logs:
        log.flush()
    assert held_files(tmp_path) == {".log": 200}
    for log in logs:
        log.close()
    assert held_files(tmp_path) == {}


_KILLED = textwrap.dedent(
    """
    import os, signal, sys
    from storage import LogConfig, LogManager
    from tests.storage.helpers import Clock, validated

    config = LogConfig(**%r)
    m = LogManager([sys.argv[1]], lambda topic: config, Clock())
    m.startup()
    log = m.create_log("t", 0)
    for i in range(150):
        stamps = [%d + (i * 7919) %% 1000 + j for j in range(i %% 3 + 1)]
        log.append(validated(log, stamps, magic=2, value_size=30))
        if i == 100:
            log.flush()
            m.checkpoint_recovery_points()
    active = log.active_segment
    on_disk = os.path.getsize(active.offset_index.path) // 8
    print(len(log.segments), active.offset_index.entries, on_disk, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
    % (KILLED_CONFIG, BASE_TS)
)


def brute_force(log: Log) -> list[tuple[int, int, int]]:
    """(first offset of its batch, offset, timestamp) of every message, by a scan of every
    segment file."""
    out = []
    for segment in log.segments:
        data = open(segment.log_path, "rb").read()
        for entry in iter_shallow(data):
            for m in iter_deep(data[entry.position : entry.next_position]):
                out.append((first_offset(data, entry), m.offset, m.timestamp))
    return out


def test_a_kill_before_any_flush_loses_no_look_up(tmp_path, clock):
    log_dir = tmp_path / "killed"
    segments, in_memory, on_disk = map(int, run_killed(_KILLED, str(log_dir))[-1].split())
    assert segments > 3
    assert on_disk < in_memory  # the kill left the active segment's index behind its log
    twin_dir = tmp_path / "twin"
    shutil.copytree(log_dir, twin_dir)

    m = LogManager([str(log_dir)], lambda topic: LogConfig(**KILLED_CONFIG), clock)
    m.startup()  # unclean: recovery from the checkpointed recovery point
    log = m.get_log("t", 0)
    messages = brute_force(log)
    assert [offset for _, offset, _ in messages] == list(range(log.log_end_offset))
    for first, offset, _ in messages:
        read = log.read(offset, 1, min_one_message=True).read_bytes()
        assert first_offset(read, next(iter_shallow(read))) == first, offset
    for target in range(BASE_TS - 1, BASE_TS + 1005, 3):
        expected = next(
            (TimestampOffset(ts, offset) for _, offset, ts in messages if ts >= target), None
        )
        assert log.offset_for_timestamp(target) == expected, target
    active = log.active_segment
    assert os.path.getsize(active.offset_index.path) == active.offset_index.entries * 8
    m.shutdown()

    # Below the recovery point nothing was rescanned: those indexes were complete on disk, as
    # a rebuild of every segment makes them.
    twin = Log(str(twin_dir / "t-0"), LogConfig(**KILLED_CONFIG), clock=clock, recovery_point=0)
    twin.close()
    names = sorted(n for n in os.listdir(log_dir / "t-0") if n.endswith(("index", ".log")))
    assert names == sorted(n for n in os.listdir(twin_dir / "t-0") if n.endswith(("index", ".log")))
    for name in names:
        assert (log_dir / "t-0" / name).read_bytes() == (twin_dir / "t-0" / name).read_bytes(), name
    index_files = [str(log_dir / "t-0" / n) for n in names if n.endswith("index")]
    assert dump_log(["--verify", *index_files]) == 0
