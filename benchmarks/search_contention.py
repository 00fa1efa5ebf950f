"""What costly searches do to scheduling through the same web server, by searches a token
may run at once (web_searches_per_token).

    python benchmarks/search_contention.py [--hot-key-jobs 120000] [--searches 8]
                                           [--schedules 200] [--limits 8,2]

Fills a database of its own with --hot-key-jobs jobs of one business key (as
search_bench.py's --hot-key-jobs), then, for each limit of --limits, serves the HTTP API
in this process with that web_searches_per_token and schedules --schedules jobs one
after another with POST /v1/jobs (a producer's token) while one viewer token sends
--searches searches at once, again and again, of the shape that reads the most: the
key with a topic none of its jobs has (topic is outside the index it walks, so each
reads every job of the key, up to search_statement_max_ms). Prints per limit: the
schedule's latency p50 / p99 / max, searches answered and refused (429), and a
baseline with no search at all. Needs the local stack (`eval "$(delayq services env)"`).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import orjson
import uvloop
from aiohttp import web
from search_bench import fill

from cluster import DelayClient
from cluster.devstack.databases import throwaway_cluster
from cluster.devstack.nodes import free_port
from cluster.settings.config import Settings
from cluster.store.mysql_store import MySQLStore
from cluster.web.auth import Tokens, parse_tokens
from cluster.web.server import make_app
from cluster.web.stats import StatsSampler

PRODUCER = "contention-producer-0123456789"
VIEWER = "contention-viewer-0123456789ab"
SEARCH = "/v1/jobs?biz_id=hot-key&topic=bench.nomatch"


@asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[str]:
    """The HTTP API over a client of `settings`, in this process, as `delayq web` runs it."""
    async with DelayClient(settings) as client:
        stats = StatsSampler(settings)
        app = make_app(client, Tokens(parse_tokens(settings.web_tokens)), stats)
        runner = web.AppRunner(app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            await stats.close()
            await runner.cleanup()


async def one_limit(settings: Settings, limit: int, options: argparse.Namespace) -> dict[str, Any]:
    settings = settings.replace(
        web_tokens=f"{PRODUCER}=producer,{VIEWER}=viewer", web_searches_per_token=limit
    )
    answered = refused = 0
    stop = asyncio.Event()
    async with serving(settings) as base, aiohttp.ClientSession() as http:
        viewer = {"Authorization": f"Bearer {VIEWER}"}
        producer = {"Authorization": f"Bearer {PRODUCER}"}

        async def searcher() -> None:
            nonlocal answered, refused
            while not stop.is_set():
                async with http.get(base + SEARCH, headers=viewer) as answer:
                    await answer.read()
                    if answer.status == 429:
                        refused += 1
                        await asyncio.sleep(float(answer.headers["Retry-After"]))
                    else:
                        answered += 1

        async def schedules() -> list[float]:
            spent = []
            for n in range(options.schedules):
                body = orjson.dumps(
                    {"topic": "bench.contention", "payload": {"n": n}, "delay": 600}
                )
                began = time.perf_counter()
                async with http.post(
                    base + "/v1/jobs",
                    data=body,
                    headers={**producer, "Content-Type": "application/json"},
                ) as answer:
                    await answer.read()
                    assert answer.status == 201, answer.status
                spent.append((time.perf_counter() - began) * 1000)
            return spent

        baseline = await schedules()
        tasks = [asyncio.create_task(searcher()) for _ in range(options.searches)]
        await asyncio.sleep(1.0)  # the searches under way
        loaded = await schedules()
        stop.set()
        await asyncio.gather(*tasks)
    return {
        "web_searches_per_token": limit,
        "schedule_ms_alone": spread(baseline),
        "schedule_ms_with_searches": spread(loaded),
        "searches_answered": answered,
        "searches_refused_429": refused,
    }


def spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 1),
        "p99": round(ordered[int(len(ordered) * 0.99)], 1),
        "max": round(ordered[-1], 1),
    }


async def main(options: argparse.Namespace) -> None:
    async with throwaway_cluster(f"cont{uuid.uuid4().hex[:6]}") as settings:
        store = MySQLStore(settings, "search-contention")
        await store.open()
        try:
            await fill(store, options.hot_key_jobs, 50_000, hot=True)
        finally:
            await store.close()
        results = [
            await one_limit(settings, int(limit), options) for limit in options.limits.split(",")
        ]
    print(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hot-key-jobs", type=int, default=120_000)
    parser.add_argument("--searches", type=int, default=8)
    parser.add_argument("--schedules", type=int, default=200)
    parser.add_argument("--limits", default="8,2")
    uvloop.run(main(parser.parse_args()))
