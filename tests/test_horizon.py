"""Tiering: jobs due beyond redis_horizon_ms live in MySQL alone until the node owning
their slot loads them; they fire on time, once, and cancel and reschedule still work."""

from __future__ import annotations

from collections import Counter

import pytest

from actors.node import Node
from actors.reconcile_passes import reconcile
from cluster import DelayClient, Job, JobStatus
from cluster.connections.redis_conn import RedisClient
from cluster.errors import ConfigError
from cluster.settings.config import Settings
from tests.conftest import Collector
from tests.faults.stores import in_redis

# Loads every 0.5 s the jobs due within 1 s; a job due >= 2 s ahead skips Redis. The
# payload lead can be at most half the horizon.
HORIZON_MS = 2000


@pytest.fixture
def tiered(settings: Settings) -> Settings:
    return settings.replace(redis_horizon_ms=HORIZON_MS, payload_lead_ms=HORIZON_MS // 2)


def test_horizon_below_one_second_is_refused(settings: Settings) -> None:
    with pytest.raises(ConfigError, match="redis_horizon_ms"):
        settings.replace(redis_horizon_ms=999)


async def test_far_jobs_are_written_to_mysql_only(tiered: Settings, redis: RedisClient) -> None:
    async with DelayClient(tiered) as client:
        near, far = await client.schedule_many([Job("t", 1, delay=0.5), Job("t", 2, delay=60)])
        assert await in_redis(redis, tiered, near)
        assert not await in_redis(redis, tiered, far)
        record = await client.get(far)
        assert record is not None and record.status == JobStatus.PENDING


async def test_node_loads_far_jobs_and_fires_each_once_never_early(
    tiered: Settings, redis: RedisClient, topic: str, collector: Collector
) -> None:
    node = Node(tiered)
    await node.start()
    try:
        async with DelayClient(tiered) as client:
            ids = await client.schedule_many(
                [Job(topic, i, delay=2.5 + (i % 20) / 10) for i in range(300)]
            )
            assert not any([await in_redis(redis, tiered, job_id) for job_id in ids])
            records = await collector.until(300, timeout_s=60)
            await collector.quiet_for(1.0)
    finally:
        await node.stop()
    assert Counter(str(r["job_id"]) for r in records) == Counter(ids)
    assert all(r["fired_ms"] >= r["due_ms"] for r in records)  # type: ignore[operator]
    assert node.stats()["loaded"] == 300


async def test_a_node_taking_slots_loads_the_jobs_already_near(
    tiered: Settings, redis: RedisClient, topic: str, collector: Collector
) -> None:
    async with DelayClient(tiered) as client:
        ids = await client.schedule_many([Job(topic, i, delay=2.2) for i in range(50)])
        assert not any([await in_redis(redis, tiered, job_id) for job_id in ids])
        node = Node(tiered)
        await node.start()
        try:
            records = await collector.until(50, timeout_s=60)
        finally:
            await node.stop()
    assert sorted(str(r["job_id"]) for r in records) == sorted(ids)


async def test_cancel_and_reschedule_of_far_jobs(
    tiered: Settings, topic: str, collector: Collector
) -> None:
    node = Node(tiered)
    await node.start()
    try:
        async with DelayClient(tiered) as client:
            cancelled, moved_in, stays_far = await client.schedule_many(
                [Job(topic, "c", delay=2.5), Job(topic, "m", delay=600), Job(topic, "f", delay=600)]
            )
            assert await client.cancel(cancelled)
            assert await client.reschedule(moved_in, delay=0.2)  # into the horizon
            assert await client.reschedule(stays_far, delay=500)  # still beyond it
            records = await collector.until(1, timeout_s=30)
            await collector.quiet_for(3.5)  # past the cancelled job's due time
            far = await client.get(stays_far)
            gone = await client.get(cancelled)
    finally:
        await node.stop()
    assert [r["job_id"] for r in records] == [moved_in]
    assert gone is not None and gone.status == JobStatus.CANCELLED
    assert far is not None and far.status == JobStatus.PENDING
    assert far.due_ms > records[0]["due_ms"] + 400_000  # type: ignore[operator]


async def test_reconcile_loads_exactly_the_rows_due_in_its_window(
    tiered: Settings, redis: RedisClient
) -> None:
    async with DelayClient(tiered) as client:
        ids = await client.schedule_many([Job("t", i, delay=100 + i) for i in range(10)])
        rows = await client.mysql.get_many(ids)
        dues = [rows[job_id].due_ms for job_id in ids]  # one second apart
        slots = range(tiered.slots)
        first = await reconcile(tiered, client.mysql, client.scripts, slots, until_ms=dues[3])
        second = await reconcile(
            tiered, client.mysql, client.scripts, slots, since_ms=dues[3], until_ms=dues[7]
        )
    assert (first.readded, second.readded) == (3, 4)
    assert [await in_redis(redis, tiered, job_id) for job_id in ids] == [True] * 7 + [False] * 3
