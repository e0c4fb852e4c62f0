"""A hypothesis state machine checking the log cleaner against a model.

The model is the history of every record appended (and not truncated): (offset, timestamp,
key, value, append time). Rules append keyed records with repeated keys and tombstones as
magic-0/1 message sets (compressed or not, CreateTime or LogAppendTime) and v2 record batches
(some from an idempotent producer), roll, clean (with a dedupe buffer that may hold only a few
keys), truncate, crash at a kill point inside a cleaning, crash without one, and reopen. Segment
modification times follow the model's clock, as they follow the wall clock in a broker.

Checked after every step:
- every record read is the one appended at its offset, in offset order;
- the latest record of every key is there, unless it is a tombstone older than
  delete.retention.ms; then no older record of the key is there either (nothing comes back);
- a record a cleaning removed was superseded by a later record of its key or was a tombstone
  older than delete.retention.ms, and was older than min.compaction.lag.ms;
- offsets_for_times (Log.offset_for_timestamp) equals brute force over what remains;
- every index file verifies against its segment (``dump-log --verify``);
- each idempotent producer's last batch is still known to the producer state;
- transactions (keyed transactional batches of two producers, COMMIT/ABORT markers): the first
  unstable offset equals brute force over every transactional batch and marker appended, the
  cleaner never cleans at or past it, and a read_committed reader (the Log's aborted
  transactions applied batch by batch below the LSO) sees exactly the records present that are
  neither aborted nor undecided, through cleanings that remove aborted data and markers.
  Records superseded only by aborted ones are kept (aborted records are not mapped).

Truncations cut at or above the end of every cleaning's dirty section so far (finished or
crashed), as a follower's truncation cuts only above the high watermark that cleaning never
passes: below it a truncation could remove the record that made a cleaning drop an older value
(tests/storage/test_cleaner.py covers the checkpoint lowered by a truncation), or the ABORT
marker that made it drop a transaction's batches.
"""

from __future__ import annotations

import io
import os
import random
import shutil
import tempfile

from hypothesis import HealthCheck, assume, event, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from protocol import recordbatch as rb
from protocol.compression import Codec
from protocol.records import MessageSetBuilder, TimestampType, iter_deep, iter_shallow
from protocol.validator import TopicSettings, ValidatedRecords, validate_produce
from storage import Log, LogConfig, TimestampOffset, killpoints
from storage.cleaner import OFFSET_MAP_ENTRY_BYTES, Cleaner, plan_cleaning
from storage.dump import dump_file
from tests.storage.helpers import Clock

DAY = 86_400_000
NOW = 1_700_000_000_000
KEYS = [b"k%d" % i for i in range(4)]
KINDS = ["v2", "v2", "v2_gzip", "v2_zstd", "v2_lat", "v1", "v1_gzip", "v1_lz4", "v1_lat"]
KINDS += ["v1_lat_snappy", "v0", "v0_gzip"]
TXN_PRODUCERS = [21, 22]


_no_op = killpoints.reached  # the real one does nothing


class Crash(Exception):
    """A kill -9 at a kill point."""


class CleanerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="cleaner-stateful-")
        self.clock = Clock(NOW)
        # offset -> (timestamp, key, value, append time)
        self.history: dict[int, tuple[int, bytes, bytes | None, int]] = {}
        self.present: dict[int, tuple[int, bytes, bytes | None]] = {}
        self.producer_last: dict[int, tuple[int, int, int, int]] = {}
        # producer -> (last sequence, last offset) of each of its batches: the sequence a
        # truncation takes the producer back to (the log checks sequences in append)
        self.producer_sequences: dict[int, list[tuple[int, int]]] = {}
        self.next_sequence: dict[int, int] = {}
        # marker offset or last offset of a transactional batch -> (first offset, producer,
        # "data" | "commit" | "abort")
        self.txn_log: dict[int, tuple[int, int, str]] = {}
        self.log: Log | None = None
        # No truncation below this: it could remove a record a cleaning (finished or not)
        # dropped older values for; Kafka's cleaning never passes the high watermark either.
        self.truncate_floor = 0

    @initialize(
        segment_bytes=st.integers(400, 1500),
        interval=st.sampled_from([0, 64, 300]),
        index_bytes=st.sampled_from([36, 120, 4096]),
        retention=st.sampled_from([0, 5_000, DAY]),
        lag=st.sampled_from([0, 0, 4_000]),
    )
    def open(self, segment_bytes, interval, index_bytes, retention, lag):
        self.config = LogConfig(
            cleanup_policy="compact",
            segment_bytes=segment_bytes,
            index_interval_bytes=interval,
            segment_index_bytes=index_bytes,
            delete_retention_ms=retention,
            min_compaction_lag_ms=lag,
            file_delete_delay_ms=0,
        )
        self.log = Log(
            os.path.join(self.tmp, "topic-0"), self.config, clock=self.clock, needs_recovery=False
        )

    def teardown(self) -> None:
        killpoints.reached = _no_op
        if self.log is not None:
            self.log.abandon()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- helpers ---------------------------------------------------------------------------------
    def _touch_active(self) -> None:
        ns = self.clock.now * 1_000_000
        os.utime(self.log.active_segment.log_path, ns=(ns, ns))

    def read_log(self) -> list[tuple]:
        out = []
        offset = self.log.log_start_offset
        while offset < self.log.log_end_offset:
            data = self.log.read(offset, 1 << 20).read_bytes()
            shallow = list(iter_shallow(data))
            if not shallow:  # the rest was cleaned away: a consumer waits here for more
                break
            out += [
                (m.offset, m.timestamp, m.key, m.value)
                for m in iter_deep(data)
                if m.offset >= offset
            ]
            offset = shallow[-1].offset + 1
        return out

    def _raise_floor(self, now: int) -> None:
        plan = plan_cleaning(self.log, now)
        if plan is not None:
            # The ABORT markers that decide which batches go are below the high watermark too
            # (an undecided or unreplicated transaction holds the LSO, and so the cleaning).
            markers = [a.last_offset + 1 for s in plan.segments for a in s.aborted]
            self.truncate_floor = max(
                self.truncate_floor,
                plan.first_uncleanable_offset,
                *markers,
                *self._decided_markers_after(plan.first_uncleanable_offset),
            )

    def _decided_markers_after(self, first_uncleanable: int) -> list[int]:
        """One past each COMMIT or ABORT marker whose transaction has records below
        ``first_uncleanable``: a cleaning may drop those records as decided, so the marker must
        stay (a broker cleans below the LSO, which its high watermark is at or above, and
        truncates only above the high watermark). Without it a truncation would make a
        transaction undecided again whose records are gone."""
        first_data: dict[int, int] = {}
        out = []
        for offset in sorted(self.txn_log):
            first, pid, kind = self.txn_log[offset]
            if kind == "data":
                first_data.setdefault(pid, first)
            elif pid in first_data:
                if first_data.pop(pid) < first_uncleanable:
                    out.append(offset + 1)
        return out

    def _sync_present(self) -> None:
        self.present = {o: (t, k, v) for o, t, k, v in self.read_log()}

    # -- rules -----------------------------------------------------------------------------------
    @rule(
        records=st.lists(
            st.tuples(st.sampled_from(KEYS), st.booleans(), st.integers(0, 3000)),
            min_size=1,
            max_size=6,
        ),
        kind=st.sampled_from(KINDS),
        producer=st.sampled_from([None, None, 1, 2]),
        seed=st.integers(0, 2**32),
        advance=st.integers(0, 3000),
        copies=st.integers(1, 4),
    )
    def append(self, records, kind, producer, seed, advance, copies):
        """Append the set ``copies`` times (the same keys again: work for the cleaner)."""
        rng = random.Random(seed)
        for _ in range(copies):
            self.clock.advance(advance)
            self._append(records, kind, producer, rng)

    def _append(self, records, kind, producer, rng):
        magic = 0 if kind.startswith("v0") else 1 if kind.startswith("v1") else 2
        codec = Codec.NONE
        for name, c in (("gzip", Codec.GZIP), ("lz4", Codec.LZ4), ("zstd", Codec.ZSTD)):
            if name in kind:
                codec = c
        if "snappy" in kind:
            codec = Codec.SNAPPY
        lat = "lat" in kind
        idempotent = magic == 2 and producer is not None
        sequence = self.next_sequence.get(producer, 0) if idempotent else -1
        builder = MessageSetBuilder(
            magic=magic,
            codec=codec,
            producer_id=producer if idempotent else -1,
            producer_epoch=0 if idempotent else -1,
            base_sequence=sequence,
        )
        for key, tombstone, age in records:
            value = None if tombstone and rng.random() < 0.6 else rng.randbytes(rng.randint(0, 30))
            builder.append(value, key=key, timestamp=self.clock.now - age)
        settings_ = TopicSettings(
            magic=magic,
            timestamp_type=TimestampType.LOG_APPEND_TIME if lat else TimestampType.CREATE_TIME,
            compacted=True,
        )
        v = validate_produce(
            builder.build(), settings_, next_offset=self.log.log_end_offset, now_ms=self.clock.now
        )
        assert isinstance(v, ValidatedRecords), v
        assume(len(v.buffer) <= self.config.segment_bytes)
        self.log.append(v)
        self._touch_active()
        for m in iter_deep(v.buffer):
            self.history[m.offset] = (m.timestamp, m.key, m.value, self.clock.now)
            self.present[m.offset] = (m.timestamp, m.key, m.value)
        if idempotent:
            self.producer_last[producer] = (
                sequence,
                sequence + len(records) - 1,
                v.first_offset,
                v.last_offset,
            )
            self.next_sequence[producer] = sequence + len(records)
            self.producer_sequences.setdefault(producer, []).append(
                (sequence + len(records) - 1, v.last_offset)
            )

    @rule(
        records=st.lists(
            st.tuples(st.sampled_from(KEYS), st.booleans(), st.integers(0, 3000)),
            min_size=1,
            max_size=4,
        ),
        producer=st.sampled_from(TXN_PRODUCERS),
        advance=st.integers(0, 3000),
    )
    def txn_append(self, records, producer, advance):
        """A keyed transactional batch (tombstones too): starts or continues a transaction."""
        self.clock.advance(advance)
        # Where the log's producer state says the producer is: a crash replays the whole
        # (cleaned) log, which may hold only the producer's marker, not its last batch.
        entry = self.log.producer_state().entry(producer)
        sequence = entry.last_sequence + 1 if entry is not None else 0
        spec = rb.BatchSpec(
            producer_id=producer, producer_epoch=0, base_sequence=sequence, is_transactional=True
        )
        batch = [
            (i, self.clock.now - age, key, None if tombstone else b"t%d" % i, ())
            for i, (key, tombstone, age) in enumerate(records)
        ]
        v = validate_produce(
            rb.build_batch(spec, batch),
            TopicSettings(magic=2, compacted=True),
            next_offset=self.log.log_end_offset,
            now_ms=self.clock.now,
        )
        assert isinstance(v, ValidatedRecords), v
        assume(len(v.buffer) <= self.config.segment_bytes)
        self.log.append(v)
        self._touch_active()
        for m in iter_deep(v.buffer):
            self.history[m.offset] = (m.timestamp, m.key, m.value, self.clock.now)
            self.present[m.offset] = (m.timestamp, m.key, m.value)
        last_seq = sequence + len(records) - 1
        self.producer_last[producer] = (sequence, last_seq, v.first_offset, v.last_offset)
        self.txn_log[v.last_offset] = (v.first_offset, producer, "data")

    @rule(producer=st.sampled_from(TXN_PRODUCERS), commit=st.booleans())
    def end_txn(self, producer, commit):
        offset = self.log.append_control(producer, 0, 0, commit, 0, self.clock.now)
        self._touch_active()
        self.txn_log[offset] = (offset, producer, "commit" if commit else "abort")

    def _transactions(self) -> tuple[dict[int, int], set[int]]:
        """Brute force: (ongoing: producer -> first offset, offsets of aborted records)."""
        ongoing: dict[int, int] = {}
        batches: dict[int, list[tuple[int, int]]] = {}
        aborted: set[int] = set()
        for offset in sorted(self.txn_log):
            first, pid, kind = self.txn_log[offset]
            if kind == "data":
                ongoing.setdefault(pid, first)
                batches.setdefault(pid, []).append((first, offset))
                continue
            ongoing.pop(pid, None)
            for low, high in batches.pop(pid, []):
                if kind == "abort":
                    aborted.update(o for o in self.history if low <= o <= high)
        return ongoing, aborted

    @rule()
    def roll(self):
        self.log.roll()
        self._touch_active()

    @rule(
        advance=st.integers(0, 10_000),
        small_map=st.booleans(),
        force=st.sampled_from([True, True, False]),
        roll_first=st.booleans(),
    )
    def clean(self, advance, small_map, force, roll_first):
        if roll_first:
            self.roll()
        self.clock.advance(advance)
        now = self.clock.now
        buffer = 8 * OFFSET_MAP_ENTRY_BYTES if small_map else 1 << 20
        before = dict(self.present)
        self._raise_floor(now)
        result = Cleaner(buffer).clean(self.log, now, force=force)
        self._sync_present()
        self._check_removals(before, now, result.end_offset if result else None)
        event("clean removed records" if len(self.present) < len(before) else "clean removed none")

    @rule(
        point=st.sampled_from(killpoints.CLEANING_POINTS),
        nth=st.integers(1, 3),
        advance=st.integers(0, 10_000),
    )
    def crash_while_cleaning(self, point, nth, advance):
        self.clock.advance(advance)
        now = self.clock.now
        before = dict(self.present)
        self._raise_floor(now)
        count = [0]

        def reached(name: str) -> None:
            if name == point:
                count[0] += 1
                if count[0] == nth:
                    raise Crash(point)

        killpoints.reached = reached
        try:
            Cleaner(1 << 20).clean(self.log, now, force=True)
        except Crash:
            pass
        finally:
            killpoints.reached = _no_op
        self._reopen(recover=True)
        self._sync_present()
        self._check_removals(before, now, None)

    @rule(data=st.data())
    def truncate(self, data):
        low = max(self.truncate_floor, self.log.log_start_offset)
        assume(low <= self.log.log_end_offset)
        offset = data.draw(st.integers(low, self.log.log_end_offset))
        self.log.truncate_to(offset)
        end = self.log.log_end_offset
        assert end <= offset
        self.history = {o: r for o, r in self.history.items() if o < end}
        self.present = {o: r for o, r in self.present.items() if o < end}
        self.producer_last = {p: b for p, b in self.producer_last.items() if b[3] < end}
        self.txn_log = {o: t for o, t in self.txn_log.items() if o < end}
        for p, batches in self.producer_sequences.items():
            batches[:] = [b for b in batches if b[1] < end]
            # A producer whose every batch is gone is unknown again: any sequence goes.
            self.next_sequence[p] = batches[-1][0] + 1 if batches else 0
        self._touch_active()

    @rule()
    def reopen_clean(self):
        self._reopen(recover=False)

    @rule()
    def crash(self):
        self._reopen(recover=True)

    def _reopen(self, *, recover: bool) -> None:
        """Open the log again after a clean close, or (``recover``) after a crash: abandoned,
        then recovered."""
        first_dirty = self.log.first_dirty_offset
        if recover:
            self.log.abandon()
        else:
            self.log.close()
        self.log = Log(
            self.log.directory,
            self.config,
            clock=self.clock,
            needs_recovery=recover,
            first_dirty_offset=first_dirty,
        )

    # -- checks ----------------------------------------------------------------------------------
    def _check_removals(self, before: dict, now: int, end_offset: int | None) -> None:
        """A record removed was aborted, or superseded by a later record of its key that was
        not, or an expired tombstone; never a record of an undecided transaction."""
        retention, lag = self.config.delete_retention_ms, self.config.min_compaction_lag_ms
        ongoing, aborted = self._transactions()
        first_unstable = min(ongoing.values(), default=None)
        for offset in sorted(set(before) - set(self.present)):
            ts, key, value, appended = self.history[offset]
            assert first_unstable is None or offset < first_unstable, (offset, first_unstable)
            if lag:
                assert ts <= now - lag, (offset, ts, now)
            if offset in aborted:
                continue
            later = [o for o, r in self.history.items() if r[1] == key and o not in aborted]
            superseded = any(o > offset for o in later)
            expired_tombstone = value is None and now >= appended + retention
            assert superseded or expired_tombstone, (offset, key, value)
            if end_offset is not None and not expired_tombstone:
                assert any(offset < o < end_offset for o in later)

    @invariant()
    def log_matches_model(self):
        if self.log is None:
            return
        got = self.read_log()
        assert [r[0] for r in got] == sorted(r[0] for r in got)
        for offset, ts, key, value in got:
            assert self.history[offset][:3] == (ts, key, value), offset
        present = {r[0] for r in got}
        assert present == set(self.present)
        _, aborted = self._transactions()
        latest: dict[bytes, int] = {}
        for offset in sorted(self.history):
            if offset not in aborted:  # an aborted record is no key's latest value
                latest[self.history[offset][1]] = offset
        for key, offset in latest.items():
            if offset in present:
                continue
            _, _, value, appended = self.history[offset]
            assert value is None and self.clock.now >= appended + self.config.delete_retention_ms
            assert not any(self.history[o][1] == key for o in present - aborted), key

    @invariant()
    def read_committed_matches(self):
        """The LSO is brute force's; a read_committed reader gets exactly the records present
        below it that were not aborted, whatever the cleaner removed."""
        if self.log is None:
            return
        ongoing, aborted = self._transactions()
        start, end = self.log.log_start_offset, self.log.log_end_offset
        first_unstable = max(min(ongoing.values()), start) if ongoing else None
        assert self.log.first_unstable_offset == first_unstable
        lso = end if first_unstable is None else first_unstable
        assert self.log.last_stable_offset == lso
        told = self.log.aborted_transactions(start, lso)
        seen, offset = [], start
        while offset < lso:
            data = self.log.read(offset, 1 << 20, max_offset=lso).read_bytes()
            shallow = list(iter_shallow(data))
            if not shallow:
                break  # the rest below the LSO was cleaned away
            for entry in shallow:
                if entry.magic == rb.MAGIC:
                    h = rb.read_header(data, entry.position)
                    if h.is_control or any(
                        a.producer_id == h.producer_id
                        and a.first_offset <= h.base_offset <= a.last_offset
                        for a in told
                        if h.is_transactional
                    ):
                        continue
                part = data[entry.position : entry.next_position]
                seen += [m.offset for m in iter_deep(part) if offset <= m.offset < lso]
            offset = shallow[-1].offset + 1
        assert seen == sorted(o for o in self.present if o < lso and o not in aborted)

    @invariant()
    def time_search_matches_brute_force(self):
        if self.log is None:
            return
        got = sorted((o, r[0]) for o, r in self.present.items())
        stamps = sorted({ts for _, ts in got if ts >= 0})
        for target in stamps[:: max(len(stamps) // 6, 1)] + [NOW + 10 * DAY]:
            expected = next((TimestampOffset(ts, o) for o, ts in got if ts >= target), None)
            assert self.log.offset_for_timestamp(target) == expected, target

    @invariant()
    def indexes_verify(self):
        if self.log is None:
            return
        out = io.StringIO()
        for s in self.log.segments:
            txn_index = [s.txn_index.path] if os.path.exists(s.txn_index.path) else []
            for path in (s.log_path, s.offset_index.path, s.time_index.path, *txn_index):
                assert dump_file(path, deep=False, verify=True, out=out, err=out) == 0, (
                    out.getvalue()
                )
        leftovers = [
            n
            for n in os.listdir(self.log.directory)
            if n.endswith((".cleaned", ".swap", ".replaces"))
        ]
        assert leftovers == []

    @precondition(lambda self: self.log is not None)
    @invariant()
    def producers_last_batches_survive(self):
        state = self.log.producer_state()
        for pid, (first_seq, last_seq, first_offset, last_offset) in self.producer_last.items():
            if first_offset < self.log.log_start_offset:
                continue
            txn = pid in TXN_PRODUCERS
            dup = state.check(pid, 0, first_seq, last_seq, is_transactional=txn)
            assert dup is not None and (dup.first_offset, dup.last_offset) == (
                first_offset,
                last_offset,
            )


CleanerMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("CLEANER_STATEFUL_EXAMPLES", "40")),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestCleanerMachine = CleanerMachine.TestCase
