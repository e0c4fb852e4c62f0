"""storage.dump: DumpLogSegments-style output, --deep, --verify and exit statuses."""

from __future__ import annotations

import os
import struct

from tests.storage.helpers import validated
from protocol.compression import Codec
from storage import Log, LogConfig
from storage.dump import main


def make_log(tmp_path, clock):
    log = Log(
        str(tmp_path / "t-0"), LogConfig(index_interval_bytes=50), clock=clock, needs_recovery=False
    )
    for i in range(10):
        log.append(
            validated(log, [100 + (i * 3) % 7, 50], codec=Codec.GZIP if i % 3 == 0 else Codec.NONE)
        )
    log.close()
    return log.segments[0]


def test_dump_log_prints_entries_and_deep_messages(tmp_path, clock, capsys):
    seg = make_log(tmp_path, clock)
    assert main([seg.log_path]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith(
        "offset: 1 position: 0 magic: 1 compresscodec: GZIP "
        "timestamptype: CREATE_TIME timestamp: 100 keysize: -1"
    )
    assert out[1].endswith("isvalid: true")
    assert "keysize: 2 valuesize: 10" in out[2]
    assert main(["--deep", seg.log_path]) == 0
    deep = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    assert deep[0] == (
        "| offset: 0 magic: 1 timestamptype: CREATE_TIME timestamp: 100 keysize: 2 valuesize: 10"
    )
    assert len(deep) == 8  # 4 wrappers x 2 messages


def test_verify_indexes_of_a_sound_segment(tmp_path, clock, capsys):
    seg = make_log(tmp_path, clock)
    base = seg.log_path[:-4]
    assert main(["--verify", base + ".index", base + ".timeindex"]) == 0
    out = capsys.readouterr().out
    assert out.count("verified") == 2 and "mismatch" not in out


def test_verify_reports_a_wrong_index_entry(tmp_path, clock, capsys):
    seg = make_log(tmp_path, clock)
    index_path = seg.log_path[:-4] + ".index"
    with open(index_path, "r+b") as f:
        rel, pos = struct.unpack(">ii", f.read(8))
        f.seek(0)
        f.write(struct.pack(">ii", rel, pos + 1))
    assert main(["--verify", index_path]) == 1
    assert "is not the start of an entry" in capsys.readouterr().out
    time_path = seg.log_path[:-4] + ".timeindex"
    with open(time_path, "r+b") as f:
        ts, rel = struct.unpack(">qi", f.read(12))
        f.seek(0)
        f.write(struct.pack(">qi", ts + 1, rel))
    assert main(["--verify", time_path]) == 1
    assert "the largest timestamp up to offset" in capsys.readouterr().out


def test_corrupt_and_torn_log_give_nonzero_status(tmp_path, clock, capsys):
    seg = make_log(tmp_path, clock)
    size = os.path.getsize(seg.log_path)
    with open(seg.log_path, "r+b") as f:
        f.seek(size - 2)
        f.write(b"\xff\xfe")
    assert main([seg.log_path]) == 1
    assert "isvalid: false problem:" in capsys.readouterr().out
    os.truncate(seg.log_path, size - 5)
    assert main([seg.log_path]) == 1
    assert "do not form a complete entry" in capsys.readouterr().out


def test_missing_and_unknown_files_are_explained(tmp_path, capsys):
    assert main([str(tmp_path / "00000000000000000000.log")]) == 2
    err = capsys.readouterr().err
    assert "cannot read: No such file or directory" in err
    (tmp_path / "notes.txt").write_text("x")
    assert main([str(tmp_path / "notes.txt")]) == 2
    assert "not a segment file" in capsys.readouterr().err


def test_dump_shows_the_cleaner_checkpoint(tmp_path, clock, capsys):
    from storage.checkpoint import cleaner_checkpoint_path, write_checkpoint

    seg = make_log(tmp_path, clock)
    path = cleaner_checkpoint_path(str(tmp_path))
    write_checkpoint(path, {("t", 0): 7, ("u", 3): 0})
    assert main([path]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        "topic: t partition: 0 firstDirtyOffset: 7",
        "topic: u partition: 3 firstDirtyOffset: 0",
    ]
    assert main([seg.log_path]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "cleaner checkpoint: t-0 is cleaned below offset 7 (this segment starts cleaned)"
    )
    with open(path, "w") as f:
        f.write("0\n2\nt 0 7\n")
    assert main([path]) == 1
    assert "announces 2 entries" in capsys.readouterr().out
