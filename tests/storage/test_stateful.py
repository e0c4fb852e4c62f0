"""A hypothesis state machine driving a Log through appends (out-of-order CreateTime stamps,
compressed and plain sets, magic 0/1 message sets and v2 record batches mixed), transactions
(transactional batches of two producers, COMMIT and ABORT markers), rolls, truncations,
retention, crashes (torn tails, flipped bytes, damaged .txnindex files) and reopens, checking
every read and timestamp search against a brute-force in-memory model.

The model is a list of top-level entries, each a list of (offset, timestamp, key, value): an
uncompressed message is an entry of one, a compressed wrapper or a record batch an entry of
several, a marker an entry of one whose key is MARKER (no reader sees it as a message).
Truncation and crash recovery work on whole entries, as the Log does. Transactions are checked
against a brute-force replay of every transactional batch and marker appended (retention
forgets no producer): the first unstable and last stable offsets, the aborted transactions a
read_committed fetch is told of, and that a read_committed reader (data below the LSO, without
control batches and the aborted transactions' batches) sees exactly the committed records.
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
from protocol import recordbatch as rb
from protocol.compression import Codec
from protocol.records import MessageSetBuilder, TimestampType, iter_deep, iter_shallow
from protocol.validator import TopicSettings, ValidatedRecords, validate_produce
from storage import Log, LogConfig, OffsetOutOfRangeError, TimestampOffset
from storage.dump import dump_file

DAY = 86_400_000
NOW = 1_700_000_000_000
MARKER = b"<marker>"  # the key of a marker's entry in the model
TXN_PRODUCERS = [11, 12]


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="storage-stateful-")
        self.clock = Clock(NOW)
        self.entries: list[list[tuple]] = []
        # last offset of an idempotent producer's batch -> (producer id, first and last sequence)
        self.producers: dict[int, tuple[int, int, int]] = {}
        self.next_sequence: dict[int, int] = {}
        # offset of each transactional batch's last record or marker -> (first offset, producer,
        # "data" | "commit" | "abort"), kept through retention (the producer state keeps them)
        self.txn_log: dict[int, tuple[int, int, str]] = {}
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
        """What a reader sees: every record, no marker."""
        return [m for entry in self.entries for m in entry if m[2] != MARKER]

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

    @rule(
        producer=st.sampled_from(TXN_PRODUCERS),
        stamps=st.lists(st.integers(-DAY, DAY), min_size=1, max_size=4),
        value_size=st.integers(0, 60),
    )
    def txn_append(self, producer, stamps, value_size):
        """A transactional batch: starts or continues the producer's transaction."""
        sequence = self.next_sequence.get(producer, 0)
        spec = rb.BatchSpec(
            producer_id=producer, producer_epoch=0, base_sequence=sequence, is_transactional=True
        )
        records = [
            (i, self.clock.now + ts, b"t%d" % i, bytes([i]) * value_size, ())
            for i, ts in enumerate(stamps)
        ]
        v = validate_produce(
            rb.build_batch(spec, records),
            TopicSettings(magic=2),
            next_offset=self.log.log_end_offset,
            now_ms=self.clock.now,
        )
        assert isinstance(v, ValidatedRecords)
        assume(len(v.buffer) <= self.config.segment_bytes)
        self.log.append(v)
        self.entries.append([(m.offset, m.timestamp, m.key, m.value) for m in iter_deep(v.buffer)])
        self.producers[v.last_offset] = (producer, sequence, sequence + len(stamps) - 1)
        self.next_sequence[producer] = sequence + len(stamps)
        self.txn_log[v.last_offset] = (v.first_offset, producer, "data")

    @rule(producer=st.sampled_from(TXN_PRODUCERS), commit=st.booleans())
    def end_txn(self, producer, commit):
        """A COMMIT or ABORT marker, whether or not a transaction is ongoing (Kafka writes it)."""
        offset = self.log.append_control(producer, 0, 0, commit, 0, self.clock.now)
        assert offset == self.end
        self.entries.append([(offset, self.clock.now, MARKER, None)])
        self.txn_log[offset] = (offset, producer, "commit" if commit else "abort")

    def _transactions(self) -> tuple[dict[int, int], list[tuple[int, int, int]], set[int]]:
        """Brute force over every transactional batch and marker: (ongoing: producer -> first
        offset, aborted (producer, first offset, marker offset), last offsets of committed
        transactional batches)."""
        ongoing: dict[int, int] = {}
        batches: dict[int, list[int]] = {}
        aborted, committed = [], set()
        for offset in sorted(self.txn_log):
            first, pid, kind = self.txn_log[offset]
            if kind == "data":
                ongoing.setdefault(pid, first)
                batches.setdefault(pid, []).append(offset)
                continue
            began = ongoing.pop(pid, None)
            done = batches.pop(pid, [])
            if began is not None and kind == "abort":
                aborted.append((pid, began, offset))
            elif kind == "commit":
                committed.update(done)
        return ongoing, aborted, committed

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
            self.txn_log.clear()
        else:
            self.entries = [e for e in self.entries if e[-1][0] < offset]
        self._forget_producers_from(self.end)

    def _forget_producers_from(self, end: int) -> None:
        """Truncation and recovery take each producer back to its last batch below ``end``;
        one without any is unknown, and may start at any sequence."""
        self.producers = {o: p for o, p in self.producers.items() if o < end}
        self.txn_log = {o: t for o, t in self.txn_log.items() if o < end}
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
            stamps = [m[1] for e in self.entries for m in e if base <= m[0] < limit and m[1] >= 0]
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
    @rule(data=st.data(), tear=st.booleans(), full_scan=st.booleans(), damage=st.booleans())
    def crash(self, data, tear, full_scan, damage):
        segment = self.log.active_segment
        raw = open(segment.log_path, "rb").read()
        shallow = list(iter_shallow(raw))
        recovery_point = 0 if full_scan else self.log.recovery_point
        for s in self.log.segments:  # die without sealing or flushing anything
            s.close()
            if damage and os.path.exists(s.txn_index.path):  # a torn .txnindex entry
                os.truncate(s.txn_index.path, os.path.getsize(s.txn_index.path) - 5)
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
            data = self.log.read(offset, 1 << 20).read_bytes()
            shallow = list(iter_shallow(data))
            assert shallow, f"read at {offset} returned nothing"
            got += [
                (m.offset, m.timestamp, m.key, m.value)
                for m in iter_deep(data)
                if m.offset >= offset
            ]
            offset = shallow[-1].offset + 1
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
        following = [e for e in self.entries if e[-1][0] >= offset]
        if min_one and following and following[0][0][2] != MARKER:
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
            txn = pid in TXN_PRODUCERS
            dup = state.check(pid, 0, first_seq, last_seq, is_transactional=txn)
            assert dup is not None and (dup.first_offset, dup.last_offset) == (
                first_offset,
                last_offset,
            ), (pid, dup)
            assert state.check(pid, 0, last_seq + 1, last_seq + 1, is_transactional=txn) is None

    @invariant()
    def transactions_match(self):
        """LSO, aborted transactions and what a read_committed reader sees, against brute
        force."""
        if self.log is None:
            return
        ongoing, aborted, committed = self._transactions()
        first_unstable = max(min(ongoing.values()), self.start) if ongoing else None
        assert self.log.first_unstable_offset == first_unstable
        lso = self.end if first_unstable is None else min(first_unstable, self.end)
        assert self.log.last_stable_offset == lso
        got = self.log.aborted_transactions(self.start, lso)
        assert sorted((a.producer_id, a.first_offset, a.last_offset) for a in got) == sorted(
            a for a in aborted if a[2] >= self.start and a[1] < lso
        )
        # the reader: batch by batch below the LSO, as Kafka's consumer applies the list
        seen, offset = [], self.start
        while offset < lso:
            data = self.log.read(offset, 1 << 20, max_offset=lso).read_bytes()
            shallow = list(iter_shallow(data))
            if not shallow:
                break
            for entry in shallow:
                if entry.magic == rb.MAGIC:
                    h = rb.read_header(data, entry.position)
                    if h.is_control or any(
                        a.producer_id == h.producer_id and a.first_offset <= h.base_offset
                        for a in got
                        if h.is_transactional and h.base_offset <= a.last_offset
                    ):
                        continue
                part = data[entry.position : entry.next_position]
                seen += [m.offset for m in iter_deep(part) if offset <= m.offset < lso]
            offset = shallow[-1].offset + 1
        transactional = {o for o, t in self.txn_log.items() if t[2] == "data"}
        expected = [
            m[0]
            for e in self.entries
            for m in e
            if m[2] != MARKER
            and m[0] < lso
            and (e[-1][0] not in transactional or e[-1][0] in committed)
        ]
        assert seen == expected

    @invariant()
    def indexes_verify_against_the_log(self):
        if self.log is None:
            return
        files = [
            path
            for seg in self.log.segments
            for path in (seg.offset_index.path, seg.time_index.path, seg.txn_index.path)
            if os.path.exists(path) or not path.endswith(".txnindex")
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
