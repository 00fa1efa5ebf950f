"""arq side of benchmarks/compare.py: N deferred jobs due at a steady rate, one worker
(max_jobs 200); lateness = receive time in the job function − due time.

    python benchmarks/peers/arq_steady.py HOST PORT JOBS RATE LEAD_S PAYLOAD_BYTES
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import sys
import time
from typing import Any

import orjson
from arq import create_pool
from arq.connections import RedisSettings
from arq.worker import Worker, func


async def main(host: str, port: int, total: int, rate: float, lead_s: float,
               payload_bytes: int) -> dict[str, Any]:
    settings = RedisSettings(host=host, port=port)
    queue = f"cmp-arq-{os.getpid()}"
    lateness: list[float] = []
    finished = asyncio.Event()

    async def fire(ctx: dict[str, Any], due_ms: int, payload: str) -> None:
        lateness.append(time.time() * 1000 - due_ms)
        if len(lateness) == total:
            finished.set()

    redis = await create_pool(settings, default_queue_name=queue)
    worker = Worker(functions=[func(fire, name="fire")], redis_settings=settings,
                    queue_name=queue, max_jobs=200, keep_result=0,
                    handle_signals=False)
    running = asyncio.create_task(worker.async_run())
    payload = "x" * payload_bytes
    first_due = time.time() + lead_s
    started = time.perf_counter()
    for start in range(0, total, 500):
        await asyncio.gather(*(
            redis.enqueue_job("fire", int((first_due + i / rate) * 1000), payload,
                              _defer_until=dt.datetime.fromtimestamp(first_due + i / rate,
                                                                     dt.UTC))
            for i in range(start, min(start + 500, total))
        ))
    add_s = time.perf_counter() - started
    added_before_first_due = time.time() < first_due
    await finished.wait()
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await worker.close()
    await redis.aclose()
    lateness.sort()

    def q(p: float) -> float:
        return round(lateness[min(len(lateness) - 1, int(p * len(lateness)))], 1)

    return {"system": "arq", "jobs": total, "add_rate_per_s": round(total / add_s),
            "scheduling_finished_before_first_due": added_before_first_due,
            "lateness_ms": {"p50": q(0.5), "p99": q(0.99), "p999": q(0.999),
                            "max": round(lateness[-1], 1)}}


if __name__ == "__main__":
    host, port, jobs, rate, lead, payload = sys.argv[1:7]
    result = asyncio.run(main(host, int(port), int(jobs), float(rate), float(lead),
                              int(payload)))
    print(orjson.dumps(result).decode())
