"""Pending jobs Redis lost come back from MySQL; cancelled and fired ones do not."""

from __future__ import annotations

import asyncio

import pytest

from actors.node import Node
from actors.reconcile_passes import reconcile
from cluster import DelayClient, Job, JobStatus
from cluster.connections.redis_conn import RedisClient
from cluster.model.keys import slot_of
from cluster.scripts.facade import NewJob
from cluster.settings.config import Settings
from tests.conftest import Collector, wait_for
from tests.faults.stores import in_redis


async def delete_prefix(redis: RedisClient, prefix: str) -> None:
    """Lose every key of this test's slots, as a Redis restart without persistence
    would (other tests' keys are left alone)."""
    keys = [key async for key in redis.scan_iter(match=f"{{{prefix}:*", count=1000)]
    for key in keys:
        await redis.delete(key)


async def test_reconcile_readds_lost_pending_jobs_only(
    settings: Settings, client: DelayClient, redis: RedisClient
) -> None:
    pending = await client.schedule_many([Job("t", i, delay=600) for i in range(50)])
    cancelled = await client.schedule("t", "c", delay=600)
    assert await client.cancel(cancelled)
    fired = await client.schedule("t", "f", delay=600)
    slot = slot_of(fired, settings.slots)
    await client.mysql.set_status(fired, JobStatus.FIRED, slot, from_statuses=(0,))
    await delete_prefix(redis, settings.key_prefix)

    result = await reconcile(settings, client.mysql, client.scripts, range(settings.slots))

    assert result.readded == 50
    assert all([await in_redis(redis, client.settings, job_id) for job_id in pending])
    assert not await in_redis(redis, client.settings, cancelled)
    assert not await in_redis(redis, client.settings, fired)
    # A second pass finds everything in place and changes nothing.
    again = await reconcile(settings, client.mysql, client.scripts, range(settings.slots))
    assert (again.examined, again.readded) == (50, 0)


async def test_reconcile_does_not_bring_back_a_job_cancelled_after_the_loss(
    settings: Settings, client: DelayClient, redis: RedisClient
) -> None:
    job_id = await client.schedule("t", 1, delay=600)
    await delete_prefix(redis, settings.key_prefix)
    assert await client.cancel(job_id)  # Redis did not hold it: MySQL + tombstone
    result = await reconcile(settings, client.mysql, client.scripts, range(settings.slots))
    assert result.readded == 0
    assert not await in_redis(redis, client.settings, job_id)


@pytest.mark.alone
async def test_node_recovers_from_flushall(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
) -> None:
    node = Node(settings)
    await node.start()
    try:
        early = await client.schedule(topic, "early", delay=0.2)
        await collector.until(1, timeout_s=30)

        async def early_recorded() -> bool:
            record = await client.get(early)
            return record is not None and record.status == JobStatus.FIRED

        assert await wait_for(early_recorded, timeout_s=10)
        later = await client.schedule_many([Job(topic, i, delay=2.0) for i in range(200)])
        dropped = await client.schedule(topic, "dropped", delay=2.0)
        assert await client.cancel(dropped)

        await redis.flushall()  # every key, the slots' owner epochs included

        records = await collector.until(201, timeout_s=60)
        await collector.quiet_for(2.5)
    finally:
        await node.stop()
    fired = [str(r["job_id"]) for r in records]
    assert sorted(fired) == sorted([early, *later])  # none lost, none resurrected
    assert node.stats()["readded"] >= 200
    await asyncio.sleep(0)


async def test_a_node_taking_slots_of_a_redis_that_came_back_older_corrects_them_first(
    settings: Settings, client: DelayClient, redis: RedisClient, topic: str, collector: Collector
) -> None:
    """A node starts on a Redis whose slots were last known complete on another server
    (a restore from an older file while no node watched): before firing from a slot it
    re-applies MySQL's changes since that slot's watermark, so jobs cancelled since do
    not fire (actors/rollback.py)."""
    node = Node(settings)
    await node.start()
    try:
        jobs = await client.schedule_many([Job(topic, i, delay=4.0) for i in range(20)])
        await asyncio.sleep(1.5)  # every slot's watermark written on this server
        marks = {
            slot: await redis.get(client.keys.slot(slot).watermark)
            for slot in range(settings.slots)
        }
    finally:
        await node.stop()
    cancelled = jobs[:10]
    for job_id in cancelled:
        assert await client.cancel(job_id)
    # What a server restored from before those cancels holds: the jobs, no tombstones,
    # and watermarks naming the server before.
    for job_id in cancelled:
        keys = client.keys.slot(slot_of(job_id, settings.slots))
        await redis.zrem(keys.tomb, job_id)
        row = await client.get(job_id)
        assert row is not None
        await client.scripts.add(slot_of(job_id, settings.slots), [NewJob.from_record(row)])
    for slot, mark in marks.items():
        if mark is not None:
            _, _, ms = mark.partition(b"|")
            await redis.set(client.keys.slot(slot).watermark, b"0123456789abcdef|" + ms)
    node = Node(settings)
    await node.start()
    try:
        records = await collector.until(10, timeout_s=30)
        await collector.quiet_for(2.0)
    finally:
        await node.stop()
    fired = {str(r["job_id"]) for r in collector.records}
    assert fired == set(jobs[10:])
    assert not fired & set(cancelled)
    assert len(records) >= 10
