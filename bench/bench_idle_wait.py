"""What a lone Produce request costs a server after an idle wait: chronolog, Tansu, and two
Python floors that do the least any Python broker must.

kafka-python, as `make bench` runs it, sends a lz4 batch of about 1,200 records every 20-25 ms,
and the CPU a request costs on this machine grows with the idle time before it (bench/NOTES.md).
This bench sends the same kind of request (Produce v9, acks=1, one lz4 record batch of
--records 100-byte records built by kafka-python's record code) to each server in turn, one at a
time, each sent --gap seconds after the last answer, and reads the server's CPU per request.

The servers:
- ``chronolog``: the broker (`python -m broker serve`), storing to files;
- ``tansu``: Tansu with its in-memory storage, as `make bench` runs it;
- ``floor-trio``: a trio server on chronolog's own stream class (broker/streams.py) that reads
  each request frame, writes it to a file (pwrite) and sends a fixed 64-byte answer: no parsing,
  no validation, no index;
- ``floor-blocking``: the same on a blocking socket, without trio.
The floors bound from below what any broker in Python on trio can spend on a request; their
answers are not Produce responses (the client only reads the frame), while the brokers' answers
are decoded and must carry error code 0.

CPU is summed over the server's threads from /proc/PID/task/*/schedstat (nanoseconds), the
same for the four servers. Each gap runs --rounds rounds; a round sends 20 unmeasured requests
to each server, then --requests measured ones, servers in turn (their order rotates each round).
Bounded: gaps x rounds x 4 servers x (20 + --requests) requests, each pause at most the gap (with
the defaults about 90 s). Writes bench/results/idle_wait.json.

    .venv/bin/python bench/bench_idle_wait.py [--gaps 0,0.005,0.02] [--rounds 5] [--requests 150]

``--floor trio|blocking --port P --file F`` runs one floor server (what the bench starts).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_e2e import machine, write_result  # noqa: E402
from bench.suite.brokers import BrokerProcess, free_port  # noqa: E402
from bench.suite.workloads import admin_create_topic, make_values  # noqa: E402
from protocol import ApiKey, ClientConnection  # noqa: E402

RESULT = Path(__file__).resolve().parent / "results" / "idle_wait.json"
TOPIC = "idle-wait"
WARMUP_REQUESTS = 20
FLOOR_ANSWER_BYTES = 64
_INT32 = struct.Struct(">i")


# --- the floor servers -------------------------------------------------------------------------


def _frames(buf: bytearray):
    """Pop every complete size-prefixed frame from ``buf``."""
    while len(buf) >= 4:
        (size,) = _INT32.unpack_from(buf)
        if len(buf) < 4 + size:
            return
        frame = bytes(buf[4 : 4 + size])
        del buf[: 4 + size]
        yield frame


def _answer(frame: bytes) -> bytes:
    """A fixed answer carrying the request's correlation id (bytes 4-8 of its header)."""
    return _INT32.pack(4 + FLOOR_ANSWER_BYTES) + frame[4:8] + bytes(FLOOR_ANSWER_BYTES)


def serve_floor_trio(port: int, fd: int) -> None:
    import trio

    from broker.streams import PlainSocketStream

    position = 0

    async def serve(stream: trio.SocketStream) -> None:
        nonlocal position
        conn = PlainSocketStream.take(stream)
        buf = bytearray()
        while data := await conn.receive_some(262144):
            buf += data
            for frame in _frames(buf):
                position += os.pwrite(fd, frame, position)
                await conn.send_all(_answer(frame))

    async def main() -> None:
        await trio.serve_tcp(serve, port, host="127.0.0.1")

    trio.run(main)


def serve_floor_blocking(port: int, fd: int) -> None:
    position = 0
    with socket.create_server(("127.0.0.1", port)) as listener:
        while True:
            conn, _ = listener.accept()
            with conn:
                buf = bytearray()
                while data := conn.recv(262144):
                    buf += data
                    for frame in _frames(buf):
                        position += os.pwrite(fd, frame, position)
                        conn.sendall(_answer(frame))


class FloorProcess:
    """A floor server child process on a free port; stop() ends it."""

    def __init__(self, kind: str, workdir: Path) -> None:
        self.name = f"floor-{kind}"
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--floor",
                kind,
                "--port",
                str(self.port),
                "--file",
                str(workdir / f"{self.name}.log"),
            ],
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"{self.name} did not start on port {self.port}") from None
                time.sleep(0.1)

    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


# --- the client ------------------------------------------------------------------------------


def process_cpu_ns(pid: int) -> int:
    """CPU nanoseconds of every live thread of ``pid`` (/proc/PID/task/*/schedstat)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:  # a thread that ended since listdir
            continue
    return total


def lz4_batch(records: int) -> bytes:
    """One lz4 record batch (magic 2) of ``records`` 100-byte bench values, by kafka-python."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=3,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    now = int(time.time() * 1000)
    for i, value in enumerate(make_values(records, 100)):
        builder.append(i, timestamp=now + i, key=None, value=value, headers=[])
    return bytes(builder.build())


class Client:
    """One connection to a server, sending Produce v9 requests one at a time."""

    def __init__(self, name: str, port: int, pid: int, batch: bytes) -> None:
        self.name, self.pid = name, pid
        self.is_broker = not name.startswith("floor")
        if self.is_broker:
            admin_create_topic(f"127.0.0.1:{port}", TOPIC, 1)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conn = ClientConnection("bench-idle-wait")
        self.body = {
            "transactional_id": None,
            "acks": 1,
            "timeout_ms": 30_000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}],
        }

    def _roundtrip(self, frame: bytes) -> None:
        self.sock.sendall(frame)
        buf = bytearray()
        while len(buf) < 4 or len(buf) < 4 + _INT32.unpack_from(buf)[0]:
            data = self.sock.recv(65536)
            if not data:
                raise RuntimeError(f"{self.name} closed the connection")
            buf += data
        if self.is_broker:
            (response,) = self.conn.receive_data(bytes(buf))
            part = response.body.responses[0].partition_responses[0]
            if part.error_code != 0:
                raise RuntimeError(f"{self.name} answered Produce with error {part.error_code}")

    def cpu_us_per_request(self, requests: int, gap: float) -> float:
        frames = [
            self.conn.request(ApiKey.PRODUCE, 9, self.body)[1]
            for _ in range(WARMUP_REQUESTS + requests)
        ]
        for frame in frames[:WARMUP_REQUESTS]:
            self._roundtrip(frame)
        before = process_cpu_ns(self.pid)
        for frame in frames[WARMUP_REQUESTS:]:
            if gap:
                time.sleep(gap)
            self._roundtrip(frame)
        return (process_cpu_ns(self.pid) - before) / requests / 1e3


def measure(args: argparse.Namespace) -> dict:
    batch = lz4_batch(args.records)
    work = Path(tempfile.mkdtemp(prefix="chronolog-bench-idle-wait-"))
    brokers = [
        BrokerProcess("chronolog", work / "chronolog"),
        BrokerProcess("tansu", work / "tansu"),
    ]
    floors: list[FloorProcess] = []
    try:
        for broker in brokers:
            broker.start()
        for kind in ("trio", "blocking"):
            floors.append(FloorProcess(kind, work))
        clients = [Client(b.name, b.port, b.pid(), batch) for b in brokers]
        clients += [Client(f.name, f.port, f.pid(), batch) for f in floors]
        results = {}
        for gap in args.gaps:
            runs: dict[str, list[float]] = {c.name: [] for c in clients}
            for r in range(args.rounds):
                for client in clients[r % len(clients) :] + clients[: r % len(clients)]:
                    runs[client.name].append(client.cpu_us_per_request(args.requests, gap))
            medians = {name: statistics.median(v) for name, v in runs.items()}
            results[f"{gap:g}"] = {
                "cpu_us_per_request": {n: round(m, 1) for n, m in medians.items()},
                "relative_to_tansu": {
                    n: round(m / medians["tansu"], 2) for n, m in medians.items()
                },
                "runs_us": {n: [round(x, 1) for x in v] for n, v in runs.items()},
            }
            print(
                f"gap {gap:g} s: " + ", ".join(f"{n} {m:.0f} us" for n, m in medians.items()),
                flush=True,
            )
        return results
    finally:
        for floor in floors:
            floor.stop()
        for broker in brokers:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--gaps", type=lambda s: [float(g) for g in s.split(",")], default=[0.0, 0.005, 0.02]
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=150)
    parser.add_argument("--records", type=int, default=1200)
    parser.add_argument("--floor", choices=("trio", "blocking"))
    parser.add_argument("--port", type=int)
    parser.add_argument("--file")
    args = parser.parse_args()
    if args.floor is not None:
        fd = os.open(args.file, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        (serve_floor_trio if args.floor == "trio" else serve_floor_blocking)(args.port, fd)
        return 0
    results = measure(args)
    write_result(
        RESULT,
        {
            "benchmark": "idle_wait",
            "request": f"Produce v9, acks=1, one lz4 record batch of {args.records:,} 100-byte records",
            "requests_per_round": args.requests,
            "rounds": args.rounds,
            "cpu": "sum over the server's threads, /proc/PID/task/*/schedstat",
            "by_gap_s": results,
            **machine(),
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
