"""batch_first_at, the time index lookup's walk through one record batch: the first record at
or after a timestamp and an offset, against a brute-force walk of iter_deep's messages, both
through the C extension's record positions and without it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st


from protocol import recordbatch as rb
from protocol.compression import Codec
from protocol.records import batch_first_at, iter_deep, iter_shallow

BASE_TS = 1_700_000_000_000


def brute_force(buf: bytes, timestamp: int, min_offset: int) -> tuple[int, int] | None:
    return next(
        (
            (m.timestamp, m.offset)
            for m in iter_deep(buf)
            if m.timestamp >= timestamp and m.offset >= min_offset
        ),
        None,
    )


batches = st.fixed_dictionaries(
    {
        "deltas": st.lists(st.integers(-5_000, 5_000), min_size=1, max_size=40),
        "codec": st.sampled_from([Codec.NONE, Codec.GZIP, Codec.LZ4, Codec.ZSTD, Codec.SNAPPY]),
        "base_offset": st.integers(0, 2**40),
        "log_append_time": st.booleans(),
        "control": st.booleans(),
    }
)


def build(spec: dict) -> bytes:
    rows = [
        (i, BASE_TS + delta, None if i % 3 else b"k%d" % i, b"v" * (i % 7), ())
        for i, delta in enumerate(spec["deltas"])
    ]
    if spec["control"]:
        batch_spec = rb.BatchSpec(
            producer_id=7, producer_epoch=0, is_transactional=True, is_control=True
        )
    else:
        batch_spec = rb.BatchSpec(codec=spec["codec"])
    out = bytearray(rb.build_batch(batch_spec, rows))
    rb.set_base_offset(out, 0, spec["base_offset"], 0)
    if spec["log_append_time"]:
        rb.set_log_append_time(out, 0, BASE_TS + 1)
    return bytes(out)


@pytest.mark.parametrize("native", [True, False], ids=["C extension", "pure Python"])
@settings(max_examples=200, deadline=None)
@given(spec=batches, target=st.integers(-6_000, 6_000), skip=st.integers(0, 45))
def test_first_record_at_or_after_matches_brute_force(native, spec, target, skip):
    if native and rb.fastscan is None:
        pytest.skip("the C extension is not built")
    buf = build(spec)
    entry = next(iter_shallow(buf))
    timestamp, min_offset = BASE_TS + target, spec["base_offset"] + skip
    with pytest.MonkeyPatch.context() as patch:
        if not native:
            patch.setattr(rb, "fastscan", None)
        found = batch_first_at(memoryview(buf), entry, timestamp, min_offset)
    assert found == brute_force(buf, timestamp, min_offset)
