"""The fault suite: real node processes under a steady load while something breaks.

Each scenario logs every client call (tests/faults/verdict.py), reads every fired record from
Kafka, and checks: lost = ok-scheduled − ok-cancelled − fired − dead must be 0, no job
fires early, no cancelled job fires, and afterwards MySQL and Redis agree. Results are
printed and appended to benchmarks/results/faults.jsonl (docs/guarantees.md).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import orjson
import pytest

from actors.failpoints import NAMES
from actors.node import Node
from cluster import DelayClient, Job, OutcomeUnknown, RedisStepFailed
from cluster.connections.redis_conn import RedisClient
from cluster.devstack import stack
from cluster.settings.config import Settings
from tests.conftest import Collector, wait_for
from tests.faults.load import reading
from tests.faults.scenario import Run, Stage, crash_at, down_for, scenario, stage
from tests.faults.settle import settle
from tests.faults.shared import shared_pid
from tests.faults.verdict import Ledger, assert_safe
from tests.processes import NodeProcess

# Faults kill the single-instance services, so the Redis Cluster pass leaves them out.
pytestmark = [pytest.mark.slow, pytest.mark.faults]
__all__ = ["stage"]  # a fixture of tests/faults/scenario.py


async def test_sigkill_a_node_mid_dispatch(stage: Stage) -> None:
    async def fault(run: Run) -> None:
        run.procs[0].signal(signal.SIGKILL)

    result, ledger, _ = await scenario(stage, "sigkill-node", fault)
    assert_safe(result, ledger)


@pytest.mark.alone
async def test_flushall(stage: Stage) -> None:
    async def fault(run: Run) -> None:
        await stage.redis.flushall()

    result, ledger, _ = await scenario(stage, "flushall", fault)
    assert_safe(result, ledger)


@pytest.mark.alone
async def test_redis_restarted_without_persistence(stage: Stage) -> None:
    """Redis dies and comes back empty (its AOF deleted): the lost owner keys fence the
    nodes, which take their slots again and re-add the pending jobs from MySQL."""

    async def fault(run: Run) -> None:
        os.kill(shared_pid("redis"), signal.SIGKILL)
        await asyncio.sleep(0.5)
        shutil.rmtree(stack.state_dir() / "redis" / "appendonlydir", ignore_errors=True)
        await asyncio.to_thread(stack.up)

    result, ledger, _ = await scenario(stage, "redis-restart-empty", fault)
    assert_safe(result, ledger)


@pytest.mark.alone
async def test_redis_down_after_the_mysql_commit(
    settings: Settings,
    client: DelayClient,
    topic: str,
    collector: Collector,
) -> None:
    """Redis stops (cleanly: its AOF keeps the slots' owner keys, so no node is fenced)
    before a schedule_many's Redis step: the call raises RedisStepFailed naming the
    jobs, which MySQL holds; once Redis is back they fire within seconds (the recent
    pass and the restart watch of actors/reconciler.py), not at the periodic pass
    (reconcile_interval_ms, 300 s here)."""
    assert settings.reconcile_interval_ms == 300_000
    node = Node(settings)  # in this process, to read its reconciler's counters
    await node.start()
    try:
        assert node.parts is not None
        reconciler = node.parts.reconciler

        async def started() -> bool:
            return len(reconciler.reconciled_slots()) == settings.slots

        assert await wait_for(started, timeout_s=30)
        os.kill(shared_pid("redis"), signal.SIGTERM)

        async def redis_gone() -> bool:
            return stack.service_pid("redis") is None

        assert await wait_for(redis_gone, timeout_s=30)
        jobs = [Job(topic, i, delay=0.5) for i in range(20)]
        try:
            with pytest.raises(RedisStepFailed, match="committed in MySQL") as caught:
                await client.schedule_many(jobs)
        finally:
            await asyncio.to_thread(stack.up)
        ids = caught.value.job_ids
        assert isinstance(caught.value, OutcomeUnknown) and len(ids) == 20
        # MySQL holds them (a node may fire them as soon as Redis answers again).
        rows = await client.mysql.get_many(ids)
        assert sorted(rows) == sorted(ids)

        async with reading(collector):
            records = await collector.until(20, timeout_s=30)

            async def restart_seen() -> bool:
                return reconciler.redis_restarts_seen >= 1

            assert await wait_for(restart_seen, timeout_s=30)
        await collector.quiet_for(1.0)
    finally:
        await node.stop()
    assert sorted(str(r["job_id"]) for r in records) == sorted(ids)


@pytest.mark.alone
async def test_broker_unreachable_for_10_s(stage: Stage) -> None:
    """The broker dies (kill -9) and is started again 10 s later with its log, which
    Apache Kafka keeps on disk: publishing fails meanwhile and is retried with backoff,
    and every record it acknowledged before it died is still there afterwards."""
    pid = shared_pid("kafka")

    async def fault(run: Run) -> None:
        os.kill(pid, signal.SIGKILL)
        await asyncio.sleep(10)
        await asyncio.to_thread(stack.up)  # starts what does not run: the broker

    result, ledger, _ = await scenario(stage, "broker-down-10s", fault)
    assert_safe(result, ledger)
    assert result.acked_not_in_kafka == []


@pytest.mark.alone
async def test_mysql_down_for_10_s(stage: Stage) -> None:
    """schedule() fails with StoreUnavailable and writes nothing; firing goes on and the
    outcomes are recorded when MySQL is back."""

    async def fault(run: Run) -> None:
        await down_for("mysql", 10)

    result, ledger, _ = await scenario(stage, "mysql-down-10s", fault)
    assert_safe(result, ledger)
    assert ledger.schedule_failed > 0


@pytest.mark.alone
async def test_zookeeper_down_for_10_s(stage: Stage) -> None:
    async def fault(run: Run) -> None:
        await down_for("zookeeper", 10)

    result, ledger, _ = await scenario(stage, "zookeeper-down-10s", fault)
    assert_safe(result, ledger)


async def test_a_node_whose_zookeeper_session_expires(stage: Stage) -> None:
    """A node freezes (SIGSTOP) past its 3 s session timeout: the other node takes its
    slots, fenced by new epochs; it wakes up, finds its session gone and rejoins."""

    async def fault(run: Run) -> None:
        run.procs[0].signal(signal.SIGSTOP)
        try:
            await asyncio.sleep(6.5)
        finally:
            run.procs[0].signal(signal.SIGCONT)

    result, ledger, _ = await scenario(stage, "zk-session-expired", fault)
    assert_safe(result, ledger)


async def test_poison_jobs_go_dead_and_the_rest_fire(stage: Stage) -> None:
    poisoned = 0  # how many the load scheduled: it makes fewer ticks on a busy machine

    def poison(tick: int) -> list[dict[str, Any]]:
        nonlocal poisoned
        if tick % 10:
            return []
        poisoned += 1
        return [{"topic": stage.topic, "payload": "x" * 30_000, "delay": 0.5, "max_attempts": 2}]

    async def fault(run: Run) -> None:
        return None

    result, ledger, _ = await scenario(
        stage,
        "poison-jobs",
        fault,
        # Payloads over the nodes' record limit, which producers (default limits) accept.
        node_env={"DELAYQ_KAFKA_MAX_BATCH_BYTES": "20000", "DELAYQ_PAYLOAD_MAX_BYTES": "15000"},
        extra=poison,
    )
    assert_safe(result, ledger)
    # No job lost (assert_safe) means every poison job scheduled is dead, as none fires.
    assert 1 <= result.dead <= poisoned


async def test_node_clock_an_hour_ahead(stage: Stage) -> None:
    async def fault(run: Run) -> None:
        return None

    result, ledger, _ = await scenario(
        stage,
        "clock-1h-ahead",
        fault,
        nodes=1,
        node_env={"DELAYQ_CLOCK_OFFSET_MS": "3600000"},
    )
    assert_safe(result, ledger)


@pytest.mark.parametrize("failpoint", NAMES)
async def test_crash_at_failpoint(failpoint: str, stage: Stage) -> None:
    """A node dies at an exact step; a second node (started when it died) loses nothing."""
    result, ledger = await crash_at(stage, failpoint, f"crash-{failpoint}")
    assert_safe(result, ledger)


async def test_same_job_id_from_two_clients_at_once(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    node = NodeProcess(settings, tmp_path, "node")
    ledger = Ledger()
    try:
        await node.wait_ready()
        async with DelayClient(settings) as other:
            ids = [f"same-{i}" for i in range(300)]
            firsts = await asyncio.gather(
                *(
                    c.schedule(topic, {"from": n}, delay=0.5, job_id=job_id)
                    for job_id in ids
                    for n, c in enumerate((client, other))
                )
            )
        assert sorted(set(firsts)) == sorted(ids)
        ledger.scheduled.update(ids)
        result = await settle("same-job-id", ledger, collector, client, redis)
    finally:
        node.kill()
    assert_safe(result, ledger)
    assert result.duplicates == 0
    rows = await client.mysql.get_many(ids)
    fired = {str(r["job_id"]): r["payload"] for r in collector.records}
    assert all(orjson.loads(rows[job_id].payload_json) == fired[job_id] for job_id in ids)


async def test_cancel_racing_with_fire(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    node = NodeProcess(settings, tmp_path, "node")
    ledger = Ledger()
    try:
        await node.wait_ready()
        await asyncio.sleep(0.5)  # the node owns its slots
        ids = await client.schedule_many(
            [{"topic": topic, "payload": i, "delay": 1.0} for i in range(1000)]
        )
        ledger.scheduled.update(ids)
        # A wave of cancels across the moment they come due: some win, some are late.
        await asyncio.sleep(0.6)
        for start in range(0, len(ids), 50):
            chunk = ids[start : start + 50]
            answers = await asyncio.gather(*(client.cancel(job_id) for job_id in chunk))
            for job_id, cancelled in zip(chunk, answers, strict=True):
                (ledger.cancelled if cancelled else ledger.not_cancelled).add(job_id)
            await asyncio.sleep(0.04)
        result = await settle("cancel-vs-fire", ledger, collector, client, redis)
    finally:
        node.kill()
    assert_safe(result, ledger)
    assert result.duplicates == 0
    fired = {str(r["job_id"]) for r in collector.records}
    assert ledger.not_cancelled <= fired
    print(f"cancelled {len(ledger.cancelled)}, too late {len(ledger.not_cancelled)}")
