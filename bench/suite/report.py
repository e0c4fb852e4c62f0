"""Turns the suite's runs into the JSON document, the stdout table, docs/performance.md and the PNG plot."""

from __future__ import annotations

import math

from .runner import Spec, median_of

# The figures shown per kind of scenario: (metric key in the medians, label).
HEADLINE = {
    "throughput": [("msgs_per_s", "msgs/s"), ("MB_per_s", "MB/s")],
    "latency": [("p50_ms", "p50 ms"), ("p99_ms", "p99 ms"), ("p999_ms", "p99.9 ms")],
    "lookup": [
        ("raw_listoffsets_v1.p50_ms", "raw p50 ms"),
        ("raw_listoffsets_v1.p99_ms", "raw p99 ms"),
        ("confluent_offsets_for_times.p99_ms", "confluent p99 ms"),
        ("kafka_python_offsets_for_times.p99_ms", "kafka-python p99 ms"),
        ("wrong_answers", "wrong answers"),
    ],
}
RESOURCES = [
    ("broker_cpu_s_per_million_msgs", "CPU s / M msgs"),
    ("broker_rss_peak_mb", "RSS peak MB"),
    # the client process (all its threads) in the timed section: the same client costs more or
    # less depending on the message format the broker's API versions let it choose
    ("client_cpu_s_per_million_msgs", "client CPU s / M msgs"),
]
# A throughput run whose client process kept this many cores busy was limited by its client: the
# Python thread that produces or consumes (kafka-python's whole client, or the loop feeding
# librdkafka) was never idle, whatever the broker.
CLIENT_BOUND_CORES = 0.9


def peers(brokers) -> list[str]:
    """The brokers chronolog is compared with, in the order given."""
    return [b for b in brokers if b != "chronolog"] if "chronolog" in brokers else []


def ratio_key(peer: str) -> str:
    return f"ratio_chronolog_over_{peer}"


def summarize(plan: list[Spec], runs: dict, brokers: tuple[str, ...]) -> dict:
    """Per scenario: every run, the medians, the first error if no run succeeded, the ratios
    chronolog / peer of every median both brokers have, and (throughput scenarios) the brokers
    on which the client was the limit, with its cores (``client_bound``)."""
    out = {}
    for spec in plan:
        entry: dict = {"kind": spec.kind}
        for b in brokers:
            rs = runs[spec.key][b]
            errors = [r["error"] for r in rs if "error" in r]
            entry[b] = {"median": median_of(rs), "runs": rs, "ok_runs": len(rs) - len(errors)}
            if errors:
                entry[b]["errors"] = errors
            if rs and len(errors) == len(rs):
                entry[b]["error"] = errors[0]
        for peer in peers(brokers):
            a, t = entry["chronolog"]["median"], entry[peer]["median"]
            entry[ratio_key(peer)] = {k: a[k] / t[k] for k in a if k in t and t[k] not in (0, 0.0)}
        if spec.kind == "throughput":
            cores = {b: entry[b]["median"].get("client_cores") for b in brokers}
            entry["client_bound"] = {
                b: round(c, 2)
                for b, c in cores.items()
                if c is not None and c >= CLIENT_BOUND_CORES
            }
        out[spec.key] = entry
    return out


def targets(summary: dict) -> dict:
    """The issue's four targets (against Tansu), each with the figures it was judged on and whether
    it is met; when Kafka ran, the same throughput and CPU comparisons against Kafka."""

    def ratios(prefix: str, peer: str) -> dict:
        return {
            k: v.get(ratio_key(peer), {}).get("msgs_per_s")
            for k, v in summary.items()
            if k.startswith(prefix)
        }

    def judge_ratio(prefix: str, peer: str = "tansu") -> dict:
        rs = ratios(prefix, peer)
        vals = [v for v in rs.values() if v is not None]
        missing = [k for k, v in rs.items() if v is None]
        geo = math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None
        bound = sorted(k for k in rs if summary[k].get("client_bound"))
        return {
            "rule": f"every scenario's chronolog/{peer} msgs/s >= 1.0",
            "per_scenario": rs,
            "geometric_mean": geo,
            "not_measured": missing,
            "client_bound": bound,
            "met": bool(vals) and not missing and min(vals) >= 1.0,
        }

    def chronolog(key: str, metric: str):
        e = summary.get(key, {}).get("chronolog", {})
        return e.get("median", {}).get(metric), e.get("error")

    def cpu_ratios(peer: str) -> dict:
        figure = "broker_cpu_s_per_million_msgs"
        return {
            k: v[ratio_key(peer)][figure]
            for k, v in summary.items()
            if v.get(ratio_key(peer), {}).get(figure) is not None
        }

    def judge_cpu(peer: str) -> dict:
        cpu = cpu_ratios(peer)
        return {
            "rule": f"chronolog's broker CPU s per million messages <= {peer}'s in every scenario",
            "per_scenario": cpu,
            "above": sorted(k for k, r in cpu.items() if r > 1.0),
            "met": bool(cpu) and max(cpu.values()) <= 1.0,
        }

    lat, lat_err = chronolog("latency/confluent/100B/10k-per-s", "p99_ms")
    oft, oft_err = chronolog("offsets_for_times/1000-segments", "raw_listoffsets_v1.p99_ms")
    wrong, _ = chronolog("offsets_for_times/1000-segments", "wrong_answers")
    return {
        "produce_ratio_ge_1": judge_ratio("produce/"),
        "consume_ratio_ge_1": judge_ratio("consume/"),
        "latency_p99_le_10ms_at_10k_per_s": {
            "value_ms": lat,
            "error": lat_err,
            "met": lat is not None and lat <= 10.0,
        },
        "offsets_for_times_p99_le_2ms": {
            "value_ms": oft,
            "error": oft_err,
            "wrong_answers": wrong,
            "met": oft is not None and oft <= 2.0 and not wrong,
        },
        "broker_cpu_le_tansu": judge_cpu("tansu"),
        **(
            {
                "produce_ratio_vs_kafka": judge_ratio("produce/", "kafka"),
                "consume_ratio_vs_kafka": judge_ratio("consume/", "kafka"),
                "broker_cpu_vs_kafka": judge_cpu("kafka"),
            }
            if any(ratio_key("kafka") in v for v in summary.values())
            else {}
        ),
    }


def _fmt(v) -> str:
    if v is None:
        return "-"
    if float(v).is_integer() and abs(v) < 1000:
        return str(int(v))
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}"


def table_rows(summary: dict, brokers: tuple[str, ...]) -> list[list[str]]:
    rows = []
    for key, e in summary.items():
        for metric, label in HEADLINE[e["kind"]] + RESOURCES:
            if e["kind"] == "lookup":
                label = label.replace("M msgs", "M queries")
            cells = [key, label]
            for b in brokers:
                v = e[b]["median"].get(metric)
                cells.append(_fmt(v) if v is not None else ("error" if e[b].get("error") else "-"))
            for peer in peers(brokers):
                ratio = e.get(ratio_key(peer), {}).get(metric)
                cells.append(f"{ratio:.2f}" if ratio is not None else "-")
            cells.append(_bound_note(e, brokers) if metric == "msgs_per_s" else "")
            rows.append(cells)
    return rows


def _bound_note(entry: dict, brokers: tuple[str, ...]) -> str:
    """ "client-bound" on a throughput row whose client was the limit (CLIENT_BOUND_CORES), naming
    the brokers unless it was on every one."""
    bound = [b for b in brokers if b in entry.get("client_bound", {})]
    if not bound:
        return ""
    return "client-bound" if len(bound) == len(brokers) else f"client-bound on {', '.join(bound)}"


def _header(brokers: tuple[str, ...], ratio_label) -> list[str]:
    return ["scenario", "figure", *brokers, *map(ratio_label, peers(brokers)), "note"]


def text_table(summary: dict, brokers: tuple[str, ...]) -> str:
    header = _header(brokers, lambda peer: f"c/{peer}")
    rows = table_rows(summary, brokers)
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines += [
        "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
        for r in rows
    ]
    errs = [
        f"  {key} [{b}]: {e[b]['error']}"
        for key, e in summary.items()
        for b in brokers
        if e[b].get("error")
    ]
    if errs:
        lines += ["errors (no successful run):", *errs]
    return "\n".join(lines)


def markdown_table(summary: dict, brokers: tuple[str, ...], keep=None) -> str:
    header = _header(brokers, lambda peer: f"chronolog / {peer}")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in table_rows(summary, brokers):
        if keep is None or keep(r[0], r[1]):
            lines.append("| " + " | ".join(r) + " |")
    return "\n".join(lines)


def plot(summary: dict, brokers: tuple[str, ...], path, title: str) -> None:
    """Four panels: produce/partitions throughput, consume throughput, latency percentiles,
    and broker CPU per million messages; one bar per broker, errors shown as missing bars, a
    throughput bar hatched where the client was the limit on that broker (``client_bound``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    colors = {"chronolog": "#1f77b4", "tansu": "#ff7f0e", "kafka": "#2ca02c"}
    fig, axes = plt.subplots(2, 2, figsize=(16, 11))

    def bars(ax, items: list[tuple[str, str, str]], ylabel: str, log: bool = False) -> None:
        width = 0.8 / len(brokers)
        for j, b in enumerate(brokers):
            ys = [summary[key][b]["median"].get(metric, float("nan")) for key, metric, _ in items]
            drawn = ax.bar(
                [i + j * width for i in range(len(items))], ys, width, label=b, color=colors.get(b)
            )
            for patch, (key, metric, _) in zip(drawn, items):
                if metric == "msgs_per_s" and b in summary[key].get("client_bound", {}):
                    patch.set_hatch("//")
        ax.set_xticks([i + width * (len(brokers) - 1) / 2 for i in range(len(items))])
        ax.set_xticklabels([lbl for _, _, lbl in items], rotation=35, ha="right", fontsize=8)
        ax.set_ylabel(ylabel)
        if log:
            ax.set_yscale("log")
        # Plain swatches: the default legend would copy the first bar's hatch.
        ax.legend(handles=[Patch(color=colors.get(b), label=b) for b in brokers], fontsize=8)
        ax.grid(axis="y", alpha=0.3)

    keys = list(summary)
    prod = [
        (k, "msgs_per_s", k.replace("produce/", "").replace("partitions/", "parts/"))
        for k in keys
        if k.startswith(("produce/", "partitions/"))
    ]
    cons = [(k, "msgs_per_s", k.replace("consume/", "")) for k in keys if k.startswith("consume/")]
    lat = []
    for k in keys:
        if k.startswith("latency/"):
            tag = "fetch wait 10ms " if k.endswith("fetch-wait-10ms") else "default "
            lat += [(k, m, f"e2e {tag}{m[:-3]}") for m in ("p50_ms", "p99_ms", "p999_ms")]
        if k.startswith("offsets_for_times/"):
            lat += [
                (k, f"raw_listoffsets_v1.{m}", f"ListOffsets {m[:-3]}")
                for m in ("p50_ms", "p99_ms", "p999_ms")
            ]
    cpu = [
        (
            k,
            "broker_cpu_s_per_million_msgs",
            k.split("/")[0] + "/" + "/".join(k.split("/")[1:])[:28],
        )
        for k in keys
        if summary[k]["kind"] == "throughput"
    ]
    bars(axes[0][0], prod, "produce messages/s (median)", log=True)
    axes[0][0].set_title("Produce throughput (hatched: client-bound)")
    bars(axes[0][1], cons, "consume messages/s (median)", log=True)
    axes[0][1].set_title("Consume throughput, 1 KiB values (hatched: client-bound)")
    bars(axes[1][0], lat, "milliseconds (median over rounds)", log=True)
    axes[1][0].set_title("Produce-to-consume latency at 10k msg/s; offsets_for_times latency")
    bars(axes[1][1], cpu, "broker CPU seconds per million messages", log=True)
    axes[1][1].set_title("Broker CPU cost")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _headline_row(scenario: str, figure: str) -> bool:
    if figure in ("msgs/s", "p99 ms", "raw p99 ms", "wrong answers"):
        return True
    if figure.startswith("CPU s"):
        return scenario in (
            "produce/confluent/100B/none",
            "consume/confluent/1KiB/warm",
            "partitions/100x10-producers/100B",
        )
    if figure.startswith("client CPU"):
        return scenario.startswith("produce/confluent/")
    return figure.startswith("RSS") and scenario in (
        "produce/confluent/1KiB/none",
        "partitions/100x10-producers/100B",
    )


def _overhead_line(overhead: dict | None) -> list[str]:
    """The metrics endpoint's overhead target, when the run measured it (bench_metrics.py)."""
    if overhead is None:
        return []
    if "error" in overhead:
        return [f"- metrics endpoint overhead < 3%: not measured ({overhead['error'][:200]})"]
    m, paired = overhead["medians"], overhead["side_by_side"]
    return [
        f"- metrics endpoint (scraped every second) adds < 3% to produce throughput: "
        f"{'met' if overhead['met'] else 'NOT met'} (broker CPU per message side by side: "
        f"{paired['batched']['overhead_percent']}% batched, "
        f"{paired['one_per_request']['overhead_percent']}% with one message per request; "
        f"throughput off/on alternating: {m['batched']['overhead_percent']}% batched, "
        f"{m['one_per_request']['overhead_percent']}% one per request)"
    ]


def _validation_lines(validation: dict | None) -> list[str]:
    """What suite/validation.py found each broker stores unchecked (error 0 = stored)."""
    if not validation:
        return []
    lines = [
        "",
        "What each broker accepts (magic-2 batches with a correct CRC-32C that Kafka refuses; the",
        "error code answered, 0 = stored, -1 UNKNOWN_SERVER_ERROR; `validation` in the JSON):",
        "",
        "| batch | " + " | ".join(validation) + " |",
        "|---|" + "---|" * len(validation),
    ]
    cases = next((v for v in validation.values() if "error" not in v), {})
    for case in cases:
        row = [str(v.get(case, v.get("error", "-"))) for v in validation.values()]
        lines.append(f"| {case} | " + " | ".join(row) + " |")
    lines += [
        "",
        "chronolog, as Kafka's LogValidator, decompresses every batch and checks its records before",
        "storing it; a broker that stores compressed batches unopened spends less CPU per message on",
        "compressed produce, which the broker CPU rows above include.",
    ]
    return lines


def _idle_wait_lines(idle: dict | None) -> list[str]:
    """bench_idle_wait.py's table: a lone lz4 Produce request's CPU by the pause before it."""
    if not idle:
        return []
    if "error" in idle:
        return ["", f"Idle-wait bench not measured ({idle['error'][:200]})."]
    by_gap = idle["by_gap_s"]
    servers = list(next(iter(by_gap.values()))["cpu_us_per_request"])
    lines = [
        "",
        "Why broker CPU stays above Tansu's in the lz4 scenarios (`bench/bench_idle_wait.py`,",
        f"`idle_wait` in the JSON; {idle['request']}, sent one at a time after a pause; server CPU",
        f"per request in µs, median of {idle['rounds']} rounds of {idle['requests_per_round']}):",
        "",
        "| pause before each request | " + " | ".join(servers) + " |",
        "|---|" + "---|" * len(servers),
    ]
    for gap, entry in by_gap.items():
        cpu = entry["cpu_us_per_request"]
        lines.append(
            f"| {float(gap) * 1000:g} ms | " + " | ".join(f"{cpu[s]:,.0f}" for s in servers) + " |"
        )
    longest_gap = max(by_gap, key=float)
    longest = by_gap[longest_gap]["cpu_us_per_request"]
    lines += [
        "",
        "The floors read each request, write it to a file and send a fixed answer, nothing else: in",
        "trio on chronolog's stream class, and on a blocking socket. On this machine a request costs",
        "more the longer the core idled before it, whatever the code (bench/NOTES.md); kafka-python",
        f"sends one every 20-25 ms. After {float(longest_gap) * 1000:g} ms the trio floor took "
        f"{longest['floor-trio'] / longest['tansu']:.0%} of Tansu's",
        f"whole request, and chronolog's work above that floor "
        f"{(longest['chronolog'] - longest['floor-trio']) / longest['tansu']:.0%}.",
    ]
    return lines


def _cpu_sources(doc: dict) -> str:
    """How the runs read broker CPU (brokers.py): a cpuacct cgroup or psutil's clock ticks."""
    found = sorted(
        {
            run["broker_cpu_source"]
            for scenario in doc["scenarios"].values()
            for name, entry in scenario.items()
            if name in ("chronolog", "tansu", "kafka")
            for run in entry.get("runs", [])
            if "broker_cpu_source" in run
        }
    )
    return " and ".join(found) or "psutil clock ticks"


def _kafka_line(env: dict) -> str:
    kafka = env.get("kafka")
    if not kafka:
        return "Apache Kafka (not in this run)"
    return f"Apache Kafka {kafka['version']}, JVM flags `{kafka['jvm_flags']}` ({kafka['jvm_flags_source']})"


def _kafka_target_lines(t: dict) -> list[str]:
    """The same throughput and CPU comparisons against Kafka, when it ran."""
    if "produce_ratio_vs_kafka" not in t:
        return []

    def ratio(v: dict) -> str:
        geo = v["geometric_mean"]
        bound = f"; client-bound in {len(v['client_bound'])}" if v["client_bound"] else ""
        return (
            f"{'met' if v['met'] else 'not met'} (geometric mean "
            f"{'-' if geo is None else format(geo, '.2f')}{bound})"
        )

    cpu = t["broker_cpu_vs_kafka"]
    above = f" (above in {', '.join(cpu['above'])})" if cpu["above"] else ""
    return [
        f"- against Kafka, produce ratio >= 1.0 in every produce scenario: "
        f"{ratio(t['produce_ratio_vs_kafka'])}",
        f"- against Kafka, consume ratio >= 1.0 in every consume scenario: "
        f"{ratio(t['consume_ratio_vs_kafka'])}",
        f"- against Kafka, broker CPU per million messages <= Kafka's in every scenario: "
        f"{'met' if cpu['met'] else 'not met'}{above}",
    ]


def readme_section(doc: dict) -> str:
    """docs/performance.md's "Performance" section: how to run, the headline table, the targets."""
    first = next(iter(doc["scenarios"].values()))
    brokers = tuple(b for b in ("chronolog", "tansu", "kafka") if b in first)
    t = doc["targets"]

    def met(v: dict) -> str:
        return "met" if v.get("met") else "not met"

    def num(v, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    env = doc["environment"]
    lines = [
        "## Performance",
        "",
        "`make bench` runs the side-by-side suite (`bench/run_all.py`; `BENCH_ARGS=--quick` for a short run,",
        "`bench/run_all.py --profile` for py-spy profiles of chronolog). It starts chronolog and the peers,",
        f"Tansu ({env['tansu']}) and {_kafka_line(env)}, on 127.0.0.1,",
        f"runs every scenario on each, taking turns (the first rotating by round), {doc['params']['rounds']} round(s),",
        "and reports medians and the ratios chronolog / peer (for latency and CPU lower is better, so there a",
        "ratio below 1 favours chronolog). Every scenario consumes back what it produced and checks count and",
        "CRC32 sum of the values. Full figures (every run, p99.9, RSS, CPU per scenario):",
        f"`bench/results/{doc['name']}.json`, plot `bench/results/{doc['name']}.png`.",
        "",
        f"A row marked client-bound: the client process kept >= {CLIENT_BOUND_CORES} of a core busy through the",
        "timed section on the brokers named (all, if none is), so its thread, not the broker, set the",
        "rate; its ratios compare what each broker lets that client do, not the brokers' ceilings.",
        "",
        "![side-by-side medians](../bench/results/" + doc["name"] + ".png)",
        "",
        f"Run of {doc['started_utc']} (chronolog {env['chronolog_commit']}, {doc['mode']} sizes,",
        f"{env['cpus']} shared cores, load average {env['loadavg_at_start'][0]:.1f} at start;",
        f"broker CPU from {_cpu_sources(doc)}):",
        "",
        markdown_table(doc["scenarios"], brokers, keep=_headline_row),
        "",
        "Targets:",
        "",
        f"- produce ratio >= 1.0 in every produce scenario: {met(t['produce_ratio_ge_1'])} "
        f"(geometric mean {num(t['produce_ratio_ge_1']['geometric_mean'], '.2f')})",
        f"- consume ratio >= 1.0 in every consume scenario: {met(t['consume_ratio_ge_1'])} "
        f"(geometric mean {num(t['consume_ratio_ge_1']['geometric_mean'], '.2f')})",
        f"- produce-to-consume p99 <= 10 ms at 10,000 msg/s (default consumer settings): "
        f"{met(t['latency_p99_le_10ms_at_10k_per_s'])} "
        f"({num(t['latency_p99_le_10ms_at_10k_per_s']['value_ms'], '.1f')} ms)",
        f"- offsets_for_times p99 <= 2 ms over 1,000+ segments (raw ListOffsets v1): "
        f"{met(t['offsets_for_times_p99_le_2ms'])} ({num(t['offsets_for_times_p99_le_2ms']['value_ms'], '.2f')} ms)",
        f"- broker CPU per million messages <= Tansu's in every scenario: "
        f"{met(t['broker_cpu_le_tansu'])}"
        + (
            f" (above in {', '.join(t['broker_cpu_le_tansu']['above'])})"
            if t["broker_cpu_le_tansu"]["above"]
            else ""
        ),
        *_kafka_target_lines(t),
        *_overhead_line(t.get("metrics_overhead")),
        *_validation_lines(doc.get("validation")),
        *_idle_wait_lines(doc.get("idle_wait")),
        "",
        "Notes: Tansu keeps everything in memory, so its cold-cache runs read memory like its warm ones;",
        f"chronolog's and Kafka's cold runs: {doc['cold_cache']}. Tansu has no time index: it answers every",
        "offsets_for_times with offset 0 (counted as wrong answers). Observed of Tansu 0.6.0 here: a waiting",
        "Fetch is answered at fetch.wait.max.ms rather than when data arrives (hence its latency with the",
        "default 500 ms), and kafka-python's uncompressed produce and its consumer run far slower against it",
        "than confluent-kafka does; its reported high watermark stops at the base offset of a partition's",
        "last batch, which can leave a consumer one batch short (the suite then records the run as failed).",
        "All three speak today's protocol (magic-2 record batches, one CRC-32C per batch), so each",
        "client writes the same format to each. Consume runs are timed from the first delivered message: the",
        "consumer's start-up before it (librdkafka waits ~0.5 s before its first ListOffsets, whichever the",
        "broker) is recorded as first_message_s in the JSON. Both consumers ask for up to 8 MiB per",
        "partition per Fetch: at the clients' 1 MiB default Tansu answers about 5.7 MB anyway, chronolog",
        "(as Kafka) one batch, so the two answered different requests (bench/NOTES.md).",
        "Kafka is a JVM started for the suite and kept across its scenarios: its JIT compiles the hot",
        "paths during the first runs, so a quick run (one round of small counts) includes that warm-up",
        "in Kafka's figures; the default run (five rounds, about a second of load each) is the fair one.",
        "Its offsets_for_times topic is made with internal.segment.bytes (Kafka 4 refuses a",
        "segment.bytes below 1 MiB), the same 4 KiB segments.",
        "The machine is shared with other work, so absolute numbers move between",
        "runs; ratios within one run are the comparison.",
    ]
    return "\n".join(lines) + "\n"


def _fairness(wide: dict) -> list[str]:
    """How evenly the wide load's connections were served (absent from runs before it was
    measured)."""
    if "answers_per_connection_min_p50_max" not in wide:
        return []
    low, mid, high = wide["answers_per_connection_min_p50_max"]
    first_p50, first_max = wide["first_answer_s_p50_max"]
    return [
        f"How evenly the {wide['connections']:,} connections were served: {low} / {mid} / {high} "
        f"answers a connection (min / p50 / max); each had its first answer within {first_max} s "
        f"(p50 {first_p50} s).",
        "",
    ]


def scale_section(doc: dict) -> str:
    """docs/performance.md's "Scale" section from bench/bench_scale.py's scale.json."""
    p, c, meta, loads = doc["params"], doc["create"], doc["metadata_all_topics"], doc["loads"]
    restart = doc.get("restart", {})
    partitions = p["topics"] * p["partitions"]

    def row(name: str, r: dict) -> str:
        return (
            f"| {name} | {r['connections']:,} | {r['messages_per_request']:,} | "
            f"{r['msgs_per_s']:,} | {r['mb_per_s']} | {r['request_p50_ms']} / {r['request_p99_ms']} | "
            f"{r['broker_cpu_cores']} ({r['loop_thread_cores']}) | {r['broker_cpu_us_per_message']} | "
            f"{r['generator_cpu_cores']} |"
        )

    names = {"wide": f"{partitions:,} partitions"}
    for key in loads:
        if key.startswith("one_partition_") and key.endswith("record_batches"):
            names[key] = f"one partition, {key.split('_')[4]}-record batches"
        elif key.startswith("one_partition_"):
            names[key] = "one partition"
    ratio = doc["wide_over_one_partition"]
    lines = [
        f"## Scale: {partitions:,} partitions",
        "",
        "`make bench-scale` (`bench/bench_scale.py`, issue #33): one chronolog process on a fresh log",
        f"directory, {p['topics']} topics x {p['partitions']} partitions, then {p['connections']:,} producer",
        f"connections over them. Run of {doc['measured_at']} (chronolog {doc['commit']},",
        f"{doc['machine']['cpus']} shared cores, load average {doc['load_average_at_start'][0]} at start);",
        "every figure in `bench/results/scale.json`.",
        "",
        "| | |",
        "|---|---|",
        f"| create {partitions:,} partitions (one CreateTopics a topic, in turn) | {c['seconds']} s "
        f"({c['per_topic_p50_ms']} ms a topic at the median), {c['files']:,} files |",
        f"| resident memory: empty / with the partitions | {c['rss_mb_empty']} / {c['rss_mb_created']} MB "
        f"({c['rss_kb_per_partition']} KB a partition) |",
        f"| Metadata of all topics ({meta['answer_bytes'] / 1e3:,.0f} KB answer, {meta['requests']} requests) "
        f"| p50 {meta['p50_ms']} ms, p99 {meta['p99_ms']} ms |",
    ]
    if restart:
        stopped = restart["stop_s"]
        exit_s = "no exit within 120 s (killed)" if stopped is None else f"{stopped} s"
        lines.append(
            f"| restart: SIGTERM to exit / start to every partition led in Metadata | "
            f"{exit_s} / {restart['start_until_all_led_s']} s, then "
            f"{restart['rss_mb_after']} MB resident |"
        )
    lines += [
        f"| resident memory / open files after the loads | {doc['rss_mb_after_loads']} MB / "
        f"{doc['open_files_after_loads']:,} (limit {doc['broker_open_files_limit']:,}) |",
        "",
        f"Produce v9 acks=1 from a generator process (selectors, {p['in_flight']} requests in flight a",
        f"connection), one uncompressed batch of {p['records_per_batch']} {p['record_bytes']}-byte "
        f"records a partition a request, for {p['seconds']:g} s",
        f"or {p['messages']:,} messages; each wide connection writes {p['partitions_per_connection']} "
        "partitions of one topic:",
        "",
        "| load | connections | messages a request | msgs/s | MB/s | request p50 / p99 ms | "
        "broker cores (loop thread) | broker CPU µs a message | generator cores |",
        "|---|---|---|---|---|---|---|---|---|",
        *(row(names[k], r) for k, r in loads.items()),
        "",
        *_fairness(loads["wide"]),
        f"{partitions:,} partitions over one partition with the same batches: {ratio:.2f} "
        f"(issue #33's target >= 0.8: {'met' if ratio >= 0.8 else 'not met'}). "
        + (
            "Nothing acknowledged was lost: in every load the log end offsets sum to at least "
            "the messages acknowledged" + _unanswered(loads)
            if doc["nothing_lost"]
            else "ACKNOWLEDGED MESSAGES ARE MISSING: a load's log end offsets sum to less than "
            "it was acknowledged (see the JSON)."
        ),
        *(
            [
                f"Partitions answered errors ({_error_counts(loads)}): the broker's log says why; "
                "see bench/NOTES.md."
            ]
            if any(r["error_partitions"] for r in loads.values())
            else []
        ),
        "What binds, from the CPU split and a py-spy profile (`BENCH_ARGS=--profile`): bench/NOTES.md.",
    ]
    return "\n".join(lines) + "\n"


def _error_counts(loads: dict) -> str:
    """'wide: 47,490 partition answers with error 56' for the loads that had errors."""
    return "; ".join(
        f"{name}: "
        + ", ".join(
            f"{n:,} partition answers with error {code}"
            for code, n in r["error_partitions"].items()
        )
        for name, r in loads.items()
        if r["error_partitions"]
    )


def _unanswered(loads: dict) -> str:
    """The end of the nothing-lost sentence: where the sum is above, and why."""
    above = [
        f"{name}: {r['log_end_offsets_sum'] - r['messages_acked']:,} more, written from the "
        f"{r['unanswered_requests']:,} requests the generator stopped waiting for"
        for name, r in loads.items()
        if r["log_end_offsets_sum"] != r["messages_acked"]
    ]
    return f" ({'; '.join(above)})." if above else " (exactly)."
