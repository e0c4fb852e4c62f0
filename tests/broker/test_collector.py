"""broker/collector.py: survivors of a full collection are frozen; garbage made later is still
collected; a thaw gives frozen objects that became garbage back to the collector."""

from __future__ import annotations

import gc
import weakref

import pytest

from broker import collector


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


@pytest.fixture
def installed():
    gc.collect()
    collector.install()
    try:
        yield
    finally:
        gc.callbacks.remove(collector._freeze_after_full_collection)
        gc.unfreeze()
        gc.collect()


def test_a_full_collection_freezes_its_survivors(installed):
    alive = _Node()
    gc.collect()
    assert gc.get_freeze_count() > 0
    assert gc.is_tracked(alive) and not any(alive is o for o in gc.get_objects(2))


def test_garbage_made_after_a_freeze_is_still_collected(installed):
    gc.collect()
    node = _Node()
    gone = weakref.ref(node)
    del node
    gc.collect()
    assert gone() is None


def test_frozen_objects_that_become_garbage_wait_for_a_thaw(installed):
    node = _Node()
    gone = weakref.ref(node)
    gc.collect()  # node survives, and is frozen
    del node
    gc.collect()
    assert gone() is not None  # frozen: not visited
    collector.thaw()
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert gone() is None


def test_install_twice_installs_once(installed):
    collector.install()
    assert gc.callbacks.count(collector._freeze_after_full_collection) == 1


def test_settle_collects_only_once_installed():
    assert collector._freeze_after_full_collection not in gc.callbacks
    collector.settle()
    assert gc.get_freeze_count() == 0


async def test_deleting_a_topic_thaws(tmp_path):
    """A deleted topic's logs may have been frozen: the next full collection must see them."""
    import trio

    from broker.config import BrokerConfig
    from broker.server import open_context

    pairs = [("log.dirs", str(tmp_path)), ("listeners", "PLAINTEXT://127.0.0.1:0")]
    ctx = await open_context(BrokerConfig.from_properties(pairs))
    await ctx.create_topic("t", 3)
    log = weakref.ref(ctx.get_log("t", 0))
    gc.freeze()
    try:
        assert await ctx.delete_topic("t")
        assert gc.get_freeze_count() == 0
        gc.collect()
        assert log() is None
    finally:
        gc.unfreeze()
        await trio.to_thread.run_sync(ctx.log_manager.shutdown)
