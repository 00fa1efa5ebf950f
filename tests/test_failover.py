"""Redis Cluster failover under load: real node processes, a cluster of three masters
with a replica each (`delayq services up --redis-cluster --replicas 1`), and each way
a master can go away: a graceful CLUSTER FAILOVER, kill -9 of the seed node named first
in redis_url (which comes back as a replica), and a lossy failover that promotes a
replica missing the master's last writes.

Producers schedule, cancel and reschedule throughout, with redis_wait_replicas=1. Each
scenario checks: nothing lost or early, no job cancelled with True fired, no job
rescheduled with True fired at its old time, both nodes alive throughout; and prints
its counts (benchmarks/results/faults.jsonl, docs/guarantees.md). The kill -9 and the
lossy failover run in both delivery modes; with exactly_once a read_committed consumer
must see no duplicate.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
from redis.asyncio import Redis

from cluster import DelayClient
from cluster.connections.redis_conn import RedisClient
from cluster.devstack.service import HOST
from cluster.settings.config import Settings
from tests.conftest import Collector
from tests.faults.redis_cluster import (
    cluster_healthy,
    cluster_ports,
    ensure_master,
    healthy_cluster,  # a fixture
    is_master,
    needs_replicas,
    pairs,
    pid_of,
    restart_node,
    wait_until,
)
from tests.faults.scenario import Fault, Run, Stage, scenario, stage
from tests.faults.verdict import Ledger, Verdict, assert_safe

__all__ = ["healthy_cluster", "stage"]  # fixtures of tests/faults/

pytestmark = [
    pytest.mark.slow,
    pytest.mark.failover,
    pytest.mark.alone,  # failovers of the shared cluster
    needs_replicas,
]

LOAD_S = 8.0
TICK_S = 0.1
PER_TICK = 40  # 400 jobs/s, plus cancels and reschedules
CHANGES_PER_TICK = 4


async def failover_scenario(
    stage: Stage, name: str, fault: Fault, delivery: str = "at_least_once"
) -> tuple[Verdict, Ledger, Run]:
    """Two nodes and a client of their own waiting for a replica (redis_wait_replicas=1)
    under _load, fault() 2.5 s in; settled and judged as `name`, both nodes alive
    throughout."""
    settings = stage.settings.replace(redis_wait_replicas=1)
    await wait_until(cluster_healthy, "the cluster to be healthy")
    env = {"DELAYQ_REDIS_WAIT_REPLICAS": "1", "DELAYQ_DELIVERY": delivery}
    async with DelayClient(settings) as client:
        result, ledger, run = await scenario(
            replace(stage, settings=settings, client=client),
            name,
            fault,
            node_env=env,
            load=_load,
            fault_at_s=2.5,
            all_running=True,
        )
    print(
        f"[{name}] cancelled {len(ledger.cancelled)}, rescheduled {len(ledger.rescheduled)}, "
        f"changes with an unknown outcome {ledger.change_failed}"
    )
    return result, ledger, run


async def _load(ledger: Ledger, client: DelayClient, topic: str) -> None:
    """Schedule PER_TICK jobs due 1-4 s ahead every tick; among the jobs scheduled a
    tick before, cancel some and move others 8 s later."""
    rng = random.Random(11)
    end = time.monotonic() + LOAD_S
    previous: list[str] = []
    tick = 0
    while time.monotonic() < end:
        jobs = [
            {"topic": topic, "payload": {"tick": tick, "n": n}, "delay": rng.uniform(1.0, 4.0)}
            for n in range(PER_TICK)
        ]
        before = set(ledger.scheduled)
        await ledger.schedule_many(client, jobs)
        changes = [ledger.cancel(client, job_id) for job_id in previous[:CHANGES_PER_TICK]] + [
            ledger.reschedule(client, job_id, int(time.time() * 1000) + 8000)
            for job_id in previous[CHANGES_PER_TICK : 2 * CHANGES_PER_TICK]
        ]
        await asyncio.gather(*changes)
        previous = sorted(ledger.scheduled - before)
        tick += 1
        await asyncio.sleep(TICK_S)


@pytest.fixture(params=["at_least_once", "exactly_once"])
async def delivery(
    request: pytest.FixtureRequest, settings: Settings, topic: str
) -> AsyncIterator[tuple[str, Collector]]:
    """Each delivery mode, with a consumer reading as that mode's users must."""
    mode: str = request.param
    isolation = "read_committed" if mode == "exactly_once" else "read_uncommitted"
    collector = Collector(settings, topic, isolation_level=isolation)
    await collector.start()
    yield mode, collector
    await collector.stop()


def assert_no_duplicate_if_exactly_once(mode: str, result: Verdict) -> None:
    if mode == "exactly_once":
        assert result.duplicates == 0


async def test_graceful_failover(stage: Stage, healthy_cluster: None) -> None:
    async def fault(run: Run) -> None:
        _, replica = (await pairs())[0]
        await ensure_master(replica)

    result, ledger, _ = await failover_scenario(stage, "failover-graceful", fault)
    assert_safe(result, ledger)


async def test_kill_the_seed_master(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    delivery: tuple[str, Collector],
    tmp_path: Path,
    healthy_cluster: None,
) -> None:
    """kill -9 of the master named first in redis_url; it comes back as a replica."""
    seed = cluster_ports()[0]
    await ensure_master(seed)

    async def fault(run: Run) -> None:
        replica = dict(await pairs())[seed]
        killed = time.time()
        os.kill(pid_of(seed), signal.SIGKILL)
        promoted = await wait_until(lambda: is_master(replica), "the replica to be promoted")
        print(f"\n[failover-kill-seed] replica promoted {promoted - killed:.1f} s after the kill")
        await restart_node(seed)

    mode, collector = delivery
    stage = Stage(settings, client, redis, topic, collector, tmp_path)
    result, ledger, _ = await failover_scenario(stage, f"failover-kill-seed-{mode}", fault, mode)
    assert_safe(result, ledger)
    assert_no_duplicate_if_exactly_once(mode, result)
    assert not await is_master(seed)  # back as a replica


async def test_lossy_failover(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    delivery: tuple[str, Collector],
    tmp_path: Path,
    healthy_cluster: None,
) -> None:
    """The replica is frozen and its link cut, the master takes writes for a second
    that no replica has, then dies: the promoted replica lacks them."""

    async def fault(run: Run) -> None:
        master, replica = (await pairs())[0]
        replica_pid = pid_of(replica)
        os.kill(replica_pid, signal.SIGSTOP)
        try:
            admin = Redis(host=HOST, port=master)
            try:
                await admin.execute_command("CLIENT", "KILL", "TYPE", "replica")
            finally:
                await admin.aclose()
            await asyncio.sleep(1.0)  # writes only the master has
            killed = time.time()
            os.kill(pid_of(master), signal.SIGKILL)
        finally:
            os.kill(replica_pid, signal.SIGCONT)
        promoted = await wait_until(
            lambda: is_master(replica), "the lagging replica to be promoted"
        )
        print(f"\n[failover-lossy] replica promoted {promoted - killed:.1f} s after the kill")
        await restart_node(master)

    mode, collector = delivery
    stage = Stage(settings, client, redis, topic, collector, tmp_path)
    result, ledger, _ = await failover_scenario(stage, f"failover-lossy-{mode}", fault, mode)
    assert_safe(result, ledger)
    assert_no_duplicate_if_exactly_once(mode, result)
