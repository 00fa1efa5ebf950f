"""How soon a job scheduled inside the caller's transaction (schedule_in) reaches Redis
after the commit, and what such a transaction costs.

    python benchmarks/outbox_bench.py                 # 500 one-job transactions
    python benchmarks/outbox_bench.py --jobs 2000 --per-transaction 10

Starts one `delayq node` on a fresh key prefix and database (dropped afterwards), then
commits --jobs jobs due two minutes ahead (inside the Redis horizon, so the node adds
each to Redis at once, and none fires during the run), --per-transaction per
transaction, one transaction after another through one aiomysql connection, each after
a random pause of up to 100 ms (so commits fall at random moments of the node's polls). After each
commit it polls the job's slot in Redis every millisecond until the node has added the
job, and records commit → in Redis. Prints the pick-up latency (p50, p99, max), the
commits per second, and outbox_poll_ms. Needs the local stack (`eval "$(delayq services
env)"`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import tempfile
import time
from pathlib import Path

import aiomysql
import uvloop

from cluster import DelayClient
from cluster.connections.redis_conn import open_redis
from cluster.devstack.databases import throwaway_cluster
from cluster.devstack.nodes import NodeProcess
from cluster.model.keys import slot_of
from cluster.settings.config import Settings
from cluster.store.sql import mysql_connect_args


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(args: argparse.Namespace) -> None:
    async with throwaway_cluster(f"outboxbench{os.getpid()}") as settings:
        await measure(args, settings)


async def measure(args: argparse.Namespace, settings: Settings) -> None:
    redis = await open_redis(settings)
    node = NodeProcess("outbox-bench", Path(tempfile.mkdtemp()), settings=settings)
    try:
        await node.wait_ready()
        async with DelayClient(settings) as client:
            conn = await aiomysql.connect(charset="utf8mb4", **mysql_connect_args(settings))
            waits: list[float] = []
            commit_s = 0.0
            for first in range(0, args.jobs, args.per_transaction):
                ids = [
                    f"tx-{i}" for i in range(first, min(first + args.per_transaction, args.jobs))
                ]
                # Commits at random moments, not right after the node's last poll.
                await asyncio.sleep(random.uniform(0, 0.1))
                began = time.perf_counter()
                await conn.begin()
                for job_id in ids:
                    await client.schedule_in(
                        conn, "bench.outbox", "x" * 100, delay=120, job_id=job_id
                    )
                await conn.commit()
                committed = time.perf_counter()
                commit_s += committed - began
                last = ids[-1]
                jobs_key = client.keys.slot(slot_of(last, settings.slots)).jobs
                deadline = committed + 30
                while not await redis.hexists(jobs_key, last):
                    if time.perf_counter() > deadline:
                        raise RuntimeError(f"{last} did not reach Redis within 30 s")
                    await asyncio.sleep(0.001)
                waits.append((time.perf_counter() - committed) * 1000)
            conn.close()
        print(
            f"{args.jobs:,} jobs, {args.per_transaction} per transaction, "
            f"outbox_poll_ms={settings.outbox_poll_ms}: commit → in Redis "
            f"p50 {quantile(waits, 0.5):.1f} ms, p99 {quantile(waits, 0.99):.1f} ms, "
            f"max {max(waits):.1f} ms; schedule_in + commit {args.jobs / commit_s:,.0f} jobs/s"
        )
    finally:
        await node.stop()
        await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--per-transaction", type=int, default=1)
    uvloop.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
