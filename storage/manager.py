"""LogManager: every partition log under several log dirs.

Start-up (``startup``): per log dir, remove ``*-delete`` directories left by an interrupted topic
deletion, read the recovery-point checkpoint (unreadable -> recover every log in that dir from
offset 0) and the log-start-offset checkpoint (unreadable -> every log starts at its first
segment), note the clean-shutdown marker, open each ``<topic>-<partition>`` directory as a Log
(recovering it unless the marker was present), then remove the marker so a crash from now on
forces recovery.

Log start offsets moved by DeleteRecords are checkpointed (``checkpoint_log_start_offsets``) by
the caller before it answers, so they survive a kill -9; also periodically and at shutdown.

Periodic work (:class:`Maintenance`: retention, flush.ms, removal of ``.deleted`` files) is
defined here and scheduled by the caller, which owns threads and locking: ``due(task, now)``
names the logs with work, judged from memory where it can be (so an idle partition costs no
worker-thread round trip), and ``run(task, log, now)`` does it. ``checkpoint_recovery_points``
is called on the caller's schedule too.

Moves between log dirs (KIP-113, storage/replica_move.py): ``start_future`` begins a partition's
copy in another dir, the caller fills it (``FutureLog.copy_round``) and, holding the partition
lock, ``swap_in_future`` replaces the current log by it. A start-up finishes what a kill -9
interrupted: a ``-future`` dir is removed and its partition listed in ``interrupted_moves`` for
the broker to move again; a partition found in two dirs keeps the copy carrying the
``.moved-here`` marker (the move's rename had happened) and the other is removed.

Resources: an idle partition holds no file descriptor and no index memory beyond its Log and
segment objects. Errors: InvalidTopicError for bad names, LogNotFoundError for unknown logs;
OSError from the file system propagates.
"""

from __future__ import annotations

import enum
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence

import structlog

from storage import checkpoint, killpoints
from storage.cleaner import CleanerManager
from storage.durable import fsync_dir
from storage.config import LogConfig
from storage.errors import LogNotFoundError
from storage.layout import (
    DELETE_DIR_SUFFIX,
    FUTURE_DIR_SUFFIX,
    MOVED_MARKER,
    parse_partition_dir,
    partition_dir_name,
    validate_topic,
)
from storage.log import Log
from storage.replica_move import FutureLog

logger = structlog.get_logger(__name__)


class Maintenance(enum.Enum):
    """Periodic storage work; see :meth:`LogManager.due` and :meth:`LogManager.run`."""

    RETENTION = "retention"  # retention.ms / retention.bytes
    FLUSH = "flush"  # flush.ms
    DELETE_FILES = "delete files"  # file.delete.delay.ms


class LogManager:
    """Owns the Log of every partition; see the module docstring."""

    def __init__(
        self,
        log_dirs: Iterable[str],
        config_for_topic: Callable[[str], LogConfig],
        clock: Callable[[], int],
    ) -> None:
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        if not self.log_dirs:
            raise ValueError("LogManager needs at least one log dir")
        self._config_for_topic = config_for_topic
        self._clock = clock
        self._logs: dict[tuple[str, int], Log] = {}
        self._dir_of: dict[tuple[str, int], str] = {}
        # KIP-112: log dir -> why it is offline, and the partitions that were in such a dir.
        self.offline_dirs: dict[str, str] = {}
        self._offline: dict[tuple[str, int], str] = {}
        self._unlisted: set[str] = set()  # offline since start-up: what they hold is unknown
        # Serialises log-start-offset checkpoint writes (request handlers' worker threads and
        # the periodic task): each rewrites one file through the same temporary name.
        self._start_checkpoint_lock = threading.Lock()
        # The same for the recovery-point checkpoints (the periodic task and moves' swaps).
        self._recovery_checkpoint_lock = threading.Lock()
        # The log cleaner's bookkeeping (storage/cleaner.py); the broker runs the cleaning.
        self.cleaning = CleanerManager()
        self._cleaner_checkpoint_lock = threading.Lock()
        # KIP-113: the log dir AlterReplicaLogDirs asked for a partition not (yet) here, the
        # future logs being filled, and the moves a restart interrupted (partition -> target).
        self._preferred: dict[tuple[str, int], str] = {}
        self._futures: dict[tuple[str, int], FutureLog] = {}
        self.interrupted_moves: dict[tuple[str, int], str] = {}

    # -- start-up ----------------------------------------------------------------------------
    def startup(self) -> None:
        """Open every log under every log dir (see the module docstring). A log dir that
        cannot be read (EIO, ...) is taken offline and the others are served, as Kafka does;
        raises OSError only when no log dir can be used."""
        for log_dir in self.log_dirs:
            try:
                os.makedirs(log_dir, exist_ok=True)
                self._finish_moves(log_dir)
            except OSError:
                pass  # _load_dir below meets the same error and takes the dir offline
        for log_dir in self.log_dirs:
            try:
                self._load_dir(log_dir)
            except OSError as exc:
                self._unlisted.add(log_dir)
                self.mark_offline(log_dir, exc)
        if len(self.offline_dirs) == len(self.log_dirs):
            raise OSError(f"every log dir is offline: {self.offline_dirs}")

    def _finish_moves(self, log_dir: str) -> None:
        """What a kill -9 in the middle of a move left in ``log_dir`` (see the module
        docstring): the future dirs go, and a copy moved here wins over the other copy."""
        for name in sorted(os.listdir(log_dir)):
            path = os.path.join(log_dir, name)
            if name.endswith(FUTURE_DIR_SUFFIX) and os.path.isdir(path):
                parsed = parse_partition_dir(name[: -len(FUTURE_DIR_SUFFIX)].rpartition(".")[0])
                logger.info(
                    "removing the unfinished copy of a partition being moved here; the move "
                    "starts again",
                    path=path,
                )
                shutil.rmtree(path)
                if parsed is not None:
                    self.interrupted_moves[parsed] = log_dir
                    self._preferred[parsed] = log_dir
                continue
            parsed = parse_partition_dir(name)
            marker = os.path.join(path, MOVED_MARKER)
            if parsed is None or not os.path.exists(marker):
                continue
            for other_dir in self.log_dirs:
                other = os.path.join(other_dir, name)
                if other_dir != log_dir and os.path.isdir(other):
                    logger.info(
                        "removing the copy a finished move replaced",
                        path=other,
                        moved_to=log_dir,
                    )
                    doomed = f"{other}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
                    os.rename(other, doomed)
                    fsync_dir(other_dir)
                    shutil.rmtree(doomed)
            os.unlink(marker)
            fsync_dir(path)

    def _load_dir(self, log_dir: str) -> None:
        clean = checkpoint.has_clean_shutdown_marker(log_dir)
        try:
            recovery_points = checkpoint.read_checkpoint(checkpoint.recovery_point_path(log_dir))
        except checkpoint.CheckpointError as exc:
            logger.warning(
                "recovery point checkpoint unreadable; recovering every log in the "
                "dir from offset 0",
                log_dir=log_dir,
                error=str(exc),
            )
            recovery_points, clean = {}, False
        try:
            start_offsets = checkpoint.read_checkpoint(checkpoint.log_start_offset_path(log_dir))
        except checkpoint.CheckpointError as exc:
            logger.warning(
                "log start offset checkpoint unreadable; every log in the dir starts at its "
                "first segment",
                log_dir=log_dir,
                error=str(exc),
                action="records deleted with DeleteRecords inside a first segment are readable "
                "again until retention removes them; delete them again if that matters",
            )
            start_offsets = {}
        try:
            clean_offsets = checkpoint.read_checkpoint(checkpoint.cleaner_checkpoint_path(log_dir))
        except checkpoint.CheckpointError as exc:
            logger.warning(
                "cleaner offset checkpoint unreadable; compacted logs are cleaned again from "
                "their start",
                log_dir=log_dir,
                error=str(exc),
            )
            clean_offsets = {}
        loaded = 0
        for name in sorted(os.listdir(log_dir)):
            path = os.path.join(log_dir, name)
            if not os.path.isdir(path):
                continue
            if name.endswith(DELETE_DIR_SUFFIX):
                logger.info("removing partition directory of a deleted topic", path=path)
                shutil.rmtree(path)
                continue
            parsed = parse_partition_dir(name)
            if parsed is None:
                logger.warning("ignoring directory that is not <topic>-<partition>", path=path)
                continue
            if parsed in self._logs:
                logger.error(
                    "partition found in two log dirs; keeping the first, remove the "
                    "other copy by hand",
                    topic=parsed[0],
                    partition=parsed[1],
                    kept=self._dir_of[parsed],
                    ignored=log_dir,
                )
                continue
            self._logs[parsed] = Log(
                path,
                self._config_for_topic(parsed[0]),
                clock=self._clock,
                recovery_point=recovery_points.get(parsed, 0),
                log_start_offset=start_offsets.get(parsed, 0),
                needs_recovery=not clean,
                first_dirty_offset=clean_offsets.get(parsed),
                on_first_dirty_lowered=self._cleaner_checkpointer(log_dir),
            )
            self._dir_of[parsed] = log_dir
            loaded += 1
        if clean:
            logger.info(
                "clean shutdown marker found: no recovery needed", log_dir=log_dir, logs=loaded
            )
        else:
            logger.info(
                "no clean shutdown marker: logs recovered from their recovery points",
                log_dir=log_dir,
                logs=loaded,
            )
        checkpoint.remove_clean_shutdown_marker(log_dir)

    # -- offline log dirs (KIP-112) ----------------------------------------------------------
    def log_dir_of(self, topic: str, partition: int) -> str | None:
        """The log dir holding (topic, partition), offline or not; None when there is none."""
        key = (topic, partition)
        return self._dir_of.get(key) or self._offline.get(key)

    def is_offline(self, topic: str, partition: int) -> bool:
        """Whether (topic, partition) is in an offline log dir, or may be: while a log dir is
        offline since start-up, a partition found in no other dir may be in it."""
        key = (topic, partition)
        if key in self._offline:
            return True
        return bool(self._unlisted) and key not in self._logs

    def partitions_in(self, log_dir: str) -> list[tuple[str, int]]:
        """The (topic, partition) of every log served from ``log_dir``, sorted."""
        return sorted(key for key, d in list(self._dir_of.items()) if d == log_dir)

    def mark_offline(self, log_dir: str, exc: OSError) -> list[tuple[str, int]]:
        """Take a failing log dir out of service (KIP-112): its logs are abandoned without
        writing anything more and its partitions answer as offline until a restart; the other
        dirs keep serving. Returns the partitions taken offline (none if it already was).
        The caller holds the locks of those partitions: no other thread may use their logs."""
        if log_dir in self.offline_dirs:
            return []
        self.offline_dirs[log_dir] = repr(exc)
        keys = [key for key, d in list(self._dir_of.items()) if d == log_dir]
        for key in keys:
            self.cleaning.abort_and_wait(key)
            self._logs.pop(key).abandon()
            del self._dir_of[key]
            self._offline[key] = log_dir
        for key, future in list(self._futures.items()):
            if future.target_dir == log_dir or key in keys:
                del self._futures[key]  # the move stops; a copy on a working disk is removed
                if future.target_dir != log_dir:
                    future.discard()
        logger.error(
            "log dir offline: its partitions are not served until a restart",
            log_dir=log_dir,
            error=repr(exc),
            partitions=len(keys),
            action="replace or repair the disk, then restart the broker",
        )
        return keys

    # -- logs --------------------------------------------------------------------------------
    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[Log]:
        return list(self._logs.values())

    def topics(self) -> dict[str, int]:
        """Topic name -> number of partitions with a log here."""
        counts: dict[str, int] = {}
        for topic, _ in list(self._logs):
            counts[topic] = counts.get(topic, 0) + 1
        return counts

    def _partition_counts(self) -> dict[str, int]:
        counts = dict.fromkeys(self.log_dirs, 0)
        for log_dir in list(self._dir_of.values()):
            counts[log_dir] += 1
        return counts

    def create_log(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        """The log of (topic, partition), created in the log dir holding the fewest partitions
        if absent. Raises InvalidTopicError for an illegal name or partition."""
        validate_topic(topic, partition)
        key = (topic, partition)
        existing = self._logs.get(key)
        if existing is not None:
            return existing
        counts = self._partition_counts()
        online = [d for d in self.log_dirs if d not in self.offline_dirs]
        if not online:
            raise OSError(f"every log dir is offline: {self.offline_dirs}")
        preferred = self._preferred.pop(key, None)
        if preferred in online:
            log_dir = preferred
        else:
            log_dir = min(online, key=lambda d: counts[d])
        path = os.path.join(log_dir, partition_dir_name(topic, partition))
        log = Log(
            path,
            config or self._config_for_topic(topic),
            clock=self._clock,
            needs_recovery=False,
            on_first_dirty_lowered=self._cleaner_checkpointer(log_dir),
        )
        fsync_dir(log_dir)
        self._logs[key] = log
        self._dir_of[key] = log_dir
        logger.info("created log", topic=topic, partition=partition, log_dir=log_dir)
        return log

    def delete_log(self, topic: str, partition: int) -> None:
        """Close and remove one partition's log (a replica moved away or its topic deleted in
        a cluster) as :meth:`delete_topic` removes each of its logs. Raises LogNotFoundError
        when there is none."""
        key = (topic, partition)
        if key not in self._logs:
            raise LogNotFoundError(f"{topic}-{partition} has no log in {self.log_dirs}")
        self._remove_log(key)

    def delete_topic(self, topic: str) -> int:
        """Close and remove every partition log of ``topic``; return how many. The directory is
        first renamed to ``<topic>-<partition>.<uuid>-delete`` so a crash mid-removal leaves
        nothing that loads as a log. Raises LogNotFoundError if the topic has no log."""
        keys = [key for key in list(self._logs) if key[0] == topic]
        if not keys:
            raise LogNotFoundError(f"topic {topic!r} has no log in {self.log_dirs}")
        for key in keys:
            self._remove_log(key)
        return len(keys)

    def _remove_log(self, key: tuple[str, int]) -> None:
        self.cleaning.abort_and_wait(key)  # no cleaning writes into the doomed directory
        self.cancel_future(*key)
        log = self._logs.pop(key)
        log_dir = self._dir_of.pop(key)
        log.close()
        doomed = f"{log.directory}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        os.rename(log.directory, doomed)
        fsync_dir(log_dir)
        shutil.rmtree(doomed)
        if log.first_dirty_offset is not None:
            self.checkpoint_cleaner(log_dir)  # a new log of this name starts dirty
        logger.info("deleted log", topic=key[0], partition=key[1], log_dir=log_dir)
        if log.log_start_offset > log.first_segment_base:
            # else a log created again under this name would start there after a crash
            self.checkpoint_log_start_offsets(log_dir)

    # -- moves between log dirs (KIP-113) ----------------------------------------------------
    def set_preferred_dir(self, topic: str, partition: int, log_dir: str) -> None:
        """Create (topic, partition) in ``log_dir`` when it comes here (Kafka's
        maybeUpdatePreferredLogDir, for a partition this broker does not hold yet)."""
        self._preferred[(topic, partition)] = log_dir

    def future_of(self, topic: str, partition: int) -> FutureLog | None:
        return self._futures.get((topic, partition))

    def futures_in(self, log_dir: str) -> list[FutureLog]:
        return [f for f in list(self._futures.values()) if f.target_dir == log_dir]

    def start_future(self, topic: str, partition: int, target_dir: str) -> FutureLog:
        """Begin moving (topic, partition) to ``target_dir``: an empty future dir there, for
        the caller to fill (``FutureLog.copy_round``) then swap in. A move under way to another
        dir is cancelled first. Raises LogNotFoundError when the partition has no log here."""
        key = (topic, partition)
        if key not in self._logs:
            raise LogNotFoundError(f"{topic}-{partition} has no log in {self.log_dirs}")
        self.cancel_future(topic, partition)
        future = FutureLog(topic, partition, target_dir)
        future.create()
        self._futures[key] = future
        logger.info(
            "moving partition to another log dir",
            topic=topic,
            partition=partition,
            from_dir=self._dir_of[key],
            to_dir=target_dir,
        )
        return future

    def cancel_future(self, topic: str, partition: int) -> None:
        """Stop moving (topic, partition) and remove its future dir; no-op without a move."""
        future = self._futures.pop((topic, partition), None)
        if future is not None:
            future.discard()
            logger.info(
                "move to another log dir cancelled",
                topic=topic,
                partition=partition,
                to_dir=future.target_dir,
            )

    def swap_in_future(self, topic: str, partition: int) -> tuple[Log, str]:
        """Finish moving (topic, partition) (Kafka's replaceCurrentWithFutureLog): close the
        current log, copy what the future log still lacks, rename it into place and open it,
        then rename the old copy ``-delete``, as a deleted topic's. Returns the moved log and
        that directory, for :meth:`remove_replaced` (Kafka deletes it later too). The caller
        holds the partition lock, has let the future catch up (so what remains is small) and
        calls this in a worker thread. The copy renamed into place carries a marker until the
        old one is renamed, so a crash between the two renames keeps the new copy at start-up
        (Kafka refuses to start then). On OSError before the rename the current log is opened
        again and the move is over."""
        key = (topic, partition)
        future = self._futures.pop(key)
        current = self._logs[key]
        old_dir = self._dir_of[key]
        target = future.target_dir
        self.cleaning.abort_and_wait(key)  # Kafka pauses the cleaning of a moving log too
        complete = current.close()
        final = os.path.join(target, partition_dir_name(topic, partition))
        try:
            future.final_round(current)
            marker = os.path.join(future.directory, MOVED_MARKER)
            with open(marker, "wb"):
                pass
            fsync_dir(future.directory)
            os.rename(future.directory, final)
            fsync_dir(target)
        except OSError:
            future.discard()
            self._logs[key] = self._reopen(current, current.directory, old_dir, complete)
            raise
        killpoints.reached("move-renamed")
        moved = self._reopen(current, final, target, complete)
        self._logs[key] = moved
        self._dir_of[key] = target
        self._preferred.pop(key, None)
        doomed = f"{current.directory}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        os.rename(current.directory, doomed)
        fsync_dir(old_dir)
        killpoints.reached("move-old-renamed")
        os.unlink(os.path.join(final, MOVED_MARKER))
        fsync_dir(final)
        return moved, doomed

    def remove_replaced(self, moved: Log, doomed: str) -> None:
        """After :meth:`swap_in_future`, without the partition lock (a large copy takes a while
        to unlink: 120 ms for 256 MiB here): remove the old copy and write the checkpoints of
        both dirs (a crash before leaves the ``-delete`` dir to the next start-up, and a moved
        log missing from its dir's recovery-point checkpoint recovered from its start)."""
        shutil.rmtree(doomed)
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        if moved.first_dirty_offset is not None:
            self.checkpoint_cleaner(os.path.dirname(doomed))
            self.checkpoint_cleaner(os.path.dirname(moved.directory))

    def _reopen(self, closed: Log, directory: str, log_dir: str, complete: bool) -> Log:
        """The Log of ``directory`` holding what ``closed`` held when it was closed (cleanly
        unless ``complete`` is False: then it is recovered), with its high watermark."""
        log = Log(
            directory,
            closed.config,
            clock=self._clock,
            recovery_point=closed.recovery_point,
            log_start_offset=closed.log_start_offset,
            needs_recovery=not complete,
            first_dirty_offset=closed.first_dirty_offset,
            on_first_dirty_lowered=self._cleaner_checkpointer(log_dir),
        )
        if closed.replicated:
            log.update_high_watermark(closed.high_watermark)
        return log

    # -- periodic work -----------------------------------------------------------------------
    def due(
        self,
        task: Maintenance,
        now_ms: int,
        among: Sequence[tuple[tuple[str, int], Log]] | None = None,
    ) -> list[tuple[tuple[str, int], Log]]:
        """((topic, partition), log) of every log that has ``task`` work at ``now_ms``, judged
        among ``among`` (a slice of :meth:`keyed_logs`: a caller on an event loop walks ten
        thousand logs in slices) or every log. Flush and file removal are judged from memory;
        retention is run on every log not being cleaned (its check may stat a segment without
        message timestamps). Safe to call while other threads append: ``run`` checks again."""
        logs = list(self._logs.items()) if among is None else among
        if task is Maintenance.RETENTION:
            # A log being cleaned waits (Kafka runs a compacted log's retention in its cleaner
            # thread): deleting the segments a cleaning is about to swap would waste it.
            return [(key, log) for key, log in logs if not self.cleaning.in_progress(key)]
        if task is Maintenance.FLUSH:
            return [(key, log) for key, log in logs if log.flush_due(now_ms)]
        return [(key, log) for key, log in logs if log.deleted_files_due(now_ms)]

    def keyed_logs(self) -> list[tuple[tuple[str, int], Log]]:
        """((topic, partition), log) of every log, a copy: logs created or removed later are
        not in it."""
        return list(self._logs.items())

    @staticmethod
    def run(task: Maintenance, log: Log, now_ms: int) -> int:
        """Do ``task`` on ``log``: segments deleted by retention, 1 if it flushed, or files
        removed. May fsync and unlink: call it where blocking is allowed."""
        if task is Maintenance.RETENTION:
            return log.delete_expired_segments(now_ms)
        if task is Maintenance.FLUSH:
            return int(log.flush_if_due(now_ms))
        return log.remove_deleted_files(now_ms)

    def checkpoint_recovery_points(self) -> None:
        """Write every online log dir's recovery-point-offset-checkpoint (atomically). Safe to
        call from several threads."""
        with self._recovery_checkpoint_lock:
            for log_dir in self.log_dirs:
                if log_dir in self.offline_dirs:
                    continue
                # Copies: the broker may create a log in another thread meanwhile.
                points = {
                    key: log.recovery_point
                    for key, log in list(self._logs.items())
                    if self._dir_of.get(key) == log_dir
                }
                checkpoint.write_checkpoint(checkpoint.recovery_point_path(log_dir), points)

    def checkpoint_log_start_offsets(self, log_dir: str | None = None) -> None:
        """Write the log-start-offset-checkpoint of ``log_dir`` (default: every online one)
        atomically: the logs whose start offset is past their first segment's base, as Kafka
        writes it. Safe to call from several threads."""
        dirs = [log_dir] if log_dir is not None else self.log_dirs
        with self._start_checkpoint_lock:
            for d in dirs:
                if d in self.offline_dirs:
                    continue
                offsets = {
                    key: log.log_start_offset
                    for key, log in list(self._logs.items())
                    if self._dir_of.get(key) == d and log.log_start_offset > log.first_segment_base
                }
                path = checkpoint.log_start_offset_path(d)
                if offsets or os.path.exists(path):  # no file until DeleteRecords needs one
                    checkpoint.write_checkpoint(path, offsets)

    def _cleaner_checkpointer(self, log_dir: str) -> Callable[[], None]:
        return lambda: self.checkpoint_cleaner(log_dir)

    def checkpoint_cleaner(self, log_dir: str) -> None:
        """Write ``log_dir``'s cleaner-offset-checkpoint (Kafka's format): the first dirty offset
        of every log there that the cleaner has seen. Called after each cleaning and when a
        truncation lowers one; serialised, as several threads may call it."""
        with self._cleaner_checkpoint_lock:
            offsets = {
                key: log.first_dirty_offset
                for key, log in list(self._logs.items())
                if self._dir_of.get(key) == log_dir and log.first_dirty_offset is not None
            }
            checkpoint.write_checkpoint(checkpoint.cleaner_checkpoint_path(log_dir), offsets)

    def shutdown(self) -> list[str]:
        """Flush and close every log, write the checkpoints, then the clean-shutdown markers.

        A full or failing disk does not stop it half-way: every log is closed, and what could
        not be written is logged. Checkpoints and markers that cannot be written only cost the
        next start a recovery, and a marker is written only when everything before it was.
        Returns the logs ("topic-partition") whose data could not be fsynced and the offline
        log dirs: empty when nothing appended is at risk."""
        unflushed: list[str] = []
        complete = True
        for (topic, partition), log in list(self._logs.items()):
            try:
                complete = log.close() and complete
            except OSError as exc:
                unflushed.append(f"{topic}-{partition}")
                logger.error(
                    "could not fsync the log at shutdown",
                    topic=topic,
                    partition=partition,
                    error=repr(exc),
                    action="check the disk; messages not yet fsynced may be lost",
                )
        try:
            self.checkpoint_recovery_points()
            self.checkpoint_log_start_offsets()
        except OSError as exc:
            complete = False
            logger.warning(
                "could not write the recovery-point checkpoints at shutdown",
                error=repr(exc),
                action="none: the next start recovers the logs from the previous checkpoints",
            )
        if complete and not unflushed:
            for log_dir in self.log_dirs:
                if log_dir not in self.offline_dirs:
                    try:
                        checkpoint.write_clean_shutdown_marker(log_dir)
                    except OSError as exc:
                        logger.warning(
                            "could not write the clean-shutdown marker",
                            log_dir=log_dir,
                            error=repr(exc),
                            action="none: the next start runs log recovery",
                        )
            logger.info(
                "logs flushed, recovery points checkpointed, clean shutdown marker written",
                logs=len(self._logs),
            )
        else:
            logger.warning(
                "no clean-shutdown marker written: the next start runs log recovery",
                logs=len(self._logs),
            )
        for log_dir, why in self.offline_dirs.items():
            logger.error(
                "log dir offline at shutdown: what it held was not flushed or checkpointed",
                log_dir=log_dir,
                error=why,
                action="replace or repair the disk; the next start recovers what it can",
            )
            unflushed.append(log_dir)
        return unflushed
