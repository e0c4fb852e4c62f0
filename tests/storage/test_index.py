"""OffsetIndex and TimeIndex: binary layout, lookups, truncation, fullness, sanity checks."""

from __future__ import annotations

import errno
import os
import struct

import pytest

from storage.errors import CorruptIndexError, InvalidAppendError
from storage import syscalls
from storage.index import OffsetIndex, TimeIndex

BASE = 1000


def offset_index(tmp_path, max_bytes=4096):
    return OffsetIndex(str(tmp_path / f"{BASE:020d}.index"), BASE, max_bytes)


def time_index(tmp_path, max_bytes=4096):
    return TimeIndex(str(tmp_path / f"{BASE:020d}.timeindex"), BASE, max_bytes)


def test_offset_index_file_layout_is_big_endian_relative_offset_then_position(tmp_path):
    index = offset_index(tmp_path)
    index.append(BASE + 5, 4200)
    index.append(BASE + 9, 8400)
    index.flush()
    raw = open(index.path, "rb").read()
    assert raw == struct.pack(">ii", 5, 4200) + struct.pack(">ii", 9, 8400)


def test_time_index_file_layout_is_big_endian_timestamp_then_relative_offset(tmp_path):
    index = time_index(tmp_path)
    index.maybe_append(1_600_000_000_000, BASE + 3)
    index.flush()
    raw = open(index.path, "rb").read()
    assert raw == struct.pack(">qi", 1_600_000_000_000, 3)
    assert os.path.getsize(index.path) == 12  # no preallocated tail


def test_offset_lookup_returns_floor_entry_or_base(tmp_path):
    index = offset_index(tmp_path)
    for i in range(1, 50):
        index.append(BASE + i * 10, i * 100)
    assert index.lookup(BASE) == (BASE, 0)
    assert index.lookup(BASE + 9) == (BASE, 0)
    assert index.lookup(BASE + 10) == (BASE + 10, 100)
    assert index.lookup(BASE + 255) == (BASE + 250, 2500)
    assert index.lookup(BASE + 10**6) == (BASE + 490, 4900)


def test_offset_index_refuses_out_of_order_and_overflowing_entries(tmp_path):
    index = offset_index(tmp_path)
    index.append(BASE + 10, 100)
    with pytest.raises(InvalidAppendError, match="does not follow"):
        index.append(BASE + 10, 200)
    with pytest.raises(InvalidAppendError, match="does not follow"):
        index.append(BASE + 11, 100)
    with pytest.raises(InvalidAppendError, match="does not fit"):
        index.append(BASE + 2**31, 300)
    assert index.entries == 1


def test_offset_index_full_at_max_entries(tmp_path):
    index = offset_index(tmp_path, max_bytes=8 * 3 + 7)
    for i in range(1, 4):
        assert not index.is_full()
        index.append(BASE + i, i)
    assert index.is_full()
    with pytest.raises(InvalidAppendError, match="full"):
        index.append(BASE + 10, 10)


def test_time_index_appends_only_growing_timestamps(tmp_path):
    index = time_index(tmp_path)
    index.maybe_append(100, BASE + 1)
    index.maybe_append(100, BASE + 2)  # not above the last: skipped
    index.maybe_append(50, BASE + 3)  # older: skipped
    index.maybe_append(200, BASE + 4)
    assert [index.entry(i) for i in range(index.entries)] == [(100, BASE + 1), (200, BASE + 4)]
    with pytest.raises(InvalidAppendError, match="below the last entry's offset"):
        index.maybe_append(300, BASE + 3)


def test_empty_time_index_reads_as_minus_one_at_base(tmp_path):
    index = time_index(tmp_path)
    assert index.last_entry() == (-1, BASE)
    assert index.lookup_before(10) == (-1, BASE)
    index.maybe_append(-1, BASE)  # -1 is never indexed
    assert index.entries == 0


def test_time_lookup_is_strictly_below_target(tmp_path):
    index = time_index(tmp_path)
    for i, ts in enumerate([100, 200, 300], start=1):
        index.maybe_append(ts, BASE + i * 10)
    assert index.lookup_before(100) == (-1, BASE)
    assert index.lookup_before(101) == (100, BASE + 10)
    assert index.lookup_before(300) == (200, BASE + 20)
    assert index.lookup_before(10**15) == (300, BASE + 30)


def test_time_index_keeps_one_slot_for_the_roll_entry(tmp_path):
    index = time_index(tmp_path, max_bytes=12 * 3)
    index.maybe_append(1, BASE + 1)
    index.maybe_append(2, BASE + 2)
    assert index.is_full()
    with pytest.raises(InvalidAppendError, match="full"):
        index.maybe_append(3, BASE + 3)
    index.maybe_append(3, BASE + 3, skip_full_check=True)
    assert index.entries == 3
    with pytest.raises(InvalidAppendError, match="no free slot"):
        index.maybe_append(4, BASE + 4, skip_full_check=True)


def test_truncate_drops_entries_at_or_after_offset_and_shrinks_file(tmp_path):
    oi, ti = offset_index(tmp_path), time_index(tmp_path)
    for i in range(1, 6):
        oi.append(BASE + i * 10, i * 100)
        ti.maybe_append(i * 1000, BASE + i * 10)
    oi.flush()
    ti.flush()
    oi.truncate_to(BASE + 30)
    ti.truncate_to(BASE + 31)
    assert oi.entries == 2 and os.path.getsize(oi.path) == 16
    assert ti.entries == 3 and os.path.getsize(ti.path) == 36
    assert ti.last_entry() == (3000, BASE + 30)
    oi.truncate_to(BASE)
    assert oi.entries == 0 and os.path.getsize(oi.path) == 0


def test_closed_index_reloads_lazily_from_file(tmp_path):
    index = offset_index(tmp_path)
    index.append(BASE + 4, 40)
    index.write_pending()
    index.close()
    assert not index.is_loaded
    fresh = offset_index(tmp_path)
    assert fresh.last_entry() == (BASE + 4, 40)  # read without loading the whole file
    assert not fresh.is_loaded
    assert fresh.lookup(BASE + 100) == (BASE + 4, 40)
    assert fresh.is_loaded


def test_sanity_check_refuses_partial_entries(tmp_path):
    path = tmp_path / f"{BASE:020d}.index"
    path.write_bytes(b"\x00" * 12)
    with pytest.raises(CorruptIndexError, match="not a multiple of the 8-byte entry size"):
        offset_index(tmp_path).sanity_check(log_size=1000)


def test_sanity_check_catches_zero_padded_preallocated_tail(tmp_path):
    # What Kafka leaves after a crash: real entries followed by preallocated zeros.
    path = tmp_path / f"{BASE:020d}.timeindex"
    path.write_bytes(struct.pack(">qi", 500, 7) + b"\x00" * 120)
    with pytest.raises(CorruptIndexError, match="out of order|below the first"):
        time_index(tmp_path).sanity_check()
    opath = tmp_path / f"{BASE:020d}.index"
    opath.write_bytes(struct.pack(">ii", 7, 300) + b"\x00" * 80)
    with pytest.raises(CorruptIndexError):
        offset_index(tmp_path).sanity_check(log_size=1000)


def test_sanity_check_catches_entry_beyond_the_log(tmp_path):
    index = offset_index(tmp_path)
    index.append(BASE + 3, 500)
    with pytest.raises(CorruptIndexError, match="beyond the 400-byte log"):
        index.sanity_check(log_size=400)
    index.sanity_check(log_size=501)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_entries_reach_the_file_in_one_write_at_flush_and_no_descriptor_stays_open(
    tmp_path, monkeypatch
):
    writes: list[int] = []
    real_write = syscalls.write

    def counting_write(fd, data):
        writes.append(len(data))
        return real_write(fd, data)

    monkeypatch.setattr(syscalls, "write", counting_write)
    index = offset_index(tmp_path)
    fds = open_fds()
    for i in range(1, 6):
        index.append(BASE + i, i * 100)
    assert open_fds() == fds and writes == [] and not os.path.exists(index.path)
    assert index.lookup(BASE + 3) == (BASE + 3, 300)  # lookups read the entries in memory
    index.flush()
    assert writes == [40] and os.path.getsize(index.path) == 40 and open_fds() == fds
    index.append(BASE + 6, 600)
    index.flush()
    index.flush()  # nothing new: nothing written
    assert writes == [40, 8] and os.path.getsize(index.path) == 48


def test_truncating_unwritten_entries_leaves_the_file_alone(tmp_path):
    index = offset_index(tmp_path)
    for i in range(1, 4):
        index.append(BASE + i * 10, i * 100)
    index.flush()
    index.append(BASE + 40, 400)
    index.append(BASE + 50, 500)
    index.truncate_to(BASE + 45)
    assert index.entries == 4 and os.path.getsize(index.path) == 24
    index.flush()
    assert open(index.path, "rb").read()[24:] == struct.pack(">ii", 40, 400)


def test_a_write_refused_by_a_full_disk_is_cut_off_and_retried_whole(tmp_path, monkeypatch):
    index = time_index(tmp_path)
    index.maybe_append(100, BASE + 1)
    index.flush()
    index.maybe_append(200, BASE + 2)
    index.maybe_append(300, BASE + 3)
    real_write = syscalls.write

    def half_then_enospc(fd, data):
        real_write(fd, bytes(data)[: len(data) // 2 + 1])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as m:
        m.setattr(syscalls, "write", half_then_enospc)
        with pytest.raises(OSError):
            index.flush()
    assert os.path.getsize(index.path) == 12  # no torn entry
    assert index.last_entry() == (300, BASE + 3)
    index.flush()
    reread = time_index(tmp_path)
    assert [reread.entry(i) for i in range(reread.entries)] == [
        (100, BASE + 1),
        (200, BASE + 2),
        (300, BASE + 3),
    ]
