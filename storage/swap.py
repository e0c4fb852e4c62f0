"""Swapping a cleaned segment in for the segments it replaces, so that a crash at any instant
leaves either the old segments or the new one, never a mix (Kafka's ``.cleaned``/``.swap``
protocol: LocalLog.replaceSegments, and LogLoader at the next start).

Files of a cleaned segment with base offset B (the base of the first segment it replaces), in
the partition directory::

    <B>.log.cleaned, <B>.index.cleaned, <B>.timeindex.cleaned   written by the cleaner, fsynced
    <B>.txnindex.cleaned    written by the cleaner only when it keeps an aborted transaction
    <B>.replaces      the swap manifest: the base offsets of the segments being replaced
    <B>.index.swap, <B>.timeindex.swap, <B>.txnindex.swap, <B>.log.swap   renamed from .cleaned

Steps (:func:`commit`, then the Log renames the replaced segments to ``.deleted``, then
:func:`install`)::

    1. write the manifest (atomically: tmp, fsync, rename, directory fsync)
    2. rename the index files .cleaned -> .swap (an empty .txnindex.swap when the cleaned
       segment has no .txnindex: so that a missing .txnindex.swap always means "installed")
    3. rename the .log .cleaned -> .swap, fsync the directory    <- the commit point
    4. rename the replaced segments' files to .deleted
    5. rename the index .swap files, then the .log .swap file, to their final names (an empty
       .txnindex is then removed: such a file is written only with an entry)
    6. remove the manifest, fsync the directory

Recovery (:func:`recover`, called when a Log is loaded): a manifest whose ``<B>.log.cleaned``
still exists is a swap that never committed: its ``.swap``/``.cleaned`` files and the manifest
are removed and the old segments stay (roll back). A manifest whose ``<B>.log.swap`` exists is a
committed swap: every file of the replaced segments still there is deleted and the ``.swap``
files are renamed in (roll forward). A manifest with neither is a swap finished but for step 6.
Each step of recovery can itself be interrupted and redone.

Unlike Kafka, which infers the replaced segments from the ``.swap`` file's offsets (and so keeps
an old segment whose records were all removed, beyond the cleaned segment's last offset), the
manifest names them. A ``<B>.log.swap`` without a manifest (left by a Kafka broker) is completed
by Kafka's rule; stray ``.cleaned`` files, ``.swap`` index files without their ``.log.swap`` and
``.deleted`` files are removed, as Kafka does.

Errors: OSError from the file system propagates (the caller's log dir is failing);
:class:`CorruptSwapError` is never raised to callers of :func:`recover` (an unreadable manifest
falls back to Kafka's rule).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import structlog

from protocol.errors import CorruptRecordError
from protocol.records import check_entry, iter_shallow
from storage import killpoints
from storage.durable import fsync_dir, write_atomically
from storage.errors import StorageError
from storage.layout import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_MANIFEST_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_segment_file,
    segment_path,
)

logger = structlog.get_logger(__name__)

SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
_MANIFEST_VERSION = "0"


class CorruptSwapError(StorageError):
    """Raised by :func:`read_manifest` for a manifest that does not follow its format."""


def cleaned_path(directory: str, base: int, suffix: str) -> str:
    """Where the cleaner writes the cleaned segment's file of ``suffix`` (.log, .index, ...)."""
    return segment_path(directory, base, suffix) + CLEANED_SUFFIX


def manifest_path(directory: str, base: int) -> str:
    return segment_path(directory, base, SWAP_MANIFEST_SUFFIX)


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def discard_cleaned(directory: str, base: int) -> None:
    """Remove a cleaned segment that will not be swapped in (cleaning aborted or stale)."""
    for suffix in SEGMENT_SUFFIXES:
        _unlink(cleaned_path(directory, base, suffix))


def read_manifest(path: str) -> list[int]:
    """The replaced base offsets a manifest lists; CorruptSwapError when it is malformed."""
    with open(path, "rb") as f:
        raw = f.read()
    try:
        lines = raw.decode("ascii").split("\n")
        if lines[0] != f"version: {_MANIFEST_VERSION}" or not lines[1].startswith("replaces:"):
            raise ValueError
        bases = [int(b) for b in lines[1][len("replaces:") :].split()]
        if not bases or any(b < 0 for b in bases) or bases != sorted(set(bases)):
            raise ValueError
    except (UnicodeDecodeError, IndexError, ValueError):
        raise CorruptSwapError(f"swap manifest {path} is malformed: {raw[:200]!r}") from None
    return bases


def commit(directory: str, base: int, replaced: Sequence[int]) -> None:
    """Steps 1-3: from here on a crash completes the swap. The .cleaned files of ``base`` must
    be complete and fsynced; ``replaced`` are the base offsets of the segments it replaces
    (``base`` first). On an OSError before step 3 the caller may still roll back with
    :func:`roll_back`."""
    text = f"version: {_MANIFEST_VERSION}\nreplaces: {' '.join(map(str, replaced))}\n"
    write_atomically(manifest_path(directory, base), text.encode("ascii"))
    killpoints.reached("manifest-written")
    txn_index = cleaned_path(directory, base, TXN_INDEX_SUFFIX)
    if not os.path.exists(txn_index):
        with open(txn_index, "wb"):
            pass
    for suffix in _INDEX_SUFFIXES:
        os.rename(
            cleaned_path(directory, base, suffix),
            segment_path(directory, base, suffix) + SWAP_SUFFIX,
        )
    killpoints.reached("indexes-swapped")
    os.rename(
        cleaned_path(directory, base, LOG_SUFFIX),
        segment_path(directory, base, LOG_SUFFIX) + SWAP_SUFFIX,
    )
    fsync_dir(directory)
    killpoints.reached("log-swapped")


def roll_back(directory: str, base: int) -> None:
    """Undo a swap that did not commit: its .swap and .cleaned files and its manifest go (the
    .log.cleaned last, so an interrupted roll back is recognised again)."""
    for suffix in _INDEX_SUFFIXES:
        _unlink(segment_path(directory, base, suffix) + SWAP_SUFFIX)
        _unlink(cleaned_path(directory, base, suffix))
    _unlink(manifest_path(directory, base))
    fsync_dir(directory)
    _unlink(cleaned_path(directory, base, LOG_SUFFIX))


def install(directory: str, base: int) -> None:
    """Steps 5-6, once the replaced segments' files are gone or renamed to .deleted (step 4):
    the .swap files take their final names, then the manifest goes."""
    for suffix in (*_INDEX_SUFFIXES, LOG_SUFFIX):
        swap = segment_path(directory, base, suffix) + SWAP_SUFFIX
        if os.path.exists(swap):
            os.replace(swap, segment_path(directory, base, suffix))
    txn_index = segment_path(directory, base, TXN_INDEX_SUFFIX)
    if os.path.exists(txn_index) and os.path.getsize(txn_index) == 0:
        os.unlink(txn_index)
    fsync_dir(directory)
    killpoints.reached("swap-installed")
    _unlink(manifest_path(directory, base))
    fsync_dir(directory)


def _roll_forward(directory: str, base: int, replaced: Iterable[int]) -> None:
    """Complete a committed swap: delete what is left of the replaced segments, install."""
    for old in replaced:
        for suffix in SEGMENT_SUFFIXES:
            path = segment_path(directory, old, suffix)
            # The new segment's own index file is already in place when its .swap is gone.
            if old != base or os.path.exists(path + SWAP_SUFFIX):
                _unlink(path)
    install(directory, base)


def _next_offset(path: str) -> int | None:
    """One past the last offset of a segment file (its base offset's when empty is not known:
    -1), None when the file is not whole sound entries (then it is no finished segment)."""
    with open(path, "rb") as f:
        data = f.read()
    last, end = -1, 0
    try:
        for entry in iter_shallow(data):
            check_entry(data, entry, len(data))
            last, end = entry.offset, entry.next_position
    except CorruptRecordError:
        return None
    return last + 1 if end == len(data) else None


def _kafka_replaced(directory: str, names: Iterable[str], base: int, end: int) -> list[int]:
    """Kafka's rule for a .log.swap without a manifest: the segments with base offsets in
    [base, the swap file's next offset ``end``)."""
    replaced = {base}
    for name in names:
        parsed = parse_segment_file(name)
        if parsed is not None and base <= parsed[0] < end:
            replaced.add(parsed[0])
    return sorted(replaced)


def recover(directory: str) -> list[str]:
    """Finish or undo every interrupted swap in a partition directory and remove leftovers
    (see the module docstring); returns what was done, one line each, for the caller's log."""
    done: list[str] = []
    names = os.listdir(directory)
    for name in sorted(n for n in names if n.endswith(SWAP_MANIFEST_SUFFIX)):
        digits = name[: -len(SWAP_MANIFEST_SUFFIX)]
        if len(digits) != 20 or not digits.isdigit():
            continue
        base = int(digits)
        path = os.path.join(directory, name)
        log_swap = segment_path(directory, base, LOG_SUFFIX) + SWAP_SUFFIX
        if os.path.exists(log_swap):
            try:
                replaced = read_manifest(path)
            except CorruptSwapError as exc:
                logger.warning(
                    "swap manifest unreadable; completing the swap by Kafka's rule",
                    file=path,
                    error=str(exc),
                )
                replaced = _kafka_replaced(directory, names, base, _next_offset(log_swap) or 0)
            _roll_forward(directory, base, replaced)
            done.append(f"completed the interrupted swap of segment {base} (replacing {replaced})")
        elif os.path.exists(cleaned_path(directory, base, LOG_SUFFIX)):
            roll_back(directory, base)
            done.append(f"rolled back the uncommitted swap of segment {base}")
        else:
            _unlink(path)
            fsync_dir(directory)
            done.append(f"removed the manifest of the completed swap of segment {base}")
    names = os.listdir(directory)
    for name in names:
        parsed = parse_segment_file(name[: -len(SWAP_SUFFIX)])
        if not name.endswith(SWAP_SUFFIX) or parsed is None or parsed[1] != LOG_SUFFIX:
            continue
        # No manifest: a swap Kafka left. Complete only a sound file; anything else is debris.
        end = _next_offset(os.path.join(directory, name))
        if end is not None:
            # Kafka writes no empty .txnindex: the one at the base is the replaced segment's.
            txn_swap = segment_path(directory, parsed[0], TXN_INDEX_SUFFIX) + SWAP_SUFFIX
            if not os.path.exists(txn_swap):
                with open(txn_swap, "wb"):
                    pass
            replaced = _kafka_replaced(directory, names, parsed[0], end)
            _roll_forward(directory, parsed[0], replaced)
            done.append(f"completed Kafka's interrupted swap of segment {parsed[0]}")
    for name in os.listdir(directory):
        if name.endswith((CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX)):
            os.unlink(os.path.join(directory, name))
            done.append(f"removed leftover file {name}")
    return done
