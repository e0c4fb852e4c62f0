"""Reading an internal log (``__consumer_offsets``, ``__transaction_state``) whole, in offset
order, as its coordinator does at load: blocking reads of READ_CHUNK_BYTES under the partition
lock the caller holds, in a worker thread."""

from __future__ import annotations

from collections.abc import Iterator

from protocol.records import ShallowEntry, iter_shallow
from storage.log import Log

READ_CHUNK_BYTES = 1 << 20


def log_entries(log: Log) -> Iterator[tuple[bytes, ShallowEntry, int]]:
    """Every top-level entry (message set entry or record batch, control batches included) of
    ``log`` from its start to its end: ``(chunk, entry, skip_below)``, where records of the entry
    below offset ``skip_below`` were yielded with the chunk before (a read starts inside the
    compressed wrapper or batch holding its offset)."""
    offset, end = log.log_start_offset, log.log_end_offset
    while offset < end:
        chunk = log.read(offset, READ_CHUNK_BYTES, min_one_message=True).read_bytes()
        last = None
        for entry in iter_shallow(chunk):
            if entry.offset < offset:
                continue
            last = entry.offset
            yield chunk, entry, offset
        if last is None:
            return
        offset = last + 1
