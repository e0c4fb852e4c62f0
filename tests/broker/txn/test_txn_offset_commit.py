"""TxnOffsetCommit in process (broker/txn/handlers.py with the group and transaction
coordinators): a transactional offset commit never opens a transaction in the offsets log that
no marker ends."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from broker.groups import setup as setup_groups
from broker.groups.coordinator import OFFSETS_PARTITION, OFFSETS_TOPIC
from broker.handlers import HANDLERS
from broker.server import open_context
from broker.txn.coordinator import TransactionCoordinator
from protocol import ApiKey, ErrorCode
from tests.broker.test_metrics_counting import until_complete
from tests.broker.test_server import config, request

PARTITIONS = 2


def txn_offset_commit_body(tid: str, pid: int, epoch: int) -> dict:
    return {
        "transactional_id": tid,
        "group_id": "g",
        "producer_id": pid,
        "producer_epoch": epoch,
        "generation_id": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": 7,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                    for p in range(PARTITIONS)
                ],
            }
        ],
    }


async def transaction_begun(ctx, nursery, version: int):
    """Both coordinators started, and an ongoing transaction of id "etl" holding t-0 and, for
    a client below TxnOffsetCommit v5, the offsets partition (its AddOffsetsToTxn). Returns
    (group coordinator, transaction coordinator, producer id, epoch)."""
    ctx.coordinator = groups = await setup_groups(ctx, nursery)
    ctx.txn_coordinator = txn = TransactionCoordinator(ctx)
    await txn.start(nursery)
    error, pid, epoch = await txn.init_producer_id("etl", 60_000, None)
    assert error is ErrorCode.NONE
    joined = [("t", 0)] if version >= 5 else [("t", 0), (OFFSETS_TOPIC, OFFSETS_PARTITION)]
    client_version = 2 if version >= 5 else 1
    added = await txn.add_partitions("etl", pid, epoch, joined, client_version=client_version)
    assert added is ErrorCode.NONE
    return groups, txn, pid, epoch


@pytest.mark.parametrize("version", [3, 5])
async def test_an_offset_commit_racing_the_end_of_its_transaction_leaves_none_open(
    tmp_path, version
):
    """The transaction ends (here an abort; a timeout's abort in the run that found this) just
    after the coordinator said yes to a TxnOffsetCommit of it. Its batch must land before the
    offsets partition's marker: asked before the offsets log's lock was taken, the batch
    landed after the marker and opened a transaction no marker ends, and every read_committed
    consumer of the group got UNSTABLE_OFFSET_COMMIT for good (Kafka's tools list it as
    hanging). v3: the client added the offsets partition (AddOffsetsToTxn) and the commit is
    verified (it was not at all before); v5 (transaction version 2): the commit adds it."""
    ctx = await open_context(config(tmp_path, transaction_state_log_num_partitions=1))
    await ctx.create_topic("t", PARTITIONS)
    client_version = 2 if version >= 5 else 1
    answers: list[dict] = []
    async with trio.open_nursery() as nursery:
        groups, txn, pid, epoch = await transaction_begun(ctx, nursery, version)
        said_yes, ending = trio.Event(), trio.Event()
        real_check = txn.check_produce

        async def check_produce(*args, **kw):
            error = await real_check(*args, **kw)
            said_yes.set()
            await ending.wait()
            await trio.testing.wait_all_tasks_blocked()  # the markers go as far as they can
            return error

        txn.check_produce = check_produce
        done = trio.Event()

        async def commit_offsets() -> None:
            body = txn_offset_commit_body("etl", pid, epoch)
            answers.append(
                await HANDLERS[ApiKey.TXN_OFFSET_COMMIT](
                    ctx, request(ApiKey.TXN_OFFSET_COMMIT, version, body)
                )
            )
            done.set()

        nursery.start_soon(commit_offsets)
        with trio.fail_after(10):
            await said_yes.wait()
        error, _, _ = await txn.end_txn("etl", pid, epoch, False, client_version=client_version)
        assert error is ErrorCode.NONE
        ending.set()
        await until_complete(txn, "etl")
        with trio.fail_after(10):
            await done.wait()
        unstable = groups.group_offsets("g", require_stable=True).unstable
        committed = groups.offsets.of_group("g")
        nursery.cancel_scope.cancel()
    offsets_log = ctx.get_log(OFFSETS_TOPIC, OFFSETS_PARTITION)
    assert offsets_log.producer_state().ongoing_transactions() == []
    assert offsets_log.last_stable_offset == offsets_log.log_end_offset
    assert unstable == frozenset() and committed == {}  # aborted: nothing counts
    [topic] = answers[0]["topics"]
    assert [p["error_code"] for p in topic["partitions"]] == [0] * PARTITIONS
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)


async def test_an_offset_commit_arriving_after_its_transaction_ended_is_refused(tmp_path):
    """A TxnOffsetCommit (v3, transaction version 1: the epoch stays) that arrives after its
    transaction ended, as one the client gave up on and aborted can, is refused with
    INVALID_TXN_STATE and writes nothing: appended, it would open a transaction in the offsets
    log that no marker ends."""
    ctx = await open_context(config(tmp_path, transaction_state_log_num_partitions=1))
    await ctx.create_topic("t", PARTITIONS)
    async with trio.open_nursery() as nursery:
        groups, txn, pid, epoch = await transaction_begun(ctx, nursery, 3)
        error, _, _ = await txn.end_txn("etl", pid, epoch, False, client_version=1)
        assert error is ErrorCode.NONE
        await until_complete(txn, "etl")
        offsets_log = ctx.get_log(OFFSETS_TOPIC, OFFSETS_PARTITION)
        end = offsets_log.log_end_offset
        body = txn_offset_commit_body("etl", pid, epoch)
        answer = await HANDLERS[ApiKey.TXN_OFFSET_COMMIT](
            ctx, request(ApiKey.TXN_OFFSET_COMMIT, 3, body)
        )
        unstable = groups.group_offsets("g", require_stable=True).unstable
        nursery.cancel_scope.cancel()
    [topic] = answer["topics"]
    invalid = int(ErrorCode.INVALID_TXN_STATE)
    assert [p["error_code"] for p in topic["partitions"]] == [invalid] * PARTITIONS
    assert offsets_log.log_end_offset == end
    assert offsets_log.producer_state().ongoing_transactions() == []
    assert unstable == frozenset()
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)
