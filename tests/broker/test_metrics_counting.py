"""broker/metrics.py in process (named apart from tests/integration/test_metrics.py: the test
modules share one namespace): what the handlers count, what the collector reads from the
broker's state, and that each broker's registry is its own."""

from __future__ import annotations

from itertools import accumulate

import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.parser import text_string_to_metric_families

from broker.groups import setup as setup_groups
from broker.groups.offsets import CommittedOffset
from broker.handlers import HANDLERS, release_fetch_body
from broker.metrics import (
    LATENCY_BUCKETS_MS,
    BrokerMetrics,
    GroupOffsetRow,
    _GROUP_GAUGES,
    _PARTITION_GAUGES,
    _TIMES,
    REQUEST_NAMES,
    PartitionRow,
    _count_errors,
    _group_offsets_text,
    _partitions_text,
    _times_text,
    response_error_tree,
)
from broker.server import open_context
from broker.txn.coordinator import TransactionCoordinator
from broker.txn.state import TxnState
from protocol import ApiKey, ErrorCode, MessageSetBuilder
from protocol import recordbatch as rb
from tests.broker.test_server import config, other_task_turns, produce_body, request

T0 = 1_700_000_000_000


def message_set(n: int, first_timestamp: int) -> bytes:
    builder = MessageSetBuilder()
    for i in range(n):
        builder.append(b"m-%d" % i, timestamp=first_timestamp + i)
    return builder.build()


def by_prometheus_client(collector: Collector) -> bytes:
    """What prometheus_client writes for ``collector``'s families: the oracle for the text the
    scrape writes itself."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry)


async def samples(metrics: BrokerMetrics) -> dict[tuple[str, tuple], float]:
    """Every sample of a scrape, keyed by (name, sorted labels)."""
    text = (await metrics.scrape()).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def fetch_body(topic: str, offset: int) -> dict:
    return {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                ],
            }
        ],
    }


def test_error_codes_are_counted_at_every_level_of_the_response_schema():
    counts: dict[int, int] = {}
    body = {
        "error_code": 0,
        "responses": [
            {"topic": "a", "partitions": [{"error_code": 3}, {"error_code": 0}]},
            {"topic": "b", "partitions": [{"error_code": 3, "records": b"\x00"}]},
        ],
        "throttle_time_ms": 0,
    }
    _count_errors(body, response_error_tree(ApiKey.FETCH, 12), counts)
    assert counts == {0: 2, 3: 2}
    # Fetch v0 has no top-level error code: one that a body carried would not be on the wire
    counts.clear()
    _count_errors(body, response_error_tree(ApiKey.FETCH, 0), counts)
    assert counts == {0: 1, 3: 2}
    # an ApiVersions request of an unknown version is answered (and counted) in v0's layout
    counts.clear()
    _count_errors(
        {"error_code": 35, "api_keys": []}, response_error_tree(ApiKey.API_VERSIONS, 99), counts
    )
    assert counts == {35: 1}


async def test_produce_and_fetch_are_counted_and_logs_read_at_scrape_time(tmp_path):
    ctx = await open_context(config(tmp_path, log_segment_bytes=200))
    ctx.metrics = metrics = BrokerMetrics(ctx, lambda: 7)
    await ctx.create_topic("t", 1)
    sets = [message_set(3, T0 + 10 * i) for i in range(4)]  # timestamps T0+0..2, +10..12, ...
    for record_set in sets:
        body = await HANDLERS[ApiKey.PRODUCE](
            ctx, request(ApiKey.PRODUCE, 2, produce_body("t", record_set))
        )
        assert body["responses"][0]["partition_responses"][0]["error_code"] == 0
    fetched = await HANDLERS[ApiKey.FETCH](ctx, request(ApiKey.FETCH, 10, fetch_body("t", 0)))
    region = fetched["responses"][0]["partitions"][0]["records"]
    release_fetch_body(fetched)
    log = ctx.get_log("t", 0)
    assert log is not None and len(log.segments) > 1  # segment.bytes 200: rolled

    got = await samples(metrics)
    topic = (("topic", "t"),)
    assert got[("kafka_server_brokertopicmetrics_messagesin_total", topic)] == 12
    assert got[("kafka_server_brokertopicmetrics_bytesin_total", topic)] == sum(map(len, sets))
    assert got[("kafka_server_brokertopicmetrics_bytesout_total", topic)] == region.length
    partition = (("partition", "0"), ("topic", "t"))
    assert got[("kafka_log_log_logendoffset", partition)] == 12
    assert got[("kafka_log_log_logstartoffset", partition)] == 0
    assert got[("kafka_log_log_numlogsegments", partition)] == len(log.segments)
    assert got[("kafka_log_log_size", partition)] == log.size
    # The time index is sparse: the oldest segment's only entry, written when it rolled after
    # two sets, holds its largest timestamp. The newest is the active segment's largest.
    assert log.segments[0].base_offset == 0 and log.segments[1].base_offset == 6
    assert got[("chronolog_log_first_timestamp_ms", partition)] == T0 + 12
    assert got[("chronolog_log_last_timestamp_ms", partition)] == T0 + 32
    assert got[("kafka_server_socketservermetrics_connection_count", (("listener", "PLAINTEXT"),))]
    assert got[("chronolog_log_storage_errors_total", (("log_dir", str(tmp_path)),))] == 0
    assert any(name == "process_cpu_seconds_total" for name, _ in got)
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)


async def test_request_times_land_in_their_buckets_and_registries_are_separate(tmp_path):
    ctx = await open_context(config(tmp_path))
    one, other = BrokerMetrics(ctx, lambda: 0), BrokerMetrics(ctx, lambda: 0)
    assert one.registry is not other.registry
    # received 0, handler from 2 ms to 5 ms, sent at 5.05 ms
    answer = {"responses": [{"name": "t", "partition_responses": [{"error_code": 0}]}]}
    one.request_done(ApiKey.PRODUCE, 9, answer, 0.0, 0.002, 0.005, 0.00505)
    one.request_done(ApiKey.PRODUCE, 9, None, 0.0, 0.0, 20.0, 20.0)
    got = await samples(one)
    produce = (("request", "Produce"),)
    assert got[("kafka_network_requestmetrics_requests_total", produce + (("version", "9"),))] == 2
    assert got[("kafka_network_requestmetrics_errors_total", (("error", "NONE"),) + produce)] == 1

    def bucket(name: str, le: float) -> float:
        return got[(name + "_bucket", (("le", repr(float(le))),) + produce)]

    assert bucket("kafka_network_requestmetrics_requestqueuetimems", 1) == 1  # 0 ms
    assert bucket("kafka_network_requestmetrics_requestqueuetimems", 2.5) == 2  # 2 ms
    assert bucket("kafka_network_requestmetrics_localtimems", 2.5) == 0
    assert bucket("kafka_network_requestmetrics_localtimems", 5) == 1  # 3 ms
    assert bucket("kafka_network_requestmetrics_totaltimems", 5) == 0
    assert bucket("kafka_network_requestmetrics_totaltimems", 10) == 1  # 5.05 ms
    assert bucket("kafka_network_requestmetrics_totaltimems", LATENCY_BUCKETS_MS[-1]) == 1
    assert got[("kafka_network_requestmetrics_totaltimems_count", produce)] == 2  # 20 s: +Inf
    assert not any(
        n.startswith("kafka_network_requestmetrics_requests") for n, _ in await samples(other)
    )
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)


class _HistogramsByPrometheusClient:
    """The request-time histograms built as prometheus_client's own families: the oracle for
    the exposition broker/metrics.py writes itself."""

    def __init__(self, times: dict[int, list]) -> None:
        self.times = times

    def collect(self):
        bounds = [*(repr(float(b)) for b in LATENCY_BUCKETS_MS), "+Inf"]
        rows = sorted((REQUEST_NAMES[api], row) for api, row in self.times.items())
        for i, (name, documentation) in enumerate(_TIMES):
            family = HistogramMetricFamily(name, documentation, labels=["request"])
            for request_name, row in rows:
                counts = accumulate(row[i * _SLOTS : (i + 1) * _SLOTS])
                family.add_metric(
                    [request_name], list(zip(bounds, counts)), row[4 * _SLOTS + i] * 1000
                )
            yield family


_SLOTS = len(LATENCY_BUCKETS_MS) + 1
_SLOT_COUNTS = st.integers(min_value=0, max_value=10**12)  # past 1e6: Go's exponent form
_SUM_SECONDS = st.floats(min_value=0, max_value=1e9, allow_nan=False)
_ROWS = st.dictionaries(
    st.sampled_from([int(api) for api in ApiKey]),
    st.tuples(
        st.lists(_SLOT_COUNTS, min_size=4 * _SLOTS, max_size=4 * _SLOTS),
        st.lists(_SUM_SECONDS, min_size=4, max_size=4),
    ).map(lambda counts_sums: [*counts_sums[0], *counts_sums[1]]),
    max_size=6,
)


@given(_ROWS)
def test_request_time_histograms_are_written_as_prometheus_client_writes_them(times):
    assert _times_text(times) == by_prometheus_client(_HistogramsByPrometheusClient(times))


class _PartitionGaugesByPrometheusClient(Collector):
    """The per-partition gauges as prometheus_client's own families: the oracle for
    :func:`_partitions_text`."""

    def __init__(self, rows) -> None:
        self.rows = rows

    def collect(self):
        for name, documentation, field in _PARTITION_GAUGES:
            family = GaugeMetricFamily(name, documentation, labels=["topic", "partition"])
            for row in self.rows:
                value = getattr(row, field)
                if not (field.endswith("_timestamp") and value < 0):
                    family.add_metric([row.topic, str(row.partition)], value)
            yield family


_TOPIC_NAMES = st.text("abcXYZ019._-", min_size=1, max_size=20)  # Kafka's legal characters
_COUNTS = st.integers(0, 2**62)  # past 1e16: Go's exponent form
_TIMESTAMPS = st.one_of(st.just(-1), st.integers(0, 2**50))
_PARTITION_ROWS = st.lists(
    st.builds(
        PartitionRow,
        _TOPIC_NAMES,
        st.integers(0, 10_000),
        _COUNTS,
        st.integers(1, 10**6),
        _COUNTS,
        _COUNTS,
        _TIMESTAMPS,
        _TIMESTAMPS,
        _COUNTS,
        st.integers(0, 10**6),
    )
).map(sorted)


@given(_PARTITION_ROWS)
def test_partition_gauges_are_written_as_prometheus_client_writes_them(rows):
    assert _partitions_text(rows) == by_prometheus_client(_PartitionGaugesByPrometheusClient(rows))


async def test_partitions_are_read_for_a_scrape_in_slices(tmp_path, monkeypatch):
    """A scrape reads the partitions with a turn for other tasks between slices (at 10,000
    partitions a scrape held the event loop about 740 ms in one piece); every partition is
    read."""
    from broker import slices

    monkeypatch.setattr(slices, "SLICE_S", 0.0)
    ctx = await open_context(config(tmp_path))
    ctx.metrics = metrics = BrokerMetrics(ctx, lambda: 0)
    for i in range(3):
        await ctx.create_topic(f"t{i}", 2)
    async with other_task_turns() as turns_so_far:
        rows = await metrics.partition_rows()
        during = turns_so_far()
    assert [(r.topic, r.partition) for r in rows] == [
        (f"t{i}", p) for i in range(3) for p in (0, 1)
    ]
    assert during >= 5, during  # a turn between each two partitions
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)


class _GroupGaugesByPrometheusClient(Collector):
    """The consumer-group gauges as prometheus_client's own families, added in (group, topic,
    partition) order: the oracle for :func:`_group_offsets_text`."""

    def __init__(self, rows) -> None:
        self.rows = sorted(rows, key=lambda r: (r.group, r.topic, r.partition))

    def collect(self):
        labels = ["group", "topic", "partition"]
        lag, current = (GaugeMetricFamily(n, d, labels=labels) for n, d in _GROUP_GAUGES)
        for r in self.rows:
            values = [r.group, r.topic, str(r.partition)]
            lag.add_metric(values, r.end_offset - r.committed)
            current.add_metric(values, r.committed)
        yield from (lag, current)


_GROUP_ROWS = st.lists(
    st.builds(
        GroupOffsetRow,
        st.text(max_size=12),  # a group id is any string: quotes, backslashes, newlines
        _TOPIC_NAMES,
        st.integers(0, 10_000),
        _COUNTS,
        _COUNTS,
    ),
    unique_by=lambda r: (r.group, r.topic, r.partition),
)


@given(_GROUP_ROWS)
def test_group_gauges_are_written_as_prometheus_client_writes_them(rows):
    assert _group_offsets_text(rows) == by_prometheus_client(_GroupGaugesByPrometheusClient(rows))


async def test_group_offsets_are_read_for_a_scrape_in_slices(tmp_path, monkeypatch):
    """A scrape reads the groups' committed offsets with a turn for other tasks between
    partitions (a group committed on 10,000 partitions held the loop 250-400 ms), leaves out
    a partition the broker does not have and a negative offset, and scrapes each remaining
    one's lag and offset."""
    from broker import slices

    ctx = await open_context(config(tmp_path))
    ctx.metrics = metrics = BrokerMetrics(ctx, lambda: 0)
    await ctx.create_topic("t", 4)
    await HANDLERS[ApiKey.PRODUCE](
        ctx, request(ApiKey.PRODUCE, 2, produce_body("t", message_set(5, T0)))
    )
    async with trio.open_nursery() as nursery:
        ctx.coordinator = await setup_groups(ctx, nursery)
        for partition, offset in enumerate([3, 0, -1, 2]):
            ctx.coordinator.offsets.put("g", "t", partition, CommittedOffset(offset, "", T0))
        ctx.coordinator.offsets.put("g", "gone", 0, CommittedOffset(1, "", T0))
        monkeypatch.setattr(slices, "SLICE_S", 0.0)
        async with other_task_turns() as turns_so_far:
            rows = await metrics.group_offset_rows()
            during = turns_so_far()
        monkeypatch.undo()
        got = await samples(metrics)
        nursery.cancel_scope.cancel()
    assert sorted(rows) == [
        GroupOffsetRow("g", "t", 0, 5, 3),
        GroupOffsetRow("g", "t", 1, 0, 0),
        GroupOffsetRow("g", "t", 3, 0, 2),
    ]
    assert during >= 4, during  # a turn between each two of the five offsets
    labels = [(("group", "g"), ("partition", str(p)), ("topic", "t")) for p in (0, 1, 3)]
    assert [got[("kafka_consumergroup_lag", k)] for k in labels] == [2, 0, -2]
    assert [got[("kafka_consumergroup_current_offset", k)] for k in labels] == [3, 0, 2]
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)


async def test_waiting_fetches_are_the_fetch_purgatory(tmp_path):
    ctx = await open_context(config(tmp_path))
    ctx.metrics = metrics = BrokerMetrics(ctx, lambda: 0)
    await ctx.create_topic("t", 1)
    purgatory = "kafka_server_delayedoperationpurgatory_purgatorysize"
    fetch = (purgatory, (("delayedOperation", "Fetch"),))
    assert (await samples(metrics))[fetch] == 0
    body = fetch_body("t", 0) | {"max_wait_ms": 60_000, "min_bytes": 1}
    done = trio.Event()

    async def long_poll():
        answer = await HANDLERS[ApiKey.FETCH](ctx, request(ApiKey.FETCH, 10, body))
        release_fetch_body(answer)
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(long_poll)
        await trio.testing.wait_all_tasks_blocked()
        assert (await samples(metrics))[fetch] == 1
        await HANDLERS[ApiKey.PRODUCE](
            ctx, request(ApiKey.PRODUCE, 2, produce_body("t", message_set(1, T0)))
        )
        with trio.fail_after(10):
            await done.wait()
    assert (await samples(metrics))[fetch] == 0
    assert (await samples(metrics))[(purgatory, (("delayedOperation", "Produce"),))] == 0
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)


async def run_transaction(
    ctx, tid: str, topic: str, values: list[bytes], *, commit: bool | None, timeout_ms=60_000
) -> tuple[int, int]:
    """One transaction of ``values`` on ``topic``-0 as a client runs it: InitProducerId,
    AddPartitionsToTxn, a transactional Produce through the handler, then EndTxn and its
    markers written (``commit`` None: left open). Returns the (producer id, epoch) it wrote."""
    coordinator = ctx.txn_coordinator
    error, pid, epoch = await coordinator.init_producer_id(tid, timeout_ms, None)
    assert error is ErrorCode.NONE
    assert await coordinator.add_partitions(tid, pid, epoch, [(topic, 0)]) is ErrorCode.NONE
    spec = rb.BatchSpec(
        producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=True
    )
    batch = rb.build_batch(spec, [(i, T0 + i, None, v, ()) for i, v in enumerate(values)])
    body = produce_body(topic, batch) | {"transactional_id": tid}
    answer = await HANDLERS[ApiKey.PRODUCE](ctx, request(ApiKey.PRODUCE, 3, body))
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
    if commit is not None:
        error, _, _ = await coordinator.end_txn(tid, pid, epoch, commit, 0)
        assert error is ErrorCode.NONE
        await until_complete(coordinator, tid)
    return pid, epoch


async def until_complete(coordinator, tid: str) -> None:
    """Wait (bounded) until the id's markers are written and its completion stored: the
    coordinator's marker task has no event to wait on, so its state is polled."""
    with trio.fail_after(10):
        while not coordinator.machine.txns[tid].state.complete:
            await trio.sleep(0.005)


async def test_transactions_by_state_completions_and_lso_lag(tmp_path):
    ctx = await open_context(
        config(
            tmp_path,
            transaction_state_log_num_partitions=1,
            transaction_abort_timed_out_transaction_cleanup_interval_ms=5,
        )
    )
    now = [T0]
    ctx.clock = lambda: now[0]
    ctx.metrics = metrics = BrokerMetrics(ctx, lambda: 0)
    await ctx.create_topic("t", 1)
    await ctx.create_topic("quiet", 1)
    async with trio.open_nursery() as nursery:
        coordinator = TransactionCoordinator(ctx)
        await coordinator.start(nursery)
        ctx.txn_coordinator = coordinator
        plain = await HANDLERS[ApiKey.PRODUCE](
            ctx, request(ApiKey.PRODUCE, 2, produce_body("t", message_set(2, T0)))
        )
        assert plain["responses"][0]["partition_responses"][0]["error_code"] == 0
        await run_transaction(ctx, "committer", "t", [b"c1", b"c2"], commit=True)
        await run_transaction(ctx, "aborter", "t", [b"a1"], commit=False)
        await run_transaction(ctx, "hung", "t", [b"h1", b"h2", b"h3"], commit=None)
        # offsets: 0-1 plain, 2-3 committed + marker 4, 5 aborted + marker 6, 7-9 open
        log = ctx.get_log("t", 0)
        assert log.log_end_offset == 10 and log.last_stable_offset == 7

        got = await samples(metrics)
        t0, quiet = (("partition", "0"), ("topic", "t")), (("partition", "0"), ("topic", "quiet"))
        assert got[("kafka_cluster_partition_laststableoffsetlag", t0)] == 3
        assert got[("chronolog_log_open_transactions", t0)] == 1
        assert got[("kafka_cluster_partition_laststableoffsetlag", quiet)] == 0
        assert got[("chronolog_log_open_transactions", quiet)] == 0

        def state(label: str) -> float:
            return got[("chronolog_transactions", (("state", label),))]

        assert state("Ongoing") == 1 and state("CompleteCommit") == 1
        assert state("CompleteAbort") == 1 and state("PrepareCommit") == 0
        assert state("PrepareAbort") == 0 and state("Empty") == 0
        completed = "chronolog_transactions_completed_total"
        assert got[(completed, (("result", "commit"),))] == 1
        assert got[(completed, (("result", "abort"),))] == 1
        assert got[("chronolog_transactions_aborted_by_timeout_total", ())] == 0

        # The open transaction outlives its timeout: the coordinator aborts it.
        now[0] += 60_001
        await until_complete(coordinator, "hung")
        assert coordinator.machine.txns["hung"].state is TxnState.COMPLETE_ABORT
        got = await samples(metrics)
        assert got[("kafka_cluster_partition_laststableoffsetlag", t0)] == 0
        assert got[("chronolog_log_open_transactions", t0)] == 0
        assert state("Ongoing") == 0 and state("CompleteAbort") == 2
        assert got[(completed, (("result", "abort"),))] == 2
        assert got[("chronolog_transactions_aborted_by_timeout_total", ())] == 1
        nursery.cancel_scope.cancel()
    await trio.to_thread.run_sync(ctx.log_manager.shutdown)
