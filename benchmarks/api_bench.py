"""Scheduling over HTTP (`delayq web`) next to the Python client, in one run.

    python benchmarks/api_bench.py                      # 50,000 jobs per way
    python benchmarks/api_bench.py --jobs 100000 --concurrency 64

Four ways of scheduling the same jobs (a 100-byte payload each, due in 2–4 minutes, so
each is a MySQL row and a Redis add), each on a fresh key prefix and database of its own:

- client, batches: `schedule_many()` with --batch jobs per call, one call after another;
- HTTP, batches: `POST /v1/jobs` with {"jobs": [...]} of --batch jobs, over one
  keep-alive connection, one request after another;
- client, single: `schedule()` of one job, --concurrency calls at a time;
- HTTP, single: `POST /v1/jobs` of one job, --concurrency requests at a time over as
  many keep-alive connections.

The server is one `delayq web` process (with a bearer token, as in production), the
load comes from this process; both share the machine with MySQL and Redis. Prints the
jobs per second of each way and HTTP's ratio to the client's. Needs the local stack
(`eval "$(delayq services env)"`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import orjson
import uvloop

from cluster import DelayClient
from cluster.devstack.databases import throwaway_cluster
from cluster.devstack.nodes import settings_env
from cluster.settings.config import Settings

TOKEN = "api-bench-token-0123456789abcdef"


def jobs(count: int, caller_ids: bool) -> list[dict[str, Any]]:
    start = time.time() + 120
    return [
        {
            "topic": "bench.api",
            "payload": "x" * 100,
            "at": start + 120 * i / count,
            **({"job_id": f"order-{os.getpid()}-{i}-close"} if caller_ids else {}),
        }
        for i in range(count)
    ]


@asynccontextmanager
async def web_server(settings: Settings) -> AsyncIterator[str]:
    env = {**os.environ, **settings_env(settings), "DELAYQ_WEB_TOKENS": f"{TOKEN}=producer"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cluster.cli.main", "web", "--port", "0",
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    assert process.stdout is not None
    try:
        line = b""
        while b"delayq web on" not in line:
            line = await asyncio.wait_for(process.stdout.readline(), 60)
            if not line:
                raise RuntimeError("delayq web exited")
        yield line.decode().split(" on ", 1)[1].strip().rstrip("/")
    finally:
        process.terminate()
        await process.wait()


async def concurrently(count: int, concurrency: int, one: Callable[[int], Awaitable[None]]) -> None:
    next_index = iter(range(count))

    async def worker() -> None:
        for index in next_index:
            await one(index)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def client_batches(settings: Settings, work: list[dict[str, Any]], batch: int) -> float:
    async with DelayClient(settings) as client:
        began = time.perf_counter()
        for first in range(0, len(work), batch):
            await client.schedule_many(work[first : first + batch])
        return len(work) / (time.perf_counter() - began)


async def client_single(settings: Settings, work: list[dict[str, Any]], concurrency: int) -> float:
    async with DelayClient(settings) as client:

        async def one(index: int) -> None:
            await client.schedule(**work[index])

        began = time.perf_counter()
        await concurrently(len(work), concurrency, one)
        return len(work) / (time.perf_counter() - began)


async def http_batches(settings: Settings, work: list[dict[str, Any]], batch: int) -> float:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    async with web_server(settings) as base, aiohttp.ClientSession(headers=headers) as http:
        began = time.perf_counter()
        for first in range(0, len(work), batch):
            body = orjson.dumps({"jobs": work[first : first + batch]})
            async with http.post(base + "/v1/jobs", data=body) as answer:
                if answer.status != 200:
                    raise RuntimeError(f"{answer.status}: {await answer.text()}")
                await answer.read()
        return len(work) / (time.perf_counter() - began)


async def http_single(settings: Settings, work: list[dict[str, Any]], concurrency: int) -> float:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with (
        web_server(settings) as base,
        aiohttp.ClientSession(headers=headers, connector=connector) as http,
    ):

        async def one(index: int) -> None:
            async with http.post(base + "/v1/jobs", data=orjson.dumps(work[index])) as answer:
                if answer.status not in (200, 201):
                    raise RuntimeError(f"{answer.status}: {await answer.text()}")
                await answer.read()

        began = time.perf_counter()
        await concurrently(len(work), concurrency, one)
        return len(work) / (time.perf_counter() - began)


async def run(args: argparse.Namespace) -> dict[str, float]:
    rates: dict[str, float] = {}
    ways: list[tuple[str, Callable[[Settings, list[dict[str, Any]]], Awaitable[float]]]] = [
        ("client, batches", lambda s, w: client_batches(s, w, args.batch)),
        ("HTTP, batches", lambda s, w: http_batches(s, w, args.batch)),
        ("client, single", lambda s, w: client_single(s, w, args.concurrency)),
        ("HTTP, single", lambda s, w: http_single(s, w, args.concurrency)),
    ]
    for name, way in ways:
        count = args.jobs if "batches" in name else args.single_jobs
        tag = name.split(",")[0][:4] + name[-6:-1]
        async with throwaway_cluster(f"apibench{os.getpid()}{tag}") as settings:
            rates[name] = await way(settings, jobs(count, args.caller_ids))
        print(f"{name:16} {rates[name]:>10,.0f} jobs/s", flush=True)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=50_000, help="jobs of the batch ways")
    parser.add_argument(
        "--single-jobs", type=int, default=10_000, help="jobs of the one-job-per-call ways"
    )
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--caller-ids", action="store_true", help="order-<pid>-<n>-close ids")
    args = parser.parse_args()
    rates = uvloop.run(run(args))
    print(
        f"HTTP/client: batches ×{rates['HTTP, batches'] / rates['client, batches']:.2f}, "
        f"single ×{rates['HTTP, single'] / rates['client, single']:.2f}"
    )


if __name__ == "__main__":
    main()
