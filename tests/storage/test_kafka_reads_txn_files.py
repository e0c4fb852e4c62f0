"""Kafka 4.1.1's DumpLogSegments (the oracle: Kafka's own readers) over a transactional
partition chronolog's storage wrote: markers, aborted-transaction indexes (one of them swapped in
by the cleaner, one rebuilt by recovery) and producer snapshots read as Kafka's own, with the
same marker, index and producer-state lines ``chronolog dump-log`` prints."""

from __future__ import annotations

import io
import os
import re

import pytest

from storage import Log, LogConfig
from storage.cleaner import Cleaner
from storage.dump import dump_file
from tests.oracle.kafka_oracle import DUMP_LOG_SEGMENTS, run_kafka_tool
from tests.storage.helpers import producer_set

pytestmark = pytest.mark.kafka_oracle

MARKER = re.compile(r"^\| offset: (\d+) .* endTxnMarker: (ABORT|COMMIT) coordinatorEpoch: (\d+)$")
TXN_ENTRY = re.compile(r"^version: 0 producerId: .*$")
SNAPSHOT = re.compile(
    r"^producerId: (\d+) producerEpoch: (\d+) coordinatorEpoch: (-?\d+) "
    r"currentTxnFirstOffset: OptionalLong(?:\.empty|\[(\d+)\])"
)


def _lines(text: str, pattern: re.Pattern) -> list[str]:
    return [line.rstrip() for line in text.splitlines() if pattern.match(line.rstrip())]


def _compare_with_kafka(log: Log) -> int:
    """Close the log, dump every .log, .txnindex and the snapshot written at close with Kafka's
    tool and ours; returns how many .txnindex entries there were."""
    directory = log.directory
    aborted = log.aborted_transactions(0, log.log_end_offset)
    producers = log.producer_state().active_producers()
    log.close()
    files = sorted(
        os.path.join(directory, n)
        for n in os.listdir(directory)
        if n.endswith((".log", ".txnindex"))
    )
    kafka = run_kafka_tool(
        DUMP_LOG_SEGMENTS, "--files", ",".join(files), "--deep-iteration", "--print-data-log"
    ).stdout
    assert "isvalid: false" not in kafka and "isvalid: true" in kafka
    ours = io.StringIO()
    for f in files:
        assert dump_file(f, deep=True, verify=True, out=ours, err=ours) == 0, ours.getvalue()
    # every marker and .txnindex entry, in Kafka's words and ours alike
    assert _lines(kafka, MARKER) == _lines(ours.getvalue(), MARKER)
    assert len(_lines(kafka, MARKER)) == 5
    kafka_entries = _lines(kafka, TXN_ENTRY)
    assert kafka_entries == _lines(ours.getvalue(), TXN_ENTRY)
    assert kafka_entries == [
        f"version: 0 producerId: {a.producer_id} firstOffset: {a.first_offset} "
        f"lastOffset: {a.last_offset} lastStableOffset: {a.last_stable_offset}"
        for a in aborted
    ]
    # the snapshot written at close: the producer state as the log knows it
    newest = os.path.join(directory, f"{log.log_end_offset:020d}.snapshot")
    text = run_kafka_tool(DUMP_LOG_SEGMENTS, "--files", newest).stdout
    got = [
        (int(m[1]), int(m[2]), int(m[3]), int(m[4]) if m[4] else -1)
        for m in (SNAPSHOT.match(line) for line in text.splitlines())
        if m
    ]
    assert got == [
        (p.producer_id, p.producer_epoch, p.coordinator_epoch, p.current_txn_start_offset)
        for p in producers
    ]
    assert got[-1][0] == 4 and got[-1][3] >= 0  # the ongoing transaction
    return len(kafka_entries)


def test_kafka_reads_markers_txn_indexes_and_snapshots(tmp_path, clock):
    directory = os.path.join(tmp_path, "t-0")
    config = LogConfig(cleanup_policy="compact", segment_bytes=400, file_delete_delay_ms=0)
    log = Log(directory, config, clock=clock, needs_recovery=False)
    for pid, sequence in ((1, 0), (2, 0), (3, 0), (1, 2), (2, 2)):
        log.append(producer_set(log, pid, 0, sequence, 2, transactional=True))
        log.append_control(pid, 0, pid + 4, pid == 2, 0, clock.now)  # 1 and 3 abort
    log.append(producer_set(log, 4, 0, 0, 2, transactional=True))  # left ongoing
    log.roll()
    Cleaner(1 << 20).clean(log, clock.now, force=True)  # aborted batches go, a .txnindex swapped
    assert _compare_with_kafka(log) == 3

    log = Log(directory, config, clock=clock, needs_recovery=True)  # every .txnindex rebuilt
    # the cleaned-away transaction's entry is not rebuilt (no data left to hide), as in Kafka
    assert _compare_with_kafka(log) == 2
