"""A hypothesis state machine driving a Log through appends (out-of-order CreateTime stamps,
compressed and plain sets, magic 0/1 message sets and v2 record batches mixed), rolls, truncations, retention, crashes (torn tails, flipped bytes)
and reopens, checking every read and timestamp search against a brute-force in-memory model.

The model is a list of top-level entries, each a list of (offset, timestamp, key, value): an
uncompressed message is an entry of one, a compressed wrapper or a record batch an entry of
several. Truncation
and crash recovery work on whole entries, as the Log does.
"""

from __future__ import annotations

import io
import os
import random
import shutil
import tempfile

from hypothesis import HealthCheck, assume, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tests.storage.helpers import Clock
from protocol.compression import Codec
from protocol.records import MessageSetBuilder, TimestampType, iter_deep, iter_shallow
from protocol.validator import TopicSettings, ValidatedRecords, validate_produce
from storage import Log, LogConfig, OffsetOutOfRangeError, TimestampOffset
from storage.dump import dump_file

DAY = 86_400_000
NOW = 1_700_000_000_000


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="storage-stateful-")
        self.clock = Clock(NOW)
        self.entries: list[list[tuple]] = []
        # last offset of an idempotent producer's batch -> (producer id, first and last sequence)
        self.producers: dict[int, tuple[int, int, int]] = {}
        self.next_sequence: dict[int, int] = {}
        self.start = 0
        self.log: Log | None = None

    @initialize(
        segment_bytes=st.integers(300, 3000),
        interval=st.integers(0, 400),
        index_bytes=st.sampled_from([36, 60, 120, 4096]),
        segment_ms=st.sampled_from([DAY, 10 * DAY, 2**40]),
    )
    def open(self, segment_bytes, interval, index_bytes, segment_ms):
        self.config = LogConfig(
            segment_bytes=segment_bytes,
            index_interval_bytes=interval,
            segment_index_bytes=index_bytes,
            segment_ms=segment_ms,
            retention_ms=3 * DAY,
            file_delete_delay_ms=0,
        )
        self.log = Log(
            os.path.join(self.tmp, "topic-0"), self.config, clock=self.clock, needs_recovery=False
        )

    def teardown(self) -> None:
        if self.log is not None:
            self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- model helpers ---------------------------------------------------------------------------
    @property
    def messages(self) -> list[tuple]:
        return [m for entry in self.entries for m in entry]

    @property
    def end(self) -> int:
        return self.entries[-1][-1][0] + 1 if self.entries else self.start

    # -- rules -----------------------------------------------------------------------------------
    @rule(
        stamps=st.lists(st.integers(-5 * DAY, DAY), min_size=1, max_size=6),
        codec=st.sampled_from([Codec.NONE, Codec.NONE, Codec.GZIP, Codec.LZ4, Codec.SNAPPY]),
        value_size=st.integers(0, 120),
        seed=st.integers(0, 2**32),
        kind=st.sampled_from(
            ["create"] * 4 + ["log_append", "magic0"] + ["v2"] * 4 + ["v2_log_append", "v2_zstd"]
        ),
        producer=st.sampled_from([None, None, 1, 2]),
    )
    def append(self, stamps, codec, value_size, seed, kind, producer):
        # Values derived from a drawn seed: sizes after compression must replay identically.
        # Record batches (v2) go into the same log as magic 0/1 sets, as after an upgrade.
        rng = random.Random(seed)
        magic = 0 if kind == "magic0" else 2 if kind.startswith("v2") else 1
        if kind == "v2_zstd":
            codec = Codec.ZSTD
        idempotent = magic == 2 and producer is not None
        # a producer goes on after the last batch the log kept (retention forgets no producer)
        sequence = self.next_sequence.get(producer, 0) if idempotent else -1
        builder = MessageSetBuilder(
            magic=magic,
            codec=codec,
            producer_id=producer if idempotent else -1,
            producer_epoch=0 if idempotent else -1,
            base_sequence=sequence,
        )
        for i, ts in enumerate(stamps):
            headers = (("i", b"%d" % i),) if magic == 2 and i % 2 else ()
            builder.append(
                rng.randbytes(value_size),
                key=b"%d" % i,
                timestamp=self.clock.now + ts,
                headers=headers,
            )
        lat = kind in ("log_append", "v2_log_append")
        topic = TopicSettings(
            magic=magic,
            timestamp_type=TimestampType.LOG_APPEND_TIME if lat else TimestampType.CREATE_TIME,
        )
        v = validate_produce(
            builder.build(), topic, next_offset=self.log.log_end_offset, now_ms=self.clock.now
        )
        assert isinstance(v, ValidatedRecords)
        assume(len(v.buffer) <= self.config.segment_bytes)
        self.log.append(v)
        for entry in iter_shallow(v.buffer):
            wrapper = v.buffer[entry.position : entry.next_position]
            self.entries.append(
                [(m.offset, m.timestamp, m.key, m.value) for m in iter_deep(wrapper)]
            )
            # keyed by last offset: one left by a truncated batch is replaced or dropped here
            self.producers.pop(entry.offset, None)
            if idempotent:
                self.producers[entry.offset] = (producer, sequence, sequence + len(stamps) - 1)
                self.next_sequence[producer] = sequence + len(stamps)

    @rule()
    def roll(self):
        self.log.roll()

    @rule(data=st.data())
    def truncate(self, data):
        offset = data.draw(st.integers(max(self.start - 3, 0), self.end + 2))
        self.log.truncate_to(offset)
        if offset < self.start:
            self.entries, self.start = [], offset
            self.producers.clear()  # the log restarts empty, its producers unknown
        else:
            self.entries = [e for e in self.entries if e[-1][0] < offset]
        self._forget_producers_from(self.end)

    def _forget_producers_from(self, end: int) -> None:
        """Truncation and recovery take each producer back to its last batch below ``end``;
        one without any is unknown, and may start at any sequence."""
        self.producers = {o: p for o, p in self.producers.items() if o < end}
        self.next_sequence = {}
        for _, (pid, _, last_seq) in sorted(self.producers.items()):
            self.next_sequence[pid] = last_seq + 1

    @rule(advance=st.integers(0, 5 * DAY))
    def retention(self, advance):
        self.clock.advance(advance)
        now = self.clock.now
        bases = [s.base_offset for s in self.log.segments]
        limits = bases[1:] + [2**63]
        expired = 0
        for base, limit in zip(bases, limits):
            stamps = [m[1] for m in self.messages if base <= m[0] < limit and m[1] >= 0]
            # A segment of magic-0 messages only is judged by its mtime: real time, years
            # after this simulated clock, so never expired.
            if not stamps or now - max(stamps) <= self.config.retention_ms:
                break
            expired += 1
        assert self.log.delete_expired_segments(now) == expired
        expected_start = bases[expired] if expired < len(bases) else self.end
        assert self.log.log_start_offset == expected_start
        self.start = expected_start
        self.entries = [e for e in self.entries if e[-1][0] >= expected_start]

    @rule()
    def reopen_clean(self):
        self.log.close()
        self.log = Log(self.log.directory, self.config, clock=self.clock, needs_recovery=False)

    @precondition(lambda self: self.log is not None and self.log.active_segment.size > 0)
    @rule(data=st.data(), tear=st.booleans(), full_scan=st.booleans())
    def crash(self, data, tear, full_scan):
        segment = self.log.active_segment
        raw = open(segment.log_path, "rb").read()
        shallow = list(iter_shallow(raw))
        recovery_point = 0 if full_scan else self.log.recovery_point
        for s in self.log.segments:  # die without sealing or flushing anything
            s.close()
        if tear:
            cut = data.draw(st.integers(1, len(raw)))
            os.truncate(segment.log_path, len(raw) - cut)
            lost_from = next(e.offset for e in shallow if e.next_position > len(raw) - cut)
        else:
            victim = data.draw(st.sampled_from(shallow))
            # Anything from the size field on; the offset field is not covered by the CRC, nor
            # is a record batch's partition leader epoch (bytes 12-15, after the size).
            position = data.draw(st.integers(victim.position + 8, victim.next_position - 1))
            if victim.magic == 2 and 12 <= position - victim.position < 16:
                position = victim.position + 16
            with open(segment.log_path, "r+b") as f:
                f.seek(position)
                f.write(bytes([raw[position] ^ data.draw(st.integers(1, 255))]))
            lost_from = victim.offset
        self.log = Log(
            self.log.directory,
            self.config,
            clock=self.clock,
            recovery_point=recovery_point,
            needs_recovery=True,
        )
        self.entries = [e for e in self.entries if e[-1][0] < lost_from]
        self._forget_producers_from(self.end)

    # -- checks ----------------------------------------------------------------------------------
    @invariant()
    def offsets_match(self):
        if self.log is None:
            return
        assert self.log.log_start_offset == self.start
        assert self.log.log_end_offset == self.end
        assert self.log.recovery_point <= self.log.log_end_offset

    @invariant()
    def reads_match(self):
        if self.log is None:
            return
        got = []
        offset = self.start
        while offset < self.end:
            fetch = self.log.read(offset, 1 << 20)
            msgs = [
                (m.offset, m.timestamp, m.key, m.value)
                for m in iter_deep(fetch.read_bytes())
                if m.offset >= offset
            ]
            assert msgs, f"read at {offset} returned nothing"
            got += msgs
            offset = msgs[-1][0] + 1
        assert got == self.messages
        assert self.log.read(self.end, 100).length == 0

    @rule(data=st.data(), max_bytes=st.integers(0, 400), min_one=st.booleans())
    def small_read(self, data, max_bytes, min_one):
        offset = data.draw(st.integers(self.start, self.end))
        fetch = self.log.read(offset, max_bytes, min_one_message=min_one)
        if not min_one:
            assert fetch.length <= max_bytes
        msgs = [
            (m.offset, m.timestamp, m.key, m.value)
            for m in iter_deep(fetch.read_bytes())
            if m.offset >= offset
        ]
        later = [m for m in self.messages if m[0] >= offset]
        assert msgs == later[: len(msgs)]
        if min_one and offset < self.end:
            assert msgs and msgs[0][0] == later[0][0]

    @rule(data=st.data())
    def read_out_of_range(self, data):
        offset = data.draw(st.sampled_from([self.start - 1, self.end + 1]))
        assume(offset >= 0)
        try:
            self.log.read(offset, 100)
        except OffsetOutOfRangeError:
            return
        raise AssertionError(f"read at {offset} outside [{self.start}, {self.end}] succeeded")

    @rule(when=st.integers(-6 * DAY, 2 * DAY))
    def search(self, when):
        target = NOW + when
        expected = next(
            (TimestampOffset(ts, off) for off, ts, _, _ in self.messages if ts >= target), None
        )
        assert self.log.offset_for_timestamp(target) == expected

    @invariant()
    def producer_state_knows_each_producers_last_batch(self):
        """The state rebuilt (snapshot + batch headers) recognises each producer's last batch
        still in the log as a duplicate, with its offsets, and expects the next sequence."""
        if self.log is None:
            return
        last: dict[int, tuple[int, int, int, int]] = {}
        for e in self.entries:
            if e[-1][0] in self.producers:
                pid, first_seq, last_seq = self.producers[e[-1][0]]
                last[pid] = (first_seq, last_seq, e[0][0], e[-1][0])
        state = self.log.producer_state()
        for pid, (first_seq, last_seq, first_offset, last_offset) in last.items():
            dup = state.check(pid, 0, first_seq, last_seq)
            assert dup is not None and (dup.first_offset, dup.last_offset) == (
                first_offset,
                last_offset,
            ), (pid, dup)
            assert state.check(pid, 0, last_seq + 1, last_seq + 1) is None

    @invariant()
    def indexes_verify_against_the_log(self):
        if self.log is None:
            return
        files = [
            path
            for seg in self.log.segments
            for path in (seg.offset_index.path, seg.time_index.path)
        ]
        out = io.StringIO()
        for path in files:
            assert dump_file(path, deep=False, verify=True, out=out, err=out) == 0, out.getvalue()

    @invariant()
    def search_every_stamp(self):
        if self.log is None:
            return
        msgs = self.messages
        for _, ts, _, _ in [m for m in msgs if m[1] >= 0][:: max(len(msgs) // 5, 1)]:
            expected = next(TimestampOffset(t, o) for o, t, _, _ in msgs if t >= ts)
            assert self.log.offset_for_timestamp(ts) == expected


LogMachine.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestLogMachine = LogMachine.TestCase
