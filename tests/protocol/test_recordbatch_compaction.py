"""What a compacting cleaner writes of a record batch (protocol.recordbatch): rebuild_batch
against build_batch of the same records, the delete horizon, empty batches; read back by
kafka-python's DefaultRecordBatch as the independent oracle."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings, strategies as st
from kafka.record.default_records import DefaultRecordBatch

from protocol import recordbatch as rb
from protocol.compression import Codec

records_strategy = st.lists(
    st.tuples(
        st.integers(-(10**6), 10**6),
        st.one_of(st.none(), st.binary(max_size=12)),
        st.one_of(st.none(), st.binary(max_size=40)),
        st.lists(
            st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=4))), max_size=2
        ),
    ),
    min_size=1,
    max_size=12,
)


def kp_records(batch: bytes) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value) for r in DefaultRecordBatch(batch)]


@settings(max_examples=200, deadline=None)
@given(
    records=records_strategy,
    data=st.data(),
    codec=st.sampled_from([Codec.NONE, Codec.GZIP, Codec.ZSTD]),
    lat=st.booleans(),
    horizon=st.one_of(st.none(), st.integers(0, 2 * 10**12)),
)
def test_rebuild_equals_building_the_kept_records(records, data, codec, lat, horizon):
    base_ts = 1_700_000_000_000
    inputs = [(2 * i, base_ts + ts, k, v, tuple(h)) for i, (ts, k, v, h) in enumerate(records)]
    spec = rb.BatchSpec(
        base_offset=100,
        codec=codec,
        log_append_time=lat,
        producer_id=5,
        producer_epoch=1,
        base_sequence=7,
    )
    original = rb.build_batch(spec, inputs, max_timestamp=base_ts + 5 if lat else None)
    header = rb.read_header(original)
    section = memoryview(rb.records_section(original, header, 0))
    fields = rb.record_positions(section, 0, len(section), header.records_count)
    kept = sorted(data.draw(st.sets(st.integers(0, len(inputs) - 1), min_size=1)))
    if horizon is not None:
        spec = dataclasses.replace(spec, delete_horizon_ms=horizon)
    rebuilt = rb.rebuild_batch(spec, header, section, fields, kept)
    expected = rb.build_batch(
        spec,
        [inputs[n] for n in kept],
        max_timestamp=base_ts + 5 if lat else None,
        last_offset_delta=header.last_offset_delta,
    )
    assert rebuilt == expected
    h = rb.read_header(rebuilt)
    assert (h.base_offset, h.last_offset, h.producer_id, h.base_sequence) == (
        100,
        header.last_offset,
        5,
        7,
    )
    assert h.delete_horizon_ms == horizon
    got = kp_records(rebuilt)
    want = [
        (100 + inputs[n][0], base_ts + 5 if lat else inputs[n][1], inputs[n][2], inputs[n][3])
        for n in kept
    ]
    assert got == want


def test_empty_batch_keeps_producer_fields_and_offsets():
    spec = rb.BatchSpec(
        base_offset=10, producer_id=3, producer_epoch=2, base_sequence=40, partition_leader_epoch=4
    )
    batch = rb.build_empty_batch(spec, 5, 1234)
    h = rb.read_header(batch)
    assert (h.base_offset, h.last_offset, h.records_count) == (10, 15, 0)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (3, 2, 40, 45)
    assert (h.base_timestamp, h.max_timestamp, h.partition_leader_epoch) == (1234, 1234, 4)
    assert rb.batch_crc(batch, 0, len(batch)) == h.crc
    kp = DefaultRecordBatch(batch)
    assert kp.validate_crc() and list(kp) == [] and kp.next_offset == 16
