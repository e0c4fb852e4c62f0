"""Moving a partition's log to another log dir of the broker (KIP-113, AlterReplicaLogDirs).

Kafka builds a *future log* ``<topic>-<partition>.<uuid>-future`` in the target dir, fills it
while the current log keeps taking appends, and once it has caught up swaps it in under the
partition lock (ReplicaManager.alterReplicaLogDirs, ReplicaAlterLogDirsThread,
LogManager.replaceCurrentWithFutureLog). Kafka's thread fetches records from the current log
and appends them to the future one; :class:`FutureLog` copies the files instead, since they are
the same bytes either way and a copy needs neither decoding nor a second producer state:

- :meth:`FutureLog.copy_round` (no lock held; appends, rolls, retention and the cleaner go on
  meanwhile) copies what changed since the previous round: the new tail of each ``.log`` (a
  segment only ever grows at its end), every other file whose identity, size or time changed,
  and removes the copies of files that are gone. A truncation (a follower's, counted by
  ``Log.truncations``) starts the copy over. Each file is fsynced once copied, so the final step
  has only the last changes to write.
- :meth:`FutureLog.final_round` (the caller holds the partition lock and has closed the current
  log, so its files are still) copies the rest, the active segment's indexes and the producer
  snapshot the close wrote included, and fsyncs the directory. LogManager.swap_in_future then
  renames it into place and opens it.

A kill -9 at any point leaves a loadable partition: until the rename, the current log is whole
and the future dir is only a copy (LogManager discards it at start-up and starts the move
again, as Kafka resumes it); after it, the future log is whole and the current one is renamed
``-delete`` and removed (see LogManager.swap_in_future for the instant between the two).
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass

from storage import syscalls
from storage.durable import fsync_dir
from storage.layout import (
    FUTURE_DIR_SUFFIX,
    PARTITION_METADATA_FILE,
    parse_segment_file,
    partition_dir_name,
)
from storage.leader_epoch import LEADER_EPOCH_CHECKPOINT
from storage.log import Log
from storage.producer_state import SNAPSHOT_SUFFIX

CHUNK = 1 << 20  # bytes per read/write while copying


def _copied_file(name: str) -> bool:
    """Whether ``name`` in a partition directory is part of the log a move copies: segment
    files, producer snapshots and the partition's metadata; not the cleaner's ``.cleaned`` /
    ``.swap`` files, ``.deleted`` segments or temporary files, which the log never loads."""
    if parse_segment_file(name) is not None:
        return True
    if name in (LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA_FILE):
        return True
    stem = name[: -len(SNAPSHOT_SUFFIX)]
    return name.endswith(SNAPSHOT_SUFFIX) and stem.isdigit()


@dataclass
class _Copied:
    """What was copied of one source file: its inode, how many bytes, and its mtime then."""

    inode: int
    size: int
    mtime_ns: int


class FutureLog:
    """The copy of one partition's log being built in ``target_dir``; see the module docstring.
    Used by one thread at a time (the broker's move task hands it to worker threads in turn)."""

    def __init__(self, topic: str, partition: int, target_dir: str) -> None:
        self.topic = topic
        self.partition = partition
        self.target_dir = target_dir
        name = partition_dir_name(topic, partition)
        self.directory = os.path.join(target_dir, f"{name}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}")
        self._copied: dict[str, _Copied] = {}
        self._truncations: int | None = None
        # Base offsets of the segments seen active: their index files are written at flushes
        # and cut by truncations, which can leave size and mtime as they were, so the final
        # round (after the close wrote their last entries) copies them again.
        self._active_bases: set[int] = set()
        self.remaining = 0  # bytes known still to copy after the last round
        self.first_incomplete_base: int | None = None  # lowest segment not fully copied
        self.size = 0  # bytes in the future dir

    def create(self) -> None:
        os.makedirs(self.directory)
        fsync_dir(self.target_dir)

    def copy_round(self, source: Log, budget: int) -> int:
        """Copy up to ``budget`` bytes of what changed in ``source`` since the last round (see
        the module docstring); returns the bytes copied. ``remaining`` then says how much more
        was already known to be there. OSError from either disk propagates (a source file
        removed meanwhile is skipped: retention or the cleaner took it)."""
        truncations = source.truncations
        if truncations != self._truncations:
            self._start_over()
            self._truncations = truncations
        self._active_bases.add(source.active_segment.base_offset)
        return self._copy(source.directory, budget, recopy_active=False)

    def final_round(self, source: Log) -> None:
        """Copy everything still different from the closed ``source`` and make it durable. The
        caller holds the partition lock, and ``source`` is closed (so nothing else writes its
        files)."""
        if source.truncations != self._truncations:
            self._start_over()
        self._copy(source.directory, None, recopy_active=True)
        fsync_dir(self.directory)

    def discard(self) -> None:
        """Remove the future dir (a cancelled move, or one interrupted by a restart)."""
        shutil.rmtree(self.directory, ignore_errors=True)

    def _start_over(self) -> None:
        for name in list(self._copied):
            self._unlink(name)
        self._copied.clear()

    def _unlink(self, name: str) -> None:
        try:
            os.unlink(os.path.join(self.directory, name))
        except FileNotFoundError:
            pass
        self._copied.pop(name, None)

    def _copy(self, source_dir: str, budget: int | None, *, recopy_active: bool) -> int:
        names = sorted(n for n in os.listdir(source_dir) if _copied_file(n))
        for gone in set(self._copied) - set(names):
            self._unlink(gone)
        copied = 0
        remaining = 0
        incomplete: int | None = None
        for name in names:
            try:
                st = os.stat(os.path.join(source_dir, name))
            except FileNotFoundError:
                self._unlink(name)
                continue
            before = self._copied.get(name)
            segment = parse_segment_file(name)
            is_log = segment is not None and segment[1] == ".log"
            if is_log:
                grows = before is not None and before.inode == st.st_ino
                start = before.size if grows and before is not None else 0
                if start > st.st_size:
                    start = 0
            else:
                again = recopy_active and segment is not None and segment[0] in self._active_bases
                if (
                    not again
                    and before is not None
                    and (before.inode, before.size, before.mtime_ns)
                    == (st.st_ino, st.st_size, st.st_mtime_ns)
                ):
                    continue
                start = 0
            todo = st.st_size - start
            if todo == 0 and before is not None and start > 0:
                continue
            end = st.st_size
            if budget is not None and copied + todo > budget:
                # A .log is copied in parts (its copy only ever grows); another file whole,
                # unless something was copied already this round.
                if is_log and copied < budget:
                    end = start + budget - copied
                elif copied > 0:
                    end = start
                if end < st.st_size:
                    remaining += st.st_size - end
                    if segment is not None and (incomplete is None or segment[0] < incomplete):
                        incomplete = segment[0]
                if end == start:
                    continue
            try:
                done = self._copy_file(source_dir, name, start, end, sync_source=is_log)
            except FileNotFoundError:  # deleted since the stat (retention, the cleaner)
                self._unlink(name)
                continue
            copied += done - start
            self._copied[name] = _Copied(st.st_ino, done, st.st_mtime_ns)
        self.remaining = remaining
        self.first_incomplete_base = incomplete
        self.size = sum(c.size for c in self._copied.values())
        return copied

    def _copy_file(
        self, source_dir: str, name: str, start: int, end: int, *, sync_source: bool
    ) -> int:
        """Copy bytes [start, end) of ``name`` (truncating the copy to ``start`` first) and
        fsync it; returns the size of the copy (less than ``end`` if the source shrank, which
        the next round notices). ``sync_source`` fsyncs the source too: the close at the swap
        then has next to nothing left to write while appends wait (a 256 MiB segment written
        with acks=1 and never flushed held them 247 ms in its fsync)."""
        src = os.open(os.path.join(source_dir, name), os.O_RDONLY)
        try:
            dst = os.open(os.path.join(self.directory, name), os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.ftruncate(dst, start)
                position = start
                while position < end:
                    data = os.pread(src, min(CHUNK, end - position), position)
                    if not data:
                        break
                    view = memoryview(data)
                    offset = position
                    while view:
                        written = os.pwrite(dst, view, offset)
                        view = view[written:]
                        offset += written
                    position += len(data)
                syscalls.fsync(dst)
                if sync_source:
                    syscalls.fsync(src)
                return position
            finally:
                os.close(dst)
        finally:
            os.close(src)
