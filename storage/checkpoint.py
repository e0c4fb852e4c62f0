"""Per-log-dir files: ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``cleaner-offset-checkpoint`` and ``.kafka_cleanshutdown``.

Checkpoint format (Kafka's OffsetCheckpoint, version 0), text, one item a line::

    0                      version
    <n>                    number of entries
    <topic> <partition> <offset>   n times

The checkpoints are written atomically (storage.durable.write_atomically), so a crash leaves either
the old or the new content, never a torn one.
"""

from __future__ import annotations

import os

from storage.durable import fsync_dir, write_atomically
from storage.errors import InvalidTopicError, StorageError
from storage.layout import (
    CLEAN_SHUTDOWN_FILE,
    CLEANER_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    validate_topic,
)

CHECKPOINT_VERSION = 0


class CheckpointError(StorageError):
    """Raised by :func:`read_checkpoint` when a checkpoint file does not follow the format; the
    caller treats every log in that dir as needing recovery from offset 0."""


def write_checkpoint(path: str, offsets: dict[tuple[str, int], int]) -> None:
    """Write a checkpoint file mapping (topic, partition) -> offset, atomically."""
    lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
    lines += [
        f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())
    ]
    write_atomically(path, ("\n".join(lines) + "\n").encode("ascii"))


def read_checkpoint(path: str) -> dict[tuple[str, int], int]:
    """Read a checkpoint file; a missing file is an empty map. Raises CheckpointError for a file
    that is unreadable or malformed (wrong version, count mismatch, bad line)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint {path}: {exc}") from exc
    try:
        lines = raw.decode("ascii").splitlines()
    except UnicodeDecodeError:
        raise CheckpointError(f"checkpoint {path} is not ASCII text") from None
    if len(lines) < 2:
        raise CheckpointError(f"checkpoint {path} is truncated: {len(lines)} lines")
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CheckpointError(f"checkpoint {path} has unknown version {lines[0]!r}")
    try:
        expected = int(lines[1])
    except ValueError:
        raise CheckpointError(f"checkpoint {path} has a bad entry count {lines[1]!r}") from None
    entries = [line for line in lines[2:] if line.strip()]
    if len(entries) != expected:
        raise CheckpointError(
            f"checkpoint {path} announces {expected} entries but holds {len(entries)}"
        )
    offsets: dict[tuple[str, int], int] = {}
    for line in entries:
        parts = line.split()
        try:
            if len(parts) != 3:
                raise ValueError
            topic, partition, offset = parts[0], int(parts[1]), int(parts[2])
            validate_topic(topic, partition)
            if offset < 0:
                raise ValueError
        except (ValueError, InvalidTopicError):
            raise CheckpointError(f"checkpoint {path} has a bad line {line!r}") from None
        offsets[(topic, partition)] = offset
    return offsets


def recovery_point_path(log_dir: str) -> str:
    return os.path.join(log_dir, RECOVERY_POINT_CHECKPOINT)


def log_start_offset_path(log_dir: str) -> str:
    return os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT)


def cleaner_checkpoint_path(log_dir: str) -> str:
    """The log cleaner's checkpoint: per compacted log, the first offset not yet cleaned."""
    return os.path.join(log_dir, CLEANER_CHECKPOINT)


def clean_shutdown_path(log_dir: str) -> str:
    return os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)


def write_clean_shutdown_marker(log_dir: str) -> None:
    write_atomically(clean_shutdown_path(log_dir), b"")


def has_clean_shutdown_marker(log_dir: str) -> bool:
    return os.path.exists(clean_shutdown_path(log_dir))


def remove_clean_shutdown_marker(log_dir: str) -> None:
    """Remove the marker (once logs are loaded, so a crash from now on forces recovery)."""
    try:
        os.unlink(clean_shutdown_path(log_dir))
    except FileNotFoundError:
        return
    fsync_dir(log_dir)
