"""Helpers of the fault suite (imported as tests.faults.helpers): filling a filesystem and
reading a partition back."""

from __future__ import annotations

import os

from tests.integration.kafka_wire import WireClient, read_all


def fill(path, leave: int) -> None:
    """Write a filler file so that about ``leave`` bytes stay free on path's filesystem."""
    st = os.statvfs(path)
    size = max(st.f_bavail * st.f_frsize - leave, 0)
    with open(path / "filler", "wb") as f:
        chunk = b"\0" * (1 << 20)
        while size > 0:
            try:
                size -= f.write(chunk[: min(size, len(chunk))])
            except OSError:
                break


def fill_rest(path) -> None:
    """Take every byte still free (beside the filler), so even small files cannot be written."""
    try:
        with open(path / "filler-rest", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    except OSError:
        pass  # full: not even an empty file fits any more


def values(client: WireClient, topic: str, start: int = 0) -> list[tuple[int, bytes]]:
    """Every (offset, value) of partition 0 from ``start``."""
    return [(m.offset, bytes(m.value)) for m in read_all(client, topic, 0, start)]
