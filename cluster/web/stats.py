"""The cluster's figures over time, for the console's charts.

A sampler takes a snapshot of the cluster (cluster/observe/snapshot.py, as `delayq top`
does: ZooKeeper, Redis and each node's /metrics) every SAMPLE_EVERY_S while someone is
looking, and keeps the last HISTORY_POINTS of them, so a console opened now shows the last
minutes at once. It starts with the first request for the figures and stops after
IDLE_STOP_S without one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp

from cluster.observe.scrape_guard import scrape_session
from cluster.observe.snapshot import SCRAPE_TIMEOUT_S, Snapshot, SnapshotReader
from cluster.observe.status import SharedStatus
from cluster.settings.config import Settings

log = logging.getLogger(__name__)

SAMPLE_EVERY_S = 2.0
HISTORY_POINTS = 450  # 15 minutes
IDLE_STOP_S = 300.0


@dataclass(frozen=True)
class Point:
    at_ms: int
    fire_rate: float | None  # None until two scrapes of a node make a rate
    p50_ms: float | None
    p99_ms: float | None
    delay: int
    ready: int
    inflight: int
    dead: int


class StatsSampler:
    def __init__(self, settings: Settings) -> None:
        # The server's one ZooKeeper session and status cache: /v1/cluster reads it too.
        self.status = SharedStatus(settings)
        self.reader = SnapshotReader(settings, self.status)
        self.points: deque[Point] = deque(maxlen=HISTORY_POINTS)
        self.latest: Snapshot | None = None
        self.error: str | None = None  # why the latest sample failed
        self._asked_at = 0.0
        self._task: asyncio.Task[None] | None = None
        self._first = asyncio.Event()

    async def figures(self) -> dict[str, Any]:
        """The latest snapshot (members, topics, slots, totals) and the points so far;
        the first call waits for the first sample."""
        self._asked_at = time.monotonic()
        if self._task is None or self._task.done():
            self._first = asyncio.Event()
            self._task = asyncio.create_task(self._run(), name="stats-sampler")
        await self._first.wait()
        return {
            "snapshot": None if self.latest is None else self.latest.as_dict(),
            "error": self.error,
            "interval_s": SAMPLE_EVERY_S,
            "points": [asdict(point) for point in self.points],
        }

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S)
        async with scrape_session(timeout) as http:
            while time.monotonic() - self._asked_at < IDLE_STOP_S:
                await self._sample(http)
                self._first.set()
                await asyncio.sleep(SAMPLE_EVERY_S)
        await self.reader.close()

    async def _sample(self, http: aiohttp.ClientSession) -> None:
        try:
            snapshot = await self.reader.snapshot(http)
        except Exception as exc:  # ZooKeeper or Redis down: say so, sample again later
            self.error = f"{type(exc).__name__}: {exc}"
            log.warning("cluster figures unavailable: %s", self.error)
            return
        self.latest, self.error = snapshot, None
        self.points.append(
            Point(
                at_ms=time.time_ns() // 1_000_000,
                fire_rate=snapshot.fire_rate
                if any(member.fire_rate is not None for member in snapshot.members)
                else None,
                p50_ms=snapshot.p50_ms,
                p99_ms=snapshot.p99_ms,
                delay=snapshot.delay,
                ready=snapshot.ready,
                inflight=snapshot.inflight,
                dead=snapshot.dead,
            )
        )

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.reader.close()
        await self.status.close()
