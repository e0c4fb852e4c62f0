"""Helpers of the fault suite (imported as tests.faults.helpers): filling a filesystem and
reading a partition back."""

from __future__ import annotations

import os

from protocol import ApiKey, iter_deep
from tests.integration.kafka_wire import WireClient


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
    """Every (offset, value) of partition 0 from ``start``, read back with Fetch v12."""
    out: list[tuple[int, bytes]] = []
    while True:
        body = {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 8 << 20,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": 0,
                            "fetch_offset": out[-1][0] + 1 if out else start,
                            "partition_max_bytes": 8 << 20,
                        }
                    ],
                }
            ],
        }
        part = client.call(ApiKey.FETCH, 12, body).responses[0].partitions[0]
        assert part.error_code == 0, part
        got = [(m.offset, m.value) for m in iter_deep(bytes(part.records))]
        if not got:
            return out
        out += got
