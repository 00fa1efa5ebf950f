"""sampler: every stats_interval_ms, the depth of each owned slot and a check of each store.

What it finds feeds the node's gauges (actors/metrics.py) and /readyz (actors/health.py):
per-slot depth (delay, ready, in flight, dead), the outcome journal waiting for MySQL,
how late the most overdue job already is, and when Redis, MySQL (each server) and Kafka
last answered.
It only reads; a store that does not answer is simply not marked as answering.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaProducer

from actors.lifecycle import Actor
from actors.ownership import Ownership
from cluster.connections.kafka_conn import broker_answers
from cluster.connections.redis_conn import RedisClient
from cluster.model.keys import KeySpace
from cluster.observe.status import SlotDepth, slot_depths
from cluster.settings.config import Settings
from cluster.store.counts import PendingCounts, pending_counts
from cluster.store.mysql_store import MySQLStore

STORES = ("redis", "mysql", "kafka")
# The node holding slot 0 counts the pending jobs in MySQL this often, for
# delayq_pending_jobs (one node counts, whichever holds that slot).
PENDING_EVERY_S = 5.0


class Sampler(Actor):
    name = "sampler"

    def __init__(
        self,
        settings: Settings,
        redis: RedisClient,
        keys: KeySpace,
        mysql: MySQLStore,
        producer: AIOKafkaProducer,
        ownership: Ownership,
    ) -> None:
        super().__init__()
        self.interval_s = settings.stats_interval_ms / 1000
        # One check waits at most this long: a store slower than that is not "answering".
        self.timeout_s = min(self.interval_s * 2, settings.ready_timeout_s)
        self.redis = redis
        self.keys = keys
        self.mysql = mysql
        self.producer = producer
        self.ownership = ownership
        self.depths: dict[int, SlotDepth] = {}
        # Store → time.monotonic() it last answered (absent: not since the start).
        self.last_ok: dict[str, float] = {}
        self.mysql_last_ok: dict[int, float] = {}  # by server index
        self.horizon_ms = settings.redis_horizon_ms
        self.pending: PendingCounts | None = None  # while this node holds slot 0
        self._pending_at = -PENDING_EVERY_S  # time.monotonic() of the last count

    async def body(self) -> None:
        while not self.stopping:
            await self.sample()
            if not await self.sleep(self.interval_s):
                break

    async def sample(self) -> None:
        await asyncio.gather(
            self._check("redis", self._sample_depths),
            self._check("mysql", self._ask_mysql),
            self._check("kafka", self._ask_kafka),
            self._count_pending(),
        )

    async def _count_pending(self) -> None:
        """Every PENDING_EVERY_S while this node holds slot 0: the pending counts
        (cluster/store/counts.py). A failed count leaves the metric out, not stale."""
        if not self.ownership.owns(0):
            self.pending = None
            return
        if time.monotonic() - self._pending_at < PENDING_EVERY_S:
            return
        self._pending_at = time.monotonic()
        try:
            async with asyncio.timeout(max(self.timeout_s, PENDING_EVERY_S)):
                self.pending = await pending_counts(self.mysql, self.horizon_ms)
        except Exception as exc:
            self.pending = None
            self.warn("counting the pending jobs failed: %s", exc, every_s=60)

    async def _check(self, store: str, ask: Callable[[], Awaitable[bool]]) -> None:
        """Mark `store` as answering if ask() returns True within timeout_s."""
        try:
            async with asyncio.timeout(self.timeout_s):
                answered = await ask()
        except Exception as exc:
            self.warn("%s did not answer the node's check: %s", store, exc, every_s=30)
            return
        if answered:
            self.last_ok[store] = time.monotonic()
        else:
            self.warn("%s did not answer the node's check", store, every_s=30)

    async def _sample_depths(self) -> bool:
        self.depths = await slot_depths(self.redis, self.keys, sorted(self.ownership.owned()))
        return True

    async def _ask_mysql(self) -> bool:
        """Every MySQL server at once: True when all answered (each one's age goes to
        delayq_mysql_server_last_ok_seconds)."""
        answered = await asyncio.gather(
            *(self._ask_server(spec.index) for spec in self.mysql.servers),
            return_exceptions=True,
        )
        return all(result is True for result in answered)

    async def _ask_server(self, index: int) -> bool:
        async def ask(conn: Any) -> None:
            async with conn.cursor() as cur:
                await cur.execute("SELECT 1")

        # Bounded, and a check cut off closes its connection rather than reusing it.
        await self.mysql.router.on_server(index, ask, self.timeout_s)
        self.mysql_last_ok[index] = time.monotonic()
        return True

    def mysql_server_ages_s(self) -> dict[str, float]:
        """Seconds since each MySQL server ("host:port") last answered (absent: not
        since the start)."""
        now = time.monotonic()
        return {
            self.mysql.servers[index].name: now - at
            for index, at in sorted(self.mysql_last_ok.items())
        }

    async def _ask_kafka(self) -> bool:
        # A metadata request to a broker: False when none answered.
        return await broker_answers(self.producer.client)

    def store_ages_s(self) -> dict[str, float | None]:
        """Seconds since each store last answered; None if it has not since the start."""
        now = time.monotonic()
        return {
            store: None if store not in self.last_ok else now - self.last_ok[store]
            for store in STORES
        }

    def journal_backlog(self) -> int:
        return sum(depth.journal for depth in self.depths.values())

    def overdue_s(self) -> float:
        return max((depth.overdue_ms for depth in self.depths.values()), default=0) / 1000
