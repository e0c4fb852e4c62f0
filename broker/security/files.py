"""Private JSON state files (SCRAM credentials, ACLs) shared by the broker and the CLI.

Each file is written whole: a ``.tmp`` file created with mode 0600, fsynced, renamed over the
old one and the directory fsynced, so a crash leaves the old or the new file, never a mix. A
read-modify-write holds an exclusive ``flock`` on ``<file>.lock``, so ``chronolog users`` and a
running broker never lose each other's changes. Readers see a change by the file's identity
(inode, size, mtime): :class:`WatchedFile` reloads when it differs, so a change made by the CLI
takes effect in a running broker at its next look-up. Blocking: the broker runs writes in a
worker thread.
"""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from broker.errors import STORAGE_FAILURES
from storage.durable import write_atomically

MODE = 0o600


class StateFileError(Exception):
    """Raised when a state file exists but cannot be read or parsed; the message names the
    file and what to do (the broker refuses to start rather than run without its ACLs or
    users)."""


STATE_FILE_FAILURES: tuple[type[Exception], ...] = (StateFileError, *STORAGE_FAILURES)
"""What reading or replacing a state file raises: its content is bad, or its log dir failed."""


def write_private(path: str, doc: Any) -> None:
    """Replace ``path`` with ``doc`` as JSON, mode 0600, durably (see the module docstring)."""
    data = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()
    write_atomically(path, data, MODE)


def read_json(path: str) -> Any | None:
    """The file's JSON, or None when it does not exist; StateFileError when unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StateFileError(
            f"cannot read {path}: {exc}; restore it from a backup or move it away (an absent "
            "file means no entries)"
        ) from None


@contextmanager
def locked(path: str) -> Iterator[None]:
    """Hold the exclusive lock of ``path``'s read-modify-write (``<path>.lock``)."""
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def identity(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class WatchedFile:
    """A parsed state file, parsed again whenever the file changed. ``parse(doc or None)``
    builds the in-memory value; :meth:`current` returns it (one stat per call)."""

    def __init__(self, path: str, parse: Callable[[Any], Any]) -> None:
        self.path = path
        self._parse = parse
        self._identity: tuple[int, int, int] | None | bool = False  # False: never loaded
        self._value: Any = None

    def current(self) -> Any:
        seen = identity(self.path)
        if seen != self._identity:
            self._value = self._parse(read_json(self.path))
            self._identity = seen
        return self._value

    def update(self, change: Callable[[Any], tuple[Any, Any]]) -> Any:
        """Under the lock: read the file, ``change(doc or None)`` returns ``(new document,
        result)``; the document is written (when not None) and becomes the current value
        at once; returns ``result``."""
        with locked(self.path):
            doc, result = change(read_json(self.path))
            if doc is not None:
                write_private(self.path, doc)
                self._value = self._parse(doc)
                self._identity = identity(self.path)
        return result
