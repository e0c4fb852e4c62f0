"""How the console shows keys, values, timestamps and transactions (broker/console/data.py)."""

from __future__ import annotations

import trio

from broker.console import data
from broker.console.data import Shown, _entry_rows, format_ms, is_secret, show_bytes
from broker.handlers import HANDLERS
from broker.server import open_context
from broker.txn.coordinator import TransactionCoordinator
from protocol import ApiKey, iter_shallow
from protocol import recordbatch as rb
from tests.broker.test_metrics_counting import T0, message_set, run_transaction
from tests.broker.test_server import config, produce_body, request


def test_values_are_shown_as_json_text_hex_or_null():
    assert show_bytes(None) == Shown("null", "null")
    assert show_bytes(b'{"a":[1,2]}') == Shown("json", '{\n  "a": [\n    1,\n    2\n  ]\n}')
    assert show_bytes(b"{not json") == Shown("text", "{not json")
    assert show_bytes("café <b>".encode()) == Shown("text", "café <b>")
    assert show_bytes(b"\xff\x00a") == Shown("hex", "ff 00 61")


def test_timestamps_are_utc_with_milliseconds():
    assert format_ms(1_700_000_000_123) == "2023-11-14 22:13:20.123 UTC"
    assert format_ms(-1) == "none"


def test_secret_names_are_recognised():
    assert is_secret("sasl.jaas.password") and is_secret("ssl.SECRET.key")
    assert not is_secret("log.dirs")


async def test_pages_mark_aborted_open_and_committed_records_and_show_markers(tmp_path):
    """A partition holding plain messages, a committed, an aborted and an open transaction,
    a committed one after the open one (above the LSO, yet committed), and then a new open
    transaction of that same producer (its committed record stays committed): each record is
    marked as its transaction ended, each marker is a row of its own, the LSO stops at the
    first open transaction, and the pager steps over markers."""
    ctx = await open_context(config(tmp_path, transaction_state_log_num_partitions=1))
    await ctx.create_topic("t", 1)
    async with trio.open_nursery() as nursery:
        coordinator = TransactionCoordinator(ctx)
        await coordinator.start(nursery)
        ctx.txn_coordinator = coordinator
        plain = await HANDLERS[ApiKey.PRODUCE](
            ctx, request(ApiKey.PRODUCE, 2, produce_body("t", message_set(2, T0)))
        )
        assert plain["responses"][0]["partition_responses"][0]["error_code"] == 0
        committer, _ = await run_transaction(ctx, "c", "t", [b"c1", b"c2"], commit=True)
        aborter, _ = await run_transaction(ctx, "a", "t", [b"a1"], commit=False)
        hung, _ = await run_transaction(ctx, "h", "t", [b"h1", b"h2"], commit=None)
        late, _ = await run_transaction(ctx, "l", "t", [b"l1"], commit=True)
        again, late_epoch = await run_transaction(ctx, "l", "t", [b"l2"], commit=None)
        assert again == late and late_epoch == 1
        # 0-1 plain, 2-3 committed, 4 COMMIT, 5 aborted, 6 ABORT, 7-8 open, 9 committed,
        # 10 COMMIT, 11 open

        found = await data.page(ctx, "t", 0, offset=0)
        assert found is not None and found.next_offset is None
        assert (found.high_watermark, found.last_stable_offset, found.log_end) == (12, 7, 12)
        rows = {r.offset: r for r in found.messages}
        assert sorted(rows) == list(range(12))
        markers = {o: (r.kind, r.producer_id) for o, r in rows.items() if r.control}
        assert markers == {4: ("COMMIT", committer), 6: ("ABORT", aborter), 10: ("COMMIT", late)}
        assert all(rows[o].coordinator_epoch == 0 for o in markers)
        marks = {o: r.txn for o, r in rows.items() if not r.control}
        assert marks == {
            0: "",
            1: "",
            2: "committed",
            3: "committed",
            5: "aborted",
            7: "open",
            8: "open",
            9: "committed",
            11: "open",
        }
        assert rows[5].value == Shown("text", "a1") and rows[5].producer_id == aborter

        # three rows a page: the pager counts markers as rows and resumes after them
        starts, offset = [], 0
        while offset is not None:
            got = await data.page(ctx, "t", 0, offset=offset, count=3)
            assert got is not None
            starts.append([r.offset for r in got.messages])
            offset = got.next_offset
        assert starts == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]

        txns = await data.partition_txns(ctx, "t", 0)
        assert txns is not None and (txns.high_watermark, txns.last_stable_offset) == (12, 7)
        assert [
            (t.first_offset, t.producer_id, t.producer_epoch, t.transactional_id, t.state)
            for t in txns.open
        ] == [(7, hung, 0, "h", "Ongoing"), (11, late, 1, "l", "Ongoing")]

        overview = data.transactions(ctx)
        assert overview.active and (overview.committed, overview.aborted) == (2, 1)
        assert [(r.transactional_id, r.state, r.partitions) for r in overview.rows] == [
            ("h", "Ongoing", [("t", 0)]),
            ("l", "Ongoing", [("t", 0)]),
            ("a", "CompleteAbort", []),  # a completed transaction holds no partitions
            ("c", "CompleteCommit", []),
        ]
        assert {r.producer_id for r in overview.rows} == {committer, aborter, hung, late}
        nursery.cancel_scope.cancel()
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)


def _control_row(records):
    spec = rb.BatchSpec(
        base_offset=40, producer_id=7, producer_epoch=3, is_transactional=True, is_control=True
    )
    batch = memoryview(rb.build_batch(spec, records))
    [entry] = iter_shallow(batch)
    [row] = _entry_rows(batch, entry)
    return row


def test_control_batches_other_than_markers_are_shown_for_what_they_are():
    marker = rb.build_end_txn_marker(
        rb.EndTxnMarker(False, 5), base_offset=9, producer_id=7, producer_epoch=3, timestamp=T0
    )
    [entry] = iter_shallow(marker)
    [row] = _entry_rows(memoryview(marker), entry)
    assert (row.offset, row.kind, row.producer_id, row.producer_epoch) == (9, "ABORT", 7, 3)
    assert row.coordinator_epoch == 5 and row.control
    # KRaft's LeaderChange (control type 2): not a transaction marker
    leader_change = _control_row([(0, T0, b"\x00\x00\x00\x02", b"\x00\x00", ())])
    assert (leader_change.kind, leader_change.coordinator_epoch) == ("control type 2", -1)
    # the cleaner removed the marker's record once delete.retention.ms passed
    assert _control_row([]).kind == "empty"
    # a marker value too short to hold the coordinator epoch
    assert _control_row([(0, T0, b"\x00\x00\x00\x01", b"\x00", ())]).kind.startswith(
        "unreadable: transaction marker value of 1 bytes"
    )
