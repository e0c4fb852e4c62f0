"""Soak: randomised faults under acks=all load against a real broker process (``make soak``).

    make soak                                      # ~4 minutes, bench/results/soak.json
    .venv/bin/python bench/soak.py --seconds 60 --seed 7 --out /tmp/soak.json

One broker process (127.0.0.1, tests/conftest.py's BrokerProcess) with small segments and a
flush per message; three raw WireClient producers (acks=-1, magic 2 batches, out-of-order
CreateTime stamps) and one confluent-kafka producer (acks=all) write to a 4-partition topic
while faults are injected at random moments (random.Random(--seed)):

  kill9           SIGKILL, then start again
  sigterm         SIGTERM (must exit 0), then start again
  disk_full       the log dir is a small tmpfs: a filler file takes its last byte, producers must
                  get KAFKA_STORAGE_ERROR for a while, then the filler is removed
  disk_full_kill9 the same, with a SIGKILL while the disk is full; started again after freeing
  disk_full_kill9_start_full / disk_full_sigterm_start_full (off with --no-start-on-full-disk)
                  SIGKILL / SIGTERM (must exit 0) while full, started again while still full
                  (recovery on a full disk; produces must be refused with KAFKA_STORAGE_ERROR
                  again), then the space is freed (tests/faults/test_full_disk_start.py)

The disk-full kinds need root and a working ``mount -t tmpfs``; without them they are skipped and
the summary says why. After every fault: the time to recover (from the start, or from freeing the
space, to the first acknowledged produce), then, with the producers paused, ``dump-log --verify``
over every segment whose files changed since the last check, and a full read of every
partition: each acknowledged message at its offset with its value, dense offsets, and nothing
read at an earlier check changed. Writes a JSON summary (faults by kind, acknowledged, lost,
recovery times, duration, commit) and exits 1 when a message was lost or a check failed.
Bounded: the fault loop ends after --seconds, every wait has a deadline.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import io
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from storage.dump import main as dump_log  # noqa: E402
from tests.conftest import BrokerProcess  # noqa: E402
from tests.integration.kafka_wire import (  # noqa: E402
    WireClient,
    create_topic,
    message_set,
    produce,
    random_batch,
    read_all,
)

TOPIC = "soak"
PARTITIONS = 4
WIRE_PRODUCERS = 3
STORAGE_ERROR = 56
FS_BYTES = 512 << 20
BROKER_CONFIG = {
    "log.segment.bytes": 128 << 10,
    "log.index.interval.bytes": 1024,
    "log.flush.interval.messages": 1,
}
RECOVER_TIMEOUT_S = 60.0
PAUSE_TIMEOUT_S = 30.0


def now_ms() -> int:
    return int(time.time() * 1000)


class Load:
    """The producers. ``acked`` maps (partition, offset) to the acknowledged value; ``pause()``
    returns once nothing is in flight (the confluent producer flushed), so checks see quiet
    files."""

    def __init__(self, broker: BrokerProcess, seed: int, use_confluent: bool) -> None:
        self.broker = broker
        self.seed = seed
        self.acked: dict[tuple[int, int], bytes] = {}
        self.acked_by: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()  # produce error codes and connection errors
        self.failures: list[str] = []  # exceptions a producer did not expect
        self.lock = threading.Lock()
        self.cond = threading.Condition()
        self.go = True
        self.active = 0
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._wire, args=(i,), daemon=True)
            for i in range(WIRE_PRODUCERS)
        ]
        if use_confluent:
            self.threads.append(threading.Thread(target=self._confluent, daemon=True))

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def close(self) -> None:
        self.stop.set()
        with self.cond:
            self.cond.notify_all()
        for t in self.threads:
            t.join(PAUSE_TIMEOUT_S)

    def resume(self) -> None:
        with self.cond:
            self.go = True
            self.cond.notify_all()

    def pause(self) -> bool:
        """False when something is still in flight after PAUSE_TIMEOUT_S."""
        with self.cond:
            self.go = False
            return self.cond.wait_for(lambda: self.active == 0, PAUSE_TIMEOUT_S)

    def _enter(self) -> bool:
        with self.cond:
            if not self.cond.wait_for(lambda: self.go or self.stop.is_set(), 0.5):
                return False
            if self.stop.is_set():
                return False
            self.active += 1
            return True

    def _leave(self) -> None:
        with self.cond:
            self.active -= 1
            self.cond.notify_all()

    def record(self, who: str, partition: int, base_offset: int, values: list[bytes]) -> None:
        with self.lock:
            for j, value in enumerate(values):
                self.acked[(partition, base_offset + j)] = value
            self.acked_by[who] += len(values)

    def _wire(self, i: int) -> None:
        rng = random.Random(self.seed * 100 + i)
        client: WireClient | None = None
        batch = 0
        try:
            while not self.stop.is_set():
                if not self._enter():
                    continue
                try:
                    if client is None:
                        client = WireClient(self.broker.host, self.broker.port, timeout=10)
                    partition = rng.randrange(PARTITIONS)
                    tag = b"w%d-b%d" % (i, batch)
                    values, stamps = random_batch(rng, tag, now_ms(), 8, (10, 300), 60_000, 0.2)
                    batch += 1
                    r = produce(
                        client,
                        TOPIC,
                        message_set(values, timestamps=stamps, magic=2),
                        partition=partition,
                        acks=-1,
                        version=9,
                    )
                    if r.error_code == 0:
                        self.record("wire", partition, r.base_offset, values)
                        self.stop.wait(rng.uniform(0, 0.02))  # paced: minutes fit the tmpfs
                    else:
                        self.errors[str(r.error_code)] += 1
                        self.stop.wait(0.05)
                except OSError:  # killed or restarting: reconnect
                    self.errors["connection"] += 1
                    if client is not None:
                        client.close()
                    client = None
                    self.stop.wait(0.05)
                finally:
                    self._leave()
        except Exception as exc:  # noqa: BLE001 - reported in the summary
            self.failures.append(f"wire producer {i}: {exc!r}")
        finally:
            if client is not None:
                client.close()

    def _confluent(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.broker.bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 20_000,
                "reconnect.backoff.max.ms": 200,
                "log_level": 0,
            }
        )
        failed: Counter[str] = Counter()

        def delivered(err, msg) -> None:
            if err is None:
                self.record("confluent_kafka", msg.partition(), msg.offset(), [msg.value()])
            else:
                failed[err.name()] += 1

        n = 0
        try:
            while not self.stop.is_set():
                if not self._enter():
                    continue
                try:
                    deadline = time.monotonic() + 0.5
                    while self.go and time.monotonic() < deadline:
                        try:
                            producer.produce(
                                TOPIC, value=b"ck-%d-" % n + b"y" * (n % 200), on_delivery=delivered
                            )
                            n += 1
                        except BufferError:
                            pass
                        producer.poll(0.005)
                    if not self.go:  # paused: everything sent is answered before checks
                        if producer.flush(PAUSE_TIMEOUT_S - 5) != 0:
                            self.failures.append("confluent-kafka could not flush in time")
                finally:
                    self._leave()
            producer.flush(10)
        except Exception as exc:  # noqa: BLE001 - reported in the summary
            self.failures.append(f"confluent-kafka producer: {exc!r}")
        for name, count in failed.items():
            self.errors[f"confluent:{name}"] += count


class Disk:
    """A FS_BYTES tmpfs for the log dir, filled and freed with a filler file (ENOSPC from the
    kernel); ``reason`` says why not when it cannot be had."""

    def __init__(self, workdir: Path) -> None:
        self.mount_point = workdir / "fs"
        self.filler = self.mount_point / "filler"
        self.mounted = False
        self.reason = ""
        if os.geteuid() != 0:
            self.reason = "skipped: mounting a tmpfs needs root"
            return
        self.mount_point.mkdir()
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={FS_BYTES}", "tmpfs", str(self.mount_point)],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            self.reason = f"skipped: mount -t tmpfs failed: {r.stderr.strip()}"
            return
        self.mounted = True
        self.reason = f"enabled: log dir on a {FS_BYTES >> 20} MiB tmpfs"

    def fill(self) -> None:
        """Take every free byte: unbuffered writes, smaller and smaller, until ENOSPC."""
        chunk = b"\0" * (1 << 20)
        with open(self.filler, "ab", buffering=0) as f:
            for size in (1 << 20, 1 << 16, 4096, 512, 1):
                for _ in range((FS_BYTES >> 20) + 256):
                    try:
                        if f.write(chunk[:size]) < size:
                            break
                    except OSError:
                        break

    def free(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.filler.unlink()

    def used_bytes(self) -> int:
        st = os.statvfs(self.mount_point)
        return (st.f_blocks - st.f_bfree) * st.f_frsize

    def close(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.mount_point)], check=False)
            self.mounted = False


class Checker:
    """The checks after a fault; ``failures`` collects what went wrong, ``lost`` every
    acknowledged (partition, offset) that was missing or different at some check."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.signatures: dict[str, tuple] = {}
        self.previous: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        self.failures: list[str] = []
        self.lost: set[tuple[int, int]] = set()
        self.checks = 0
        self.verified_segments = 0

    def verify_files(self, label: str) -> None:
        """dump-log --verify over the segments whose .log, .index or .timeindex changed."""
        files: list[str] = []
        for log in glob.glob(os.path.join(self.broker.log_dir, f"{TOPIC}-*", "*.log")):
            stem = log[: -len(".log")]
            parts = [stem + s for s in (".log", ".index", ".timeindex") if os.path.exists(stem + s)]
            signature = tuple((os.stat(f).st_size, os.stat(f).st_mtime_ns) for f in parts)
            if self.signatures.get(stem) != signature:
                self.signatures[stem] = signature
                files += parts
        if not files:
            return
        self.verified_segments += len(files)
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            status = dump_log(["--verify", *files])
        if status != 0:
            bad = [x for x in out.getvalue().splitlines() if "mismatch" in x or "torn" in x]
            self.failures.append(f"{label}: dump-log --verify exit {status}: {bad[:5]}")

    def read_partition(self, client: WireClient, partition: int) -> list[tuple[int, bytes]]:
        return [(m.offset, bytes(m.value)) for m in read_all(client, TOPIC, partition)]

    def check(self, label: str, acked: dict[tuple[int, int], bytes]) -> None:
        self.checks += 1
        self.verify_files(label)
        with WireClient(self.broker.host, self.broker.port, timeout=30) as client:
            for p in range(PARTITIONS):
                messages = self.read_partition(client, p)
                if [o for o, _ in messages] != list(range(len(messages))):
                    self.failures.append(f"{label}: partition {p}: offsets not dense from 0")
                stored = dict(messages)
                lost = [k for k, v in acked.items() if k[0] == p and stored.get(k[1]) != v]
                if lost:
                    self.lost.update(lost)
                    self.failures.append(f"{label}: partition {p}: lost {sorted(lost)[:10]}")
                values = [v for _, v in messages]
                before = self.previous[p]
                if values[: len(before)] != before:
                    self.failures.append(f"{label}: partition {p}: earlier messages changed")
                self.previous[p] = values


def first_ack(broker: BrokerProcess, load: Load, t0: float, deadline: float) -> float | None:
    """Seconds from ``t0`` until a probe produce (acks=-1) is acknowledged; None at the
    deadline."""
    client: WireClient | None = None
    n = 0
    try:
        while time.monotonic() < deadline:
            try:
                if client is None:
                    client = WireClient(broker.host, broker.port, timeout=10)
                value = b"probe-%d-%d" % (now_ms(), n)
                n += 1
                r = produce(client, TOPIC, message_set([value], magic=2), acks=-1, version=9)
                if r.error_code == 0:
                    load.record("probe", 0, r.base_offset, [value])
                    return time.monotonic() - t0
            except OSError:
                if client is not None:
                    client.close()
                client = None
            time.sleep(0.01)
        return None
    finally:
        if client is not None:
            client.close()


def wait_storage_error(broker: BrokerProcess, load: Load, deadline: float) -> int | None:
    """The error code of the first refused probe produce on a full disk (None: never refused)."""
    with WireClient(broker.host, broker.port, timeout=10) as client:
        for i in range(100_000):
            if time.monotonic() > deadline:
                return None
            value = b"full-%d-" % i + b"z" * 2000
            r = produce(client, TOPIC, message_set([value], magic=2), acks=-1, version=9)
            if r.error_code != 0:
                return r.error_code
            load.record("probe", 0, r.base_offset, [value])
    return None


def git_commit() -> str:
    r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def summary_of(times: list[float]) -> dict:
    if not times:
        return {"n": 0}
    return {
        "n": len(times),
        "max_s": round(max(times), 3),
        "median_s": round(statistics.median(times), 3),
    }


def run(args: argparse.Namespace) -> dict:
    """The campaign; an interrupted one (SIGINT, SIGTERM) leaves no broker or mount behind."""
    workdir = Path(tempfile.mkdtemp(prefix="chronolog-soak-"))
    disk = Disk(workdir) if not args.no_disk_full else None
    broker = BrokerProcess(workdir, BROKER_CONFIG)
    if disk and disk.mounted:
        broker.log_dir = str(disk.mount_point / "logs")
        broker.log_dirs = [broker.log_dir]
    try:
        result = campaign(args, workdir, disk, broker)
    finally:
        broker.kill()
        if disk:
            disk.close()
    if result["ok"]:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        result["workdir_kept"] = str(workdir)
    return result


def campaign(
    args: argparse.Namespace, workdir: Path, disk: Disk | None, broker: BrokerProcess
) -> dict:
    rng = random.Random(args.seed)
    try:
        import confluent_kafka  # noqa: F401

        use_confluent = True
    except ImportError:
        use_confluent = False
    kinds = ["kill9", "sigterm"]
    if disk and disk.mounted:
        kinds += ["disk_full", "disk_full_kill9"]
        if args.start_on_full_disk:
            kinds += ["disk_full_kill9_start_full", "disk_full_sigterm_start_full"]
    faults: Counter[str] = Counter()
    recover: dict[str, list[float]] = {k: [] for k in kinds}
    storage_errors: Counter[str] = Counter()
    checker = Checker(broker)
    started = time.monotonic()
    broker.start()
    with WireClient(broker.host, broker.port) as c:
        if create_topic(c, TOPIC, PARTITIONS) != 0:
            raise RuntimeError("cannot create the topic")
    load = Load(broker, args.seed, use_confluent)
    load.start()
    end = started + args.seconds
    try:
        for n in range(10_000):
            if time.monotonic() + 5 > end:
                break
            time.sleep(rng.uniform(0.5, 4.0))  # load between faults: the workload
            kind = rng.choice(kinds)
            label = f"fault {n} ({kind})"
            faults[kind] += 1
            if kind in ("kill9", "sigterm"):
                if kind == "kill9":
                    broker.kill()
                elif (status := broker.stop()) != 0:
                    checker.failures.append(f"{label}: SIGTERM exit status {status}")
                t0 = time.monotonic()
                broker.start()
            else:
                assert disk is not None
                disk.fill()
                code = wait_storage_error(broker, load, time.monotonic() + 30)
                storage_errors[str(code)] += 1
                if code != STORAGE_ERROR:
                    checker.failures.append(f"{label}: a full disk answered {code}, not 56")
                time.sleep(rng.uniform(0.5, 3.0))  # producers keep hitting the full disk
                if kind == "disk_full_sigterm_start_full":
                    if (status := broker.stop()) != 0:
                        checker.failures.append(f"{label}: SIGTERM exit status {status}")
                elif kind != "disk_full":
                    broker.kill()
                if kind.endswith("_start_full"):  # recovery on a full disk, answers still clear
                    broker.start()
                    code = wait_storage_error(broker, load, time.monotonic() + 30)
                    storage_errors[str(code)] += 1
                    if code != STORAGE_ERROR:
                        checker.failures.append(f"{label}: after the start answered {code}")
                disk.free()
                t0 = time.monotonic()
                if kind == "disk_full_kill9":
                    broker.start()
            took = first_ack(broker, load, t0, t0 + RECOVER_TIMEOUT_S)
            if took is None:
                checker.failures.append(f"{label}: no produce acknowledged within the deadline")
                break
            recover[kind].append(took)
            if not load.pause():
                checker.failures.append(f"{label}: the producers did not pause")
                break
            with load.lock:
                acked = dict(load.acked)
            checker.check(label, acked)
            load.resume()
            print(
                f"{time.monotonic() - started:6.1f}s {label}: recovered in {took:.3f}s, "
                f"{len(acked)} acknowledged, {len(checker.failures)} failures",
                flush=True,
            )
    except Exception as exc:  # noqa: BLE001 - a crash of the campaign is a failed check
        checker.failures.append(f"campaign stopped: {exc!r}")
    finally:
        if disk:
            disk.free()
        if not load.pause():
            checker.failures.append("the producers did not pause at the end")
        load.close()
    if broker.running():
        with load.lock:
            acked = dict(load.acked)
        try:
            checker.check("final", acked)
        except Exception as exc:  # noqa: BLE001
            checker.failures.append(f"final check: {exc!r}")
        if (status := broker.stop()) != 0:
            checker.failures.append(f"final SIGTERM: exit status {status}")
    checker.failures += load.failures
    all_times = [t for ts in recover.values() for t in ts]
    result = {
        "benchmark": "soak",
        "commit": git_commit(),
        "version": _version(),
        "seed": args.seed,
        "seconds_requested": args.seconds,
        "duration_s": round(time.monotonic() - started, 1),
        "broker_config": BROKER_CONFIG,
        "topic_partitions": PARTITIONS,
        "producers": {"wire_acks_all": WIRE_PRODUCERS, "confluent_kafka_acks_all": use_confluent},
        "disk_full_faults": disk.reason if disk else "skipped: --no-disk-full",
        "start_on_full_disk": args.start_on_full_disk,
        "faults": dict(faults),
        "faults_total": sum(faults.values()),
        "acknowledged": len(load.acked),
        "acknowledged_by": dict(load.acked_by),
        "lost": len(checker.lost),
        "lost_examples": [list(x) for x in sorted(checker.lost)[:20]],
        "recover": summary_of(all_times),
        "recover_by_kind": {k: summary_of(v) for k, v in recover.items()},
        "full_disk_answers": dict(storage_errors),
        "produce_errors_seen_by_producers": dict(load.errors),
        "checks": checker.checks,
        "files_verified": checker.verified_segments,
        "check_failures": checker.failures,
        "log_bytes_at_end": _du(broker.log_dir),
        "ok": not checker.lost and not checker.failures,
    }
    if disk and disk.mounted and not result["ok"]:  # keep the logs: off the tmpfs
        shutil.copytree(broker.log_dir, workdir / "logs-copy", dirs_exist_ok=True)
    return result


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("chronolog")
    except PackageNotFoundError:
        return "unknown"


def _du(path: str) -> int:
    total = 0
    for root, _, names in os.walk(path):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(root, name)).st_size
    return total


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=240.0, help="fault loop duration")
    parser.add_argument("--seed", type=int, default=1125)
    parser.add_argument("--no-disk-full", action="store_true", help="skip the disk-full faults")
    parser.add_argument(
        "--no-start-on-full-disk",
        dest="start_on_full_disk",
        action="store_false",
        help="never restart the broker while its disk is full",
    )
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "soak.json"))
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _interrupt)
    result = run(args)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("faults", "acknowledged", "lost", "recover", "ok")}))
    print(f"wrote {args.out}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
