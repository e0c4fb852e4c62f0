"""Does chronolog scale to 10,000 partitions and 1,000 producer connections? (issue #33)

On one broker process of this checkout, on a fresh log directory:
- create --topics x --partitions (100 x 100) with one CreateTopics request a topic, sequentially:
  the time, the files made, and the broker's resident memory before and after (per partition);
- Metadata for all topics (v12), --metadata-requests times: p50/p99 from sending the request
  to holding the whole answer (decoded once, outside the timing, to check it lists them all);
- restart: SIGTERM, the time to exit, then the time from starting the process until a
  Metadata answer lists every partition with its leader, and the resident memory then;
- load, from a generator in a child process (its CPU is apart from the broker's): first the
  baseline, one connection and then --baseline-connections into a 1-partition topic each, then
  --connections connections each owning --partitions-per-connection of the wide topics'
  partitions (contiguous, so each request names one topic). Every Produce request (v9,
  acks=1) carries one uncompressed record batch of --records-per-batch --record-bytes-byte
  values per partition it names, pre-encoded once (producer id -1, not idempotent, so the
  same bytes are resent and the broker assigns the offsets); each connection keeps
  --in-flight requests outstanding. A load stops sending at --seconds or --messages,
  whichever first, and waits for every answer. Per load: messages and MB (of values) per
  second, request latency p50/p99, how evenly the connections were served (answers per
  connection min/p50/max, and when each got its first answer), the broker's CPU in cores
  (all threads, and the event loop's thread apart) and the generator's, and at the end a
  check that the log end offsets of the partitions written sum to the messages acknowledged.

Writes bench/results/scale.json (--out elsewhere). ``--quick``: 20 x 50 partitions, 100
connections, 5-second loads. ``--profile``: py-spy samples the broker (the GIL holder's
stacks) during the one-connection baseline and the wide load, no restart and no 8-connection
baseline, and the top functions go to the result (bench/results/scale-profile.json unless
--out); figures of a profiled run are not benchmark figures.

    .venv/bin/python bench/bench_scale.py [--quick] [--profile]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import selectors
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_e2e import commit_of, machine, write_result  # noqa: E402
from bench.bench_isolation import Wire, batch, cpu_s, start_broker  # noqa: E402
from bench.suite.profile import py_spy, top_functions  # noqa: E402
from bench.suite.workloads import make_values  # noqa: E402
from protocol import ApiKey, ClientConnection  # noqa: E402
from protocol.records import Codec  # noqa: E402
from protocol.schemas import decode_response_body  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "bench" / "results" / "scale.json"
WIDE_PREFIX = "wide"
_INT32 = struct.Struct(">i")


def wide_topic(i: int) -> str:
    return f"{WIDE_PREFIX}-{i:03d}"


# --- the load generator (child process) ------------------------------------------------------


@dataclass
class Producer:
    """One connection: its pre-encoded request, what is to be sent and what awaits an answer."""

    sock: socket.socket
    frame: bytes
    index: int
    out: list[memoryview] = field(default_factory=list)
    sent_at: list[float] = field(default_factory=list)
    answered: int = 0
    first_answer: float | None = None
    inbox: bytearray = field(default_factory=bytearray)
    writing: bool = False


def produce_frame(conn_id: int, topic: str, partitions: list[int], batches: list[bytes]) -> bytes:
    """A connection's one request, encoded once: encoding per send would cost the generator
    more CPU than the broker spends on the request."""
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 30_000,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [
                    {"index": p, "records": batches[i % len(batches)]}
                    for i, p in enumerate(partitions)
                ],
            }
        ],
    }
    # The same frame, correlation id and all, is sent again and again: answers come in order.
    return ClientConnection(f"bench-scale-{conn_id}").request(ApiKey.PRODUCE, 9, body)[1]


def run_load(args: argparse.Namespace) -> dict[str, Any]:
    """Connect, say ``ready``, wait for ``go`` on stdin, load, print the result as JSON."""
    per_conn = args.partitions_per_connection
    values = make_values(args.records_per_batch * per_conn, args.record_bytes, seed=11)
    n = args.records_per_batch
    # A batch's bytes do not name its partition: one per slot of a request is enough.
    batches = [batch(Codec.NONE, values[i * n : (i + 1) * n]) for i in range(per_conn)]
    targets: list[tuple[str, list[int]]] = []
    for c in range(args.connections):
        if args.topic:  # baseline: every connection writes partition 0 of one topic
            targets.append((args.topic, [0]))
        else:
            first = c * per_conn
            topic = wide_topic(first // args.partitions)
            targets.append((topic, [first % args.partitions + k for k in range(per_conn)]))
    producers = []
    started = time.monotonic()
    for c, (topic, parts) in enumerate(targets):
        sock = socket.create_connection(("127.0.0.1", args.port), timeout=60)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        producers.append(Producer(sock, produce_frame(c, topic, parts, batches), c))
    connect_s = time.monotonic() - started
    msgs_per_request = n * len(targets[0][1])
    request_bytes = len(producers[0].frame)

    sel = selectors.DefaultSelector()
    for p in producers:
        sel.register(p.sock, selectors.EVENT_READ, p)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return {}
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    deadline = t0 + args.seconds
    requested = acked = 0
    errors: dict[str, int] = {}
    latencies: list[float] = []
    outstanding = 0
    sending = True

    def flush(p: Producer) -> None:
        while p.out:
            try:
                sent = p.sock.send(p.out[0])
            except BlockingIOError:
                sent = 0
            if sent < len(p.out[0]):
                p.out[0] = p.out[0][sent:]
                if not p.writing:
                    sel.modify(p.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, p)
                    p.writing = True
                return
            p.out.pop(0)
        if p.writing:
            sel.modify(p.sock, selectors.EVENT_READ, p)
            p.writing = False

    def send(p: Producer) -> None:
        nonlocal requested, outstanding, sending
        if not sending:
            return
        if requested >= args.messages or time.perf_counter() >= deadline:
            sending = False
            return
        p.out.append(memoryview(p.frame))
        p.sent_at.append(time.perf_counter())
        requested += msgs_per_request
        outstanding += 1

    for p in producers:
        for _ in range(args.in_flight):
            send(p)
        flush(p)
    last_ack = t0
    drain_deadline = deadline + 120
    while outstanding and time.perf_counter() < drain_deadline:
        for key, mask in sel.select(timeout=1.0):
            p = key.data
            if mask & selectors.EVENT_WRITE:
                flush(p)
            if not mask & selectors.EVENT_READ:
                continue
            data = p.sock.recv(1 << 18)
            if not data:
                raise RuntimeError(f"the broker closed producer connection {p.index}")
            p.inbox += data
            while len(p.inbox) >= 4:
                (size,) = _INT32.unpack_from(p.inbox, 0)
                if len(p.inbox) < 4 + size:
                    break
                now = time.perf_counter()
                view = memoryview(p.inbox)
                # header v1 of a flexible answer: correlation id and an empty tagged-field byte
                body = decode_response_body(ApiKey.PRODUCE, 9, view, 9, 4 + size)
                view.release()
                del p.inbox[: 4 + size]
                latencies.append(now - p.sent_at.pop(0))
                p.answered += 1
                if p.first_answer is None:
                    p.first_answer = now - t0
                outstanding -= 1
                last_ack = now
                for topic in body.responses:
                    for part in topic.partition_responses:
                        if part.error_code == 0:
                            acked += n
                        else:
                            errors[str(part.error_code)] = errors.get(str(part.error_code), 0) + 1
                send(p)
            flush(p)
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    for p in producers:
        p.sock.close()
    elapsed = last_ack - t0
    latencies.sort()
    answered = sorted(p.answered for p in producers)
    firsts = sorted(p.first_answer if p.first_answer is not None else elapsed for p in producers)
    return {
        "connections": len(producers),
        "connect_s": round(connect_s, 2),
        "messages_per_request": msgs_per_request,
        "request_bytes": request_bytes,
        "messages_acked": acked,
        "unanswered_requests": outstanding,
        "error_partitions": errors,
        "seconds": round(elapsed, 2),
        "msgs_per_s": round(acked / elapsed),
        "mb_per_s": round(acked * args.record_bytes / elapsed / 1e6, 1),
        "request_p50_ms": round(1000 * statistics.median(latencies), 2),
        "request_p99_ms": round(1000 * latencies[int(len(latencies) * 0.99) - 1], 2),
        "generator_cpu_cores": round(
            (cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime) / elapsed, 2
        ),
        # How evenly the connections were served: a starved one answers little, and late.
        "answers_per_connection_min_p50_max": [
            answered[0],
            answered[len(answered) // 2],
            answered[-1],
        ],
        "first_answer_s_p50_max": [round(firsts[len(firsts) // 2], 2), round(firsts[-1], 2)],
    }


# --- the broker side --------------------------------------------------------------------------


def raise_open_files(pid: int) -> int:
    """Let the broker keep as many files open as this process may allow it: a written
    partition keeps three open (its .log, and the .index and .timeindex it appends to), so
    10,000 need 30,000 besides the connections. Kafka's operations guide asks for 100,000 or
    more, and its JVM raises the soft limit to the hard one itself; raising the hard limit
    needs CAP_SYS_RESOURCE. Returns the limit the broker got (recorded in the result)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (1 << 20, 1 << 20))
        return 1 << 20
    except PermissionError:  # not root, or a container without CAP_SYS_RESOURCE
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (hard, hard))
        return hard


def stop(proc: subprocess.Popen[bytes], timeout: float = 120) -> float | None:
    """SIGTERM and the seconds until the broker exited; None if it had not exited after
    ``timeout`` (then it is killed, and the next start recovers the logs)."""
    started = time.monotonic()
    proc.terminate()
    try:
        proc.wait(timeout)
        return round(time.monotonic() - started, 2)
    except subprocess.TimeoutExpired:
        print(f"the broker had not exited {timeout:g} s after SIGTERM: killed", file=sys.stderr)
        proc.kill()
        proc.wait()
        return None


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")


def files_under(path: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(path))


def create_topics(wire: Wire, topics: list[str], partitions: int) -> list[float]:
    """One CreateTopics request a topic, in turn; the seconds each took."""
    took = []
    for name in topics:
        body = {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1}],
            "timeout_ms": 60_000,
        }
        t = time.perf_counter()
        answer = wire.call(ApiKey.CREATE_TOPICS, 7, body).topics[0]
        took.append(time.perf_counter() - t)
        if answer.error_code != 0:
            raise RuntimeError(
                f"CreateTopics {name} answered error {answer.error_code}: {answer.error_message}"
            )
    return took


def metadata_frame() -> bytes:
    body = {"topics": None, "allow_auto_topic_creation": False}
    return ClientConnection("bench-scale-metadata").request(ApiKey.METADATA, 12, body)[1]


def metadata_raw(sock: socket.socket, frame: bytes) -> bytes:
    """Send a Metadata request and read its whole answer, undecoded."""
    sock.sendall(frame)
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            raise RuntimeError("the broker closed the connection answering Metadata")
        head += chunk
    (size,) = _INT32.unpack(head)
    body = bytearray()
    while len(body) < size:
        chunk = sock.recv(min(1 << 20, size - len(body)))
        if not chunk:
            raise RuntimeError("the broker closed the connection answering Metadata")
        body += chunk
    return head + bytes(body)


def led_partitions(raw: bytes, prefix: str) -> int:
    """Partitions with a leader in a Metadata v12 answer, of topics named ``prefix``*."""
    body = decode_response_body(ApiKey.METADATA, 12, raw, 9, len(raw))
    return sum(
        1
        for t in body.topics
        if t.error_code == 0 and t.name.startswith(prefix)
        for p in t.partitions
        if p.error_code == 0 and p.leader_id >= 0
    )


def metadata_latency(port: int, count: int, expect: int) -> dict[str, Any]:
    frame = metadata_frame()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        took = []
        for _ in range(count):
            t = time.perf_counter()
            raw = metadata_raw(sock, frame)
            took.append(time.perf_counter() - t)
    listed = led_partitions(raw, WIDE_PREFIX)
    if listed != expect:
        raise RuntimeError(f"Metadata listed {listed} led partitions, {expect} were created")
    took.sort()
    return {
        "requests": count,
        "answer_bytes": len(raw),
        "p50_ms": round(1000 * statistics.median(took), 1),
        "p99_ms": round(1000 * took[max(0, int(len(took) * 0.99) - 1)], 1),
    }


def wait_all_led(port: int, expect: int, deadline_s: float) -> float:
    """Seconds until a Metadata answer lists ``expect`` led wide partitions (polled)."""
    started = time.monotonic()
    frame = metadata_frame()
    while time.monotonic() - started < deadline_s:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
                while time.monotonic() - started < deadline_s:
                    if led_partitions(metadata_raw(sock, frame), WIDE_PREFIX) == expect:
                        return round(time.monotonic() - started, 2)
                    time.sleep(0.05)
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{expect} partitions were not all led {deadline_s} s after the start")


def log_end_sum(wire: Wire, topics: list[str], partitions: int) -> int:
    total = 0
    for name in topics:
        body = {
            "replica_id": -1,
            "topics": [
                {
                    "name": name,
                    "partitions": [
                        {"partition_index": p, "timestamp": -1} for p in range(partitions)
                    ],
                }
            ],
        }
        for part in wire.call(ApiKey.LIST_OFFSETS, 7, body).topics[0].partitions:
            if part.error_code != 0:
                raise RuntimeError(f"ListOffsets {name}/{part.partition_index}: {part.error_code}")
            total += part.offset
    return total


def load(
    port: int, pid: int, args: argparse.Namespace, profile: Path | None, **overrides: object
) -> dict[str, Any]:
    """One load from a generator child; the broker's CPU over the generator's timed section,
    sampled by py-spy into ``profile`` if given."""
    child_args = {
        "connections": args.connections,
        "partitions_per_connection": args.partitions_per_connection,
        "partitions": args.partitions,
        "records_per_batch": args.records_per_batch,
        "record_bytes": args.record_bytes,
        "in_flight": args.in_flight,
        "seconds": args.seconds,
        "messages": args.messages,
        **overrides,
    }
    cmd = [sys.executable, __file__, "--role", "load", "--port", str(port)]
    for k, v in child_args.items():
        cmd += [f"--{k.replace('_', '-')}", str(v)]
    gen = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert gen.stdin is not None and gen.stdout is not None
    if gen.stdout.readline().strip() != "ready":
        gen.kill()
        raise RuntimeError(f"the load generator did not connect ({child_args})")
    spy = profiled(pid, profile) if profile else None
    before, started = cpu_s(pid), time.monotonic()
    gen.stdin.write("go\n")
    gen.stdin.flush()
    out = json.loads(gen.stdout.read())
    elapsed = time.monotonic() - started
    after = cpu_s(pid)
    if gen.wait() != 0:
        raise RuntimeError(f"the load generator failed ({child_args})")
    cores, loop_cores = ((a - b) / elapsed for a, b in zip(after, before))
    row = {
        **out,
        "broker_cpu_cores": round(cores, 2),
        "loop_thread_cores": round(loop_cores, 2),
        "other_threads_cores": round(max(0.0, cores - loop_cores), 2),
        "broker_cpu_us_per_message": round(
            (after[0] - before[0]) / max(1, out["messages_acked"]) * 1e6, 2
        ),
    }
    if spy and profile:
        spy.send_signal(signal.SIGINT)
        err = spy.communicate(timeout=60)[1]
        if profile.exists():
            row["profile"] = top_functions(profile.read_text(), 20)
        else:
            row["profile"] = {"error": f"py-spy wrote no profile: {err.decode()[-400:]}"}
    print(f"load {overrides or 'wide'}: {row}", flush=True)
    return row


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    total = args.topics * args.partitions
    per_conn = args.partitions_per_connection
    broker = start_broker(Path(args.repo), work, None)
    proc, port = broker.proc, broker.port
    result: dict[str, Any] = {}
    try:
        result["broker_open_files_limit"] = raise_open_files(proc.pid)
        wire = Wire(port, "bench-scale-admin")
        rss_empty = rss_mb(proc.pid)
        topics = [wide_topic(i) for i in range(args.topics)]
        took = create_topics(wire, topics, args.partitions)
        settle = wait_all_led(port, total, 120)
        rss_created = rss_mb(proc.pid)
        result["create"] = {
            "topics": args.topics,
            "partitions_each": args.partitions,
            "seconds": round(sum(took), 2),
            "per_topic_p50_ms": round(1000 * statistics.median(took), 1),
            "per_topic_max_ms": round(1000 * max(took), 1),
            "all_led_after_s": round(settle, 2),
            "files": files_under(work / "data"),
            "rss_mb_empty": rss_empty,
            "rss_mb_created": rss_created,
            "rss_kb_per_partition": round((rss_created - rss_empty) * 1024 / total, 1),
        }
        print(f"create: {result['create']}", flush=True)
        result["metadata_all_topics"] = metadata_latency(port, args.metadata_requests, total)
        print(f"metadata: {result['metadata_all_topics']}", flush=True)

        if not args.profile:
            # The restart, before any data: what the partitions themselves cost to open.
            stopped = stop(proc)
            t = time.monotonic()
            broker = start_broker(Path(args.repo), work, None)
            proc, port = broker.proc, broker.port
            raise_open_files(proc.pid)
            ready = time.monotonic() - t + wait_all_led(port, total, 300)
            result["restart"] = {
                "stop_s": stopped,
                "start_until_all_led_s": round(ready, 2),
                "rss_mb_after": rss_mb(proc.pid),
            }
            print(f"restart: {result['restart']}", flush=True)
            wire = Wire(port, "bench-scale-admin")

        loads: dict[str, dict[str, Any]] = {}
        baselines = (1,) if args.profile else (1, args.baseline_connections)
        for conns in baselines:
            topic = f"one-partition-{conns}"
            create_topics(wire, [topic], 1)
            spy_out = work / f"{topic}.txt" if args.profile else None
            row = load(port, proc.pid, args, spy_out, connections=conns, topic=topic)
            row["log_end_offsets_sum"] = log_end_sum(wire, [topic], 1)
            loads[f"one_partition_{conns}_connections"] = row
        if not args.profile:
            # Requests as large as the wide load's, in one batch: what a partition costs apart
            # from what a request costs.
            topic, records = "one-partition-big-batches", args.records_per_batch * per_conn
            create_topics(wire, [topic], 1)
            row = load(
                port,
                proc.pid,
                args,
                None,
                connections=1,
                topic=topic,
                records_per_batch=records,
                partitions_per_connection=1,
            )
            row["log_end_offsets_sum"] = log_end_sum(wire, [topic], 1)
            loads[f"one_partition_1_connection_{records}_record_batches"] = row
        row = load(port, proc.pid, args, work / "wide.txt" if args.profile else None)
        row["log_end_offsets_sum"] = log_end_sum(wire, topics, args.partitions)
        loads["wide"] = row
        result["loads"] = loads
        # Acknowledged messages must all be there; a request left unanswered (the generator
        # gave up on it) may have been written in part, which leaves the sum above.
        result["nothing_lost"] = all(
            r["log_end_offsets_sum"] >= r["messages_acked"] for r in loads.values()
        )
        # The measure: against the best one-partition load of the same batches.
        same = [r["msgs_per_s"] for k, r in loads.items() if k.endswith("connections")]
        result["wide_over_one_partition"] = round(loads["wide"]["msgs_per_s"] / max(same), 3)
        result["rss_mb_after_loads"] = rss_mb(proc.pid)
        result["open_files_after_loads"] = len(os.listdir(f"/proc/{proc.pid}/fd"))
    finally:
        result["final_stop_s"] = stop(proc)
    return result


def profiled(pid: int, out: Path, rate: int = 250) -> subprocess.Popen[bytes]:
    """py-spy sampling the broker (the GIL holder's stacks, without pausing it) into ``out``."""
    cmd = [py_spy(), "record", "--pid", str(pid), "--format", "raw", "--output", str(out)]
    cmd += ["--rate", str(rate), "--nonblocking", "--gil"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--partitions-per-connection", type=int, default=10)
    parser.add_argument("--baseline-connections", type=int, default=8)
    parser.add_argument("--records-per-batch", type=int, default=100)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--in-flight", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=25)
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--metadata-requests", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="20 x 50 partitions, 5 s loads")
    parser.add_argument(
        "--profile", action="store_true", help="py-spy on the broker under load (no restart)"
    )
    parser.add_argument("--repo", default=str(REPO))
    parser.add_argument("--out")
    parser.add_argument("--role", choices=("load",))
    parser.add_argument("--port", type=int)
    parser.add_argument("--topic", help="(load role) one 1-partition topic for every connection")
    args = parser.parse_args()
    if args.role == "load":
        print(json.dumps(run_load(args)), flush=True)
        return 0
    if args.quick:
        args.topics, args.partitions, args.connections, args.seconds = 20, 50, 100, 5
        args.metadata_requests = 10
    if args.topics * args.partitions != args.connections * args.partitions_per_connection:
        parser.error("--connections x --partitions-per-connection must cover every partition")
    if args.partitions % args.partitions_per_connection:
        parser.error("--partitions-per-connection must divide --partitions (one topic a request)")
    commit = commit_of(args.repo)
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    out = (
        Path(args.out)
        if args.out
        else RESULT.with_name("scale-profile.json" if args.profile else "scale.json")
    )
    work = Path(tempfile.mkdtemp(prefix="chronolog-bench-scale-"))
    try:
        result = measure(args, work)
    except BaseException:
        print(f"kept the broker's log directory and output for a look: {work}", file=sys.stderr)
        raise
    failed = [k for k, r in result["loads"].items() if r["error_partitions"]]
    if failed:
        print(
            f"{', '.join(failed)}: partitions answered errors; the broker's output is kept "
            f"in {work / 'broker.out'}",
            file=sys.stderr,
        )
    else:
        shutil.rmtree(work, ignore_errors=True)
    params = {
        k: getattr(args, k)
        for k in (
            "topics", "partitions", "connections", "partitions_per_connection",
            "baseline_connections", "records_per_batch", "record_bytes", "in_flight",
            "seconds", "messages", "metadata_requests", "quick", "profile",
        )
    }  # fmt: skip
    write_result(
        out,
        {
            "benchmark": "scale",
            "commit": commit,
            "params": params,
            "request": "Produce v9 acks=1, one uncompressed record batch a partition, "
            "producer id -1; values from bench.suite.workloads.make_values (hex text)",
            "load_average_at_start": load_at_start,
            **result,
            **machine(),
        },
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
