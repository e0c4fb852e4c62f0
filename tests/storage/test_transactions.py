"""Transactions in a partition's log (KIP-98): transactional batches, COMMIT/ABORT markers
(Log.append_control), the last stable offset, the aborted-transaction index (.txnindex) and its
life with its segment (roll, truncation, retention, reopen, recovery).

Oracles: kafka-python's record code parses the control batches we write; the .txnindex and
.snapshot bytes are decoded here with Kafka's layouts (AbortedTxn.java, ProducerStateManager's
snapshot schema), independently of storage/.
"""

from __future__ import annotations

import os
import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch

from storage import Log, LogConfig
from storage.layout import segment_path
from storage.producer_state import (
    Duplicate,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from storage.txn_index import AbortedTxn
from tests.storage.helpers import producer_set, validated

NOW = 1_700_000_000_000
TXN_ENTRY = struct.Struct(">hqqqq")  # AbortedTxn.java: version, pid, first, last, lso


def open_log(tmp_path, clock, *, recover=False, **config) -> Log:
    return Log(
        os.path.join(tmp_path, "t-0"),
        LogConfig(file_delete_delay_ms=0, **config),
        clock=clock,
        needs_recovery=recover,
    )


def txn_index_entries(log: Log, base: int) -> list[tuple]:
    path = segment_path(log.directory, base, ".txnindex")
    if not os.path.exists(path):
        return []
    data = open(path, "rb").read()
    assert len(data) % 34 == 0
    return [TXN_ENTRY.unpack_from(data, i) for i in range(0, len(data), 34)]


def read_committed(log: Log) -> list[int]:
    """Offsets a read_committed consumer gets: data below the LSO, without control batches and
    the batches of aborted transactions (a batch of producer P in [first, marker] of one of
    P's aborted transactions), as Kafka's consumer applies Fetch's aborted_transactions."""
    from protocol import recordbatch as rb
    from protocol.records import iter_deep, iter_shallow

    lso = log.last_stable_offset
    aborted = log.aborted_transactions(log.log_start_offset, lso)
    data = b""
    offset = log.log_start_offset
    while offset < lso:  # a read stops at the end of a segment
        chunk = log.read(offset, 1 << 20, max_offset=lso).read_bytes()
        if not chunk:
            break
        data += chunk
        offset = list(iter_shallow(chunk))[-1].offset + 1
    out = []
    for entry in iter_shallow(data):
        h = rb.read_header(data, entry.position)
        if h.is_control or any(
            a.producer_id == h.producer_id and a.first_offset <= h.base_offset <= a.last_offset
            for a in aborted
            if h.is_transactional
        ):
            continue
        part = data[entry.position : entry.next_position]
        out += [m.offset for m in iter_deep(part) if m.offset < lso]
    return out


def test_commit_and_abort_move_the_lso_and_index_aborts(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(producer_set(log, 7, 0, 0, 3, transactional=True))  # 0..2
    assert (log.first_unstable_offset, log.last_stable_offset) == (0, 0)
    log.append(validated(log, [NOW], magic=2))  # 3: a plain producer's record
    log.append(producer_set(log, 8, 0, 0, 2, transactional=True))  # 4..5
    log.append(producer_set(log, 7, 0, 3, 1, transactional=True))  # 6: continues 7's txn
    assert log.producer_state().ongoing_transactions() == [(0, 7), (4, 8)]
    assert log.append_control(7, 0, 5, False, 0, NOW) == 7  # ABORT of 0..6
    # 8's transaction still holds the LSO at its first offset: the entry says so
    assert txn_index_entries(log, 0) == [(0, 7, 0, 7, 4)]
    assert log.last_stable_offset == 4
    assert log.append_control(8, 0, 5, True, 0, NOW) == 8  # COMMIT
    assert (log.first_unstable_offset, log.last_stable_offset) == (None, 9)
    assert log.aborted_transactions(0, 9) == [AbortedTxn(7, 0, 7, 4)]
    assert log.aborted_transactions(8, 9) == []  # ends before the fetch
    assert read_committed(log) == [3, 4, 5]
    info = {p.producer_id: p for p in log.producer_state().active_producers()}
    assert (info[7].coordinator_epoch, info[7].current_txn_start_offset) == (5, -1)
    log.close()


def test_markers_are_kafkas_control_batches(tmp_path, clock):
    """kafka-python (an independent decoder) reads the marker as Kafka writes it
    (MemoryRecords.withEndTransactionMarker)."""
    log = open_log(tmp_path, clock)
    log.append(producer_set(log, 7, 3, 0, 1, transactional=True))
    offset = log.append_control(7, 3, 11, True, 4, NOW + 5)
    raw = log.read(offset, 1 << 10).read_bytes()
    batch = DefaultRecordBatch(raw)
    assert batch.validate_crc()
    assert (batch.is_control_batch, batch.is_transactional) == (True, True)
    assert (batch.base_offset, batch.producer_id, batch.producer_epoch) == (offset, 7, 3)
    assert (batch.base_sequence, batch.max_timestamp, batch.records_count) == (-1, NOW + 5, 1)
    assert struct.unpack_from(">i", raw, 12)[0] == 4  # partition leader epoch
    (record,) = list(batch)
    assert (record.commit, record.version, record.timestamp) == (True, 0, NOW + 5)
    assert struct.unpack(">hi", bytes(record.value)) == (0, 11)  # version, coordinator epoch
    abort = log.append_control(7, 3, 11, False, 4, NOW + 6)
    (record,) = list(DefaultRecordBatch(log.read(abort, 1 << 10).read_bytes()))
    assert record.abort
    log.close()


def test_producer_and_marker_errors_change_nothing(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(producer_set(log, 7, 2, 0, 2, transactional=True))
    end = log.log_end_offset
    with pytest.raises(InvalidTxnStateError) as exc:
        log.append(producer_set(log, 7, 2, 2, 1))  # not transactional inside the txn
    assert exc.value.error_name == "INVALID_TXN_STATE"
    with pytest.raises(InvalidProducerEpochError):
        log.append_control(7, 1, 0, True, 0, NOW)
    log.append_control(7, 2, 4, False, 0, NOW)
    with pytest.raises(TransactionCoordinatorFencedError) as fenced:
        log.append_control(7, 2, 3, False, 0, NOW)
    assert fenced.value.error_name == "TRANSACTION_COORDINATOR_FENCED"
    assert log.log_end_offset == end + 1
    log.close()


def test_a_lone_duplicate_is_answered_with_its_offsets(tmp_path, clock):
    log = open_log(tmp_path, clock)
    first = producer_set(log, 7, 0, 0, 2, transactional=True)
    log.append(first)
    again = producer_set(log, 7, 0, 0, 2, transactional=True)
    result = log.append(again)
    assert result.duplicate == Duplicate(0, 1, NOW)
    assert log.log_end_offset == 2
    log.close()


def test_a_newer_marker_epoch_bumps_the_producer(tmp_path, clock):
    """KIP-890: a marker with a newer epoch is the producer's epoch now; its next batch starts
    at sequence 0, and its old epoch is fenced."""
    log = open_log(tmp_path, clock)
    log.append(producer_set(log, 7, 0, 0, 2, transactional=True))
    log.append_control(7, 1, 0, True, 0, NOW)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(producer_set(log, 7, 1, 2, 1, transactional=True))
    with pytest.raises(InvalidProducerEpochError):
        log.append(producer_set(log, 7, 0, 2, 1, transactional=True))
    log.append(producer_set(log, 7, 1, 0, 1, transactional=True))
    assert log.first_unstable_offset == 3
    log.close()


def test_a_marker_without_a_transaction_is_written(tmp_path, clock):
    """Kafka writes it (aborts of empty or unknown transactions); nothing is indexed."""
    log = open_log(tmp_path, clock)
    assert log.append_control(42, 0, 0, False, 0, NOW) == 0
    assert log.log_end_offset == 1 and log.last_stable_offset == 1
    assert txn_index_entries(log, 0) == []
    assert not os.path.exists(segment_path(log.directory, 0, ".txnindex"))
    log.close()


def test_txn_index_and_ongoing_state_survive_reopen_truncation_and_crash(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_bytes=300)
    for pid in (1, 2, 3):
        log.append(producer_set(log, pid, 0, 0, 2, transactional=True))
        log.append_control(pid, 0, 0, pid == 2, 0, NOW)  # 1, 3 abort; 2 commits
    log.append(producer_set(log, 4, 0, 0, 2, transactional=True))  # ongoing
    ongoing = log.first_unstable_offset
    aborted = log.aborted_transactions(0, log.log_end_offset)
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in aborted] == [
        (1, 0, 2),
        (3, 6, 8),
    ]
    assert len(log.segments) > 1
    indexes = {s.base_offset: txn_index_entries(log, s.base_offset) for s in log.segments}
    log.close()
    snapshot = open(segment_path(log.directory, log.log_end_offset, ".snapshot"), "rb").read()
    entries = [struct.unpack_from(">qhiqiqiq", snapshot, 10 + 46 * i) for i in range(4)]
    assert [(e[0], e[6], e[7]) for e in entries] == [(1, 0, -1), (2, 0, -1), (3, 0, -1), (4, -1, 9)]

    log = open_log(tmp_path, clock, segment_bytes=300)  # clean: from the snapshot
    assert (log.first_unstable_offset, log.aborted_transactions(0, 99)) == (ongoing, aborted)
    log.abandon()
    for s in log.segments:  # a crash that lost every .txnindex: recovery rebuilds them
        s.txn_index.delete()
    log = open_log(tmp_path, clock, recover=True, segment_bytes=300)
    assert (log.first_unstable_offset, log.aborted_transactions(0, 99)) == (ongoing, aborted)
    assert {s.base_offset: txn_index_entries(log, s.base_offset) for s in log.segments} == indexes

    log.truncate_to(8)  # the second abort's marker goes; 3's transaction is ongoing again
    assert log.aborted_transactions(0, 99) == aborted[:1]
    assert log.first_unstable_offset == 6
    assert sum(len(txn_index_entries(log, s.base_offset)) for s in log.segments) == 1
    log.close()


def test_retention_deletes_a_txn_index_with_its_segment(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_bytes=300, retention_ms=1000)
    log.append(producer_set(log, 1, 0, 0, 2, transactional=True, now=clock.now))
    log.append_control(1, 0, 0, False, 0, clock.now)
    path = segment_path(log.directory, 0, ".txnindex")
    assert os.path.exists(path)
    log.roll()
    clock.advance(5000)
    assert log.delete_expired_segments(clock.now) == 1
    assert not os.path.exists(path) and not os.path.exists(path + ".deleted")
    assert log.aborted_transactions(0, 99) == []
    log.close()


def batches(log: Log) -> list:
    """(base offset, producer id, control?, records, delete horizon) of every batch."""
    from protocol import recordbatch as rb
    from protocol.records import iter_shallow

    out = []
    for s in log.segments:
        data = open(s.log_path, "rb").read()
        for e in iter_shallow(data):
            h = rb.read_header(data, e.position)
            out.append(
                (h.base_offset, h.producer_id, h.is_control, h.records_count, h.delete_horizon_ms)
            )
    return out


def test_cleaner_drops_aborted_data_then_markers_and_stops_at_the_lso(tmp_path, clock):
    """Kafka's Cleaner with CleanedTransactionMetadata: aborted batches go at once (the
    producer's last one stays, emptied), an ABORT marker stays while data of its transaction
    was removed, then gets a delete horizon and goes after delete.retention.ms; a COMMIT marker
    stays while its data does; nothing at or after the LSO is cleaned."""
    from storage.cleaner import Cleaner, plan_cleaning

    log = open_log(tmp_path, clock, cleanup_policy="compact", delete_retention_ms=1000)
    log.append(producer_set(log, 1, 0, 0, 2, transactional=True))  # 0..1 aborted
    log.append(producer_set(log, 1, 0, 2, 1, transactional=True))  # 2 aborted
    log.append_control(1, 0, 0, False, 0, clock.now)  # 3 ABORT
    log.append(producer_set(log, 2, 0, 0, 2, transactional=True))  # 4..5 committed
    log.append_control(2, 0, 0, True, 0, clock.now)  # 6 COMMIT
    log.roll()
    log.append(producer_set(log, 3, 0, 0, 1, transactional=True))  # 7: ongoing
    log.roll()
    log.append(validated(log, [NOW], magic=2))  # 8
    assert log.last_stable_offset == 7
    assert plan_cleaning(log, clock.now).first_uncleanable_offset == 7
    committed = read_committed(log)
    assert committed == [4, 5]

    Cleaner(1 << 20).clean(log, clock.now, force=True)
    assert read_committed(log) == committed
    # 0..1 gone, 2 kept empty (producer 1's last batch), both markers kept, the ABORT indexed
    # in the cleaned segment; 7 (the ongoing transaction) untouched
    assert [b[:4] for b in batches(log)] == [
        (2, 1, False, 0),
        (3, 1, True, 1),
        (4, 2, False, 2),
        (6, 2, True, 1),
        (7, 3, False, 1),
        (8, -1, False, 1),
    ]
    assert txn_index_entries(log, 0) == [(0, 1, 0, 3, 4)]
    assert log.aborted_transactions(0, 7) == [AbortedTxn(1, 0, 3, 4)]

    # producer 1 goes on, so its emptied batch no longer holds its last sequence; 3 commits
    log.append_control(3, 0, 0, True, 0, clock.now)  # 9
    log.append(producer_set(log, 1, 0, 3, 1, transactional=True))  # 10
    log.append_control(1, 0, 0, True, 0, clock.now)  # 11
    log.roll()
    committed = [4, 5, 7, 8, 10]
    assert read_committed(log) == committed

    def clean_all_again(advance):
        clock.advance(advance)
        log.first_dirty_offset = None
        Cleaner(1 << 20).clean(log, clock.now, force=True)
        assert read_committed(log) == committed

    clean_all_again(10)  # the emptied batch goes; it was read, so the marker stays indexed
    assert [b[0] for b in batches(log)] == [3, 4, 6, 7, 8, 9, 10, 11]
    assert log.aborted_transactions(0, 12) == [AbortedTxn(1, 0, 3, 4)]
    clean_all_again(10)  # nothing of the aborted transaction is left: a delete horizon
    assert [b for b in batches(log) if b[0] == 3] == [(3, 1, True, 1, clock.now + 1000)]
    assert log.aborted_transactions(0, 12) == []
    clean_all_again(999)  # not yet
    assert [b[0] for b in batches(log)][:1] == [3]
    clean_all_again(1)  # delete.retention.ms after the horizon was set: gone
    assert [b[0] for b in batches(log)] == [4, 6, 7, 8, 9, 10, 11]
    log.close()
    log = open_log(tmp_path, clock, recover=True, cleanup_policy="compact")
    assert (log.first_unstable_offset, read_committed(log)) == (None, committed)
    log.close()


def test_dump_log_shows_markers_txn_index_and_ongoing_transactions(tmp_path, clock):
    """Kafka's DumpLogSegments words: endTxnMarker lines, .txnindex entries, the snapshot's
    coordinator epoch and current transaction; --verify finds an entry without its marker."""
    import io

    from storage.dump import dump_file

    log = open_log(tmp_path, clock)
    log.append(producer_set(log, 5, 1, 0, 2, transactional=True))  # 0..1
    log.append_control(5, 1, 7, False, 0, NOW)  # 2
    log.append(producer_set(log, 6, 0, 0, 1, transactional=True))  # 3, left ongoing
    log.close()

    def dump(name: str, verify: bool = False) -> tuple[int, str]:
        out = io.StringIO()
        path = segment_path(log.directory, int(name.split(".")[0]), "." + name.split(".")[1])
        status = dump_file(path, deep=True, verify=verify, out=out, err=out)
        return status, out.getvalue()

    status, text = dump("0.log")
    assert status == 0
    assert "isTransactional: true isControl: true" in text
    assert "endTxnMarker: ABORT coordinatorEpoch: 7\n" in text
    status, text = dump("0.txnindex", verify=True)
    assert status == 0
    assert "version: 0 producerId: 5 firstOffset: 0 lastOffset: 2 lastStableOffset: 3\n" in text
    status, text = dump("4.snapshot")
    assert "producerId: 5 producerEpoch: 1 coordinatorEpoch: 7 currentTxnFirstOffset: -1" in text
    assert "producerId: 6 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: 3" in text

    path = segment_path(log.directory, 0, ".txnindex")
    with open(path, "r+b") as f:  # the entry now names offset 1, a data batch
        f.seek(18)
        f.write(struct.pack(">q", 1))
    status, text = dump("0.txnindex", verify=True)
    assert status == 1 and "no ABORT marker of producer 5 at offset 1" in text


def test_a_marker_in_a_log_append_time_topic_is_stamped_so(tmp_path, clock):
    log = open_log(tmp_path, clock)
    offset = log.append_control(7, 0, 0, True, 0, NOW + 3, log_append_time=True)
    batch = DefaultRecordBatch(log.read(offset, 1 << 10).read_bytes())
    assert (batch.timestamp_type, batch.max_timestamp) == (1, NOW + 3)
    log.close()


def test_a_follower_applies_markers_and_holds_the_lso_until_the_high_watermark(tmp_path, clock):
    """append_replica: the leader's transactional batches and markers give the follower the
    same .txnindex and producer state; a completed transaction stays unstable until the high
    watermark passes its marker (Kafka's unreplicatedTxns)."""
    leader = Log(os.path.join(tmp_path, "l", "t-0"), LogConfig(), clock=clock, needs_recovery=False)
    follower = Log(
        os.path.join(tmp_path, "f", "t-0"), LogConfig(), clock=clock, needs_recovery=False
    )
    follower.update_high_watermark(0)
    leader.append(producer_set(leader, 1, 0, 0, 2, transactional=True))  # 0..1
    leader.append(producer_set(leader, 2, 0, 0, 1, transactional=True))  # 2
    leader.append_control(1, 0, 3, False, 0, NOW)  # 3: ABORT
    leader.append_control(2, 0, 3, True, 0, NOW)  # 4: COMMIT
    data = leader.read(0, 1 << 20).read_bytes()
    assert follower.append_replica(data).entries == 4
    assert follower.aborted_transactions(0, 5) == leader.aborted_transactions(0, 5)
    assert txn_index_entries(follower, 0) == txn_index_entries(leader, 0) == [(0, 1, 0, 3, 2)]
    assert follower.first_unstable_offset == 0  # decided, but the markers are not replicated
    assert follower.last_stable_offset == 0
    follower.update_high_watermark(4)  # the ABORT's marker is below it, the COMMIT's is not
    assert follower.first_unstable_offset == 2
    follower.update_high_watermark(5)
    assert (follower.first_unstable_offset, follower.last_stable_offset) == (None, 5)
    assert (
        follower.producer_state().active_producers() == leader.producer_state().active_producers()
    )
    leader.close()
    follower.close()
