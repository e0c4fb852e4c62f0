"""The system calls through which storage/ writes and syncs files: the fault-injection seam.

Every write and fsync of segment, index, checkpoint and snapshot data goes through these
functions, so a test can make any of them fail (tests/faults replaces them with wrappers that
raise ENOSPC or EIO at the n-th call). Nothing else assigns them. Each looks up its ``os``
function when called, so a test that patches ``os`` itself still sees storage's calls; the extra
Python call is paid once per append or fsync, never per message.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12


def pwrite(fd: int, data: Buffer, position: int) -> int:
    return os.pwrite(fd, data, position)


def write(fd: int, data: Buffer) -> int:
    return os.write(fd, data)


def fsync(fd: int) -> None:
    os.fsync(fd)
