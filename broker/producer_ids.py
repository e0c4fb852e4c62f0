"""Producer ids for idempotent producers (InitProducerId), unique for the broker's lifetime.

Kafka hands them out in blocks reserved in ZooKeeper (/latest_producer_id_block), so ids are
never reused after a restart. chronolog is one node and reserves its blocks in a file instead:
``<first log dir>/producer-id-block`` holds one decimal number, the first id *not* yet reserved.
A block is reserved by writing the new end durably (tmp file, fsync, rename, directory fsync)
before any id in it is handed out, so a crash at any point loses at most the unused rest of a
block and never repeats an id.
"""

from __future__ import annotations

import os

from storage.durable import write_atomically

BLOCK_FILE = "producer-id-block"
BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE


class ProducerIdBlockError(Exception):
    """Raised at start-up when ``producer-id-block`` exists but does not hold a non-negative
    decimal number: the broker must not guess, or it could hand out an id twice."""


class ProducerIdManager:
    """Hands out producer ids; blocking file writes happen in :meth:`reserve_block` only.

    Not thread-safe: call from the trio thread, running ``reserve_block`` in a worker thread
    when :meth:`needs_block` says so.
    """

    def __init__(self, log_dir: str) -> None:
        self._path = os.path.join(log_dir, BLOCK_FILE)
        self._next = 0
        self._end = 0  # ids in [_next, _end) are reserved and unused

    def load(self) -> None:
        """Read the reserved end (0 when the file is absent); raises ProducerIdBlockError."""
        try:
            with open(self._path, encoding="ascii") as f:
                text = f.read().strip()
        except FileNotFoundError:
            return
        except (OSError, UnicodeDecodeError) as exc:
            raise ProducerIdBlockError(f"cannot read {self._path}: {exc}") from exc
        if not text.isdigit():
            raise ProducerIdBlockError(
                f"{self._path} holds {text[:40]!r}, not a producer id; restore it from a backup "
                "or set it above every producer id in use"
            )
        self._next = self._end = int(text)

    def needs_block(self) -> bool:
        return self._next >= self._end

    def reserve_block(self) -> None:
        """Reserve the next BLOCK_SIZE ids durably (blocking I/O; OSError on failure, with
        nothing reserved)."""
        end = self._end + BLOCK_SIZE
        write_atomically(self._path, f"{end}\n".encode("ascii"))
        self._next, self._end = self._end, end

    def next_id(self) -> int:
        """The next unused id; call :meth:`reserve_block` first when :meth:`needs_block`."""
        if self.needs_block():
            raise AssertionError("no producer id block reserved")
        producer_id = self._next
        self._next += 1
        return producer_id
