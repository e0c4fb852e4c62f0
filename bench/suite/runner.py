"""Runs the plan: every scenario on every broker, rotating which goes first, several rounds.

Each run is a fresh child process (spawn) in its own process group, bounded by a timeout; a hang,
crash or failed check becomes an error string in that run's record. Between the scenario's
``start`` and ``end`` marks the parent samples the broker's CPU and RSS (brokers.py).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import statistics
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from . import scenarios
from .brokers import BROKER_NAMES, BrokerProcess, BrokerStartError
from .brokers import broker as make_broker

logger = structlog.get_logger(__name__)

BROKERS = BROKER_NAMES
MAX_START_FAILURES = 2  # a broker that cannot start twice is not retried for every scenario


@dataclass(frozen=True)
class Spec:
    """One scenario: ``key`` names it in the JSON, ``fn`` is the function in scenarios.py."""

    key: str
    fn: str
    kind: str  # "throughput", "latency" or "lookup"
    kwargs: dict = field(default_factory=dict)
    needs: str | None = None  # setup function whose result the scenario reads


def build_plan() -> list[Spec]:
    plan = []
    for client in ("confluent", "kafka-python"):
        for size, label in ((100, "100B"), (1024, "1KiB")):
            for codec in ("none", "lz4"):
                plan.append(
                    Spec(
                        f"produce/{client}/{label}/{codec}",
                        "produce",
                        "throughput",
                        {"client": client, "size": size, "codec": codec},
                    )
                )
    for client in ("confluent", "kafka-python"):
        for cache in ("cold", "warm"):
            plan.append(
                Spec(
                    f"consume/{client}/1KiB/{cache}",
                    "consume",
                    "throughput",
                    {"client": client, "cache": cache},
                    needs="consume_setup",
                )
            )
    plan.append(Spec("latency/confluent/100B/10k-per-s", "latency", "latency"))
    plan.append(
        Spec(
            "latency/confluent/100B/10k-per-s/fetch-wait-10ms",
            "latency",
            "latency",
            {"fetch_wait_ms": 10},
        )
    )
    plan.append(
        Spec("offsets_for_times/1000-segments", "offsets_for_times", "lookup", needs="oft_setup")
    )
    plan.append(Spec("partitions/100x10-producers/100B", "partitions", "throughput"))
    return plan


def _child_main(
    conn, fn_name: str, kwargs: dict, bootstrap: str, log_dir: str | None, params: dict
) -> None:
    os.setpgrp()  # the parent kills this group on timeout, with any helper processes in it

    client_cpu: dict[str, float] = {}

    def mark(label: str) -> None:
        # CPU of this process, every client thread included (librdkafka's too), in the timed section
        client_cpu[label] = time.process_time()
        conn.send(("mark", label))
        conn.recv()

    try:
        fn = getattr(scenarios, fn_name)
        result = fn(scenarios.Run(bootstrap, log_dir, params, mark), **kwargs)
        if "start" in client_cpu and "end" in client_cpu:
            result["client_cpu_s"] = client_cpu["end"] - client_cpu["start"]
        conn.send(("result", result))
    except BaseException as exc:  # noqa: BLE001 - every failure becomes the run's error string
        msg = f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, scenarios.ScenarioError):
            msg += " @ " + traceback.format_exc(limit=-2).strip().replace("\n", " | ")[-400:]
        conn.send(("error", msg))


def run_in_child(
    broker: BrokerProcess,
    fn_name: str,
    kwargs: dict,
    params: dict,
    timed: bool = True,
    on_mark=None,
) -> dict:
    """Run one scenario function against ``broker``; returns its figures or {"error": ...}.

    ``timed=False`` is for setup functions, which have no measured section. ``on_mark(label)`` is
    called at the start and end marks (the profiler attaches there), outside the timed window.
    """
    timeout = params["scenario_timeout_s"]
    ctx = multiprocessing.get_context("spawn")
    parent_conn, child_conn = ctx.Pipe()
    proc = ctx.Process(
        target=_child_main,
        args=(child_conn, fn_name, kwargs, broker.bootstrap, broker.log_dir, params),
    )
    proc.start()
    child_conn.close()
    deadline = time.monotonic() + timeout
    u0 = u1 = None
    t0 = t1 = 0.0
    rss_peak = 0
    outcome: dict | None = None
    try:
        while outcome is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                outcome = {"error": f"timed out after {timeout}s"}
                break
            if parent_conn.poll(min(0.1, remaining)):
                try:
                    kind, payload = parent_conn.recv()
                except EOFError:
                    outcome = {"error": f"scenario process died (exit code {proc.exitcode})"}
                    break
                if kind == "mark":
                    if on_mark is not None and payload == "start":
                        on_mark(payload)
                    if payload == "start":
                        u0, t0 = broker.usage(), time.perf_counter()
                        rss_peak = u0.rss_bytes
                    else:
                        t1, u1 = time.perf_counter(), broker.usage()
                        rss_peak = max(rss_peak, u1.rss_bytes)
                        if on_mark is not None:
                            on_mark(payload)
                    parent_conn.send("ok")
                elif kind == "result":
                    outcome = payload
                else:
                    outcome = {"error": payload}
            elif not proc.is_alive():
                outcome = {
                    "error": f"scenario process exited with code {proc.exitcode} without a result"
                }
            if u0 is not None and u1 is None:
                rss_peak = max(rss_peak, broker.usage().rss_bytes)
            if not broker.alive():
                outcome = {
                    "error": f"{broker.name} died during the scenario (exit {broker.proc.returncode}); "
                    f"output tail: {broker.output_tail()}"
                }
    finally:
        if proc.is_alive():
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.join(10)
        parent_conn.close()
    if "error" in outcome or not timed:
        return outcome
    if u0 is None or u1 is None:
        outcome.setdefault("error", "scenario returned without marking its measured section")
        return outcome
    elapsed = t1 - t0
    n = outcome.get("messages", 0)
    cpu = u1.cpu_s - u0.cpu_s
    outcome.update(
        {
            "elapsed_s": elapsed,
            "broker_cpu_s": cpu,
            "broker_cpu_source": broker.cpu_source,
            "broker_rss_peak_mb": rss_peak / 1e6,
        }
    )
    if cpu < broker.cpu_resolution_s * 5:
        outcome["broker_cpu_low_resolution"] = True
    if "client_cpu_s" in outcome and elapsed > 0:
        # Cores the client process kept busy: near 1 or above, its own thread was the limit.
        outcome["client_cores"] = outcome["client_cpu_s"] / elapsed
    if n:
        outcome["broker_cpu_s_per_million_msgs"] = cpu / n * 1e6
        if "client_cpu_s" in outcome:
            outcome["client_cpu_s_per_million_msgs"] = outcome["client_cpu_s"] / n * 1e6
        outcome["msgs_per_s"] = n / elapsed
        if outcome.get("value_bytes"):
            outcome["MB_per_s"] = n * outcome["value_bytes"] / elapsed / 1e6
    return outcome


class Suite:
    """Owns the broker processes and the results of every run."""

    def __init__(self, params: dict, workdir: Path, plan: list[Spec], brokers=BROKERS) -> None:
        self.params = params
        self.plan = plan
        self.brokers = {name: make_broker(name, workdir / name) for name in brokers}
        self.setups: dict[str, dict[str, dict]] = {name: {} for name in brokers}
        self.events: list[str] = []
        self.runs: dict[str, dict[str, list[dict]]] = {
            s.key: {b: [] for b in brokers} for s in plan
        }
        self.start_errors: dict[str, list[str]] = {name: [] for name in brokers}
        self.deadline = time.monotonic() + params["suite_budget_s"]

    def _ensure(self, name: str) -> str | None:
        """Start (or restart) a broker and run the setups it needs; returns an error or None."""
        b = self.brokers[name]
        if b.alive():
            return None
        if len(self.start_errors[name]) >= MAX_START_FAILURES:
            return f"gave up after {MAX_START_FAILURES} failed starts; last: {self.start_errors[name][-1]}"
        if b.starts:
            self.events.append(
                f"{name} was not running (exit {b.proc.returncode}); restarting it. "
                f"Output tail: {b.output_tail()}"
            )
        try:
            b.start()
        except BrokerStartError as exc:
            self.start_errors[name].append(str(exc))
            return str(exc)
        self.setups[name] = {}
        for setup in sorted({s.needs for s in self.plan if s.needs}):
            t = time.monotonic()
            res = run_in_child(
                b,
                setup,
                {},
                dict(self.params, round=0, tag=f"setup-{b.starts}", broker=name),
                timed=False,
            )
            if "error" in res:
                logger.warning("setup_failed", broker=name, setup=setup, error=res["error"])
            else:
                logger.info(
                    "setup_done",
                    broker=name,
                    setup=setup,
                    seconds=round(time.monotonic() - t, 1),
                    **{k: v for k, v in res.items() if k != "digest"},
                )
            self.setups[name][setup] = res
        return None

    def run(self) -> None:
        rounds = self.params["rounds"]
        names = list(self.brokers)
        try:
            for r in range(rounds):
                for spec in self.plan:
                    # Each broker goes first in turn (with two, they alternate).
                    order = names[r % len(names) :] + names[: r % len(names)]
                    for name in order:
                        self.runs[spec.key][name].append(self._one(spec, name, r))
        finally:
            for b in self.brokers.values():
                b.stop(purge=True)

    def _one(self, spec: Spec, name: str, r: int) -> dict:
        if time.monotonic() > self.deadline:
            return {
                "error": f"skipped: the suite's time budget ({self.params['suite_budget_s']} s) is spent"
            }
        err = self._ensure(name)
        if err:
            return {"error": f"broker not available: {err}"}
        params = dict(self.params, round=r, tag=f"r{r}-{self.brokers[name].starts}", broker=name)
        if spec.needs:
            setup = self.setups[name].get(spec.needs, {"error": "setup did not run"})
            if "error" in setup:
                return {"error": f"setup {spec.needs} failed: {setup['error']}"}
            params["setup"] = setup
        started = time.monotonic()
        res = run_in_child(self.brokers[name], spec.fn, spec.kwargs, params)
        summary = {
            k: (round(v, 3) if isinstance(v, float) else v)
            for k, v in res.items()
            if k in ("msgs_per_s", "MB_per_s", "p50_ms", "p99_ms", "error", "wrong_answers")
        }
        logger.info(
            "run",
            scenario=spec.key,
            broker=name,
            round=r,
            seconds=round(time.monotonic() - started, 1),
            **summary,
        )
        return res


def median_of(runs: list[dict]) -> dict:
    """Median of every numeric figure over the runs that succeeded (nested dicts flattened a.b)."""
    ok = [r for r in runs if "error" not in r]
    flat: dict[str, list[float]] = {}

    def walk(prefix: str, d: dict) -> None:
        for k, v in d.items():
            if isinstance(v, bool):
                continue
            if isinstance(v, (int, float)):
                flat.setdefault(prefix + k, []).append(float(v))
            elif isinstance(v, dict):
                walk(prefix + k + ".", v)

    for r in ok:
        walk("", r)
    return {k: statistics.median(v) for k, v in flat.items()}
