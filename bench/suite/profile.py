"""Sampling profiles of the chronolog broker under the suite's own loads (py-spy).

``profile_scenarios`` starts chronolog, attaches ``py-spy record --format raw`` (collapsed stacks,
non-blocking so the broker is not paused) for the duration of one scenario run, and reduces the
samples to the functions with the most self time and the most inclusive time, in percent of all
samples. ``--gil`` keeps only samples of the thread holding the GIL: trio's worker threads
parked on their queues and the event loop in epoll_wait would otherwise count as busy. py-spy needs ptrace rights over the broker (root or the same user without Yama limits);
without them the profile is an error string like any failed scenario.
"""

from __future__ import annotations

import collections
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from .brokers import BrokerProcess
from .runner import Spec, run_in_child


def py_spy() -> str:
    exe = Path(sys.executable).with_name("py-spy")
    found = str(exe) if exe.exists() else shutil.which("py-spy")
    if not found:
        raise FileNotFoundError("py-spy is not installed: `make bench` installs the bench extra")
    return found


# Inclusive shares are listed separately for chronolog's own code: generic frames (trio's run
# loop, the command's main) are on every stack and say nothing.
PROJECT_MARKERS = ("(broker/", "(storage/", "(protocol/")
ENTRY_FRAMES = ("(broker/cli.py)", "(broker/__main__.py)")


def _frame_name(frame: str) -> str:
    # py-spy raw frames look like "handle_produce (broker/handlers/produce.py:42)"; drop the line.
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "/work/main/", "lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{name} ({path})" if path else name


def top_functions(collapsed: str, n: int = 15) -> dict:
    """Self and inclusive sample shares (percent) from py-spy's collapsed-stack output."""
    self_counts: collections.Counter = collections.Counter()
    incl_counts: collections.Counter = collections.Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        c = int(count)
        frames = [_frame_name(f) for f in stack.split(";")]
        # The first frame is the process/thread label py-spy adds; the last is where time was spent.
        total += c
        self_counts[frames[-1]] += c
        for f in set(frames[1:]):
            incl_counts[f] += c
    if not total:
        return {"samples": 0}
    pct = lambda k: round(100.0 * k / total, 1)  # noqa: E731
    ours = collections.Counter(
        {
            f: c
            for f, c in incl_counts.items()
            if any(m in f for m in PROJECT_MARKERS) and not f.endswith(ENTRY_FRAMES)
        }
    )
    return {
        "samples": total,
        "self_top": [[f, pct(c)] for f, c in self_counts.most_common(n)],
        "inclusive_top_project": [[f, pct(c)] for f, c in ours.most_common(n)],
        "inclusive_top": [[f, pct(c)] for f, c in incl_counts.most_common(n)],
    }


def profile_scenarios(specs: list[Spec], params: dict, workdir: Path, rate: int = 250) -> dict:
    """Profile chronolog once per spec (fresh broker per spec so one load does not colour the next)."""
    results = {}
    for spec in specs:
        broker = BrokerProcess("chronolog", workdir / spec.key.replace("/", "_"))
        try:
            broker.start()
            run_params = dict(params, round=0, tag="profile")
            if spec.needs:
                setup = run_in_child(broker, spec.needs, {}, run_params, timed=False)
                if "error" in setup:
                    results[spec.key] = {"error": f"setup {spec.needs}: {setup['error']}"}
                    continue
                run_params["setup"] = setup
            out = broker.workdir / "profile.txt"
            spy: list[subprocess.Popen] = []
            err = b""

            def on_mark(label: str) -> None:
                nonlocal err
                if label == "start":
                    spy.append(
                        subprocess.Popen(
                            [
                                py_spy(),
                                "record",
                                "--pid",
                                str(broker.pid()),
                                "--format",
                                "raw",
                                "--output",
                                str(out),
                                "--rate",
                                str(rate),
                                "--nonblocking",
                                "--gil",
                            ],
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE,
                        )
                    )
                elif spy:
                    spy[0].send_signal(signal.SIGINT)
                    try:
                        err = spy[0].communicate(timeout=30)[1]
                    except subprocess.TimeoutExpired:
                        spy[0].kill()
                        err = spy[0].communicate()[1]

            run = run_in_child(broker, spec.fn, spec.kwargs, run_params, on_mark=on_mark)
            if spy and spy[0].poll() is None:
                spy[0].kill()
                spy[0].wait()
            if not out.exists():
                results[spec.key] = {
                    "error": f"py-spy wrote no profile: {err.decode(errors='replace')[-400:]}"
                }
                continue
            figures = {
                k: v
                for k, v in run.items()
                if k in ("msgs_per_s", "MB_per_s", "error", "broker_cpu_s_per_million_msgs")
            }
            results[spec.key] = {"run": figures, **top_functions(out.read_text())}
        finally:
            broker.stop(purge=True)
    return results
