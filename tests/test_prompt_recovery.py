"""Jobs whose Redis state was lost without the node being fenced (a producer's add that
failed after its MySQL commit, writes Redis lost while the node could not reach it) come
back within seconds through the reconciler's recent pass, not at the periodic full pass."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from urllib.parse import urlparse

import pytest

from actors.node import Node
from actors.reconcile_passes import load_bound_ms, reconcile_recent
from actors.reconciler import redis_identity
from cluster import DelayClient, Job, JobStatus
from cluster.connections.redis_conn import RedisClient
from cluster.errors import ConfigError
from cluster.model.contract import member_id
from cluster.model.keys import KeySpace, slot_of
from cluster.settings.config import Settings
from tests.conftest import Collector, wait_for
from tests.faults.stores import in_redis
from tests.forwarder import forwarder, free_port


async def lose(settings: Settings, redis: RedisClient, job_ids: list[str]) -> None:
    """Remove jobs from their slots' delay zset and jobs hash, as a lost write would."""
    keys = KeySpace(settings.key_prefix)
    wanted = {job_id.encode() for job_id in job_ids}
    for slot in {slot_of(job_id, settings.slots) for job_id in job_ids}:
        k = keys.slot(slot)
        found: list[bytes] = await redis.zrange(k.delay, 0, -1)  # type: ignore[assignment]
        members = [m for m in found if member_id(m) in wanted]
        if members:
            await redis.zrem(k.delay, *members)
        await redis.hdel(
            k.jobs, *[job_id for job_id in job_ids if slot_of(job_id, settings.slots) == slot]
        )


def test_new_settings_are_validated(redis_settings: Settings) -> None:
    assert redis_settings.recent_reconcile_ms == 5000
    assert redis_settings.startup_timeout_s == 120
    with pytest.raises(ConfigError, match="recent_reconcile_ms"):
        redis_settings.replace(recent_reconcile_ms=0)
    with pytest.raises(ConfigError, match="startup_timeout_s"):
        redis_settings.replace(startup_timeout_s=-1)
    assert Settings.from_env({"DELAYQ_STARTUP_TIMEOUT_S": "2.5"}).startup_timeout_s == 2.5


async def test_recent_pass_readds_only_lost_waiting_jobs(
    settings: Settings, client: DelayClient, redis: RedisClient
) -> None:
    before = await client.mysql.server_now()
    lost = await client.schedule_many([Job("t", i, delay=60) for i in range(30)])
    kept = await client.schedule("t", "kept", delay=60)
    cancelled = await client.schedule("t", "c", delay=60)
    assert await client.cancel(cancelled)
    fired = await client.schedule("t", "f", delay=60)
    await client.mysql.set_status(
        fired, JobStatus.FIRED, slot_of(fired, settings.slots), from_statuses=(0,)
    )
    far = await client.schedule("t", "far", delay=3600)  # beyond the load bound: not here
    await lose(settings, redis, [*lost, fired])
    every_slot = range(settings.slots)
    bound = load_bound_ms(settings)

    result = await reconcile_recent(
        settings,
        client.mysql,
        client.scripts,
        every_slot,
        created_after=before - dt.timedelta(seconds=1),
        until_ms=bound,
    )

    assert (result.examined, result.readded) == (31, 30)  # lost + kept; fired is not pending
    assert all([await in_redis(redis, settings, job_id) for job_id in [*lost, kept]])
    assert not await in_redis(redis, settings, cancelled)
    assert not await in_redis(redis, settings, fired)
    assert not await in_redis(redis, settings, far)
    # Rows created before the window are not looked at; a second pass adds nothing.
    await lose(settings, redis, lost[:5])
    later = await reconcile_recent(
        settings,
        client.mysql,
        client.scripts,
        every_slot,
        created_after=await client.mysql.server_now(),
        until_ms=bound,
    )
    assert (later.examined, later.readded) == (0, 0)
    again = await reconcile_recent(
        settings,
        client.mysql,
        client.scripts,
        every_slot,
        created_after=before - dt.timedelta(seconds=1),
        until_ms=bound,
    )
    assert (again.examined, again.readded) == (31, 5)


async def test_redis_identity_is_stable_while_redis_runs(redis: RedisClient) -> None:
    first = await redis_identity(redis)
    assert first and all(first)
    assert await redis_identity(redis) == first


@pytest.mark.skipif(
    os.environ.get("DELAYQ_TEST_REDIS_CLUSTER") == "1",
    reason="a forwarder in front of one seed node cannot cut off a Redis Cluster client, "
    "which connects to every node it discovers",
)
async def test_jobs_lost_while_the_node_was_cut_off_from_redis_fire_within_seconds(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
) -> None:
    """The node reaches Redis through a forwarder that the test cuts for a while, as a
    network partition would. Redis does not restart (same run_id) and the owner keys stay,
    so nothing fences the node, and the periodic full pass is 300 s away: only the recent
    pass that follows the outage can bring the lost jobs back in time."""
    assert settings.reconcile_interval_ms == 300_000
    redis_url = urlparse(settings.redis_url)
    port = free_port()
    through = redis_url._replace(netloc=f"{redis_url.hostname}:{port}").geturl()
    async with forwarder(port, redis_url.port or 6379) as link:
        node = Node(settings.replace(redis_url=through))
        await node.start()
        try:
            assert node.parts is not None
            reconciler = node.parts.reconciler

            async def started() -> bool:  # taking a slot runs a full pass: let those end
                return len(reconciler.reconciled_slots()) == settings.slots

            assert await wait_for(started, timeout_s=30)
            ids = await client.schedule_many([Job(topic, i, delay=4.0) for i in range(50)])
            await link.cut()
            # While the node cannot reach Redis, the jobs' Redis state is lost.
            await lose(settings, redis, ids)
            assert not any([await in_redis(redis, settings, job_id) for job_id in ids])
            await asyncio.sleep(settings.recent_reconcile_ms / 1000 * 2)  # the watch sees it
            await link.open()
            records = await collector.until(50, timeout_s=60)
            await collector.quiet_for(1.0)
        finally:
            await node.stop()
    assert sorted(str(r["job_id"]) for r in records) == sorted(ids)
    assert node.stats()["readded"] >= 50
