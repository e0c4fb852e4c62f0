"""kill -9 in a loop under concurrent acks=all producers, with segments so small that kills land
mid-roll.

What a user notices after every restart: every acknowledged message is there exactly once, at
the offset it was acknowledged with, with its value and timestamp; offsets are dense; a message
read once is never lost later; ``dump-log --verify`` passes on every segment, offset index and
time index; and offsets_for_times (ListOffsets v1) answers what a scan of the partition answers.
"""

from __future__ import annotations

import contextlib
import glob
import io
import os
import random
import threading
import time

from protocol import ApiKey
from storage.dump import main as dump_log
from tests.integration.kafka_wire import (
    WireClient,
    create_topic,
    message_set,
    produce,
    random_batch,
    read_all,
)

SEED = 20261125
ROUNDS = 8
PRODUCERS = 4
PARTITIONS = 3
TOPIC = "killloop"
MAX_PROBES = 300  # distinct timestamps probed per partition and round (a sample when more)
TEST_BUDGET_S = 60.0  # the rounds take 15-25 s on 2 shared cores


def now_ms() -> int:
    return int(time.time() * 1000)


class Producers:
    """PRODUCERS threads, each with its own WireClient, producing acks=all batches of magic 2 to
    random partitions while ``go`` is set, reconnecting after a connection error. ``pause()``
    returns once no produce is in flight, so checks see a quiet broker."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        # (partition, offset) -> (value, CreateTime) of every acknowledged message
        self.acked: dict[tuple[int, int], tuple[bytes, int]] = {}
        self.errors: list[str] = []  # non-zero error codes and unexpected exceptions
        self.cond = threading.Condition()
        self.go = False
        self.active = 0
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(PRODUCERS)
        ]

    def __enter__(self) -> Producers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        with self.cond:
            self.cond.notify_all()
        for t in self.threads:
            t.join(15)

    def resume(self) -> None:
        with self.cond:
            self.go = True
            self.cond.notify_all()

    def pause(self, timeout: float = 15.0) -> None:
        with self.cond:
            self.go = False
            assert self.cond.wait_for(lambda: self.active == 0, timeout), "a produce hangs"

    def _run(self, i: int) -> None:
        rng = random.Random(SEED * 100 + i)
        client: WireClient | None = None
        batch = 0
        try:
            while not self.stop.is_set():
                with self.cond:
                    if not self.cond.wait_for(lambda: self.go or self.stop.is_set(), 0.5):
                        continue
                    if self.stop.is_set():
                        break
                    self.active += 1
                try:
                    if client is None:
                        client = WireClient(self.host, self.port, timeout=5)
                    partition = rng.randrange(PARTITIONS)
                    tag = b"p%d-b%d" % (i, batch)
                    values, stamps = random_batch(rng, tag, now_ms(), 5, (20, 120), 20_000, 0.25)
                    batch += 1
                    r = produce(
                        client,
                        TOPIC,
                        message_set(values, timestamps=stamps, magic=2),
                        partition=partition,
                        acks=-1,
                        version=9,
                    )
                    if r.error_code != 0:
                        self.errors.append(f"produce to {partition}: error {r.error_code}")
                        continue
                    for j, (value, ts) in enumerate(zip(values, stamps)):
                        self.acked[(partition, r.base_offset + j)] = (value, ts)
                except OSError:  # the broker was killed under us: reconnect once it is back
                    if client is not None:
                        client.close()
                    client = None
                    self.stop.wait(0.02)
                finally:
                    with self.cond:
                        self.active -= 1
                        self.cond.notify_all()
        except Exception as exc:  # noqa: BLE001 - reported by the test, not lost in a thread
            self.errors.append(f"producer {i}: {exc!r}")
        finally:
            if client is not None:
                client.close()


def read_partition(client: WireClient, partition: int) -> list[tuple[int, bytes, int]]:
    """Every (offset, value, timestamp) of a partition."""
    return [(m.offset, bytes(m.value), m.timestamp) for m in read_all(client, TOPIC, partition)]


def list_offsets(client: WireClient, targets: dict[int, int]) -> dict[int, tuple[int, int]]:
    """ListOffsets v1 for {partition: timestamp}: {partition: (offset, timestamp)}."""
    body = {
        "replica_id": -1,
        "topics": [
            {
                "name": TOPIC,
                "partitions": [{"partition_index": p, "timestamp": t} for p, t in targets.items()],
            }
        ],
    }
    answer = client.call(ApiKey.LIST_OFFSETS, 1, body).topics[0].partitions
    assert all(r.error_code == 0 for r in answer), answer
    return {r.partition_index: (r.offset, r.timestamp) for r in answer}


def first_at_or_after(messages: list[tuple[int, bytes, int]], target: int) -> tuple[int, int]:
    """The brute-force answer: (offset, timestamp) of the first message whose timestamp is >=
    target, (-1, -1) when there is none."""
    for offset, _, ts in messages:
        if ts >= target:
            return offset, ts
    return -1, -1


def verify_files(log_dir: str) -> None:
    """``dump-log --verify`` over every segment, offset index and time index of the topic."""
    files = sorted(
        f
        for suffix in ("log", "index", "timeindex")
        for f in glob.glob(os.path.join(log_dir, f"{TOPIC}-*", f"*.{suffix}"))
    )
    assert len(files) >= 3 * PARTITIONS
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        status = dump_log(["--verify", *files])
    problems = [x for x in out.getvalue().splitlines() if "mismatch" in x or "torn" in x]
    assert status == 0, "\n".join(problems[:20]) or out.getvalue()[-3000:]


def test_kill9_loop_under_concurrent_producers_keeps_every_acknowledged_message(broker_factory):
    deadline = time.monotonic() + TEST_BUDGET_S
    b = broker_factory(
        {
            "log.segment.bytes": 3000,
            "log.index.interval.bytes": 256,
            "log.flush.interval.messages": 1,
        }
    )
    with WireClient(b.host, b.port) as c:
        assert create_topic(c, TOPIC, PARTITIONS) == 0
    rng = random.Random(SEED)
    seen: dict[int, list[tuple[int, bytes, int]]] = {p: [] for p in range(PARTITIONS)}
    acked_per_round = []

    with Producers(b.host, b.port) as producers:
        for round_no in range(ROUNDS):
            assert time.monotonic() < deadline, f"out of time in round {round_no}"
            producers.resume()
            time.sleep(rng.uniform(0.1, 0.6))  # the workload between kills, not a sync point
            b.kill()
            producers.pause()
            acked = dict(producers.acked)
            acked_per_round.append(len(acked))
            b.start()
            assert "no clean shutdown marker" in b.log_output(since_start=True)

            verify_files(b.log_dir)
            with WireClient(b.host, b.port) as c:
                for p in range(PARTITIONS):
                    messages = read_partition(c, p)
                    offsets = [o for o, _, _ in messages]
                    assert offsets == list(range(len(offsets))), f"round {round_no}: gaps in {p}"
                    stored = {o: (v, ts) for o, v, ts in messages}
                    lost = sorted(o for (q, o), m in acked.items() if q == p and stored.get(o) != m)
                    assert lost == [], f"round {round_no}, partition {p}: lost {lost[:10]}"
                    # what was read after an earlier restart is still there, unchanged
                    earlier = seen[p]
                    assert messages[: len(earlier)] == earlier, f"round {round_no}: {p} changed"
                    seen[p] = messages

                # offsets_for_times, brute force: every distinct timestamp (a sample when there
                # are many), one below and one above each, and targets beyond both ends
                probes: dict[int, list[int]] = {}
                for p in range(PARTITIONS):
                    stamps = sorted({ts for _, _, ts in seen[p]})
                    if len(stamps) > MAX_PROBES:
                        stamps = sorted(rng.sample(stamps, MAX_PROBES))
                    targets = {t + d for t in stamps for d in (-1, 0, 1)}
                    targets |= {0, now_ms() + 3_600_000}
                    probes[p] = sorted(targets)
                for k in range(max(len(v) for v in probes.values())):
                    targets = {p: v[k] for p, v in probes.items() if k < len(v)}
                    got = list_offsets(c, targets)
                    for p, t in targets.items():
                        want = first_at_or_after(seen[p], t)
                        assert got[p] == want, f"round {round_no}, partition {p}, target {t}"

    assert producers.errors == []
    assert acked_per_round[-1] >= 100 and acked_per_round[-1] > acked_per_round[ROUNDS // 2]
    segments = glob.glob(os.path.join(b.log_dir, f"{TOPIC}-*", "*.log"))
    assert len(segments) > 2 * PARTITIONS  # the producers rolled segments between the kills
