"""schedule_many's add rate, MySQL row included, with generated or caller-given ids.

    python benchmarks/schedule_bench.py --jobs 100000 --batch 5000              # generated ids
    python benchmarks/schedule_bench.py --jobs 100000 --batch 5000 --caller-ids
    PYTHONPATH=/path/to/other/build python benchmarks/schedule_bench.py ...    # another build

Schedules --jobs jobs (a 100-byte payload each) due --due-in seconds ahead and spread over
as many again (by default 2–4 minutes: inside redis_horizon_ms, so each job is a MySQL row
and a Redis add), --batch per call, one call after another, on a fresh key prefix and a
database of its own (dropped afterwards, with the keys). Caller-given ids are
`order-<pid>-<n>-close`, as users pass their own idempotent job_id. Prints one line: the
jobs per second spent in schedule_many. Needs the local stack (`eval "$(delayq services
env)"`). The harness's ids scenario measures the same against BullMQ, through
fire_bench.py's backlog mode; this script exists beside it because it needs nothing but
the client API and cluster.devstack.databases, so it also runs against an older build (through
PYTHONPATH) for before/after figures, where fire_bench.py's newer imports would not.
"""

from __future__ import annotations

import argparse
import os
import time

import uvloop

from cluster import DelayClient, Job
from cluster.connections.redis_conn import open_redis
from cluster.devstack.databases import create_cluster_database, drop_cluster_database
from cluster.settings.config import Settings


async def run(args: argparse.Namespace) -> float:
    prefix = f"schedbench{os.getpid()}"
    settings = await create_cluster_database(
        Settings.from_env().replace(key_prefix=prefix), f"delayq_{prefix}"
    )
    try:
        start = time.time() + args.due_in
        jobs = [
            Job(
                "bench.schedule",
                "x" * 100,
                at=start + args.due_in * i / args.jobs,
                job_id=f"order-{os.getpid()}-{i}-close" if args.caller_ids else None,
            )
            for i in range(args.jobs)
        ]
        async with DelayClient(settings) as client:
            began = time.perf_counter()
            for first in range(0, len(jobs), args.batch):
                await client.schedule_many(jobs[first : first + args.batch])
            return args.jobs / (time.perf_counter() - began)
    finally:
        redis = await open_redis(settings)
        try:
            # A few keys per slot: every key of the cluster starts with its slots' tag.
            async for key in redis.scan_iter(match=f"{{{prefix}:*"):
                await redis.unlink(key)
        finally:
            await redis.aclose()
        await drop_cluster_database(settings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=5000, help="jobs per schedule_many call")
    parser.add_argument("--caller-ids", action="store_true", help="order-<pid>-<n>-close ids")
    parser.add_argument(
        "--due-in", type=float, default=120.0, help="seconds to the first due time (default 120)"
    )
    args = parser.parse_args()
    rate = uvloop.run(run(args))
    ids = "caller-given" if args.caller_ids else "generated"
    print(f"{args.jobs:,} jobs, {ids} ids, batches of {args.batch:,}: {rate:,.0f} jobs/s")


if __name__ == "__main__":
    main()
