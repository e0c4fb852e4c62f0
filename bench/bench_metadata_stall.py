"""Does an answer listing every partition stall other clients? (issue #33)

One broker with --topics x --partitions partitions (100 x 100 by default). A probe connection
sends ApiVersions v0 every 2 ms and times each round trip, first alone for --quiet-s seconds,
then while another connection asks Metadata v12 for all topics --requests times back to back,
then DescribeLogDirs v4 for all topics as often, then while /metrics is scraped --scrapes
times, then while the console's topics page is loaded as often, then beside a group's
OffsetCommit of every partition (--scrapes times), OffsetFetch of them all (--requests times),
/metrics again, now with the group's lag on every partition, the console's groups page and
the group's page (--scrapes times each), and a Fetch (v12, nothing to wait for) naming every
partition (--requests times). Per phase: the probe's
p50/p99/max and, beside, the neighbour's round trips. What the
probe waits beyond its quiet figures is time the event loop spent elsewhere: serving the
neighbour and, before broker/collector.py, full garbage collections of the whole heap (68-94
ms each at 10,000 partitions). About two minutes with the defaults.
Writes bench/results/metadata_stall.json (each --label's run is kept).

    .venv/bin/python bench/bench_metadata_stall.py [--repo DIR] [--label NAME]

``--repo DIR`` runs the broker from another tree (a worktree of an older commit, its C
extension built in place), with this checkout's venv.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_e2e import commit_of, machine, write_result  # noqa: E402
from bench.bench_isolation import Wire, start_broker  # noqa: E402
from bench.bench_scale import (  # noqa: E402
    create_topics,
    metadata_frame,
    metadata_raw,
    wait_all_led,
    wide_topic,
)
from protocol import ApiKey, ClientConnection  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "bench" / "results" / "metadata_stall.json"
PROBE_PAUSE_S = 0.002
GROUP = "bench-metadata-stall"


def probe(port: int, stop: threading.Event, took: list[float]) -> None:
    """ApiVersions v0 round trips until ``stop``, PROBE_PAUSE_S apart."""
    frame = ClientConnection("bench-metadata-stall-probe").request(ApiKey.API_VERSIONS, 0, {})[1]
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while not stop.is_set():
            t = time.perf_counter()
            sock.sendall(frame)
            got = b""
            while len(got) < 4 or len(got) < 4 + int.from_bytes(got[:4], "big"):
                chunk = sock.recv(65536)
                if not chunk:
                    raise RuntimeError("the broker closed the probe's connection")
                got += chunk
            took.append(time.perf_counter() - t)
            time.sleep(PROBE_PAUSE_S)


def summary(took: list[float]) -> dict:
    ordered = sorted(took)
    return {
        "count": len(ordered),
        "p50_ms": round(1000 * statistics.median(ordered), 2),
        "p99_ms": round(1000 * ordered[max(0, int(len(ordered) * 0.99) - 1)], 2),
        "max_ms": round(1000 * ordered[-1], 2),
    }


def log_dirs_frame() -> bytes:
    body = {"topics": None}
    return ClientConnection("bench-log-dirs").request(ApiKey.DESCRIBE_LOG_DIRS, 4, body)[1]


def offset_commit_frame(topics: list[str], partitions: int) -> bytes:
    """OffsetCommit v8 of offset 0 for every partition, by a group with no members (as
    kafka-consumer-groups --reset-offsets commits)."""
    body = {
        "group_id": GROUP,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": [
            {
                "name": t,
                "partitions": [
                    {"partition_index": p, "committed_offset": 0} for p in range(partitions)
                ],
            }
            for t in topics
        ],
    }
    return ClientConnection("bench-offset-commit").request(ApiKey.OFFSET_COMMIT, 8, body)[1]


def offset_fetch_frame() -> bytes:
    """OffsetFetch v8 of every partition the group has committed."""
    body = {"groups": [{"group_id": GROUP, "topics": None}]}
    return ClientConnection("bench-offset-fetch").request(ApiKey.OFFSET_FETCH, 8, body)[1]


def fetch_frame(topics: list[str], partitions: int) -> bytes:
    """Fetch v12 of every partition from offset 0, without waiting."""
    body = {
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 50 << 20,
        "topics": [
            {
                "topic": t,
                "partitions": [
                    {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                    for p in range(partitions)
                ],
            }
            for t in topics
        ],
    }
    return ClientConnection("bench-fetch-all").request(ApiKey.FETCH, 12, body)[1]


def scrape(url: str) -> None:
    with urllib.request.urlopen(url, timeout=60) as answer:
        answer.read()


def phase(
    port: int,
    requests: int,
    quiet_s: float,
    frame: bytes | None = None,
    name: str = "",
    url: str | None = None,
) -> dict:
    """The probe's round trips alone for ``quiet_s``, or beside ``requests`` of ``frame``
    sent back to back on another connection, or beside ``requests`` GETs of ``url`` (their
    round trips under ``name``)."""
    stop, took = threading.Event(), []
    prober = threading.Thread(target=probe, args=(port, stop, took))
    prober.start()
    neighbour: list[float] = []
    try:
        if frame is not None:
            with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
                for _ in range(requests):
                    t = time.perf_counter()
                    metadata_raw(sock, frame)  # reads any framed answer whole
                    neighbour.append(time.perf_counter() - t)
        elif url is not None:
            for _ in range(requests):
                t = time.perf_counter()
                scrape(url)
                neighbour.append(time.perf_counter() - t)
        else:
            time.sleep(quiet_s)
    finally:
        stop.set()
        prober.join()
    result = {"probe": summary(took)}
    if neighbour:
        result[name] = summary(neighbour)
    return result


def measure(args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix="chronolog-bench-metadata-stall-"))
    broker = start_broker(Path(args.repo), work, None)
    proc, port, metrics_port = broker.proc, broker.port, broker.metrics_port
    try:
        topics = [wide_topic(i) for i in range(args.topics)]
        create_topics(Wire(port, "bench-metadata-stall-admin"), topics, args.partitions)
        wait_all_led(port, args.topics * args.partitions, 120)

        def gets(name: str, path: str) -> dict:
            """The probe beside --scrapes GETs of the HTTP listener's ``path``."""
            url = f"http://127.0.0.1:{metrics_port}{path}"
            return phase(port, args.scrapes, 0, name=name, url=url)

        return {
            "partitions": args.topics * args.partitions,
            "quiet": phase(port, 0, args.quiet_s),
            "beside_metadata": phase(
                port, args.requests, 0, metadata_frame(), "metadata_all_topics"
            ),
            "beside_describe_log_dirs": phase(
                port, args.requests, 0, log_dirs_frame(), "describe_log_dirs_all_topics"
            ),
            "beside_metrics_scrapes": gets("metrics_scrape", "/metrics"),
            "beside_console_topics_page": gets("topics_page", "/"),
            "beside_offset_commit": phase(
                port,
                args.scrapes,
                0,
                offset_commit_frame(topics, args.partitions),
                "offset_commit_all_partitions",
            ),
            "beside_offset_fetch": phase(
                port, args.requests, 0, offset_fetch_frame(), "offset_fetch_all_partitions"
            ),
            "beside_metrics_scrapes_with_group": gets("metrics_scrape", "/metrics"),
            "beside_console_groups_page": gets("groups_page", "/groups"),
            "beside_console_group_page": gets("group_page", f"/groups/{GROUP}"),
            "beside_fetch": phase(
                port,
                args.requests,
                0,
                fetch_frame(topics, args.partitions),
                "fetch_all_partitions",
            ),
        }
    finally:
        proc.terminate()
        proc.wait(120)
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--scrapes", type=int, default=10)
    parser.add_argument("--quiet-s", type=float, default=5)
    parser.add_argument("--repo", default=str(REPO))
    parser.add_argument("--label", default="after")
    parser.add_argument("--out", default=str(RESULT))
    args = parser.parse_args()
    commit = commit_of(args.repo)
    result = measure(args)
    print(json.dumps(result), flush=True)
    out = Path(args.out)
    runs = json.loads(out.read_text()).get("runs", {}) if out.exists() else {}
    runs[args.label] = {"commit": commit, **result, **machine()}
    write_result(
        out,
        {
            "benchmark": "metadata_stall",
            "probe": "ApiVersions v0 every 2 ms, round trip",
            "neighbours": "Metadata v12, then DescribeLogDirs v4, for all topics, then GET "
            "/metrics, then GET / (the console's topics page), then OffsetCommit v8 and "
            "OffsetFetch v8 of every partition, then GET /metrics, /groups and /groups/<group> "
            "with the group committed on every partition, then Fetch v12 of every partition, "
            "back to back",
            "runs": runs,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
