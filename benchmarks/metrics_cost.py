"""What the node's metrics cost, as a share of the node's CPU while it fires.

    python benchmarks/metrics_cost.py [--jobs 200000] [--window 10] [--rounds 2]

The metrics work of a node is of two kinds, each measured directly:

1. per fired job: the dispatcher's per-round bookkeeping (Dispatcher._observe: the
   lateness and publish-stage histograms, the per-topic count), timed in this process
   over rounds of 500 jobs; the move and claim stages are observed once per slot and
   round, not per job;
2. per scrape: the node's CPU to answer GET /metrics, read with psutil from an idle
   node with metrics on while it is scraped SCRAPES times.

Against them, the node's CPU per fired job: benchmarks/fire_bench.py with one node, the
steady pattern (jobs/window per second) and metrics on and scraped every second, the
node's CPU (psutil) summed over the samples in which it used at least FIRING_CORES of a
core (the firing phase), divided by the jobs. The cost is (per-job work x rate + scrape
CPU x scrapes per second) / node CPU per second at that rate.

Comparing whole runs with metrics_port 0 and with metrics on does not isolate this: the
per-job bookkeeping runs in both (the collector only reads it), and run-to-run noise on
a small machine is a few per cent of the node's CPU. Needs the local stack.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

import orjson
import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the delayq packages, run from a checkout
METRICS_PORT = 19464
SAMPLE_S = 0.25
FIRING_CORES = 0.3
SCRAPES = 300
ROUND_JOBS = 500


def observe_us_per_job(topics: int = 4) -> float:
    """CPU µs per job of the dispatcher's metrics bookkeeping for a broker-acked round."""
    from actors.dispatch_round import Sent
    from actors.dispatcher import Dispatcher
    from actors.histogram import LATENESS_BUCKETS_S, Histograms

    dispatcher = Dispatcher.__new__(Dispatcher)  # only the metrics state _observe uses
    dispatcher.published_by_topic = Counter()
    dispatcher.lateness = Histograms(LATENESS_BUCKETS_S)
    dispatcher.publish_lag = Histograms(LATENESS_BUCKETS_S)
    loop = asyncio.new_event_loop()
    future: asyncio.Future[object] = loop.create_future()
    now_ms = int(time.time() * 1000)
    items = [
        Sent(b"job-%d" % i, future, f"topic-{i % topics}", now_ms - 20, now_ms - 5)
        for i in range(ROUND_JOBS)
    ]
    acked_ms = {id(future): time.time() * 1000}
    rounds = 2000
    started = time.process_time()
    for _ in range(rounds):
        dispatcher._observe(items, acked_ms)
    spent = time.process_time() - started
    loop.close()
    return spent / (rounds * ROUND_JOBS) * 1e6


async def scrape_cpu_ms() -> tuple[float, int]:
    """(node CPU ms per GET /metrics, response bytes), on an idle node of its own."""
    from cluster.devstack.databases import create_cluster_database, drop_cluster_database
    from cluster.devstack.nodes import NodeProcess
    from cluster.settings.config import Settings

    prefix = f"mcost{uuid.uuid4().hex[:6]}"
    settings = await create_cluster_database(
        Settings.from_env().replace(key_prefix=prefix), f"delayq_{prefix}"
    )
    log_dir = Path(os.environ.get("DELAYQ_STATE_DIR", ".delayq"))
    env = {"DELAYQ_METRICS_PORT": str(METRICS_PORT), "DELAYQ_METRICS_HOST": "127.0.0.1"}
    node = NodeProcess("metrics-cost-node", log_dir, settings=settings, env=env)
    try:
        await node.wait_ready()
        await asyncio.sleep(3)  # past the start-up work
        process = psutil.Process(node.pid)

        def cpu_s() -> float:
            times = process.cpu_times()
            return times.user + times.system

        idle_from, started = cpu_s(), time.monotonic()
        await asyncio.sleep(5)
        idle_per_s = (cpu_s() - idle_from) / (time.monotonic() - started)
        url = f"http://127.0.0.1:{METRICS_PORT}/metrics"

        def scrape_many() -> int:
            size = 0
            for _ in range(SCRAPES):
                with urllib.request.urlopen(url, timeout=5) as answer:
                    size = len(answer.read())
            return size

        before, started = cpu_s(), time.monotonic()
        size = await asyncio.to_thread(scrape_many)
        elapsed = time.monotonic() - started
        spent = cpu_s() - before - idle_per_s * elapsed
        return spent / SCRAPES * 1000, size
    finally:
        await node.stop()
        await drop_cluster_database(settings)


def firing_cpu_us_per_job(jobs: int, window: float) -> dict[str, float]:
    """fire_bench with metrics on, scraped every second: node CPU per job while firing."""
    env = {**os.environ, "DELAYQ_METRICS_PORT": str(METRICS_PORT)}
    env["DELAYQ_METRICS_HOST"] = "127.0.0.1"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        command = [
            sys.executable,
            str(HERE / "fire_bench.py"),
            *("--jobs", str(jobs), "--window", str(window), "--pattern", "steady"),
            *("--out", str(out)),
        ]
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
        bench = psutil.Process(proc.pid)
        stop = threading.Event()
        scraper = threading.Thread(target=scrape_every_second, args=(stop,))
        scraper.start()
        last: dict[int, float] = {}
        firing_cpu = firing_s = 0.0
        while proc.poll() is None:
            used = sum(node_cpu_deltas(bench, last))
            if used >= FIRING_CORES * SAMPLE_S:
                firing_cpu += used
                firing_s += SAMPLE_S
            time.sleep(SAMPLE_S)
        stop.set()
        scraper.join()
        if proc.returncode != 0:
            raise SystemExit(f"fire_bench failed with exit {proc.returncode}")
        result = orjson.loads(out.read_bytes())
    return {
        "cpu_us_per_job": firing_cpu / result["received"] * 1e6,
        "firing_s": firing_s,
        "fire_rate": result["fire_rate_per_s"],
        "lateness_p50_ms": result["lateness_ms"]["p50"],
        "lateness_p99_ms": result["lateness_ms"]["p99"],
    }


def node_cpu_deltas(bench: psutil.Process, last: dict[int, float]) -> list[float]:
    """CPU seconds each delayq node process under the benchmark used since last time."""
    deltas = []
    try:
        children = bench.children(recursive=True)
    except psutil.NoSuchProcess:
        return deltas
    for child in children:
        try:
            if "cluster.cli.main" not in " ".join(child.cmdline()):
                continue
            times = child.cpu_times()
        except psutil.NoSuchProcess:
            continue
        now = times.user + times.system
        deltas.append(now - last.get(child.pid, now))
        last[child.pid] = now
    return deltas


def scrape_every_second(stop: threading.Event) -> None:
    url = f"http://127.0.0.1:{METRICS_PORT}/metrics"
    while not stop.wait(1.0):
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                answer.read()
        except OSError:
            pass  # the node is not up yet, or gone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    rate = args.jobs / args.window
    per_job_us = observe_us_per_job()
    print(f"metrics bookkeeping: {per_job_us:.2f} µs of CPU per fired job", flush=True)
    scrape_ms, scrape_bytes = asyncio.run(scrape_cpu_ms())
    print(f"one scrape: {scrape_ms:.2f} ms of node CPU ({scrape_bytes / 1024:.0f} KiB)", flush=True)
    runs = []
    for round_no in range(args.rounds):
        run = firing_cpu_us_per_job(args.jobs, args.window)
        runs.append(run)
        print(
            f"round {round_no + 1}: node CPU while firing {run['cpu_us_per_job']:.1f} µs/job "
            f"over {run['firing_s']:.1f} s, fired {run['fire_rate']:.0f}/s, lateness p50 "
            f"{run['lateness_p50_ms']:.1f} p99 {run['lateness_p99_ms']:.1f} ms",
            flush=True,
        )
    node_us = statistics.median(run["cpu_us_per_job"] for run in runs)
    node_cpu_per_s = node_us * rate / 1e6
    for interval_s in (1.0, 15.0):
        metrics_per_s = per_job_us * rate / 1e6 + scrape_ms / 1000 / interval_s
        print(
            f"at {rate:,.0f} jobs/s, scraped every {interval_s:g} s: metrics "
            f"{metrics_per_s * 1000:.1f} ms of CPU per second of {node_cpu_per_s * 1000:.0f} "
            f"ms the node uses = {metrics_per_s / node_cpu_per_s:.1%}"
        )


if __name__ == "__main__":
    main()
