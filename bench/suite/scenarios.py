"""The measured scenarios. Each runs in its own child process against one broker.

A scenario is ``fn(run: Run) -> dict``: it does its untimed setup, calls ``run.mark("start")``
and ``run.mark("end")`` around the measured section (the parent samples the broker's CPU and RSS
between the two marks), checks that everything produced was consumed back intact, and returns its
figures. ``messages`` in the result is the count the broker's CPU seconds are divided by.
Any failure raises (ScenarioError for the expected kinds); the runner records it as a string.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import random
import shutil
import statistics
import struct
import subprocess
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .rawkafka import RawConnection
from .workloads import (
    Digest,
    ScenarioError,
    admin_create_topic,
    admin_delete_topic,
    confluent_produce_all,
    confluent_producer,
    consume_confluent,
    consume_kafka_python,
    make_values,
    verify,
)


@dataclass
class Run:
    """What a scenario gets: the broker's address, its data directory (None for a memory-only
    broker), the size parameters, and ``mark`` to delimit the measured section."""

    bootstrap: str
    log_dir: str | None
    params: dict
    mark: Callable[[str], None]
    started: float = field(default_factory=time.monotonic)

    @property
    def deadline(self) -> float:
        """When the scenario's own waits give up: before the parent's hard timeout kills it."""
        return self.started + self.params["scenario_timeout_s"] * 0.9

    @property
    def host_port(self) -> tuple[str, int]:
        host, port = self.bootstrap.rsplit(":", 1)
        return host, int(port)


def percentiles(samples_us: list[float]) -> dict:
    """p50/p99/p999/max in milliseconds (nearest-rank) of latency samples given in microseconds."""
    if not samples_us:
        raise ScenarioError("no latency samples")
    xs = sorted(samples_us)

    def rank(q: float) -> float:
        return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))] / 1000.0

    return {
        "p50_ms": rank(0.50),
        "p99_ms": rank(0.99),
        "p999_ms": rank(0.999),
        "max_ms": xs[-1] / 1000.0,
        "mean_ms": statistics.fmean(xs) / 1000.0,
        "samples": len(xs),
    }


# --- produce ---------------------------------------------------------------------------------------


def produce(run: Run, client: str, size: int, codec: str) -> dict:
    """Throughput of one producer sending N values of ``size`` bytes to a fresh 1-partition topic."""
    p = run.params
    n = p["produce_messages"][client][str(size)]
    topic = f"produce-{client}-{size}-{codec}-{p['tag']}"
    deadline = run.deadline
    admin_create_topic(run.bootstrap, topic, 1)
    values = make_values(n, size, tag=p["round"])
    want = Digest.of(values)
    if client == "confluent":
        producer, errors = confluent_producer(
            run.bootstrap, **{"linger.ms": 5, "compression.type": codec}
        )
        producer.list_topics(topic, timeout=10)  # connect + metadata outside the measured section
        run.mark("start")
        confluent_produce_all(producer, topic, values, deadline)
        run.mark("end")
        if errors:
            raise ScenarioError(
                f"produce to {topic}: {len(errors)} failed deliveries, first: {errors[0]}"
            )
    else:
        from kafka import KafkaProducer

        producer = KafkaProducer(
            bootstrap_servers=run.bootstrap,
            linger_ms=5,
            batch_size=256 * 1024,
            compression_type=None if codec == "none" else codec,
        )
        producer.partitions_for(topic)
        run.mark("start")
        futures = [producer.send(topic, v) for v in values]
        producer.flush(timeout=max(0.0, deadline - time.monotonic()))
        run.mark("end")
        failed = [f for f in futures if not f.succeeded()]
        producer.close(timeout=5)
        if failed:
            raise ScenarioError(
                f"produce to {topic} (kafka-python): {len(failed)} of {n} sends failed, "
                f"first: {failed[0].exception!r}"
            )
    verify(consume_confluent(run.bootstrap, topic, 1, n, deadline), want, f"produce {topic}")
    admin_delete_topic(run.bootstrap, topic)
    return {"messages": n, "value_bytes": size}


# --- consume ---------------------------------------------------------------------------------------

CONSUME_TOPIC = "consume-1k"


def consume_setup(run: Run) -> dict:
    """Fill the shared consume topic once per broker (untimed)."""
    p = run.params
    n = p["consume_messages"]
    admin_create_topic(run.bootstrap, CONSUME_TOPIC, 1)
    values = make_values(n, 1024, tag=99)
    producer, errors = confluent_producer(run.bootstrap, **{"linger.ms": 5})
    confluent_produce_all(producer, CONSUME_TOPIC, values, run.deadline)
    if errors:
        raise ScenarioError(
            f"prefill {CONSUME_TOPIC}: {len(errors)} failed deliveries, first: {errors[0]}"
        )
    d = Digest.of(values)
    return {"messages": n, "digest": [d.count, d.crc_sum]}


def drop_page_cache() -> dict:
    """Write back dirty pages and drop the clean page cache; returns Cached kB before and after."""

    def cached_kb() -> int:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("Cached:"):
                return int(line.split()[1])
        return -1

    before = cached_kb()
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("1\n")
    return {"cached_kb_before": before, "cached_kb_after": cached_kb()}


def resident_bytes(paths: list[Path]) -> int | str:
    """Bytes of ``paths`` in the page cache (util-linux fincore), proof that a cold run is cold."""
    exe = shutil.which("fincore")
    if exe is None or not paths:
        return "not measured (no fincore or no files)"
    out = subprocess.run(
        [exe, "--bytes", "--noheadings", "--output", "RES", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if out.returncode != 0:
        return f"not measured: fincore: {out.stderr.strip()[:200]}"
    return sum(int(x) for x in out.stdout.split())


def consume(run: Run, client: str, cache: str) -> dict:
    """Read the whole prefilled topic from offset 0, timed from the first delivered message; ``cache`` is
    "cold" (page cache dropped) or "warm"."""
    p = run.params
    want = Digest(*p["setup"]["digest"])
    deadline = run.deadline
    extra: dict = {}
    if cache == "cold":
        if not p["cold_measurable"]:
            raise ScenarioError(f"cold not measurable here: {p['cold_reason']}")
        extra["page_cache"] = drop_page_cache()
        if run.log_dir is not None:
            extra["page_cache"]["topic_log_bytes_resident"] = resident_bytes(
                sorted(Path(run.log_dir, f"{CONSUME_TOPIC}-0").glob("*.log"))
            )
    else:
        # Warm: one untimed pass first, so the measured one reads from memory.
        consume_confluent(run.bootstrap, CONSUME_TOPIC, 1, want.count, deadline)
    # Timed from the first delivered message: the consumer's start-up before it (~0.5 s with
    # librdkafka, which waits that long before its first ListOffsets whichever the broker) would
    # otherwise be most of the measured time. Its length is kept as first_message_s.
    opened = time.monotonic()
    first_at: list[float] = []

    def on_first() -> None:
        first_at.append(time.monotonic())
        run.mark("start")

    if client == "confluent":
        got = consume_confluent(
            run.bootstrap, CONSUME_TOPIC, 1, want.count, deadline, on_first=on_first
        )
    else:
        got = consume_kafka_python(
            run.bootstrap, CONSUME_TOPIC, 1, want.count, deadline, on_first=on_first
        )
    run.mark("end")
    verify(got, want, f"consume {CONSUME_TOPIC} ({client}, {cache})")
    return {
        "messages": want.count - 1,
        "value_bytes": 1024,
        "first_message_s": first_at[0] - opened,
        **extra,
    }


# --- produce-to-consume latency at a fixed rate ----------------------------------------------------

_STAMP = struct.Struct(
    ">qq"
)  # sequence number, send time (CLOCK_MONOTONIC ns, system-wide on Linux)


def _latency_consumer(
    bootstrap: str,
    topic: str,
    expected: int,
    timeout_s: float,
    fetch_wait_ms: int | None,
    ready,
    out,
) -> None:
    """Child of the latency scenario: consume and report (digest, [latency µs]) through ``out``.

    poll() returns each message as soon as it arrives (consume() would wait to fill a batch).
    """
    lat: list[float] = []
    unpack = _STAMP.unpack_from
    try:
        from confluent_kafka import Consumer, TopicPartition

        conf = {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-latency",
            "enable.auto.commit": False,
        }
        if fetch_wait_ms is not None:
            conf["fetch.wait.max.ms"] = fetch_wait_ms
        c = Consumer(conf)
        try:
            c.assign([TopicPartition(topic, 0, 0)])
            c.poll(1.0)  # connect and fetch once before the producer starts
            ready.set()
            deadline = time.monotonic() + timeout_s
            s = 0
            while len(lat) < expected:
                m = c.poll(0.1)
                now = time.monotonic_ns()
                if m is None:
                    if time.monotonic() > deadline:
                        raise ScenarioError(
                            f"latency consumer: {len(lat)} of {expected} messages by the deadline"
                        )
                    continue
                if m.error() is not None:
                    raise ScenarioError(f"latency consumer {topic}/0: {m.error()}")
                v = m.value()
                s += zlib.crc32(v)
                lat.append((now - unpack(v, 0)[1]) / 1000.0)
        finally:
            c.close()
        out.put(("ok", [len(lat), s & ((1 << 64) - 1)], lat))
    except Exception as exc:  # noqa: BLE001 - reported to the parent scenario as its error
        ready.set()
        out.put(("error", f"{type(exc).__name__}: {exc}", None))


def latency(run: Run, fetch_wait_ms: int | None = None) -> dict:
    """Produce 100-byte values at a fixed rate; the consumer (another process) stamps arrival.

    ``fetch_wait_ms`` None keeps librdkafka's default fetch.wait.max.ms (500): a broker that does
    not answer a waiting Fetch as soon as data arrives shows that wait in the latency.
    """
    p = run.params
    rate = p["latency_rate"]
    n = int(rate * p["latency_seconds"])
    topic = f"latency-{p['tag']}"
    admin_create_topic(run.bootstrap, topic, 1)
    filler = make_values(1, 100)[0][16:]
    ctx = multiprocessing.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    proc = ctx.Process(
        target=_latency_consumer,
        daemon=True,
        args=(run.bootstrap, topic, n, p["scenario_timeout_s"] * 0.8, fetch_wait_ms, ready, out),
    )
    proc.start()
    try:
        if not ready.wait(60):
            raise ScenarioError("latency consumer did not become ready within 60 s")
        producer, errors = confluent_producer(run.bootstrap, **{"linger.ms": 1})
        producer.list_topics(topic, timeout=10)
        produce_ = producer.produce
        pack = _STAMP.pack
        crc = 0
        run.mark("start")
        t0 = time.monotonic()
        i = 0
        while i < n:
            due = min(n, int((time.monotonic() - t0) * rate) + 1)
            while i < due:
                v = pack(i, time.monotonic_ns()) + filler
                crc += zlib.crc32(v)
                produce_(topic, v)
                i += 1
            producer.poll(0)
            time.sleep(0.0005)
        send_s = time.monotonic() - t0
        producer.flush(30)
        status, digest, lat = out.get(timeout=p["scenario_timeout_s"] * 0.8)
        run.mark("end")
    finally:
        proc.join(5)
        if proc.is_alive():
            proc.kill()
    if status != "ok":
        raise ScenarioError(f"latency consumer: {digest}")
    if errors:
        raise ScenarioError(
            f"latency producer: {len(errors)} failed deliveries, first: {errors[0]}"
        )
    verify(Digest(*digest), Digest(n, crc & ((1 << 64) - 1)), f"latency {topic}")
    warmup = int(rate * p["latency_warmup_s"])
    admin_delete_topic(run.bootstrap, topic)
    return {
        "messages": n,
        "achieved_rate": n / send_s,
        "warmup_messages_excluded": warmup,
        **percentiles(lat[warmup:]),
    }


# --- offsets_for_times over a many-segment topic -------------------------------------------------

OFT_TOPIC = "oft-segments"
OFT_STEP_MS = 10  # message i has CreateTime t0 + i * OFT_STEP_MS and offset i
OFT_AGE_MS = 6 * 3600 * 1000  # t0 is this far in the past: inside the 7-day default retention.ms,
# which a correct broker applies to message time (KIP-33) and would otherwise enforce mid-run.


def oft_setup(run: Run) -> dict:
    """Build the time-indexed topic: small segments (segment.bytes), one timestamp per message."""
    p = run.params
    n = p["oft_messages"]
    t0 = int(time.time() * 1000) - OFT_AGE_MS
    # Kafka 4 refuses a segment.bytes below 1 MiB (1,000 such segments would take 1 GB); its
    # internal.segment.bytes, meant for tests, takes the same size without that floor.
    size_config = "internal.segment.bytes" if p.get("broker") == "kafka" else "segment.bytes"
    admin_create_topic(run.bootstrap, OFT_TOPIC, 1, {size_config: str(p["oft_segment_bytes"])})
    values = make_values(n, 200, tag=77)
    # Small batches, so segments roll at segment.bytes rather than once per 1 MB batch.
    producer, errors = confluent_producer(
        run.bootstrap, **{"linger.ms": 2, "batch.size": p["oft_batch_bytes"]}
    )
    confluent_produce_all(
        producer,
        OFT_TOPIC,
        values,
        run.deadline,
        timestamps=[t0 + i * OFT_STEP_MS for i in range(n)],
    )
    if errors:
        raise ScenarioError(
            f"prefill {OFT_TOPIC}: {len(errors)} failed deliveries, first: {errors[0]}"
        )
    verify(
        consume_confluent(run.bootstrap, OFT_TOPIC, 1, n, run.deadline),
        Digest.of(values),
        f"prefill {OFT_TOPIC}",
    )
    out = {"messages": n, "t0": t0}
    if run.log_dir is not None:
        out["segments"] = len(list(Path(run.log_dir, f"{OFT_TOPIC}-0").glob("*.log")))
    return out


def offsets_for_times(run: Run) -> dict:
    """Latency of time look-ups at random times: raw ListOffsets v1, and through both clients.

    The expected answer for time t is the first offset whose timestamp >= t, i.e.
    ceil((t - t0) / step); answers that differ are counted and sampled, not hidden.
    """
    p = run.params
    n_msgs = p["oft_messages"]
    t0 = p["setup"]["t0"]
    rng = random.Random(p["round"])
    span = (n_msgs - 1) * OFT_STEP_MS
    targets = [t0 + rng.randrange(span + 1) for _ in range(p["oft_queries"])]

    def expected(t: int) -> int:
        return -(-(t - t0) // OFT_STEP_MS)

    budget = p["oft_time_budget_s"]
    raw_us: list[float] = []
    wrong: list[dict] = []
    with RawConnection(*run.host_port) as conn:
        conn.list_offsets(OFT_TOPIC, 0, targets[0])  # connection warm-up
        run.mark("start")
        stop = time.monotonic() + budget
        for t in targets:
            t1 = time.perf_counter_ns()
            ans = conn.list_offsets(OFT_TOPIC, 0, t)
            raw_us.append((time.perf_counter_ns() - t1) / 1000.0)
            if ans.error_code != 0 or ans.offset != expected(t):
                wrong.append(
                    {
                        "query_ts": t,
                        "expected_offset": expected(t),
                        "offset": ans.offset,
                        "timestamp": ans.timestamp,
                        "error_code": ans.error_code,
                    }
                )
            if time.monotonic() > stop:
                break
        run.mark("end")
    result = {
        "messages": len(raw_us),
        "raw_listoffsets_v1": percentiles(raw_us),
        **percentiles(raw_us),
        "wrong_answers": len(wrong),
        "wrong_samples": wrong[:3],
    }

    # Through the clients (each call is a blocking ListOffsets v1 round trip plus client overhead).
    from confluent_kafka import Consumer, TopicPartition as CTP

    c = Consumer(
        {"bootstrap.servers": run.bootstrap, "group.id": "bench-oft", "enable.auto.commit": False}
    )
    conf_us: list[float] = []
    stop = time.monotonic() + budget
    for t in targets:
        t1 = time.perf_counter_ns()
        c.offsets_for_times([CTP(OFT_TOPIC, 0, t)], timeout=10)
        conf_us.append((time.perf_counter_ns() - t1) / 1000.0)
        if time.monotonic() > stop:
            break
    c.close()
    result["confluent_offsets_for_times"] = percentiles(conf_us)

    from kafka import KafkaConsumer, TopicPartition as KTP

    k = KafkaConsumer(bootstrap_servers=run.bootstrap, group_id=None, enable_auto_commit=False)
    tp = KTP(OFT_TOPIC, 0)
    k.assign([tp])
    kp_us: list[float] = []
    stop = time.monotonic() + budget
    for t in targets:
        t1 = time.perf_counter_ns()
        k.offsets_for_times({tp: t})
        kp_us.append((time.perf_counter_ns() - t1) / 1000.0)
        if time.monotonic() > stop:
            break
    k.close()
    result["kafka_python_offsets_for_times"] = percentiles(kp_us)
    if run.log_dir is not None:
        segs = len(list(Path(run.log_dir, f"{OFT_TOPIC}-0").glob("*.log")))
        result["segments"] = segs
        if segs < p["oft_min_segments"]:
            raise ScenarioError(
                f"{OFT_TOPIC} has {segs} segments on disk, the scenario needs "
                f">= {p['oft_min_segments']}: segment.bytes topic config not applied?"
            )
    return result


# --- 100 partitions x 10 producers -------------------------------------------------------------------


def _partition_producer(
    bootstrap: str, topic: str, partitions: int, n: int, tag: int, go, out
) -> None:
    """One of the concurrent producers: waits for ``go``, sends ``n`` values round-robin."""
    try:
        values = make_values(n, 100, tag=tag)
        producer, errors = confluent_producer(bootstrap, **{"linger.ms": 5})
        producer.list_topics(topic, timeout=10)
        out.put(("ready", tag, None))
        go.wait(60)
        confluent_produce_all(
            producer, topic, values, time.monotonic() + 120, partitions=partitions
        )
        d = Digest.of(values)
        out.put(("done", tag, [d.count, d.crc_sum, errors[:1], len(errors)]))
    except Exception as exc:  # noqa: BLE001 - reported to the parent scenario as its error
        out.put(("error", tag, f"{type(exc).__name__}: {exc}"))


def partition_producers(
    bootstrap: str,
    topic: str,
    partitions: int,
    producers: int,
    per_producer: int,
    deadline: float,
    at_go: Callable[[list[int]], object],
    at_done: Callable[[list[int]], object] = lambda _pids: None,
) -> Digest:
    """Start ``producers`` processes (:func:`_partition_producer`), wait until each is connected,
    call ``at_go`` with their pids, let them all send, call ``at_done`` with their pids (before
    they are reaped: /proc still has their CPU), and return the digest of what they sent.
    Raises ScenarioError for a producer's error or failed deliveries; the processes are ended
    either way."""
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(
            target=_partition_producer,
            daemon=True,
            args=(bootstrap, topic, partitions, per_producer, tag, go, out),
        )
        for tag in range(producers)
    ]
    for pr in procs:
        pr.start()
    try:
        ready = 0
        while ready < producers:
            kind, tag, info = out.get(timeout=max(1.0, deadline - time.monotonic()))
            if kind == "error":
                raise ScenarioError(f"producer {tag}: {info}")
            ready += 1
        at_go([pr.pid for pr in procs if pr.pid is not None])
        go.set()
        want = Digest(0, 0)
        for _ in range(producers):
            kind, tag, info = out.get(timeout=max(1.0, deadline - time.monotonic()))
            if kind == "error":
                raise ScenarioError(f"producer {tag}: {info}")
            count, crc_sum, first_err, n_err = info
            if n_err:
                raise ScenarioError(
                    f"producer {tag}: {n_err} failed deliveries, first: {first_err[0]}"
                )
            want = want + Digest(count, crc_sum)
        at_done([pr.pid for pr in procs if pr.pid is not None])
        return want
    finally:
        for pr in procs:
            pr.join(5)
            if pr.is_alive():
                pr.kill()


def partitions(run: Run) -> dict:
    """Aggregate throughput of ``producers`` processes writing 100-byte values to 100 partitions."""
    p = run.params
    parts, nprod = p["partitions"], p["partition_producers"]
    per = p["partition_messages"] // nprod
    topic = f"partitions-{p['tag']}"
    deadline = run.deadline
    admin_create_topic(run.bootstrap, topic, parts)
    want = partition_producers(
        run.bootstrap, topic, parts, nprod, per, deadline, lambda _pids: run.mark("start")
    )
    run.mark("end")
    verify(
        consume_confluent(run.bootstrap, topic, parts, want.count, deadline),
        want,
        f"partitions {topic}",
    )
    admin_delete_topic(run.bootstrap, topic)
    return {"messages": want.count, "value_bytes": 100, "producers": nprod, "partitions": parts}
