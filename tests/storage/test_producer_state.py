"""Idempotent producers' state: Kafka 3.9's sequence and epoch rules, and the rebuild from the
log after a reopen or a truncation."""

from __future__ import annotations

import os

import pytest

from protocol.records import MessageSetBuilder
from protocol.validator import TopicSettings, validate_produce
from storage import Log, LogConfig
from storage.layout import segment_path
from storage.producer_state import (
    BATCHES_KEPT,
    Duplicate,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    ProducerStateManager,
)

NOW = 1_700_000_000_000


def record(p, producer_id, epoch, first_seq, last_seq, first_offset, last_offset, ts, txn=False):
    """Record a stored batch as a replay of the log does (no checks)."""
    info = p.prepare_update(producer_id, client=False)
    info.append_data(epoch, first_seq, last_seq, first_offset, last_offset, ts, txn)
    p.update(info)


def test_sequences_duplicates_and_epochs():
    p = ProducerStateManager()
    assert p.check(7, 0, 5, 9) is None  # unknown producer: any sequence (state lost)
    record(p, 7, 0, 5, 9, 100, 104, NOW)
    assert p.check(7, 0, 5, 9) == Duplicate(100, 104, NOW)
    with pytest.raises(OutOfOrderSequenceError, match="after 9"):
        p.check(7, 0, 11, 12)
    assert p.check(7, 0, 10, 12) is None
    for i in range(BATCHES_KEPT):
        record(p, 7, 0, 10 + i, 10 + i, 200 + i, 200 + i, NOW)
    assert p.check(7, 0, 10, 10) == Duplicate(200, 200, NOW)
    with pytest.raises(OutOfOrderSequenceError):
        p.check(7, 0, 5, 9)  # older than the last five: no longer known as a duplicate
    with pytest.raises(OutOfOrderSequenceError, match="epoch 1 at sequence 3"):
        p.check(7, 1, 3, 4)
    assert p.check(7, 1, 0, 4) is None
    record(p, 7, 1, 0, 4, 300, 304, NOW)
    with pytest.raises(InvalidProducerEpochError):
        p.check(7, 0, 15, 15)


def test_sequence_wraps_to_zero():
    p = ProducerStateManager()
    record(p, 1, 0, 2**31 - 2, 2**31 - 1, 0, 1, NOW)
    assert p.check(1, 0, 0, 3) is None
    with pytest.raises(OutOfOrderSequenceError):
        p.check(1, 0, 1, 3)


def batch(log: Log, producer_id: int, epoch: int, seq: int, n: int):
    b = MessageSetBuilder(2, producer_id=producer_id, producer_epoch=epoch, base_sequence=seq)
    for i in range(n):
        b.append(b"v%d" % i, b"k", NOW)
    return validate_produce(
        b.build(), TopicSettings(magic=2), next_offset=log.log_end_offset, now_ms=NOW
    )


def test_log_rebuilds_producer_state_after_reopen_and_truncation(tmp_path, clock):
    directory = os.path.join(tmp_path, "t-0")
    log = Log(directory, LogConfig(segment_bytes=200), clock=clock, needs_recovery=False)
    log.append(batch(log, 5, 0, 0, 3))
    log.append(batch(log, 6, 2, 0, 2))  # another producer in between
    log.append(batch(log, 5, 0, 3, 3))  # rolls: the state spans segments
    assert len(log.segments) > 1
    assert log.producer_state().check(5, 0, 3, 5) == Duplicate(5, 7, NOW)
    log.append(batch(log, 5, 0, 6, 1))  # appends keep a loaded state current
    assert log.producer_state().check(5, 0, 6, 6) == Duplicate(8, 8, NOW)
    log.close()

    log = Log(directory, LogConfig(segment_bytes=200), clock=clock, needs_recovery=True)
    state = log.producer_state()
    assert state.check(5, 0, 6, 6) == Duplicate(8, 8, NOW)
    assert state.check(6, 2, 0, 1) == Duplicate(3, 4, NOW)
    with pytest.raises(OutOfOrderSequenceError):
        state.check(5, 0, 9, 9)
    log.truncate_to(5)  # the second batch of producer 5 is gone: its retry is new again
    assert log.producer_state().check(5, 0, 3, 5) is None
    log.close()


def test_snapshot_format_field_by_field():
    """Kafka's ProducerStateManager snapshot (version 1): decoded here independently."""
    import struct

    from crc32c import crc32c

    p = ProducerStateManager()
    record(p, 9, 2, 0, 4, 10, 14, NOW)
    record(p, 9, 2, 5, 6, 15, 16, NOW + 1)
    record(p, 3, 0, 2**31 - 2, 1, 20, 23, NOW + 2)  # sequence wraps inside the batch
    data = p.snapshot()
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count, crc) == (1, 2, crc32c(data[6:]))
    entries = [struct.unpack_from(">qhiqiqiq", data, 10 + 46 * i) for i in range(count)]
    assert entries == [(3, 0, 1, 23, 3, NOW + 2, -1, -1), (9, 2, 6, 16, 1, NOW + 1, -1, -1)]
    again = ProducerStateManager.from_snapshot(data)
    assert again.check(9, 2, 5, 6) == Duplicate(15, 16, NOW + 1)
    assert again.check(3, 0, 2**31 - 2, 1) == Duplicate(20, 23, NOW + 2)
    assert again.check(9, 2, 7, 7) is None


@pytest.mark.parametrize("damage", ["truncate", "flip", "version"])
def test_corrupt_snapshots_are_refused(damage):
    from storage.producer_state import CorruptSnapshotError

    p = ProducerStateManager()
    record(p, 1, 0, 0, 0, 0, 0, NOW)
    data = bytearray(p.snapshot())
    if damage == "truncate":
        data = data[:-3]
    elif damage == "flip":
        data[-1] ^= 1
    else:
        data[1] = 2
    with pytest.raises(CorruptSnapshotError):
        ProducerStateManager.from_snapshot(bytes(data))


def test_snapshots_at_roll_and_close_are_used_and_kept_in_step(tmp_path, clock):
    directory = os.path.join(tmp_path, "t-0")
    log = Log(directory, LogConfig(segment_bytes=150), clock=clock, needs_recovery=False)
    log.append(batch(log, 5, 0, 0, 3))
    log.append(batch(log, 5, 0, 3, 3))  # rolls at offset 3
    snapshots = sorted(f for f in os.listdir(directory) if f.endswith(".snapshot"))
    assert snapshots == ["00000000000000000003.snapshot"]
    log.close()
    assert "00000000000000000006.snapshot" in os.listdir(directory)
    # a corrupt newest snapshot is ignored for the older one plus the log after it
    with open(os.path.join(directory, "00000000000000000006.snapshot"), "r+b") as f:
        f.write(b"\xff")
    log = Log(directory, LogConfig(segment_bytes=150), clock=clock, needs_recovery=False)
    assert log.producer_state().check(5, 0, 3, 5) == Duplicate(3, 5, NOW)
    log.truncate_to(3)
    assert sorted(f for f in os.listdir(directory) if f.endswith(".snapshot")) == [
        "00000000000000000003.snapshot"
    ]
    assert log.producer_state().check(5, 0, 0, 2) == Duplicate(0, 2, NOW)
    log.close()


def _snapshots(directory):
    return sorted(int(f.split(".")[0]) for f in os.listdir(directory) if f.endswith(".snapshot"))


def test_state_is_loaded_when_the_log_opens(tmp_path, clock):
    """Kafka's LogLoader: an unclean start without snapshots scans the log; a clean start without
    any (a directory from before snapshots) skips the scan and writes empty snapshots at the last
    two segment bases and the log end, so later reloads never scan either."""
    directory = os.path.join(tmp_path, "t-0")
    config = LogConfig(segment_bytes=150)
    log = Log(directory, config, clock=clock, needs_recovery=False)
    for seq in (0, 3, 6):
        log.append(batch(log, 5, 0, seq, 3))
    bases = [s.base_offset for s in log.segments]
    assert len(bases) == 3
    log.close()
    for offset in _snapshots(directory):
        os.unlink(segment_path(directory, offset, ".snapshot"))
    log = Log(directory, config, clock=clock, needs_recovery=True)
    assert log.producer_state().check(5, 0, 6, 8) == Duplicate(6, 8, NOW)
    assert _snapshots(directory) == []  # a scan writes nothing until the next roll or close
    log.close()

    for offset in _snapshots(directory):
        os.unlink(segment_path(directory, offset, ".snapshot"))
    log = Log(directory, config, clock=clock, needs_recovery=False)
    assert log.producer_state().check(5, 0, 6, 8) is None  # not scanned: any sequence goes
    assert _snapshots(directory) == [bases[1], bases[2], 9]
    log.close()


def test_stray_snapshots_beyond_a_recovered_log_are_removed(tmp_path, clock):
    directory = os.path.join(tmp_path, "t-0")
    config = LogConfig(segment_bytes=150)
    log = Log(directory, config, clock=clock, needs_recovery=False)
    for seq in (0, 3, 6):
        log.append(batch(log, 5, 0, seq, 3))
    log.close()
    assert _snapshots(directory) == [3, 6, 9]
    os.truncate(segment_path(directory, 6, ".log"), 0)  # the last segment's batch is lost
    log = Log(directory, config, clock=clock, needs_recovery=True, recovery_point=6)
    assert log.log_end_offset == 6
    assert _snapshots(directory) == [3, 6]
    assert log.producer_state().check(5, 0, 3, 5) == Duplicate(3, 5, NOW)
    assert log.producer_state().check(5, 0, 6, 8) is None
    log.close()


def test_dump_log_prints_a_snapshot(tmp_path):
    import io

    from storage.dump import dump_file

    p = ProducerStateManager()
    record(p, 9, 2, 5, 6, 15, 16, NOW)
    path = tmp_path / "00000000000000000017.snapshot"
    path.write_bytes(p.snapshot())
    out = io.StringIO()
    assert dump_file(str(path), deep=False, verify=False, out=out, err=io.StringIO()) == 0
    assert (  # Kafka's DumpLogSegments words
        f"producerId: 9 producerEpoch: 2 coordinatorEpoch: -1 currentTxnFirstOffset: -1 "
        f"lastTimestamp: {NOW} firstSequence: 5 lastSequence: 6 lastOffset: 16 offsetDelta: 1 "
        f"timestamp: {NOW}\n"
    ) in out.getvalue()
    path.write_bytes(p.snapshot()[:-1])
    assert dump_file(str(path), deep=False, verify=False, out=io.StringIO(), err=io.StringIO()) == 1
