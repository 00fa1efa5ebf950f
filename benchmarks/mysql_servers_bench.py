"""Schedule and fire rates with the logical shards on 1, 2 and 3 MySQL servers, and the
CPU each MySQL server spends per job.

    eval "$(delayq services env --mysql-servers 3)"
    python benchmarks/mysql_servers_bench.py --jobs 200000 --window 10 --runs 2 --lead 25

For each count N of --servers, each of --runs repetitions and each --producers count P:
a fire_bench-like run (benchmarks/fire_bench.py: a database of its own, one `delayq node`
process, a fresh topic read by a consumer in this process) with mysql_databases =
--databases logical shards placed by `db migrate`'s even split over the first N servers
(mysql_url, then DELAYQ_MYSQL_SERVERS in order), so every N holds the same shards and
only their placement differs. The jobs (due times uniformly random over --window,
starting --lead s after scheduling begins) are scheduled with schedule_many, --batch per
call, by P concurrent tasks sharing one client in this process. The runs go round the
counts (all N of one repetition, then the next), so slow spells of a shared machine
fall on every N.

Per run: schedule rate (jobs / seconds in schedule_many), fire rate (records / span of
their fired_ms), lateness p50/p99 at the consumer, and CPU in two phases: "schedule" from
the first schedule_many to the first due time (what MariaDB flushes in the background
after the commits counts with scheduling) and "fire" from the first due time to SETTLE_S
after the last job arrived (the node records the last fires in MySQL after publishing
them). Of each MariaDB server: the CPU of the threads serving the run's connections
(benchmarks/mysql_servers_cpu.py; robust to the other clients of a shared server), also
less what they spent per second in the --idle seconds sampled before scheduling, while
the node only polled; and of its background threads. Of the node, this process (the
producer while scheduling, the consumer while firing), Redis and the whole mariadbd
processes: their CPU less their idle rate. All per job, in µs; the JSON has the raw
figures too.

Prints two tables (the rates; the CPU per job) and writes every run to benchmarks/results/
mysql_servers_bench-<time>.json (or --out). Needs the local stack with --mysql-servers 3
(or as many servers as the largest N) and psutil (the dev extra).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import psutil
import uvloop
from fire_bench import (
    RESULTS,
    Received,
    bench_cluster,
    consume,
    due_times,
    fire_result,
    kafka_topic,
    machine,
    start_consumer,
)
from mysql_servers_cpu import (
    ThreadCpu,
    cpu_table,
    delta,
    server_processes,
    snapshot,
    thread_delta,
    watched_processes,
)

from cluster import DelayClient, Job
from cluster.settings.config import Settings
from cluster.store.sql import parse_mysql_url

SETTLE_S = 2.0
CORES = psutil.cpu_count() or 1
PROGRESS_EVERY_S = 3.0


@dataclass(frozen=True)
class Mark:
    """The clock and the CPU counters at a phase's start or end."""

    at: float
    threads: dict[str, dict[str, float]]  # ThreadCpu.sample()
    processes: dict[str, float]  # snapshot()


class Progress:
    """A line on stderr at most every PROGRESS_EVERY_S seconds."""

    def __init__(self, label: str) -> None:
        self.label, self.last = label, 0.0

    def say(self, text: str, force: bool = False) -> None:
        if force or time.monotonic() - self.last >= PROGRESS_EVERY_S:
            self.last = time.monotonic()
            print(f"{time.strftime('%H:%M:%S')} {self.label} {text}", file=sys.stderr, flush=True)


async def schedule(
    settings: Settings,
    topic: str,
    dues: list[int],
    args: argparse.Namespace,
    producers: int,
    progress: Progress,
) -> float:
    """schedule_many of --batch jobs at a time by `producers` concurrent tasks; returns
    the jobs per second."""
    payload = {"data": "x" * args.payload_bytes}
    starts = iter(range(0, len(dues), args.batch))  # shared: each batch goes to one task
    done = 0
    async with DelayClient(settings) as client:
        began = time.perf_counter()

        async def producer() -> None:
            nonlocal done
            for start in starts:
                part = dues[start : start + args.batch]
                await client.schedule_many([Job(topic, payload, at=due / 1000) for due in part])
                done += len(part)
                rate = done / (time.perf_counter() - began)
                progress.say(f"scheduled {done:,}/{len(dues):,} ({rate:,.0f} jobs/s)")

        await asyncio.gather(*(producer() for _ in range(producers)))
        return len(dues) / (time.perf_counter() - began)


async def report_received(got: Received, expected: int, progress: Progress) -> None:
    while True:
        await asyncio.sleep(PROGRESS_EVERY_S)
        progress.say(f"received {len(got.ids):,}/{expected:,}", force=True)


async def sleep_until(epoch_s: float) -> None:
    await asyncio.sleep(max(0.0, epoch_s - time.time()))


async def one_run(
    args: argparse.Namespace, servers: int, producers: int, label: str
) -> dict[str, Any]:
    env = Settings.from_env()
    extras = env.mysql_servers.split()
    base = env.replace(
        mysql_servers=" ".join(extras[: servers - 1]), mysql_databases=args.databases
    )
    progress = Progress(label)
    got = Received()
    all_servers = env.replace(mysql_databases=args.databases)
    servers_running = server_processes(all_servers)  # before anything is created
    progress.say("creating the database and starting the node", force=True)
    async with bench_cluster(1, base=base) as settings:
        watched = watched_processes(settings, servers_running)
        threads = ThreadCpu(parse_mysql_url(settings.mysql_url)["db"])

        async def mark() -> Mark:
            return Mark(time.time(), await threads.sample(), snapshot(watched))

        topic = f"bench.{settings.key_prefix}"
        async with kafka_topic(settings, topic):
            reopen = functools.partial(start_consumer, settings, topic)
            consumer = await reopen()
            try:
                await threads.open(all_servers, watched)
                idle_from = await mark()
                await asyncio.sleep(args.idle)
                idle_to = await mark()
                idle_s = idle_to.at - idle_from.at
                idle = {
                    k: v / idle_s for k, v in delta(idle_to.processes, idle_from.processes).items()
                }
                idle_threads = thread_delta(idle_to.threads, idle_from.threads)
                first_due_ms = round((time.time() + args.lead) * 1000)
                dues = due_times("uniform", args.jobs, first_due_ms, args.window)
                last_due_s = dues[-1] / 1000
                consuming = asyncio.create_task(
                    consume(consumer, reopen, got, args.jobs, last_due_s, last_due_s + 300)
                )
                marks = {"schedule": await mark()}
                rate = await schedule(settings, topic, dues, args, producers, progress)
                scheduled_at = time.time()
                progress.say(f"scheduled: {rate:,.0f} jobs/s", force=True)
                await sleep_until(first_due_ms / 1000)
                marks["fire"] = await mark()
                reporter = asyncio.create_task(report_received(got, args.jobs, progress))
                try:
                    await consuming
                finally:
                    reporter.cancel()
                await asyncio.sleep(SETTLE_S)
                marks["end"] = await mark()
            finally:
                await threads.close()
                await consumer.stop()
    fired = fire_result(
        argparse.Namespace(
            pattern="uniform",
            jobs=args.jobs,
            caller_ids=False,
            nodes=1,
            payload_bytes=args.payload_bytes,
        ),
        settings,
        got,
        first_due_ms,
        args.window,
        args.lead,
        rate,
        scheduled_at * 1000 < first_due_ms,
    )
    jobs: int = args.jobs

    def per_job(cpu_s: float) -> float:
        return round(cpu_s / jobs * 1e6, 1)

    phases = {}
    for phase, end in (("schedule", "fire"), ("fire", "end")):
        first, last = marks[phase], marks[end]
        seconds = last.at - first.at
        raw = delta(last.processes, first.processes)
        by_thread = thread_delta(last.threads, first.threads)
        phases[phase] = {
            "wall_s": round(seconds, 2),
            "cpu_s": raw,
            "mysql_threads_cpu_s": by_thread,
            "machine_busy": round(raw["machine"] / seconds / CORES, 3),
            "cpu_us_per_job": {name: per_job(raw[name]) for name in raw if name != "machine"},
            "cpu_us_per_job_net_of_idle": {
                name: per_job(max(0.0, raw[name] - idle[name] * seconds))
                for name in raw
                if name != "machine"
            },
            "ours_us_per_job": {k: per_job(v["ours"]) for k, v in by_thread.items()},
            # Less what the node's connections spent per second while idle (its polling).
            "ours_net_us_per_job": {
                k: per_job(max(0.0, v["ours"] - idle_threads[k]["ours"] / idle_s * seconds))
                for k, v in by_thread.items()
            },
            "background_us_per_job": {k: per_job(v["background"]) for k, v in by_thread.items()},
        }
    result = {
        "servers": servers,
        "producers": producers,
        "server_of_shard": {str(d): d * servers // args.databases for d in range(args.databases)},
        "schedule_rate_per_s": round(rate),
        "scheduling_s": round(scheduled_at - marks["schedule"].at, 2),
        "idle_cpu_per_s": {k: round(v, 4) for k, v in idle.items()},
        # The node's own connections while no job is due: its polling, per server.
        "idle_ours_cpu_ms_per_s": {
            k: round(v["ours"] / idle_s * 1000, 2) for k, v in idle_threads.items()
        },
        "phases": phases,
        **{
            k: fired[k]
            for k in (
                "received",
                "unique",
                "missing",
                "early",
                "duplicates",
                "fire_rate_per_s",
                "lateness_ms",
                "node_lateness_ms",
                "scheduling_finished_before_first_due",
            )
        },
        "load_average": os.getloadavg(),
    }
    progress.say(
        f"fire rate {result['fire_rate_per_s']:,} jobs/s, lateness p50/p99 "
        f"{result['lateness_ms']['p50']}/{result['lateness_ms']['p99']} ms, "
        f"missing {result['missing']}, early {result['early']}",
        force=True,
    )
    return result


# ----- the tables ------------------------------------------------------------------------


def spread(values: Sequence[float], unit: str = "") -> str:
    """min / median / max (one value alone if there is one run)."""
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:,.0f}{unit}"
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{low:,.0f} / {mid:,.0f} / {high:,.0f}{unit}"


def rate_table(runs: list[dict[str, Any]], databases: int, producer_counts: list[int]) -> str:
    head = ["MySQL servers", "shards per server"]
    head += [f"schedule rate, {p} producer task{'s' if p > 1 else ''}" for p in producer_counts]
    head += ["fire rate", "lateness p50", "lateness p99", "runs"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n in sorted({r["servers"] for r in runs}):
        mine = [r for r in runs if r["servers"] == n]
        cells = [str(n), f"{databases / n:g}"]
        for p in producer_counts:
            rates = [r["schedule_rate_per_s"] for r in mine if r["producers"] == p]
            cells.append(spread(rates, " /s"))
        cells.append(spread([r["fire_rate_per_s"] for r in mine], " /s"))
        cells.append(spread([r["lateness_ms"]["p50"] for r in mine], " ms"))
        cells.append(spread([r["lateness_ms"]["p99"] for r in mine], " ms"))
        cells.append(str(len(mine)))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ----- main --------------------------------------------------------------------------------


async def run_all(args: argparse.Namespace, save: Callable[[list[dict[str, Any]]], None]) -> None:
    runs: list[dict[str, Any]] = []
    total = args.runs * len(args.servers) * len(args.producers)
    for repetition in range(1, args.runs + 1):
        for servers in args.servers:
            for producers in args.producers:
                label = (
                    f"[{len(runs) + 1}/{total}] servers={servers} producers={producers} "
                    f"run {repetition}:"
                )
                try:
                    result = await one_run(args, servers, producers, label)
                except Exception as exc:  # e.g. a shared server restarted: go on, say so
                    print(f"{label} failed: {exc!r}", file=sys.stderr, flush=True)
                    result = {"servers": servers, "producers": producers, "error": repr(exc)}
                runs.append(result | {"repetition": repetition})
                save(runs)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--window", type=float, default=10.0, help="seconds the dues span")
    parser.add_argument(
        "--servers", type=int, nargs="+", default=[1, 2, 3], help="server counts to run"
    )
    parser.add_argument(
        "--producers",
        type=int,
        nargs="+",
        default=[1, 4],
        help="concurrent schedule_many tasks (one process), each count a run of its own",
    )
    parser.add_argument("--runs", type=int, default=2, help="repetitions of every combination")
    parser.add_argument("--databases", type=int, default=6, help="logical shards (mysql_databases)")
    parser.add_argument("--batch", type=int, default=5000, help="jobs per schedule_many")
    parser.add_argument("--payload-bytes", type=int, default=80)
    parser.add_argument(
        "--lead",
        type=float,
        default=None,
        help="seconds from the start of scheduling to the first due time (default 5 + jobs/6000)",
    )
    parser.add_argument(
        "--idle", type=float, default=6.0, help="seconds of idle CPU sampling before each run"
    )
    parser.add_argument("--out", type=Path, default=None, help="where to write the JSON")
    args = parser.parse_args()
    available = 1 + len(Settings.from_env().mysql_servers.split())
    if min(args.servers) < 1 or max(args.servers) > available:
        parser.error(
            f"--servers must be within 1..{available}: mysql_url and DELAYQ_MYSQL_SERVERS "
            f'name {available} (`eval "$(delayq services env --mysql-servers 3)"`)'
        )
    if max(args.servers) > 1 and args.databases < max(args.servers):
        parser.error("--databases must be at least the largest --servers")
    if args.lead is None:
        args.lead = 5 + args.jobs / 6000
    return args


def main() -> None:
    args = parse_args()
    path = args.out or RESULTS / f"mysql_servers_bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    command = " ".join(["python", "benchmarks/mysql_servers_bench.py", *sys.argv[1:]])

    def save(runs: list[dict[str, Any]]) -> None:
        document = {
            "benchmark": "mysql_servers_bench",
            "command": command,
            "jobs": args.jobs,
            "window_s": args.window,
            "databases": args.databases,
            "batch": args.batch,
            "machine": machine(),
            "runs": runs,
        }
        path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))

    runs: list[dict[str, Any]] = []

    def keep(done: list[dict[str, Any]]) -> None:
        runs[:] = done
        save(done)

    uvloop.run(run_all(args, keep))
    failed = [r for r in runs if "error" in r]
    runs[:] = [r for r in runs if "error" not in r]
    print(f"\n{command}\n")
    print(rate_table(runs, args.databases, args.producers))
    print("\nCPU µs per job, the median of the runs:\n")
    print(cpu_table(runs, max(args.servers)))
    print(f"\nwritten to {path}")
    if failed:
        print(f"{len(failed)} run(s) failed (left out of the tables): see the JSON")
    if any(r["missing"] or r["early"] for r in runs):
        sys.exit("some jobs were missing or early")


if __name__ == "__main__":
    main()
