"""Option parsing and offset-range planning (no broker needed)."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_chronolog.errors import DataLossError, InvalidOptionError
from pyspark_chronolog.options import EARLIEST, LATEST, parse_read, parse_write
from pyspark_chronolog.planning import (
    OffsetRange,
    PartitionOffsets,
    check_data_loss,
    plan,
    rate_limit,
)

BASE = {"bootstrap.servers": "127.0.0.1:9092", "topic": "clicks"}


def test_defaults_and_case_insensitive_names():
    opts = parse_read({"KAFKA.BOOTSTRAP.SERVERS": "h1:1, h2:2", "Subscribe": "a, b,a"})
    assert opts.connect.bootstrap == (("h1", 1), ("h2", 2))
    assert opts.topics == ("a", "b")
    assert (opts.starting.kind, opts.ending.kind) == ("earliest", "latest")
    assert opts.fail_on_data_loss and opts.window == (None, None)
    assert parse_read({**BASE}, streaming=True).starting.kind == "latest"


def test_timestamps_make_a_window():
    opts = parse_read({**BASE, "startingTimestamp": "1000", "endingTimestamp": "2000"})
    assert opts.window == (1000, 2000)
    assert parse_read({**BASE, "startingTimestamp": "1000"}, streaming=True).window == (None, None)


def test_json_offsets():
    opts = parse_read(
        {
            **BASE,
            "subscribe": None,
            "topic": "clicks",
            "startingOffsets": '{"clicks": {"0": 5, "1": -2}}',
            "endingOffsets": '{"clicks": {"0": -1, "1": 9}}',
        }
    )
    assert opts.starting.for_partition(("clicks", 1)) == EARLIEST
    assert opts.ending.for_partition(("clicks", 0)) == LATEST


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            {"startingTimestamp": "2000", "endingTimestamp": "1000"},
            "endingTimestamp=1000 is before startingTimestamp=2000",
        ),
        ({"startingTimestamp": "soon"}, "startingTimestamp='soon' must be milliseconds"),
        ({"startingOffsets": "latest"}, 'startingOffsets="latest" is not allowed for a batch'),
        ({"endingOffsets": "earliest"}, 'endingOffsets="earliest" is not allowed'),
        ({"startingOffsets": '{"other": {"0": 1}}'}, "names topic 'other'"),
        ({"startingOffsets": '{"clicks": {"0": -3}}'}, "-1 latest / -2 earliest"),
        ({"endingOffsets": '{"clicks": {"0": -2}}'}, "-1 for latest"),
        ({"startingOffsets": "{nope"}, "not valid JSON"),
        ({"startingOffsets": "earliest", "startingTimestamp": "5"}, "contradict each other"),
        ({"failOnDataLoss": "maybe"}, "must be true or false"),
        ({"maxOffsetsPerTrigger": "10"}, "readStream only"),
        ({"maxRecordsPerPartition": "0"}, "must be >= 1"),
        ({"subscribe": "x"}, "exactly one of the options topic or subscribe"),
        ({"bootstrap.servers": "localhost"}, "is not host:port"),
    ],
)
def test_bad_options_are_explained(extra, message):
    with pytest.raises(InvalidOptionError, match=re.escape(message)):
        parse_read({**BASE, **extra})


def test_missing_bootstrap_and_stream_ending():
    with pytest.raises(InvalidOptionError, match="bootstrap.servers is required"):
        parse_read({"topic": "t"})
    with pytest.raises(InvalidOptionError, match="not supported by readStream"):
        parse_read({**BASE, "endingOffsets": "latest"}, streaming=True)


def test_write_options():
    assert parse_write({"bootstrap.servers": "h:1"}).topic is None
    with pytest.raises(InvalidOptionError, match="kafka.acks=0"):
        parse_write({**BASE, "kafka.acks": "0"})


def test_plan_splits_large_ranges_evenly():
    start = {("t", 0): 0, ("t", 1): 10, ("t", 2): 7}
    end = {("t", 0): 25, ("t", 1): 10, ("t", 2): 8}
    assert plan(start, end, 10) == [
        OffsetRange("t", 0, 0, 8),
        OffsetRange("t", 0, 8, 16),
        OffsetRange("t", 0, 16, 25),
        OffsetRange("t", 2, 7, 8),
    ]
    with pytest.raises(InvalidOptionError, match="starting offset 5 is after ending offset 4"):
        plan({("t", 0): 5}, {("t", 0): 4}, 10)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.integers(0, 5), st.tuples(st.integers(0, 100), st.integers(0, 100)), min_size=1
    ),
    st.integers(1, 10_000),
)
def test_plan_covers_every_offset_once(spans, max_records):
    start = {("t", p): min(a, b) for p, (a, b) in spans.items()}
    end = {("t", p): max(a, b) for p, (a, b) in spans.items()}
    ranges = plan(start, end, max_records)
    assert all(0 < r.size <= max_records for r in ranges)
    for tp in start:
        covered = [o for r in ranges if (r.topic, r.partition) == tp for o in range(r.start, r.end)]
        assert covered == list(range(start[tp], end[tp]))


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.integers(0, 6), st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1
    ),
    st.integers(1, 3000),
)
def test_rate_limit_never_exceeds_the_limit_nor_the_data(spans, limit):
    start = {("t", p): a for p, (a, _) in spans.items()}
    latest = {("t", p): a + b for p, (a, b) in spans.items()}
    end = rate_limit(start, latest, limit)
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in start)
    total = sum(latest[tp] - start[tp] for tp in start)
    assert sum(end[tp] - start[tp] for tp in start) == min(limit, total)


def test_data_loss_fails_or_skips():
    known = PartitionOffsets(earliest=100, latest=200)
    with pytest.raises(
        DataLossError,
        match=r"clicks\[2\]: offsets 40..99 were deleted by "
        r"retention.*failOnDataLoss=false",
    ):
        check_data_loss(("clicks", 2), 40, known, fail_on_data_loss=True)
    assert check_data_loss(("clicks", 2), 40, known, fail_on_data_loss=False) == 100
    assert check_data_loss(("clicks", 2), 150, known, fail_on_data_loss=True) == 150
