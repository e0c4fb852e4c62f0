"""Durable file writes: fsync of files and directories, and atomic replacement of small files.

``write_atomically`` writes ``<name>.tmp``, fsyncs it, renames it over the target and fsyncs the
directory, so a crash leaves either the old or the new content, never a torn one. Every error is
the OSError of the failing call; a failed write leaves the target as it was.
"""

from __future__ import annotations

import os
from storage import syscalls


def _fsync_path(path: str, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        syscalls.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: str) -> None:
    """fsync a directory so a rename or file creation in it survives a crash."""
    _fsync_path(directory, os.O_RDONLY | os.O_DIRECTORY)


def fsync_file(path: str) -> None:
    """fsync a file through a temporary read-only descriptor (dirty pages are the file's, not
    the descriptor's); FileNotFoundError if it does not exist."""
    _fsync_path(path, os.O_RDONLY)


def write_atomically(path: str, data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` by ``data`` (file mode ``mode``) via tmp + fsync + rename + directory
    fsync. On failure (a full disk) ``path`` is untouched and the partial temporary file is
    removed again."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        try:
            os.fchmod(fd, mode)  # a leftover .tmp keeps its old mode through O_CREAT
            view = memoryview(data)
            while view:
                view = view[syscalls.write(fd, view) :]
            syscalls.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        os.unlink(tmp)
        raise
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))
