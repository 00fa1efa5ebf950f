"""Retention under a steady stream: the job and history tables stop growing.

    python benchmarks/retention_bench.py [--rate 500] [--duration 180] [--keep 30]
    python benchmarks/retention_bench.py --keep 0 --prune-at-end   # the same, by hand

Starts one node with retention_days set to --keep seconds (and retention_interval_s
5), schedules --rate jobs per second due one second ahead for --duration seconds, and
every --every seconds prints the rows of the job and history tables and their size
(data + index bytes, InnoDB's estimate after ANALYZE TABLE). Without retention the rows
grow by --rate every second; with it they level off at about rate x (keep + interval
+ lead). --keep 0 turns retention off; --prune-at-end then deletes every fired job the
way `delayq db prune --older-than 1s` does and prints the tables before and after, and
how long it took. Writes the series to benchmarks/results/. Needs the local stack.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

import aiomysql
import orjson
import uvloop
from fire_bench import RESULTS, bench_cluster, kafka_topic, mysql_size

from cluster import DelayClient, Job
from cluster.settings.config import Settings
from cluster.store.mysql_store import MySQLStore
from cluster.store.retention import prune
from cluster.store.sql import parse_mysql_url

RETENTION_INTERVAL_S = 5


async def row_counts(settings: Settings) -> tuple[int, int]:
    """(job rows, history rows) over every shard of the cluster's database."""
    conn = await aiomysql.connect(**parse_mysql_url(settings.mysql_url))
    try:
        async with conn.cursor() as cur:
            await cur.execute("SHOW TABLES")
            tables = [name for (name,) in await cur.fetchall()]
            counts = {"job_": 0, "job_history_": 0}
            for table in tables:
                kind = "job_history_" if table.startswith("job_history_") else "job_"
                if not table.startswith("job_"):
                    continue
                await cur.execute(f"SELECT COUNT(*) FROM `{table}`")
                (rows,) = await cur.fetchone()
                counts[kind] += int(rows)
            return counts["job_"], counts["job_history_"]
    finally:
        conn.close()


async def produce(settings: Settings, topic: str, rate: int, duration_s: float) -> int:
    """rate jobs per second, due one second ahead, for duration_s; returns how many."""
    sent = 0
    started = time.monotonic()
    async with DelayClient(settings) as client:
        while (elapsed := time.monotonic() - started) < duration_s:
            due = int(elapsed * rate) - sent
            if due > 0:
                await client.schedule_many(
                    [Job(topic, {"n": sent + i}, delay=1.0) for i in range(due)]
                )
                sent += due
            await asyncio.sleep(0.05)
    return sent


async def reading(settings: Settings, started: float) -> dict[str, float]:
    jobs, history = await row_counts(settings)
    size = await mysql_size(settings)
    point: dict[str, float] = {
        "t_s": round(time.monotonic() - started),
        "job_rows": jobs,
        "history_rows": history,
        "mysql_bytes": size,
    }
    print(
        f"t={point['t_s']:>4} s  job rows {jobs:>7}  history rows {history:>7}  "
        f"tables {size / 2**20:6.1f} MiB",
        flush=True,
    )
    return point


def print_summary(series: list[dict[str, float]], by_hand: dict[str, Any]) -> None:
    """The readings as one Markdown table, a column per reading (docs/benchmarks.md)."""
    columns = [(f"{p['t_s']:g} s", p) for p in series]
    if by_hand:
        columns += [("before pruning", by_hand["before"]), ("after pruning", by_hand["after"])]
    rows = [
        ("job rows", lambda p: f"{int(p['job_rows']):,}"),
        ("history rows", lambda p: f"{int(p['history_rows']):,}"),
        ("tables (data + index)", lambda p: f"{p['mysql_bytes'] / 2**20:.1f} MiB"),
    ]
    print()
    print("| t | " + " | ".join(name for name, _ in columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for label, cell in rows:
        print(f"| {label} | " + " | ".join(cell(p) for _, p in columns) + " |")


async def prune_by_hand(settings: Settings) -> dict[str, float]:
    store = MySQLStore(settings, "bench")
    await store.open()
    try:
        started = time.monotonic()
        pruned = await prune(store, 1.0, settings.retention_batch)
        took = time.monotonic() - started
    finally:
        await store.close()
    print(f"pruned {pruned.jobs} jobs and {pruned.history} history rows in {took:.1f} s")
    return {"jobs": pruned.jobs, "history": pruned.history, "seconds": round(took, 2)}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    os.environ["DELAYQ_RETENTION_DAYS"] = repr(args.keep / 86400)  # 0: off
    os.environ["DELAYQ_RETENTION_INTERVAL_S"] = str(RETENTION_INTERVAL_S)
    series: list[dict[str, float]] = []
    async with bench_cluster(1) as settings:
        topic = f"bench.{settings.key_prefix}"
        async with kafka_topic(settings, topic):
            producer = asyncio.create_task(produce(settings, topic, args.rate, args.duration))
            started = time.monotonic()
            while not producer.done() or time.monotonic() - started < args.duration + args.keep:
                await asyncio.sleep(args.every)
                series.append(await reading(settings, started))
            scheduled = await producer
            by_hand: dict[str, Any] = {}
            if args.prune_at_end:
                await asyncio.sleep(5)  # the last jobs fire and are recorded
                by_hand["before"] = await reading(settings, started)
                by_hand["pruned"] = await prune_by_hand(settings)
                by_hand["after"] = await reading(settings, started)
    return {
        "benchmark": "retention_bench",
        "rate_per_s": args.rate,
        "duration_s": args.duration,
        "keep_s": args.keep,
        "retention_interval_s": RETENTION_INTERVAL_S,
        "scheduled": scheduled,
        "series": series,
        "prune_at_end": by_hand,
        "command": " ".join(sys.argv),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=500, help="jobs scheduled per second")
    parser.add_argument("--duration", type=float, default=180.0, help="seconds of scheduling")
    parser.add_argument("--keep", type=float, default=30.0, help="retention, in seconds (0: off)")
    parser.add_argument(
        "--prune-at-end", action="store_true", help="then prune every fired job by hand"
    )
    parser.add_argument("--every", type=float, default=15.0, help="seconds between readings")
    args = parser.parse_args()
    result = uvloop.run(run(args))
    print(
        f"{result['scheduled']:,} jobs scheduled at {args.rate}/s for {args.duration:g} s, "
        f"retention {args.keep:g} s (0: off), retention_interval_s {RETENTION_INTERVAL_S}"
    )
    print_summary(result["series"], result["prune_at_end"])
    path = RESULTS / f"retention_bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
