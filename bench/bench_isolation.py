"""Does one client stall another? A well-behaved client's produce-to-consume latency, quiet and
beside noisy neighbours (issue #33).

The probe: one producer connection sends a 100-byte message (Produce v9, acks=1) every
--interval seconds to topic ``probe`` while another connection long-polls it (Fetch v11); the
latency of a message is from just before its Produce was sent to the Fetch answer holding it.
Both connections are raw sockets in threads of this process, so no client library's timers are
measured.

Phases, each at most --phase-s seconds, on one broker process:
- ``quiet``: the probe alone;
- ``fetch_v2``: beside --consumers Fetch v2 readers (raw connections in threads of one child
  process; the data is stored as lz4 record batches, so the broker down-converts it to magic
  1), each pulling --consumer-mb MB with a 1 MiB partition limit;
- ``fetch_v2_slowloris``: the same beside --slowloris connections that each send one byte of a
  request every second and never finish it;
- ``zstd_produce``: beside a client producing --zstd-mb MB (uncompressed) zstd record batches
  (Produce v9, acks=1) one after another.
A phase ends when its neighbours are done or at --phase-s. Per phase: the probe's p50/p99/max,
the neighbours' throughput, the broker's CPU (utime + stime, /proc/PID/stat) in cores, all
threads and the event loop's (main) thread apart, and its peak resident memory in the phase
(VmHWM, reset at the phase's start), how late the broker's event loop woke a task asking to
wake every 100 ms (its /metrics histogram, read at the phase's start and end), and the
machine's floor: the same probe through a relay process (one connection's bytes written to
another) beside the same neighbours. Bounded: about 4 x --phase-s plus the 30 MB
load and the neighbours' last requests (with the defaults about 4 minutes). Writes
bench/results/isolation.json (--out to write elsewhere; each --label's run is kept).

    .venv/bin/python bench/bench_isolation.py [--phase-s 30] [--repo DIR] [--io-threads N]

``--repo DIR`` runs the broker from another tree (the "before" figures: `git archive` of an
older commit, its C extension built in place with setup.py build_ext --inplace), with this
checkout's venv; ``--label`` names the run in the result file.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_e2e import commit_of, machine, write_result  # noqa: E402
from bench.suite.brokers import free_port  # noqa: E402
from bench.suite.workloads import admin_create_topic, make_values  # noqa: E402
from protocol import ApiKey, ClientConnection  # noqa: E402
from protocol.records import Codec, MessageSetBuilder, iter_shallow  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "bench" / "results" / "isolation.json"
BULK, PROBE, ZSTD = "bulk", "probe", "zstd"
RECORDS_PER_BATCH = 1000
_INT32 = struct.Struct(">i")


class Wire:
    """One blocking connection speaking the protocol through ClientConnection."""

    def __init__(self, port: int, client_id: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conn = ClientConnection(client_id)

    def call(self, api: ApiKey, version: int, body: dict):
        self.sock.sendall(self.conn.request(api, version, body)[1])
        while True:
            data = self.sock.recv(1 << 20)
            if not data:
                raise RuntimeError(f"the broker closed the connection answering {api.name}")
            for response in self.conn.receive_data(data):
                return response.body

    def produce(self, topic: str, records: bytes) -> int:
        body = {
            "transactional_id": None,
            "acks": 1,
            "timeout_ms": 30_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
        }
        part = self.call(ApiKey.PRODUCE, 9, body).responses[0].partition_responses[0]
        if part.error_code != 0:
            raise RuntimeError(f"Produce to {topic} answered error {part.error_code}")
        return part.base_offset

    def fetch(self, version: int, topic: str, offset: int, max_wait_ms: int, max_bytes: int):
        body = {
            "replica_id": -1,
            "max_wait_ms": max_wait_ms,
            "min_bytes": 1,
            "max_bytes": 64 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": 0,
                            "current_leader_epoch": -1,
                            "fetch_offset": offset,
                            "log_start_offset": -1,
                            "partition_max_bytes": max_bytes,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        part = self.call(ApiKey.FETCH, version, body).responses[0].partitions[0]
        if part.error_code != 0:
            raise RuntimeError(f"Fetch v{version} of {topic} answered error {part.error_code}")
        return part.records or b""


def batch(codec: Codec, values: list[bytes]) -> bytes:
    builder = MessageSetBuilder(magic=2, codec=codec)
    now = int(time.time() * 1000)
    for value in values:
        builder.append(value, timestamp=now)
    return builder.build()


# --- neighbours (child processes: their clients' CPU is not this process's GIL) --------------


def run_consumers(port: int, count: int, mb: float, seconds: float) -> dict:
    """``count`` Fetch v2 readers in threads, each reading ``bulk`` from offset 0 until it has
    ``mb`` MB (starting over at the end) or ``seconds`` pass."""
    want = int(mb * 1e6)
    deadline = time.monotonic() + seconds
    pulled = [0] * count
    errors: list[str] = []

    def consume(i: int) -> None:
        wire = Wire(port, f"bench-isolation-v2-{i}")
        offset = 0
        try:
            while pulled[i] < want and time.monotonic() < deadline:
                records = wire.fetch(2, BULK, offset, 500, 1 << 20)
                entries = list(iter_shallow(records))
                pulled[i] += len(records)
                offset = entries[-1].offset + 1 if entries else 0  # at the end: again
        except Exception as exc:  # reported in the result
            errors.append(repr(exc))

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(count)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    return {
        "consumers": count,
        "mb_each": round(min(pulled) / 1e6, 1),
        "mb_total": round(sum(pulled) / 1e6, 1),
        "consumer_seconds": round(elapsed, 1),
        "mb_per_s": round(sum(pulled) / 1e6 / elapsed, 1),
        "errors": errors[:3],
    }


def run_slowloris(port: int, count: int, seconds: float) -> dict:
    """``count`` connections each sending one byte of a never-finished request a second."""
    frame = ClientConnection("bench-isolation-slowloris").request(ApiKey.API_VERSIONS, 0, {})[1]
    socks = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(count)]
    sent, closed = 0, 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and sent < len(frame) - 1:
        for s in socks:
            try:
                s.send(frame[sent : sent + 1])
            except OSError:
                closed += 1
        sent += 1
        time.sleep(1)
    for s in socks:
        s.close()
    return {"connections": count, "bytes_dripped_each": sent, "send_failures": closed}


def run_zstd(port: int, mb: float, seconds: float) -> dict:
    """Produce record batches of ``mb`` MB of 100-byte values, zstd, one after another."""
    # Hex of random bytes: about 2:1 under zstd, so the broker inflates what it was sent.
    rng = random.Random(3)
    records = batch(Codec.ZSTD, [rng.randbytes(50).hex().encode() for _ in range(int(mb * 1e4))])
    wire = Wire(port, "bench-isolation-zstd")
    deadline = time.monotonic() + seconds
    sent, started = 0, time.monotonic()
    while time.monotonic() < deadline:
        wire.produce(ZSTD, records)
        sent += 1
    elapsed = time.monotonic() - started
    return {
        "batches": sent,
        "batch_mb_uncompressed": mb,
        "batch_mb_compressed": round(len(records) / 1e6, 1),
        "mb_per_s_uncompressed": round(sent * mb / elapsed, 1),
    }


# --- the machine's floor: the probe's path without a broker ----------------------------------


def run_relay() -> None:
    """A process that does the least a broker must on the probe's path: woken by one
    connection's bytes, it writes them to another. Prints its port, then serves one sender and
    one receiver (accepted in that order) until the sender closes."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        print(server.getsockname()[1], flush=True)
        sender, _ = server.accept()
        receiver, _ = server.accept()
    receiver.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while data := sender.recv(1 << 16):
        receiver.sendall(data)


def run_floor(interval: float) -> dict:
    """The probe through a relay process instead of the broker, beside the same neighbours,
    until this process's stdin closes: what the machine alone adds to the probe's latency
    (waking two processes, scheduling them beside the neighbours), the floor under the
    broker's figures."""
    relay = subprocess.Popen(
        [sys.executable, __file__, "--role", "relay"], stdout=subprocess.PIPE, text=True
    )
    assert relay.stdout is not None
    port = int(relay.stdout.readline())
    sender = socket.create_connection(("127.0.0.1", port))
    sender.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    receiver = socket.create_connection(("127.0.0.1", port))
    stop = threading.Event()
    latencies: list[float] = []

    def send() -> None:
        while not stop.wait(interval):
            sender.sendall(struct.pack(">d", time.perf_counter()))

    def receive() -> None:
        pending = b""
        while data := receiver.recv(1 << 16):
            now = time.perf_counter()
            pending += data
            while len(pending) >= 8:
                latencies.append((now - struct.unpack_from(">d", pending)[0]) * 1000)
                pending = pending[8:]

    threads = [threading.Thread(target=send), threading.Thread(target=receive)]
    for t in threads:
        t.start()
    sys.stdin.read()
    stop.set()
    threads[0].join()
    sender.close()
    threads[1].join()
    relay.wait(10)
    latencies.sort()
    return {
        "floor_messages": len(latencies),
        "floor_p50_ms": round(statistics.median(latencies), 2),
        "floor_p99_ms": round(latencies[int(len(latencies) * 0.99) - 1], 2),
        "floor_max_ms": round(latencies[-1], 2),
    }


# --- the probe and the phases --------------------------------------------------------------


def probe(port: int, seconds: float, interval: float, stop: threading.Event) -> list[float]:
    """Latencies in ms of messages produced every ``interval`` s until ``stop`` or ``seconds``."""
    producer = Wire(port, "bench-isolation-probe")
    consumer = Wire(port, "bench-isolation-probe-consumer")
    start = producer.produce(PROBE, batch(Codec.NONE, [b"warm-up"]))
    sent: dict[int, float] = {}
    received: dict[int, float] = {}
    done = threading.Event()

    def consume() -> None:
        offset = start + 1
        while not done.is_set():
            records = consumer.fetch(11, PROBE, offset, 200, 1 << 20)
            now = time.perf_counter()
            for entry in iter_shallow(records):
                received[entry.offset] = now
                offset = entry.offset + 1

    reader = threading.Thread(target=consume)
    reader.start()
    value = bytes(100)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline and not stop.is_set():
            t = time.perf_counter()
            sent[producer.produce(PROBE, batch(Codec.NONE, [value]))] = t
            time.sleep(interval)
        time.sleep(0.5)
    finally:
        done.set()
        reader.join()
    return [(received[o] - t) * 1000 for o, t in sent.items() if o in received]


def _stat_cpu_s(path: str) -> float:
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> tuple[float, float]:
    """(all threads, the event loop's thread) of ``pid``: utime + stime in seconds
    (/proc/PID/stat and /proc/PID/task/PID/stat: the loop runs on the main thread)."""
    return _stat_cpu_s(f"/proc/{pid}/stat"), _stat_cpu_s(f"/proc/{pid}/task/{pid}/stat")


def child(role: str, port: int, args: argparse.Namespace) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, __file__, "--role", role, "--port", str(port), *_child_args(args)],
        stdout=subprocess.PIPE,
    )


def _child_args(args: argparse.Namespace) -> list[str]:
    return [
        "--phase-s", str(args.phase_s), "--consumers", str(args.consumers),
        "--consumer-mb", str(args.consumer_mb), "--slowloris", str(args.slowloris),
        "--zstd-mb", str(args.zstd_mb),
    ]  # fmt: skip


def reset_peak_rss(pid: int) -> None:
    """Start the broker's peak resident set (VmHWM) over from its current size (Linux
    clear_refs 5), so each phase's peak is its own."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    return round(kb / 1024, 1)


def loop_delays(metrics_port: int) -> list[tuple[float, float]]:
    """The broker's event-loop delay histogram (broker/loop_delay.py: a task asks to wake every
    100 ms and counts how late it woke) from /metrics: (upper bound in s, cumulative count) per
    bucket; empty when the broker has none (an older tree)."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    rows = []
    for line in text.splitlines():
        if line.startswith("chronolog_event_loop_delay_seconds_bucket{"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            rows.append((float(bound), float(line.rsplit(" ", 1)[1])))
    return rows


def loop_delay_row(before: list[tuple[float, float]], after: list[tuple[float, float]]) -> dict:
    """What the loop made a ready task wait during a phase, from two histogram readings: so a
    probe's tail can be told apart from the loop's (the loop was late) and the machine's (the
    probe or the broker was not scheduled)."""
    if not before or not after:
        return {}
    counts = [(bound, a - b) for (bound, a), (_, b) in zip(after, before)]
    total = counts[-1][1]
    p99 = next(bound for bound, c in counts if c >= 0.99 * total)
    late = dict(counts)
    return {
        "loop_wakeups": int(total),
        "loop_delay_p99_ms_at_most": None if p99 == float("inf") else p99 * 1000,
        "loop_wakeups_over_1ms": int(total - late[0.001]),
        "loop_wakeups_over_5ms": int(total - late[0.005]),
    }


def phase(name: str, broker: Broker, roles: list[str], args: argparse.Namespace) -> dict:
    port, pid = broker.port, broker.proc.pid
    reset_peak_rss(pid)
    children = [child(role, port, args) for role in roles]
    floor = subprocess.Popen(
        [sys.executable, __file__, "--role", "floor", "--interval", str(args.interval)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    stop = threading.Event()
    delays_before = loop_delays(broker.metrics_port)
    before, started = cpu_s(pid), time.monotonic()
    results: dict = {}

    def wait_children() -> None:
        for c in children:
            out, _ = c.communicate()
            results.update(json.loads(out or b"{}"))
        stop.set()

    waiter = threading.Thread(target=wait_children)
    if roles:
        waiter.start()
    # With neighbours the phase lasts as long as they do (each stops itself at --phase-s).
    latencies = probe(port, args.phase_s + (30 if roles else 0), args.interval, stop)
    if roles:
        waiter.join()
    elapsed = time.monotonic() - started
    floor_out, _ = floor.communicate(timeout=60)
    after = cpu_s(pid)
    loop = loop_delay_row(delays_before, loop_delays(broker.metrics_port))
    cores, loop_cores = ((a - b) / elapsed for a, b in zip(after, before))
    latencies.sort()
    row = {
        "probe_messages": len(latencies),
        "p50_ms": round(statistics.median(latencies), 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1], 2),
        "max_ms": round(latencies[-1], 2),
        "broker_cpu_cores": round(cores, 2),
        "loop_thread_cores": round(loop_cores, 2),
        "worker_threads_cores": round(cores - loop_cores, 2),
        "broker_peak_rss_mb": peak_rss_mb(pid),
        "seconds": round(elapsed, 1),
        **loop,
        **json.loads(floor_out),
        **results,
    }
    print(f"{name}: {row}", flush=True)
    return row


@dataclass(frozen=True)
class Broker:
    proc: subprocess.Popen
    port: int
    metrics_port: int


def start_broker(
    repo: Path,
    work: Path,
    io_threads: int | None,
    extra: tuple[str, ...] = (),
    launcher: tuple[str, ...] = (),
    timeout_s: float = 60,
) -> Broker:
    """A broker of ``repo`` serving from ``work``, started by ``launcher`` (a command the
    broker's command line is appended to, such as valgrind's) when given."""
    port, metrics_port = free_port(), free_port()
    listener = f"PLAINTEXT://127.0.0.1:{port}"
    cmd = [*launcher, sys.executable, "-m", "broker", "serve"]
    overrides = [f"listeners={listener}", f"advertised.listeners={listener}"]
    overrides.append(f"metrics.listener=http://127.0.0.1:{metrics_port}")
    overrides += [f"log.dirs={work / 'data'}", "auto.create.topics.enable=false", *extra]
    if io_threads is not None:
        overrides.append(f"num.io.threads={io_threads}")
    for o in overrides:
        cmd += ["--override", o]
    out = open(work / "broker.out", "ab")
    env = {**os.environ, "PYTHONPATH": str(repo)}
    proc = subprocess.Popen(cmd, cwd=repo, stdout=out, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            socket.create_connection(("127.0.0.1", metrics_port), timeout=1).close()
            return Broker(proc, port, metrics_port)
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"the broker did not start: see {work / 'broker.out'}") from None
            time.sleep(0.2)


def measure(args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix="chronolog-bench-isolation-"))
    broker = start_broker(Path(args.repo), work, args.io_threads)
    proc, port = broker.proc, broker.port
    try:
        bootstrap = f"127.0.0.1:{port}"
        admin_create_topic(bootstrap, PROBE, 1)
        admin_create_topic(bootstrap, BULK, 1)
        admin_create_topic(bootstrap, ZSTD, 1, {"max.message.bytes": str(200 << 20)})
        loader = Wire(port, "bench-isolation-load")
        values = make_values(RECORDS_PER_BATCH, 100, seed=5)
        one = batch(Codec.LZ4, values)
        stored = 0
        while stored < args.consumer_mb * 1e6:
            loader.produce(BULK, one)
            stored += len(one)
        phases = {"quiet": phase("quiet", broker, [], args)}
        phases["fetch_v2"] = phase("fetch_v2", broker, ["consumers"], args)
        phases["fetch_v2_slowloris"] = phase(
            "fetch_v2_slowloris", broker, ["consumers", "slowloris"], args
        )
        phases["zstd_produce"] = phase("zstd_produce", broker, ["zstd"], args)
        return {"bulk_mb_stored": round(stored / 1e6, 1), "phases": phases}
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phase-s", type=float, default=30)
    parser.add_argument("--interval", type=float, default=0.01)
    parser.add_argument("--consumers", type=int, default=20)
    parser.add_argument("--consumer-mb", type=float, default=30)
    parser.add_argument("--slowloris", type=int, default=200)
    parser.add_argument("--zstd-mb", type=float, default=50)
    parser.add_argument("--repo", default=str(REPO))
    parser.add_argument("--io-threads", type=int)
    parser.add_argument("--label", default="after")
    parser.add_argument("--out", default=str(RESULT))
    parser.add_argument("--role", choices=("consumers", "slowloris", "zstd", "floor", "relay"))
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    if args.role == "consumers":
        print(json.dumps(run_consumers(args.port, args.consumers, args.consumer_mb, args.phase_s)))
        return 0
    if args.role == "slowloris":
        print(json.dumps({"slowloris": run_slowloris(args.port, args.slowloris, args.phase_s)}))
        return 0
    if args.role == "relay":
        run_relay()
        return 0
    if args.role == "floor":
        print(json.dumps(run_floor(args.interval)))
        return 0
    if args.role == "zstd":
        print(json.dumps({"zstd": run_zstd(args.port, args.zstd_mb, args.phase_s)}))
        return 0
    commit = commit_of(args.repo)
    result = measure(args)
    out = Path(args.out)
    runs = json.loads(out.read_text()).get("runs", {}) if out.exists() else {}
    runs[args.label] = {"commit": commit, "io_threads": args.io_threads, **result, **machine()}
    write_result(
        out,
        {
            "benchmark": "isolation",
            "probe": f"100-byte message every {args.interval} s, Produce v9 acks=1 -> Fetch v11",
            "neighbours": {
                "fetch_v2": f"{args.consumers} Fetch v2 readers x {args.consumer_mb} MB (lz4 "
                "batches stored, down-converted to magic 1)",
                "slowloris": f"{args.slowloris} connections dripping a byte a second",
                "zstd_produce": f"{args.zstd_mb} MB zstd record batches, back to back",
            },
            "phase_s": args.phase_s,
            "runs": runs,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
