"""Jobs that cannot be published go dead after their attempts; list, replay, purge."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import cluster
import cluster.client.dead_letters
import cluster.client.delay_client
from actors.node import Node
from cluster import DelayClient, JobStatus
from cluster.model.keys import slot_of
from cluster.scripts.facade import ClaimResult, Scripts
from cluster.settings.config import Settings
from tests.conftest import Collector, wait_for


async def make_dead(client: DelayClient, scripts: Scripts, topic: str, count: int) -> list[str]:
    """Jobs that failed their only attempt, as a node would leave them (no node runs)."""
    ids = await client.schedule_many(
        [{"topic": topic, "payload": i, "delay": 0, "max_attempts": 1} for i in range(count)]
    )
    slots = sorted({slot_of(job_id, client.settings.slots) for job_id in ids})
    await scripts.move_many([(slot, 0) for slot in slots], 100)
    for slot, claim in zip(
        slots, await scripts.claim_many([(s, 0) for s in slots], 100, 60_000), strict=True
    ):
        assert isinstance(claim, ClaimResult)
        await scripts.nack(slot, 0, [c.job_id for c in claim.jobs], "broker said no", 10, 10)
    return ids


async def test_poison_job_goes_dead_with_its_error_and_others_fire(
    settings: Settings, topic: str, collector: Collector
) -> None:
    # The producer accepts 64 KiB payloads; the node's broker records are smaller.
    node_settings = settings.replace(
        kafka_max_batch_bytes=50_000, payload_max_bytes=40_000, retry_backoff_ms=50
    )
    async with DelayClient(settings) as client:
        node = Node(node_settings)
        await node.start()
        try:
            # Larger than the producer may send: publishing it always fails.
            poison = await client.schedule(topic, "x" * 60_000, delay=0, max_attempts=3)
            fine = await client.schedule(topic, "fine", delay=0.2)
            [record] = await collector.until(1, timeout_s=30)
            assert record["job_id"] == fine

            async def dead_recorded() -> bool:
                row = await client.get(poison)
                return row is not None and row.status == JobStatus.DEAD

            assert await wait_for(dead_recorded, timeout_s=30)
        finally:
            await node.stop()
        [dead] = await client.dead_letters()
        assert (dead.job_id, dead.topic, dead.attempts) == (poison, topic, 3)
        assert dead.last_error is not None and "MessageSizeTooLarge" in dead.last_error
        assert dead.record["payload"] == "x" * 60_000
        assert await client.dead_letters(topic="other.topic") == []
        assert (await client.dead_job(poison)) == dead
        assert await client.dead_job(fine) is None


async def test_replay_fires_dead_jobs_again(
    settings: Settings,
    client: DelayClient,
    scripts: Scripts,
    topic: str,
    collector: Collector,
) -> None:
    ids = await make_dead(client, scripts, topic, 5)
    await asyncio.sleep(0)
    assert len(await client.dead_letters()) == 5
    assert await client.replay_dead(ids[:2]) == 2
    assert await client.replay_dead(topic=topic) == 3
    assert await client.replay_dead() == 0  # nothing dead any more
    # The deaths were not recorded in MySQL before the replay: the journal applies
    # "dead" then "replayed", and the rows end up fired, not dead.
    node = Node(settings)
    await node.start()
    try:
        records = await collector.until(5, timeout_s=30)

        async def all_fired() -> bool:
            rows = await client.mysql.get_many(ids)
            return {row.status for row in rows.values()} == {JobStatus.FIRED}

        assert await wait_for(all_fired, timeout_s=30)
    finally:
        await node.stop()
    assert sorted(str(r["job_id"]) for r in records) == sorted(ids)
    assert {r["attempt"] for r in records} == {1}  # a fresh set of attempts
    history = [row["status"] for row in await client.mysql.history(ids[0])]
    assert history[-3:] == [JobStatus.DEAD, JobStatus.PENDING, JobStatus.FIRED]


async def test_a_purged_job_named_by_id_is_replayed_from_mysql(
    settings: Settings,
    client: DelayClient,
    scripts: Scripts,
    topic: str,
    collector: Collector,
) -> None:
    [job_id] = await make_dead(client, scripts, topic, 1)
    node = Node(settings)
    await node.start()
    try:

        async def dead_recorded() -> bool:
            row = await client.get(job_id)
            return row is not None and row.status == JobStatus.DEAD

        assert await wait_for(dead_recorded, timeout_s=30)
        assert await client.purge_dead([job_id]) == 1
        assert await client.dead_letters() == []
        assert await client.replay_dead(topic=topic) == 0  # not listed any more ...
        assert await client.replay_dead([job_id]) == 1  # ... but MySQL knows it
        [record] = await collector.until(1, timeout_s=30)
    finally:
        await node.stop()
    assert record["job_id"] == job_id
    assert await client.replay_dead([job_id]) == 0  # not dead any more


async def test_purge_forgets_dead_jobs_in_redis_only(
    settings: Settings, client: DelayClient, scripts: Scripts, topic: str
) -> None:
    ids = await make_dead(client, scripts, topic, 3)
    assert await client.purge_dead([ids[0]]) == 1
    assert {job.job_id for job in await client.dead_letters()} == set(ids[1:])
    assert await client.purge_dead() == 2
    assert await client.dead_letters() == []


def test_dead_cli(settings: Settings) -> None:
    env = {
        **os.environ,
        "DELAYQ_KEY_PREFIX": settings.key_prefix,
        "DELAYQ_MYSQL_URL": settings.mysql_url,
        "DELAYQ_MYSQL_SERVERS": settings.mysql_servers,
    }

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cluster.cli.main", "dead", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert cli("list").stdout == ""
    refused = cli("replay")
    assert refused.returncode == 2 and "exactly one of" in refused.stderr
    nothing = cli("purge", "--all")
    assert nothing.returncode == 0
    assert nothing.stdout.strip() == "0 dead job(s) to purge (every dead job(s))"
    assert cli("show", "nobody").returncode == 1


def test_dead_job_is_one_class_wherever_it_is_imported_from() -> None:
    client_module = cluster.client.delay_client
    assert cluster.DeadJob is client_module.DeadJob is cluster.client.dead_letters.DeadJob


async def test_a_node_never_publishes_to_a_topic_outside_allowed_topics(
    settings: Settings, topic: str, collector: Collector
) -> None:
    """The producer's settings allow the topic, the node's do not: the node never
    publishes the job, which goes dead with an error naming allowed_topics."""
    node_settings = settings.replace(allowed_topics="only.this.*", retry_backoff_ms=50)
    async with DelayClient(settings) as client:
        node = Node(node_settings)
        await node.start()
        try:
            job_id = await client.schedule(topic, "never", delay=0, max_attempts=2)

            async def dead_recorded() -> bool:
                row = await client.get(job_id)
                return row is not None and row.status == JobStatus.DEAD

            assert await wait_for(dead_recorded, timeout_s=30)
        finally:
            await node.stop()
        assert collector.records == []
        assert await collector.caught_up()
        assert collector.records == []  # the topic holds no record at all
        [dead] = await client.dead_letters()
        assert (dead.job_id, dead.attempts) == (job_id, 2)
        assert dead.last_error is not None
        assert "TopicNotAllowed" in dead.last_error and "allowed_topics" in dead.last_error
        history = await client.mysql.history(job_id)
        assert [h["status"] for h in history] == [JobStatus.FIRING, JobStatus.DEAD]
