"""What the node's metrics cost: node CPU per fired job with metrics off and on.

    python benchmarks/metrics_cost.py [--jobs 200000] [--window 10] [--rounds 2]

Runs benchmarks/fire_bench.py (one node, --pattern steady: jobs/window per second)
alternately with metrics_port 0 and with metrics on and scraped every second, as
Prometheus would, and reads the node process's CPU time (user + system, psutil) while
it runs. Prints, per run, the node's CPU seconds, CPU µs per fired job, the fire rate
and the consumer's lateness, and the cost of metrics as the change of the node's CPU
per job (median of the rounds). Needs the local stack and a migrated database.

Whole-run CPU varies by a few per cent between identical runs on a small machine, so
it also measures the metrics' own work directly: the dispatcher's per-round metrics
code (actors/dispatcher.py, Dispatcher._observe) per job, timed in this process, and
each scrape's time as the scraper saw it (an upper bound of the node's CPU for it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import orjson
import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the delayq packages, run from a checkout
METRICS_PORT = 19464
SAMPLE_S = 0.25


def node_cpu_s(bench: psutil.Process, seen: dict[int, float]) -> None:
    """Update pid → CPU seconds of every delayq node process under the benchmark."""
    try:
        children = bench.children(recursive=True)
    except psutil.NoSuchProcess:
        return
    for child in children:
        try:
            if "cluster.cli" in " ".join(child.cmdline()):
                times = child.cpu_times()
                seen[child.pid] = times.user + times.system
        except psutil.NoSuchProcess:
            pass


def scrape_every_second(stop: threading.Event, scrapes: list[tuple[int, float]]) -> None:
    """GET /metrics every second: (bytes, seconds it took) per scrape."""
    url = f"http://127.0.0.1:{METRICS_PORT}/metrics"
    while not stop.wait(1.0):
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                size = len(answer.read())
        except OSError:
            continue  # the node is not up yet, or gone
        scrapes.append((size, time.perf_counter() - started))


def observe_us_per_job(round_size: int = 500, topics: int = 4) -> float:
    """CPU µs per job of the metrics work the dispatcher does for each broker-acked
    round (a round of `round_size` jobs over `topics` topics)."""
    import asyncio

    from actors.dispatcher import Dispatcher, Sent
    from actors.histogram import LATENESS_BUCKETS_S, Histograms

    class Clock:
        def redis_ms(self, wall_s: float) -> float:
            return wall_s * 1000

    dispatcher = Dispatcher.__new__(Dispatcher)  # only the metrics state _observe uses
    dispatcher.scanner = Clock()  # type: ignore[assignment]
    dispatcher.published_by_topic = Counter()
    dispatcher.lateness = Histograms(LATENESS_BUCKETS_S)
    dispatcher.publish_lag = Histograms(LATENESS_BUCKETS_S)
    loop = asyncio.new_event_loop()
    future: asyncio.Future[object] = loop.create_future()
    now_ms = int(time.time() * 1000)
    items = [
        Sent(b"job-%d" % i, future, f"topic-{i % topics}", now_ms - 20, now_ms - 5)
        for i in range(round_size)
    ]
    acked_at = {id(future): time.time()}
    rounds = 2000
    started = time.process_time()
    for _ in range(rounds):
        dispatcher._observe(items, acked_at)
    spent = time.process_time() - started
    loop.close()
    return spent / (rounds * round_size) * 1e6


def run_once(jobs: int, window: float, metrics: bool) -> dict[str, float]:
    env = {**os.environ, "DELAYQ_METRICS_PORT": str(METRICS_PORT if metrics else 0)}
    env["DELAYQ_METRICS_HOST"] = "127.0.0.1"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        command = [
            sys.executable,
            str(HERE / "fire_bench.py"),
            "--jobs",
            str(jobs),
            "--window",
            str(window),
            "--pattern",
            "steady",
            "--out",
            str(out),
        ]
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
        bench = psutil.Process(proc.pid)
        seen: dict[int, float] = {}
        stop, scrapes = threading.Event(), list[tuple[int, float]]()
        scraper = threading.Thread(target=scrape_every_second, args=(stop, scrapes))
        if metrics:
            scraper.start()
        while proc.poll() is None:
            node_cpu_s(bench, seen)
            time.sleep(SAMPLE_S)
        stop.set()
        if metrics:
            scraper.join()
        if proc.returncode != 0:
            raise SystemExit(f"fire_bench failed with exit {proc.returncode}")
        result = orjson.loads(out.read_bytes())
    fired = result["received"]
    cpu = sum(seen.values())
    return {
        "metrics": float(metrics),
        "node_cpu_s": cpu,
        "cpu_us_per_job": cpu / fired * 1e6,
        "fire_rate": result["fire_rate_per_s"],
        "lateness_p50_ms": result["lateness_ms"]["p50"],
        "lateness_p99_ms": result["lateness_ms"]["p99"],
        "scrapes": float(len(scrapes)),
        "scrape_bytes": float(scrapes[-1][0]) if scrapes else 0.0,
        "scrape_ms": statistics.median(t for _, t in scrapes) * 1000 if scrapes else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    runs = []
    for round_no in range(args.rounds):
        for metrics in (False, True):
            run = run_once(args.jobs, args.window, metrics)
            runs.append(run)
            print(
                f"round {round_no + 1} metrics {'on ' if metrics else 'off'}: "
                f"node CPU {run['node_cpu_s']:.2f} s = {run['cpu_us_per_job']:.1f} µs/job, "
                f"fired {run['fire_rate']:.0f}/s, lateness p50 {run['lateness_p50_ms']:.1f} "
                f"p99 {run['lateness_p99_ms']:.1f} ms, scrapes {run['scrapes']:.0f} "
                f"({run['scrape_bytes'] / 1024:.0f} KiB, {run['scrape_ms']:.1f} ms each)",
                flush=True,
            )
    off = statistics.median(r["cpu_us_per_job"] for r in runs if not r["metrics"])
    on = statistics.median(r["cpu_us_per_job"] for r in runs if r["metrics"])
    print(f"node CPU per job: off {off:.1f} µs, on {on:.1f} µs: change {(on - off) / off:+.1%}")
    per_job = observe_us_per_job()
    scrape_ms = statistics.median(r["scrape_ms"] for r in runs if r["metrics"])
    rate = args.jobs / args.window
    direct_s = per_job * rate / 1e6 + scrape_ms / 1000  # per second of firing
    print(
        f"direct: {per_job:.2f} µs of metrics work per job + {scrape_ms:.1f} ms per "
        f"scrape each second = {direct_s * 1000:.1f} ms of CPU per second at {rate:.0f} "
        f"jobs/s: {direct_s / (off * rate / 1e6):.1%} of the node's CPU without metrics"
    )


if __name__ == "__main__":
    main()
