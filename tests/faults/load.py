"""The fault suite's load: PER_TICK jobs every TICK_S, due 0.3-2 s ahead, each call
logged in a Ledger (for a time, or until stopped); and `reading`, which keeps the
collector polling meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from cluster import DelayClient
from tests.conftest import Collector
from tests.faults.verdict import Ledger

LOAD_S = 6.0
TICK_S = 0.1
PER_TICK = 50  # 500 jobs/s


async def steady_load(
    ledger: Ledger,
    client: DelayClient,
    topic: str,
    seconds: float = LOAD_S,
    extra: Callable[[int], list[dict[str, Any]]] | None = None,
    *,
    stop: asyncio.Event | None = None,
    errors: list[str] | None = None,
) -> None:
    """PER_TICK jobs every TICK_S (plus extra(tick)'s jobs each tick) for `seconds`, or,
    given `stop`, until it is set (it also cuts the wait between two ticks short).
    What a failed call raised goes to `errors` when given."""
    rng = random.Random(3)
    end = time.monotonic() + seconds
    tick = 0
    while not stop.is_set() if stop is not None else time.monotonic() < end:
        jobs: list[dict[str, Any]] = [
            {"topic": topic, "payload": {"tick": tick, "n": n}, "delay": rng.uniform(0.3, 2.0)}
            for n in range(PER_TICK)
        ]
        await ledger.schedule_many(client, jobs + (extra(tick) if extra else []), errors)
        tick += 1
        if stop is None:
            await asyncio.sleep(TICK_S)
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), TICK_S)


@contextlib.asynccontextmanager
async def reading(collector: Collector, errors: list[str] | None = None) -> AsyncIterator[None]:
    """Keep reading Kafka meanwhile, so that lateness is measured when records arrive.
    Stopped between two polls rather than cancelled, so no fetch is cut off midway.
    Given `errors`, what a poll raised (brokers down) is kept there, not raised, and
    the next poll comes 0.5 s later."""
    done = asyncio.Event()

    async def poll_until_done() -> None:
        while not done.is_set():
            if errors is None:
                await collector.poll()
                continue
            try:
                await collector.poll()
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.5)

    task = asyncio.create_task(poll_until_done())
    try:
        yield
    finally:
        done.set()
        await task
