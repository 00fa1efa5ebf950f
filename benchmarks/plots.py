"""PNG plots of a harness run (benchmarks/harness.py), written to the directory given
(the harness: benchmarks/results/harness-<time>/, copied to docs/img/ with --write-docs):

* bench-steady-<rate>-lateness-cdf.png: lateness CDF per system, log x, one per rate;
* bench-steady-<rate>-fire-rate.png, bench-burst-fire-rate.png: jobs received per 100 ms
  bucket (as jobs/s) against seconds since the first due time, per system;
* bench-scale.png: delayq's fire rate and p99 lateness against the node count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

COLORS = {
    "delayq": "tab:blue",
    "delayq-eos": "tab:purple",
    "bullmq": "tab:orange",
    "arq": "tab:green",
    "floor": "tab:gray",
    "floor-redis": "tab:brown",
}
LABELS = {
    "delayq": "delayq (at a Kafka consumer)",
    "delayq-eos": "delayq, exactly-once (at a read_committed consumer)",
    "bullmq": "BullMQ (in its worker)",
    "arq": "arq (in its worker)",
    "floor": "Kafka floor (bare producer → broker → consumer)",
    "floor-redis": "Redis + Kafka floor (a sorted set, then the Kafka floor)",
}
MIN_LATENESS_MS = 0.1  # the log axis starts here; anything below is drawn at it
PLAIN = FuncFormatter(lambda value, _: f"{value:g}")  # 200, not 2×10²

Result = dict[str, Any]


def plot_all(run: Result, img_dir: Path) -> list[Path]:
    """Every plot the run's scenarios allow; returns the files written."""
    img_dir.mkdir(parents=True, exist_ok=True)
    scenarios = run["scenarios"]
    figures: dict[str, Figure] = {}
    for rate, steady in scenarios.get("steady", {}).get("by_rate", {}).items():
        figures[f"bench-steady-{rate}-lateness-cdf"] = lateness_cdf(steady)
        figures[f"bench-steady-{rate}-fire-rate"] = fire_rate(
            steady, f"Steady: {steady['rate_per_s']:,} jobs/s due"
        )
    if "burst" in scenarios:
        figures["bench-burst-fire-rate"] = fire_rate(
            scenarios["burst"],
            f"Burst: {scenarios['burst']['jobs']:,} jobs due in one second",
            per_buckets=10,
        )
    if "scale" in scenarios:
        figures["bench-scale"] = scale(scenarios["scale"])
    paths = []
    for name, figure in figures.items():
        path = img_dir / f"{name}.png"
        figure.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(figure)
        paths.append(path)
    return paths


def ok_results(scenario: Result) -> dict[str, Result]:
    return {name: r for name, r in scenario["results"].items() if "error" not in r}


def lateness_cdf(scenario: Result) -> Figure:
    figure, ax = plt.subplots(figsize=(7, 4.2))
    for name, r in ok_results(scenario).items():
        values = [max(v, MIN_LATENESS_MS) for v in r["lateness_cdf_ms"]]
        if len(values) > 1:
            fractions = [i / (len(values) - 1) for i in range(len(values))]
            ax.plot(values, fractions, color=COLORS[name], label=LABELS[name])
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(PLAIN)
    ax.set_xlabel("lateness: receive time − due time (ms, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(
        f"Steady: {scenario['rate_per_s']:,} jobs/s for {scenario['seconds']:g} s — lateness CDF"
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")
    return figure


def fire_rate(scenario: Result, title: str, per_buckets: int = 1) -> Figure:
    """Jobs fired per second over time, from each run's 100 ms series summed over
    `per_buckets` buckets (a burst's delayq series is by publish time, and a node
    publishes a whole round at once, so single buckets would show rounds, not a rate)."""
    figure, ax = plt.subplots(figsize=(8, 4.2))
    for name, r in ok_results(scenario).items():
        series = r["series"]
        step_s = series["bucket_ms"] * per_buckets / 1000
        counts = series["counts"]
        sums = [sum(counts[i : i + per_buckets]) for i in range(0, len(counts), per_buckets)]
        times = [series["start_s"] + i * step_s for i in range(len(sums))]
        label = LABELS[name]
        if r.get("fire_times") == "publish":
            label = f"{label.split(' (')[0]} (handed to Kafka by the node)"
        ax.step(
            times,
            [c / step_s for c in sums],
            where="post",
            color=COLORS[name],
            linewidth=1,
            label=f"{label}, {r['jobs']:,} jobs",
        )
    if "rate_per_s" in scenario:
        ax.axhline(
            scenario["rate_per_s"], color="grey", linestyle="--", linewidth=1, label="due rate"
        )
    ax.set_xlabel("seconds since the first due time")
    ax.set_ylabel(f"jobs fired per second ({round(100 * per_buckets)} ms buckets)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right")
    return figure


def scale(scenario: Result) -> Figure:
    nodes = [
        n
        for n in scenario["nodes"]
        if "error" not in scenario["steady"][str(n)] and "error" not in scenario["burst"][str(n)]
    ]
    steady = [scenario["steady"][str(n)] for n in nodes]
    burst = [scenario["burst"][str(n)] for n in nodes]
    figure, (rates, late) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    rates.plot(nodes, [r["peak_fire_rate_per_s"] for r in burst], "o-", label="burst: peak")
    rates.plot(nodes, [r["drain_fire_rate_per_s"] for r in burst], "o-", label="burst: mean")
    rates.plot(
        nodes,
        [r["mean_fire_rate_per_s"] for r in steady],
        "o-",
        label=f"steady ({scenario['rate_per_s']:,}/s due): mean",
    )
    rates.set_ylabel("jobs fired per second")
    late.plot(nodes, [r["lateness_ms"]["p99"] for r in steady], "o-", label="steady p99")
    late.plot(nodes, [r["lateness_ms"]["p99"] for r in burst], "o-", label="burst p99")
    late.set_yscale("log")
    late.yaxis.set_major_formatter(PLAIN)
    late.yaxis.set_minor_formatter(PLAIN)
    late.set_ylabel("lateness p99 (ms, log scale)")
    for ax in (rates, late):
        ax.set_xlabel("delayq node processes")
        ax.set_xticks(nodes)
        ax.grid(True, alpha=0.3)
        ax.legend()
    rates.set_ylim(bottom=0)
    figure.suptitle(
        f"delayq on one machine: {scenario['burst_jobs']:,}-job burst and "
        "steady load against the node count"
    )
    return figure
