"""cancel() and reschedule() say what happened: every status, produced for real (jobs
claimed with the scripts as a node would, fired by a running node, left dead, expired).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid

import pytest

from actors.node import Node
from cluster import (
    CancelResult,
    ChangeStatus,
    DelayClient,
    JobStatus,
    OutcomeUnknown,
    RescheduleResult,
)
from cluster.connections.redis_conn import RedisClient
from cluster.devstack.nodes import settings_env
from cluster.model.jobs import now_ms
from cluster.model.keys import slot_of
from cluster.scripts.facade import Scripts
from cluster.settings.config import Settings
from tests.conftest import Collector, wait_for
from tests.test_dead_letters import make_dead


def new_id() -> str:
    return f"a-{uuid.uuid4().hex}"


async def claim(client: DelayClient, scripts: Scripts, job_id: str) -> int:
    """Claim a job that is due as a node's dispatcher would (no node runs, epoch 0);
    returns the attempt it was claimed for."""
    slot = slot_of(job_id, client.settings.slots)
    await scripts.move(slot, 0, 100)
    claimed = (await scripts.claim(slot, 0, 100, 60_000)).jobs
    [attempt] = [job.attempt for job in claimed if job.job_id == job_id.encode()]
    return attempt


async def test_cancelled_and_rescheduled_are_true(client: DelayClient) -> None:
    job_id = await client.schedule("t", 1, delay=60)
    moved = await client.reschedule(job_id, delay=600)
    record = await client.get(job_id)
    assert record is not None
    assert moved == RescheduleResult(job_id, ChangeStatus.RESCHEDULED, due_ms=record.due_ms)
    assert moved and isinstance(moved, RescheduleResult)
    cancelled = await client.cancel(job_id)
    assert cancelled == CancelResult(job_id, ChangeStatus.CANCELLED) and cancelled
    assert await client.cancel(job_id) == cancelled  # cancelled before: still true
    # A reschedule of a cancelled job says so, and is false.
    refused = await client.reschedule(job_id, delay=5)
    assert refused == RescheduleResult(job_id, ChangeStatus.CANCELLED) and not refused
    record = await client.get(job_id)
    assert record is not None and record.status == JobStatus.CANCELLED


async def test_not_found(client: DelayClient) -> None:
    job_id = new_id()
    assert await client.cancel(job_id) == CancelResult(job_id, ChangeStatus.NOT_FOUND)
    assert await client.reschedule(job_id, at=now_ms() / 1000 + 60) == RescheduleResult(
        job_id, ChangeStatus.NOT_FOUND
    )
    assert await client.get(job_id) is None


async def test_in_flight_changes_nothing(
    client: DelayClient, scripts: Scripts, redis: RedisClient
) -> None:
    job_id = await client.schedule("t", 1, delay=0)
    await claim(client, scripts, job_id)
    assert await client.cancel(job_id) == CancelResult(job_id, ChangeStatus.IN_FLIGHT)
    answer = await client.reschedule(job_id, delay=60)
    assert answer == RescheduleResult(job_id, ChangeStatus.IN_FLIGHT) and not answer
    keys = client.keys.slot(slot_of(job_id, client.settings.slots))
    assert await redis.zscore(keys.inflight, job_id) is not None  # still being published
    record = await client.get(job_id)
    assert record is not None and record.status == JobStatus.PENDING


async def test_dead(client: DelayClient, scripts: Scripts) -> None:
    [job_id] = await make_dead(client, scripts, "t", 1)
    assert await client.cancel(job_id) == CancelResult(job_id, ChangeStatus.DEAD)
    assert await client.reschedule(job_id, delay=1) == RescheduleResult(job_id, ChangeStatus.DEAD)
    assert [job.job_id for job in await client.dead_letters()] == [job_id]  # untouched


async def test_fired_before_the_node_recorded_it(client: DelayClient, scripts: Scripts) -> None:
    """Acked in Redis, not yet in MySQL: ALREADY_FIRED, without a time or attempt yet, and
    the MySQL row is left alone (no cancel recorded for a job that fired)."""
    job_id = await client.schedule("t", 1, delay=0)
    await claim(client, scripts, job_id)
    slot = slot_of(job_id, client.settings.slots)
    assert await scripts.ack(slot, [job_id.encode()]) == 1
    answer = await client.cancel(job_id)
    assert answer == CancelResult(job_id, ChangeStatus.ALREADY_FIRED) and not answer
    assert (answer.fired_ms, answer.attempt) == (None, None)
    assert (await client.reschedule(job_id, delay=9)).status == ChangeStatus.ALREADY_FIRED
    record = await client.get(job_id)
    assert record is not None and record.status == JobStatus.PENDING


async def test_fired_by_a_node_carries_its_time_and_attempt(
    settings: Settings, client: DelayClient, redis: RedisClient, topic: str, collector: Collector
) -> None:
    """A node fires the job and records it; once the node's fired marker in Redis is gone
    the answer comes from MySQL: ALREADY_FIRED with the time and attempt of the fire."""
    node = Node(settings)
    await node.start()
    try:
        job_id = await client.schedule(topic, {"n": 1}, delay=0)
        [record] = await collector.until(1, timeout_s=30)

        async def recorded() -> bool:
            row = await client.get(job_id)
            return row is not None and row.status == JobStatus.FIRED

        assert await wait_for(recorded, timeout_s=30)
        # The node's fired marker is in Redis (for marker_retention_ms): Redis answers
        # FIRED, the time and attempt come from MySQL.
        keys = client.keys.slot(slot_of(job_id, settings.slots))
        assert await redis.zscore(keys.acked, job_id) is not None
        while_marked = await client.cancel(job_id)
    finally:
        await node.stop()
    # The fired marker lasts marker_retention_ms after the record (removed at the slot's
    # next trim): gone here, as it is then.
    await redis.zrem(keys.acked, job_id)
    answer = await client.cancel(job_id)
    assert answer == while_marked
    assert answer.status == ChangeStatus.ALREADY_FIRED and not answer
    assert answer.attempt == record["attempt"] == 1
    assert answer.fired_ms is not None and answer.fired_ms >= int(str(record["fired_ms"]))
    assert (answer.fired_ms, answer.attempt) == (await client.mysql.fired_at(job_id))
    moved = await client.reschedule(job_id, delay=60)
    assert (moved.status, moved.fired_ms, moved.attempt) == (
        ChangeStatus.ALREADY_FIRED,
        answer.fired_ms,
        1,
    )
    row = await client.get(job_id)
    assert row is not None and row.status == JobStatus.FIRED  # neither changed it


async def test_a_reschedule_meeting_a_cancel_under_way_answers_cancelled(
    client: DelayClient, scripts: Scripts
) -> None:
    """The cancel's Redis step is done (the job is out of Redis, its tombstone refuses
    adds) and its MySQL step comes while the reschedule runs: the reschedule answers
    CANCELLED, and the job stays out of Redis."""
    job_id = await client.schedule("t", 1, delay=60)
    slot = slot_of(job_id, client.settings.slots)
    await scripts.cancel(slot, job_id, 60_000)
    rescheduling = asyncio.create_task(client.reschedule(job_id, delay=30))
    await asyncio.sleep(0)
    assert await client.mysql.set_status(
        job_id, JobStatus.CANCELLED, slot, from_statuses=(int(JobStatus.PENDING),)
    )
    answer = await rescheduling
    assert answer == RescheduleResult(job_id, ChangeStatus.CANCELLED)
    assert not await client.scripts.redis.hexists(client.keys.slot(slot).jobs, job_id)


async def test_a_reschedule_meeting_a_cancel_that_failed_half_way_is_unknown(
    client: DelayClient, scripts: Scripts
) -> None:
    """A cancel whose MySQL step never came (MySQL down when it ran) left its tombstone:
    the reschedule cannot tell whether the job will be cancelled, and says so."""
    job_id = await client.schedule("t", 1, delay=60)
    slot = slot_of(job_id, client.settings.slots)
    await scripts.cancel(slot, job_id, 60_000)
    with pytest.raises(OutcomeUnknown) as unknown:
        await client.reschedule(job_id, delay=30)
    assert unknown.value.job_ids == [job_id] and "cancel" in str(unknown.value)
    record = await client.get(job_id)
    assert record is not None and record.status == JobStatus.PENDING


def test_delayq_cancel_prints_why(settings: Settings) -> None:
    env = {**os.environ, **settings_env(settings)}

    def cancel(job_id: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cluster.cli.main", "cancel", job_id],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    unknown = cancel("no-such-job")
    assert (unknown.returncode, unknown.stdout) == (1, "not cancelled: no such job\n")

    async def schedule() -> str:
        async with DelayClient(settings) as client:
            return await client.schedule("t", 1, delay=60)

    job_id = asyncio.run(schedule())
    done = cancel(job_id)
    assert (done.returncode, done.stdout) == (0, "cancelled\n")
