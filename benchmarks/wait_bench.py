"""What waiting for a replica costs a producer: cancel() and reschedule() latency, one
call at a time and 200 at once, with redis_wait_replicas 0 and 1, alternating rounds.

    eval "$(delayq services env --redis-cluster)"      # the cluster with replicas
    python benchmarks/wait_bench.py --calls 2000 --rounds 2

Prints one line per (round, setting) and a JSON summary on the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

import orjson
import uvloop

from cluster import DelayClient
from cluster.devstack.databases import create_cluster_database, drop_cluster_database
from cluster.settings.config import Settings


def quantiles_ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(ordered[int(len(ordered) * 0.99) - 1] * 1000, 2),
    }


async def timed(call: object) -> float:
    started = time.perf_counter()
    await call  # type: ignore[misc]
    return time.perf_counter() - started


async def one_round(settings: Settings, calls: int) -> dict[str, object]:
    async with DelayClient(settings) as client:
        jobs = [{"topic": "bench.wait", "payload": n, "delay": 3600} for n in range(3 * calls)]
        ids = await client.schedule_many(jobs)
        sequential = [await timed(client.cancel(job_id)) for job_id in ids[:calls]]
        moved = [
            await timed(client.reschedule(job_id, delay=7200)) for job_id in ids[calls : 2 * calls]
        ]
        started = time.perf_counter()
        for start in range(2 * calls, 3 * calls, 200):
            await asyncio.gather(*(client.cancel(job_id) for job_id in ids[start : start + 200]))
        concurrent_rate = calls / (time.perf_counter() - started)
    return {
        "cancel": quantiles_ms(sequential),
        "reschedule": quantiles_ms(moved),
        "cancels_per_s_200_at_once": round(concurrent_rate),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    base = Settings.from_env().replace(key_prefix=f"wb{uuid.uuid4().hex[:8]}")
    settings = await create_cluster_database(base, f"delayq_{base.key_prefix}")
    results: list[dict[str, object]] = []
    try:
        for round_no in range(args.rounds):
            for wait in (0, 1):
                row = await one_round(settings.replace(redis_wait_replicas=wait), args.calls)
                row = {"round": round_no, "redis_wait_replicas": wait, **row}
                print(row, flush=True)
                results.append(row)
    finally:
        await drop_cluster_database(settings)
    print(orjson.dumps({"calls": args.calls, "results": results}).decode())


if __name__ == "__main__":
    uvloop.run(main())
