"""Keep freed request-sized buffers in the process heap instead of giving them back to the OS.

A produce request moves a few ~1 MB buffers through Python (the frame, the validated copy).
glibc serves allocations above its mmap threshold with fresh mmaps and trims the heap top once
128 KiB is free, so every request faults its buffers in again, which costs more than validating
them (bench/NOTES.md).
Raising both thresholds lets the next request reuse the same pages. Only the serve process does
this; RSS then follows the largest working set rather than the current one.
"""

from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["keep_freed_buffers"]

# mallopt() parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024  # glibc's ceiling for this parameter on 64-bit
TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024


def keep_freed_buffers() -> bool:
    """Set glibc's mmap and trim thresholds; False where the C library is not glibc (musl,
    macOS), where the defaults stay and nothing else changes."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
