"""A hard Redis Cluster failover leaves the promoted master without a replica until the
old master returns (docs/cluster.md): what cancel() answers meanwhile, with
redis_wait_replicas=1 and each redis_wait_fallback.

A master of the cluster with replicas is killed (kill -9); once its replica is
promoted, jobs scheduled before are cancelled. With "raise", every cancel on the
promoted master's slots raises ReplicationUnconfirmed saying no replica is attached
(the others answer true); with "mysql", all answer true and MySQL holds them cancelled.
Once the old master is back as a replica, cancels there wait for it again.

The clients were opened before the kill, so a first try meets the killed master. The
cancel it turns into must still be told by the promoted master itself: redis-py's
cluster pipeline, which sends again what a lost connection did not answer, once sent
the script to the new master and its WAIT to another node, which "confirmed" it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from redis.asyncio import Redis
from redis.crc import key_slot

from cluster import DelayClient, JobStatus, OutcomeUnknown, ReplicationUnconfirmed
from cluster.devstack.service import HOST
from cluster.model.changes import CancelResult
from cluster.model.keys import slot_of
from cluster.settings.config import Settings
from tests.faults.redis_cluster import (
    healthy_cluster,  # noqa: F401  (a fixture)
    is_master,
    needs_replicas,
    pairs,
    pid_of,
    restart_node,
    wait_until,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.failover,
    pytest.mark.alone,  # failovers of the shared cluster
    needs_replicas,
]

JOBS = 60


async def slots_of(port: int) -> set[int]:
    """The hash slots the master on `port` serves, as it says (CLUSTER SLOTS)."""
    redis = Redis(host=HOST, port=port)
    try:
        ranges = await redis.execute_command("CLUSTER", "SLOTS")
    finally:
        await redis.aclose()
    served: set[int] = set()
    for first, last, owner, *_ in ranges:
        if int(owner[1]) == port:
            served.update(range(first, last + 1))
    return served


async def cancel(client: DelayClient, job_id: str) -> CancelResult:
    """client.cancel(), tried again while it meets the killed master (the client has
    not learnt the new slot map yet); ReplicationUnconfirmed is raised."""
    for _ in range(10):
        try:
            return await client.cancel(job_id)
        except ReplicationUnconfirmed:
            raise
        except OutcomeUnknown:
            await asyncio.sleep(0.5)
    return await client.cancel(job_id)


@pytest.mark.usefixtures("healthy_cluster")
async def test_cancels_after_a_hard_failover(settings: Settings) -> None:
    settings = settings.replace(redis_wait_replicas=1, redis_wait_timeout_ms=200)
    async with (
        DelayClient(settings) as raising,
        DelayClient(settings.replace(redis_wait_fallback="mysql")) as falling_back,
    ):
        jobs = [await raising.schedule("t", {"n": n}, delay=120) for n in range(JOBS)]
        master, replica = (await pairs())[0]
        killed = time.time()
        os.kill(pid_of(master), signal.SIGKILL)
        promoted = await wait_until(lambda: is_master(replica), "the replica to be promoted")
        print(f"\n[fallback] replica {replica} promoted {promoted - killed:.1f} s after the kill")
        served = await slots_of(replica)
        on_promoted = [
            job_id
            for job_id in jobs
            if key_slot(raising.keys.slot(slot_of(job_id, settings.slots)).delay.encode()) in served
        ]
        assert on_promoted

        # The clients still hold the old slot map: a first try meets the killed master,
        # and the cancel it becomes must not pass for confirmed by a replica.
        unconfirmed = []
        for job_id in jobs[: JOBS // 2]:
            try:
                assert await cancel(raising, job_id)
            except ReplicationUnconfirmed as exc:
                assert "no replica attached" in str(exc)
                unconfirmed.append(job_id)
        assert unconfirmed == [j for j in jobs[: JOBS // 2] if j in on_promoted]

        notes = falling_back._opened.scripts.fallback_notes  # type: ignore[union-attr]
        for job_id in jobs[JOBS // 2 :]:
            assert await cancel(falling_back, job_id)
        assert notes.confirmed_by_mysql == len(set(jobs[JOBS // 2 :]) & set(on_promoted))
        for job_id in jobs:
            record = await raising.get(job_id)
            assert record is not None and record.status is JobStatus.CANCELLED
        print(
            f"[fallback] {len(on_promoted)} of {JOBS} jobs on the promoted master: "
            f"{len(unconfirmed)} cancels raised ReplicationUnconfirmed with 'raise', "
            f"{notes.confirmed_by_mysql} were confirmed by MySQL with 'mysql'"
        )

        # The old master back as the promoted one's replica: cancels wait for it again.
        await restart_node(master)
        again = [await falling_back.schedule("t", {}, delay=120) for _ in range(JOBS)]
        confirmed_before = notes.confirmed_by_mysql
        for job_id in again:
            try:
                assert await cancel(falling_back, job_id)
            except ReplicationUnconfirmed:  # the first on that master: one attached now
                assert await cancel(falling_back, job_id)
        assert notes.confirmed_by_mysql == confirmed_before
