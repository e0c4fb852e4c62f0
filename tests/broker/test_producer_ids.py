"""broker.producer_ids: ids are unique across restarts and crashes, reserved in durable blocks."""

from __future__ import annotations

import pytest

from broker.producer_ids import BLOCK_FILE, BLOCK_SIZE, ProducerIdBlockError, ProducerIdManager


def take(manager: ProducerIdManager, n: int) -> list[int]:
    ids = []
    for _ in range(n):
        if manager.needs_block():
            manager.reserve_block()
        ids.append(manager.next_id())
    return ids


def test_ids_are_unique_across_restarts(tmp_path):
    first = ProducerIdManager(str(tmp_path))
    first.load()
    a = take(first, BLOCK_SIZE + 5)
    assert a == list(range(BLOCK_SIZE + 5))
    assert (tmp_path / BLOCK_FILE).read_text() == f"{2 * BLOCK_SIZE}\n"
    # a restart (or a crash) skips the rest of the reserved block rather than reuse it
    second = ProducerIdManager(str(tmp_path))
    second.load()
    assert take(second, 3) == [2 * BLOCK_SIZE, 2 * BLOCK_SIZE + 1, 2 * BLOCK_SIZE + 2]


def test_next_id_without_a_block_is_a_bug(tmp_path):
    manager = ProducerIdManager(str(tmp_path))
    manager.load()
    assert manager.needs_block()
    with pytest.raises(AssertionError):
        manager.next_id()


@pytest.mark.parametrize("content", ["", "-5\n", "12x\n", "\xff"])
def test_unreadable_block_file_stops_start_up(tmp_path, content):
    (tmp_path / BLOCK_FILE).write_text(content, encoding="latin-1")
    with pytest.raises(ProducerIdBlockError, match=BLOCK_FILE):
        ProducerIdManager(str(tmp_path)).load()
