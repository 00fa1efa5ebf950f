"""arq side of benchmarks/harness.py; runs in its own virtualenv (requirements.txt).

    python bench.py fire    --redis URL --jobs N --rate R --lead S --give-up S --raw FILE
    python bench.py backlog --redis URL --jobs N --start-in S --spread S
    (both take --payload-bytes B, default 100)

fire: N jobs enqueued with enqueue_job(..., _defer_until=due), 500 calls at a time, due
evenly at R/s from S seconds after the start; one worker in this process (max_jobs 200,
arq's other settings at their defaults) notes each job's receive and due time and writes
them as float64 pairs to FILE (read by benchmarks/summary.py). Gives up --give-up seconds
after the last due time.
backlog: N deferred jobs due from --start-in seconds ahead, spread over --spread seconds,
no worker; Redis INFO used_memory before and after the enqueues (read on a connection of
its own once the enqueue pool is closed) and the MEMORY USAGE of the run's keys, then the
jobs and the queue are deleted and used_memory read again. Each mode prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

from arq import create_pool
from arq.connections import ArqRedis, RedisSettings
from arq.constants import job_key_prefix
from arq.worker import Worker, func
from redis.asyncio import Redis

CONCURRENT_ENQUEUES = 500
MAX_JOBS = 200


async def enqueue_all(
    pool: ArqRedis, queue: str, total: int, due_of: Callable[[int], int], payload: str
) -> float:
    """Enqueue job i (id <queue>-<i>) deferred until due_of(i) ms; returns jobs per second."""
    started = time.perf_counter()
    for start in range(0, total, CONCURRENT_ENQUEUES):
        await asyncio.gather(
            *(
                pool.enqueue_job(
                    "fire",
                    due_of(i),
                    payload,
                    _job_id=f"{queue}-{i}",
                    _queue_name=queue,
                    _defer_until=dt.datetime.fromtimestamp(due_of(i) / 1000, dt.UTC),
                )
                for i in range(start, min(start + CONCURRENT_ENQUEUES, total))
            )
        )
    return total / (time.perf_counter() - started)


async def fire(settings: RedisSettings, args: argparse.Namespace) -> dict[str, Any]:
    queue = f"bench-arq-{time.time_ns()}"
    pairs = array("d")
    seen: set[str] = set()
    duplicates = 0
    finished = asyncio.Event()

    async def on_job(ctx: dict[str, Any], due_ms: int, payload: str) -> None:
        nonlocal duplicates
        now = time.time() * 1000
        if ctx["job_id"] in seen:
            duplicates += 1
            return
        seen.add(ctx["job_id"])
        pairs.extend((now, due_ms))
        if len(seen) == args.jobs:
            finished.set()

    pool = await create_pool(settings, default_queue_name=queue)
    worker = Worker(
        functions=[func(on_job, name="fire")],
        redis_settings=settings,
        queue_name=queue,
        max_jobs=MAX_JOBS,
        keep_result=0,
        handle_signals=False,
    )
    running = asyncio.create_task(worker.async_run())
    first_due: int = round((time.time() + args.lead) * 1000)
    per_s: int = args.rate

    def due_of(i: int) -> int:
        return first_due + i * 1000 // per_s

    rate = await enqueue_all(pool, queue, args.jobs, due_of, "x" * args.payload_bytes)
    added_in_time = time.time() * 1000 < first_due
    give_up_s = (due_of(args.jobs - 1) / 1000 + args.give_up) - time.time()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(finished.wait(), max(give_up_s, 0))
    running.cancel()
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await running
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await worker.close()
    await delete_jobs(pool, queue, args.jobs)
    await pool.aclose()
    args.raw.write_bytes(pairs.tobytes())
    return {
        "mode": "fire",
        "jobs": args.jobs,
        "received": len(seen),
        "duplicates": duplicates,
        "add_rate_per_s": round(rate),
        "first_due_ms": first_due,
        "scheduling_finished_before_first_due": added_in_time,
    }


async def backlog(settings: RedisSettings, args: argparse.Namespace) -> dict[str, Any]:
    queue = f"bench-arq-{time.time_ns()}"
    probe = Redis(host=settings.host, port=settings.port, db=settings.database)
    before = await redis_facts(probe)
    start: int = round((time.time() + args.start_in) * 1000)
    spread_ms: int = round(args.spread * 1000)
    jobs: int = args.jobs

    def due_of(i: int) -> int:
        return start + i * spread_ms // jobs

    pool = await create_pool(settings, default_queue_name=queue)
    rate = await enqueue_all(pool, queue, args.jobs, due_of, "x" * args.payload_bytes)
    await pool.connection_pool.disconnect()  # its up to 500 connections are not job data
    after = await redis_facts(probe)
    own_bytes, own_keys = await key_usage(probe, [queue, *job_keys(queue, args.jobs)])
    await delete_jobs(pool, queue, args.jobs)
    await pool.aclose()
    cleaned = await redis_facts(probe)
    await probe.aclose()
    return {
        "mode": "backlog",
        "jobs": args.jobs,
        "add_rate_per_s": round(rate),
        "redis": {
            "used_memory_before": before[0],
            "used_memory_after": after[0],
            "used_memory_after_cleanup": cleaned[0],
            "keys_added": after[1] - before[1],
            "own_keys": own_keys,
            "own_keys_memory_usage": own_bytes,
        },
        "redis_bytes_per_job": round((after[0] - before[0]) / args.jobs, 1),
        "own_keys_bytes_per_job": round(own_bytes / args.jobs, 1),
    }


def job_keys(queue: str, total: int) -> list[str]:
    return [f"{job_key_prefix}{queue}-{i}" for i in range(total)]


async def delete_jobs(redis: Redis, queue: str, total: int) -> None:
    """The queue's sorted set and every job key this run made (arq has no obliterate)."""
    await redis.delete(queue)
    keys = job_keys(queue, total)
    for start in range(0, total, 1000):
        await redis.unlink(*keys[start : start + 1000])


async def key_usage(redis: Redis, keys: list[str]) -> tuple[int, int]:
    """(bytes, keys): MEMORY USAGE (every element counted) summed over those of `keys` that
    exist; unlike used_memory, other clients of the same Redis do not change it."""
    total = found = 0
    for start in range(0, len(keys), 1000):
        pipe = redis.pipeline(transaction=False)
        for key in keys[start : start + 1000]:
            pipe.memory_usage(key, samples=0)
        sizes = [size for size in await pipe.execute() if size is not None]
        total, found = total + sum(sizes), found + len(sizes)
    return total, found


async def redis_facts(redis: Redis) -> tuple[int, int]:
    """(used_memory, keys in the database), once any lazy free has finished."""
    for _ in range(100):
        memory = await redis.info("memory")
        if not memory.get("lazyfree_pending_objects"):
            break
        await asyncio.sleep(0.1)
    return int(memory["used_memory"]), int(await redis.dbsize())


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["fire", "backlog"])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--rate", type=int, help="fire: jobs due per second")
    parser.add_argument("--lead", type=float, help="fire: seconds to the first due time")
    parser.add_argument("--give-up", type=float, default=120.0)
    parser.add_argument("--raw", type=Path, help="fire: where to write the pairs")
    parser.add_argument("--start-in", type=float, default=3600.0)
    parser.add_argument("--spread", type=float, default=3600.0)
    parser.add_argument("--payload-bytes", type=int, default=100)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    settings = RedisSettings.from_dsn(args.redis)
    run = fire if args.mode == "fire" else backlog
    result = asyncio.run(run(settings, args))
    print(json.dumps({"system": "arq", **result}))


if __name__ == "__main__":
    main()
