"""The system calls through which storage/ writes and syncs files: the fault-injection seam.

Every write and fsync of segment, index, checkpoint and snapshot data goes through these names,
so a test can make any of them fail (tests/faults replaces them with wrappers that raise ENOSPC
or EIO at the n-th call). Nothing else assigns them. They are the os functions themselves:
calling ``syscalls.pwrite`` costs the same attribute lookup as ``os.pwrite``.
"""

from __future__ import annotations

import os

pwrite = os.pwrite
write = os.write
fsync = os.fsync
