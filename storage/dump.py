"""``chronolog dump-log FILE...``: print the contents of segment files, like Kafka's
DumpLogSegments.

* ``.log``: one line per top-level entry (offset, position, magic, codec, timestamp type,
  timestamp, key/value sizes, stored CRC, whether the entry is valid); ``--deep`` adds a line per
  message inside each compressed wrapper.
  A control batch's record says its marker (``endTxnMarker: COMMIT coordinatorEpoch: 3``).
* ``.index`` / ``.timeindex``: one line per entry; ``--verify`` checks each entry against the
  segment's .log next to it (offset entries must point at the start of the entry holding their
  offset; time entries must carry the largest timestamp up to their offset; both must be in
  order).
* ``.txnindex``: one line per aborted transaction, in Kafka's words; ``--verify`` checks that
  each entry's last offset is an ABORT marker of its producer in the segment's .log, after its
  first offset and after the previous entry's.
* ``.snapshot``: one line per producer (epoch, coordinator epoch, ongoing transaction, last
  batch), as Kafka prints it.
* ``cleaner-offset-checkpoint`` (and ``recovery-point-offset-checkpoint``): one line per
  partition. A ``.log`` file is followed by its partition's cleaner checkpoint, when the log dir
  has one: where the cleaned part of the log ends.

Exit status: 0 when everything read is sound, 1 when corruption or an index mismatch was found,
2 when a file is missing, unreadable or of an unknown kind.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import os
import struct
import sys
from typing import TYPE_CHECKING, NamedTuple, TextIO

from protocol import recordbatch as rb
from protocol.compression import Codec
from protocol.errors import CorruptRecordError
from protocol.records import LOG_OVERHEAD, ShallowEntry, check_entry, iter_deep, iter_shallow
from storage.checkpoint import CheckpointError, read_checkpoint
from storage.errors import CorruptIndexError
from storage.index import OffsetIndex, TimeIndex
from storage.layout import (
    CLEANER_CHECKPOINT,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    RECOVERY_POINT_CHECKPOINT,
    TXN_INDEX_SUFFIX,
    parse_partition_dir,
    parse_segment_file,
)
from storage.producer_state import (
    SNAPSHOT_SUFFIX,
    CorruptSnapshotError,
    ProducerStateManager,
)
from storage.txn_index import ENTRY as TXN_ENTRY, parse as parse_txn_index

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

_I32 = struct.Struct(">i")
# Offset of key_length within an entry, by magic (12-byte log overhead + crc, magic, attributes
# [+ timestamp]).
_KEY_LENGTH_AT = (LOG_OVERHEAD + 6, LOG_OVERHEAD + 14)
OK, CORRUPT, UNREADABLE = 0, 1, 2


def _codec_name(codec: int) -> str:
    try:
        return Codec(codec).name
    except ValueError:
        return f"UNKNOWN({codec})"


def _key_value_sizes(data: Buffer, entry: ShallowEntry) -> tuple[int, int] | None:
    if entry.magic not in (0, 1):
        return None
    at = entry.position + _KEY_LENGTH_AT[entry.magic]
    end = entry.next_position
    if at + 4 > end:
        return None
    (key_size,) = _I32.unpack_from(data, at)
    value_at = at + 4 + max(key_size, 0)
    if key_size < -1 or value_at + 4 > end:
        return None
    (value_size,) = _I32.unpack_from(data, value_at)
    return key_size, value_size


def _dump_batch(
    data: Buffer, entry: ShallowEntry, valid: bool, problem: str, deep: bool, out: TextIO
) -> int:
    """One v2 batch in the words of Kafka's DumpLogSegments; with ``deep`` its records."""
    h = rb.read_header(data, entry.position)
    time_name = "LogAppendTime" if h.log_append_time else "CreateTime"
    out.write(
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: "
        f"{h.records_count} baseSequence: {h.base_sequence} lastSequence: "
        f"{h.last_sequence} producerId: {h.producer_id} producerEpoch: "
        f"{h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
        f"isTransactional: {str(h.is_transactional).lower()} isControl: "
        f"{str(h.is_control).lower()} position: {entry.position} {time_name}: "
        f"{h.max_timestamp} size: {LOG_OVERHEAD + entry.size} magic: 2 compresscodec: "
        f"{_codec_name(h.codec).lower()} crc: {h.crc} isvalid: "
        f"{str(valid).lower()}{problem}\n"
    )
    if not (deep and valid):
        return OK
    try:
        for r in rb.iter_records(data, entry.position, h):
            ts = h.max_timestamp if h.log_append_time else h.base_timestamp + r.timestamp_delta
            # Kafka's record sequence: base + offset delta (compaction leaves gaps)
            sequence = (
                -1 if h.base_sequence < 0 else (h.base_sequence + r.offset_delta) & 0x7FFFFFFF
            )
            out.write(
                f"| offset: {h.base_offset + r.offset_delta} {time_name}: {ts} keySize: "
                f"{-1 if r.key is None else len(r.key)} valueSize: "
                f"{-1 if r.value is None else len(r.value)} sequence: {sequence} "
                f"headerKeys: [{','.join(k for k, _ in r.headers)}]"
                f"{_control_words(r) if h.is_control else ''}\n"
            )
    except CorruptRecordError as exc:
        out.write(f"| cannot read the records: {exc}\n")
        return CORRUPT
    return OK


def _control_words(record: rb.Record) -> str:
    """What DumpLogSegments says of a control record."""
    try:
        marker = rb.read_end_txn_marker(record)
    except CorruptRecordError:
        marker = None
    if marker is None:
        return f" controlType: UNKNOWN({rb.control_type(record)})"
    name = "COMMIT" if marker.commit else "ABORT"
    return f" endTxnMarker: {name} coordinatorEpoch: {marker.coordinator_epoch}"


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _dump_log(path: str, deep: bool, out: TextIO) -> int:
    data = _read(path)
    status = OK
    end = 0
    try:
        for entry in iter_shallow(data):
            end = entry.next_position
            try:
                check_entry(data, entry, max_message_bytes=len(data))
                valid, problem = True, ""
            except CorruptRecordError as exc:
                valid, problem = False, f" problem: {exc}"
                status = CORRUPT
            if entry.magic == rb.MAGIC:
                status = max(status, _dump_batch(data, entry, valid, problem, deep, out))
                continue
            sizes = _key_value_sizes(data, entry)
            key_size, value_size = sizes if sizes else ("?", "?")
            out.write(
                f"offset: {entry.offset} position: {entry.position} magic: {entry.magic} "
                f"compresscodec: {_codec_name(entry.codec)} timestamptype: "
                f"{entry.timestamp_type.name} timestamp: {entry.timestamp} keysize: "
                f"{key_size} valuesize: {value_size} crc: {entry.crc} isvalid: "
                f"{str(valid).lower()}{problem}\n"
            )
            if deep and valid and entry.codec != Codec.NONE:
                try:
                    for m in iter_deep(memoryview(data)[entry.position : end]):
                        out.write(
                            f"| offset: {m.offset} magic: {m.magic} timestamptype: "
                            f"{m.timestamp_type.name} timestamp: {m.timestamp} keysize: "
                            f"{-1 if m.key is None else len(m.key)} valuesize: "
                            f"{-1 if m.value is None else len(m.value)}\n"
                        )
                except CorruptRecordError as exc:
                    out.write(f"| cannot read the inner messages: {exc}\n")
                    status = CORRUPT
    except CorruptRecordError as exc:
        out.write(f"corrupt entry, the rest of the file is unreadable: {exc}\n")
        return CORRUPT
    if end < len(data):
        out.write(
            f"{len(data) - end} trailing bytes at position {end} do not form a complete "
            f"entry (torn write)\n"
        )
        status = CORRUPT
    return status


class _Timeline(NamedTuple):
    """Every deep message of a .log file, for time index checks: offsets sorted, the largest
    timestamp among the messages up to each of them, and the offset of the last message."""

    offsets: list[int]
    max_timestamps: list[int]
    last_offset: int | None


def _log_facts(log_path: str) -> tuple[dict[int, tuple[int, int]], _Timeline]:
    """({position: (previous shallow offset, shallow offset)}, timeline of every deep message)
    of a .log file."""
    data = _read(log_path)
    starts: dict[int, tuple[int, int]] = {}
    previous = -1
    # A record batch counts at its last offset with its maxTimestamp too: after compaction its
    # last records may be gone (or all of them: a producer's empty batch), and appends, recovery
    # and the cleaner all index a batch by its header.
    messages = []
    for entry in iter_shallow(data):
        starts[entry.position] = (previous, entry.offset)
        previous = entry.offset
        if entry.magic == rb.MAGIC:
            messages.append((entry.offset, entry.timestamp))
    messages += [(m.offset, m.timestamp) for m in iter_deep(data)]
    # Running maximum over the messages sorted by offset: one bisect per time index entry
    # instead of a scan of the whole log.
    ordered = sorted(messages)
    max_timestamps = list(itertools.accumulate((ts for _, ts in ordered), max))
    last_offset = max(o for o, _ in messages) if messages else None
    return starts, _Timeline([o for o, _ in ordered], max_timestamps, last_offset)


def _dump_index(path: str, base: int, suffix: str, verify: bool, out: TextIO) -> int:
    index_class = OffsetIndex if suffix == INDEX_SUFFIX else TimeIndex
    index = index_class(path, base, max_index_bytes=os.stat(path).st_size + 24)
    try:
        count = index.entries
    except CorruptIndexError as exc:
        out.write(f"{exc}\n")
        return CORRUPT
    facts = None
    if verify:
        log_path = path[: -len(suffix)] + LOG_SUFFIX
        try:
            facts = _log_facts(log_path)
        except OSError as exc:
            out.write(f"cannot verify: {log_path} is unreadable: {exc.strerror}\n")
            return UNREADABLE
        except CorruptRecordError as exc:
            out.write(f"cannot verify: {log_path} is corrupt: {exc}\n")
            return CORRUPT
    status = OK
    previous = None
    for slot in range(count):
        entry = index.entry(slot)
        if suffix == INDEX_SUFFIX:
            out.write(f"offset: {entry[0]} position: {entry[1]}\n")
        else:
            out.write(f"timestamp: {entry[0]} offset: {entry[1]}\n")
        if facts is None:
            continue
        problem = (
            _check_offset_entry(entry, previous, facts[0])
            if suffix == INDEX_SUFFIX
            else _check_time_entry(entry, previous, facts[1])
        )
        if problem:
            out.write(f"  mismatch: {problem}\n")
            status = CORRUPT
        previous = entry
    if facts is not None and status == OK:
        out.write(f"verified {count} entries against the log\n")
    return status


def _check_offset_entry(
    entry: tuple[int, int], previous: tuple[int, int] | None, starts: dict[int, tuple[int, int]]
) -> str | None:
    offset, position = entry
    if previous is not None and (offset <= previous[0] or position <= previous[1]):
        return f"entry ({offset}, {position}) does not follow ({previous[0]}, {previous[1]})"
    if position not in starts:
        return f"position {position} is not the start of an entry in the log"
    before, last = starts[position]
    if not before < offset <= last:
        return (
            f"offset {offset} is not in the entry at position {position}, which holds "
            f"offsets {before + 1}..{last}"
        )
    return None


def _check_time_entry(
    entry: tuple[int, int], previous: tuple[int, int] | None, timeline: _Timeline
) -> str | None:
    timestamp, offset = entry
    if previous is not None and (timestamp <= previous[0] or offset < previous[1]):
        return f"entry ({timestamp}, {offset}) does not follow ({previous[0]}, {previous[1]})"
    upto = bisect.bisect_right(timeline.offsets, offset)  # messages with offsets <= offset
    if not upto or timeline.last_offset is None or offset > timeline.last_offset:
        return f"offset {offset} is beyond the last message of the log"
    largest = timeline.max_timestamps[upto - 1]
    if largest != timestamp:
        return (
            f"the largest timestamp up to offset {offset} is {largest}, the entry says {timestamp}"
        )
    return None


def dump_file(path: str, *, deep: bool, verify: bool, out: TextIO, err: TextIO) -> int:
    """Print one file to ``out`` (problems with the file itself to ``err``); return its exit
    status (0 sound, 1 corrupt, 2 unreadable or unknown kind)."""
    name = os.path.basename(path)
    if name.endswith(SNAPSHOT_SUFFIX) and name[: -len(SNAPSHOT_SUFFIX)].isdigit():
        return _dump_snapshot(path, out, err)
    if name in (CLEANER_CHECKPOINT, RECOVERY_POINT_CHECKPOINT):
        return _dump_checkpoint(path, out, err)
    parsed = parse_segment_file(name)
    if parsed is None:
        err.write(
            f"dump-log: {path}: not a segment file (expected <20-digit offset>.log, "
            f".index, .timeindex, .txnindex or .snapshot, or a checkpoint)\n"
        )
        return UNREADABLE
    base, suffix = parsed
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        err.write(f"dump-log: {path}: cannot read: {exc.strerror}\n")
        return UNREADABLE
    out.write(f"Dumping {path}\n")
    if suffix == LOG_SUFFIX:
        status = _dump_log(path, deep, out)
        _cleaner_checkpoint_line(path, base, out)
        return status
    if suffix == TXN_INDEX_SUFFIX:
        return _dump_txn_index(path, base, verify, out)
    return _dump_index(path, base, suffix, verify, out)


def _dump_txn_index(path: str, base: int, verify: bool, out: TextIO) -> int:
    """An aborted-transaction index, one line per entry as Kafka's DumpLogSegments prints it;
    with ``verify`` each entry's ABORT marker is looked up in the .log next to it."""
    data = _read(path)
    try:
        whole = len(data) - len(data) % TXN_ENTRY.size
        entries = parse_txn_index(data[:whole], path, base)
    except CorruptIndexError as exc:
        out.write(f"corrupt transaction index: {exc}\n")
        return CORRUPT
    for t in entries:
        out.write(
            f"version: 0 producerId: {t.producer_id} firstOffset: {t.first_offset} "
            f"lastOffset: {t.last_offset} lastStableOffset: {t.last_stable_offset}\n"
        )
    status = OK
    if len(data) % TXN_ENTRY.size:
        out.write(
            f"{len(data) % TXN_ENTRY.size} trailing bytes do not form a whole "
            f"{TXN_ENTRY.size}-byte entry\n"
        )
        status = CORRUPT
    if not verify:
        return status
    log_path = path[: -len(TXN_INDEX_SUFFIX)] + LOG_SUFFIX
    try:
        log = _read(log_path)
    except OSError as exc:
        out.write(f"cannot verify against {log_path}: {exc.strerror}\n")
        return CORRUPT
    aborts: dict[int, int] = {}  # marker offset -> producer id
    try:
        for entry in iter_shallow(log):
            if entry.magic != rb.MAGIC:
                continue
            h = rb.read_header(log, entry.position)
            if h.is_control:
                marker = rb.stored_end_txn_marker(log, entry.position, h)
                if marker is not None and not marker.commit:
                    aborts[h.base_offset] = h.producer_id
    except CorruptRecordError as exc:
        out.write(f"cannot verify against {log_path}: {exc}\n")
        return CORRUPT
    for t in entries:
        if aborts.get(t.last_offset) != t.producer_id:
            out.write(
                f"Mismatch: no ABORT marker of producer {t.producer_id} at offset "
                f"{t.last_offset} in {log_path}\n"
            )
            status = CORRUPT
    return status


def _dump_checkpoint(path: str, out: TextIO, err: TextIO) -> int:
    """A checkpoint file (Kafka's OffsetCheckpoint format), one line per partition."""
    what = "firstDirtyOffset" if os.path.basename(path) == CLEANER_CHECKPOINT else "recoveryPoint"
    if not os.path.exists(path):
        err.write(f"dump-log: {path}: cannot read: No such file or directory\n")
        return UNREADABLE
    out.write(f"Dumping {path}\n")
    try:
        offsets = read_checkpoint(path)
    except CheckpointError as exc:
        out.write(f"corrupt checkpoint: {exc}\n")
        return CORRUPT
    for (topic, partition), offset in sorted(offsets.items()):
        out.write(f"topic: {topic} partition: {partition} {what}: {offset}\n")
    return OK


def _cleaner_checkpoint_line(log_path: str, base: int, out: TextIO) -> None:
    """Where the log cleaner's clean section of this segment's partition ends, if it has one."""
    partition_dir = os.path.dirname(os.path.abspath(log_path))
    parsed = parse_partition_dir(os.path.basename(partition_dir))
    if parsed is None:
        return
    try:
        offsets = read_checkpoint(os.path.join(os.path.dirname(partition_dir), CLEANER_CHECKPOINT))
    except CheckpointError:
        return
    first_dirty = offsets.get(parsed)
    if first_dirty is None:
        return
    where = "cleaned" if first_dirty > base else "dirty"
    out.write(
        f"cleaner checkpoint: {parsed[0]}-{parsed[1]} is cleaned below offset {first_dirty} "
        f"(this segment starts {where})\n"
    )


def _dump_snapshot(path: str, out: TextIO, err: TextIO) -> int:
    """A producer state snapshot, one line per producer as Kafka's DumpLogSegments prints it."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        err.write(f"dump-log: {path}: cannot read: {exc.strerror}\n")
        return UNREADABLE
    out.write(f"Dumping {path}\n")
    try:
        state = ProducerStateManager.from_snapshot(data)
    except CorruptSnapshotError as exc:
        out.write(f"corrupt snapshot: {exc}\n")
        return CORRUPT
    for p in state.active_producers():
        entry = state.entry(p.producer_id)
        assert entry is not None
        line = (
            f"producerId: {p.producer_id} producerEpoch: {p.producer_epoch} coordinatorEpoch: "
            f"{p.coordinator_epoch} currentTxnFirstOffset: {p.current_txn_start_offset} "
            f"lastTimestamp: {p.last_timestamp}"
        )
        if entry.batches:
            b = entry.batches[-1]
            line += (
                f" firstSequence: {b.first_sequence} lastSequence: {b.last_sequence} "
                f"lastOffset: {b.last_offset} offsetDelta: {b.last_offset - b.first_offset} "
                f"timestamp: {b.max_timestamp}"
            )
        out.write(line + "\n")
    return OK


def main(argv: list[str]) -> int:
    """Entry point (``chronolog dump-log``); returns the worst exit status of all files."""
    parser = argparse.ArgumentParser(
        prog="chronolog dump-log",
        description="Print Kafka segment files (.log, .index, .timeindex, .txnindex, .snapshot) "
        "and log dir checkpoints (cleaner-offset-checkpoint, recovery-point-offset-checkpoint).",
    )
    parser.add_argument("files", nargs="+", metavar="FILE")
    parser.add_argument(
        "--deep", action="store_true", help="also print the messages inside compressed wrappers"
    )
    parser.add_argument(
        "--verify", action="store_true", help="check every index entry against the segment's .log"
    )
    args = parser.parse_args(argv)
    status = OK
    try:
        for path in args.files:
            status = max(
                status,
                dump_file(path, deep=args.deep, verify=args.verify, out=sys.stdout, err=sys.stderr),
            )
    except BrokenPipeError:  # output piped into head & co.
        sys.stderr.close()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
