"""sampler: every stats_interval_ms, the depth of each owned slot and a check of each store.

What it finds feeds the node's gauges (actors/metrics.py) and /readyz (actors/health.py):
per-slot depth (delay, ready, in flight, dead), the outcome journal waiting for MySQL,
how late the most overdue job already is, and when Redis, MySQL and Kafka last answered.
It only reads; a store that does not answer is simply not marked as answering.
"""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaProducer

from actors.lifecycle import Actor
from actors.ownership import Ownership
from cluster.config import Settings
from cluster.keys import KeySpace
from cluster.mysql_store import MySQLStore
from cluster.redis_conn import RedisClient
from cluster.status import SlotDepth, slot_depths

STORES = ("redis", "mysql", "kafka")


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

    async def body(self) -> None:
        while not self.stopping:
            await self.sample()
            if not await self.sleep(self.interval_s):
                break

    async def sample(self) -> None:
        await asyncio.gather(self._sample_redis(), self._check_mysql(), self._check_kafka())

    async def _sample_redis(self) -> None:
        try:
            async with asyncio.timeout(self.timeout_s):
                self.depths = await slot_depths(
                    self.redis, self.keys, sorted(self.ownership.owned())
                )
        except Exception as exc:
            self.warn("sampling the slots' depths failed: %s", exc, every_s=30)
            return
        self.last_ok["redis"] = time.monotonic()

    async def _check_mysql(self) -> None:
        try:
            async with asyncio.timeout(self.timeout_s):
                await self.mysql.server_now()
        except Exception as exc:
            self.warn("MySQL did not answer: %s", exc, every_s=30)
            return
        self.last_ok["mysql"] = time.monotonic()

    async def _check_kafka(self) -> None:
        try:
            async with asyncio.timeout(self.timeout_s):
                # A metadata request to a broker: False when none answered.
                answered = await self.producer.client.force_metadata_update()
        except Exception as exc:
            self.warn("Kafka did not answer: %s", exc, every_s=30)
            return
        if answered:
            self.last_ok["kafka"] = time.monotonic()
        else:
            self.warn("Kafka did not answer a metadata request", every_s=30)

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
