"""The fault suite: real node processes under a steady load while something breaks.

Each scenario logs every client call (tests/checker.py), reads every fired record from
Kafka, and checks: lost = ok-scheduled − ok-cancelled − fired − dead must be 0, no job
fires early, no cancelled job fires, and afterwards MySQL and Redis agree. Results are
printed and appended to benchmarks/results/faults.jsonl (docs/guarantees.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from actors.failpoints import EXIT_CODE, NAMES
from actors.node import Node
from cluster import DelayClient, Job, OutcomeUnknown, RedisStepFailed
from cluster.connections.redis_conn import RedisClient
from cluster.devstack import stack
from cluster.model.contract import member_id
from cluster.model.keys import slot_of
from cluster.settings.config import Settings
from tests.checker import Ledger, Verdict, verdict
from tests.conftest import Collector, wait_for
from tests.processes import NodeProcess

# Faults kill the single-instance services, so the Redis Cluster pass leaves them out.
pytestmark = [pytest.mark.slow, pytest.mark.faults]

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "faults.jsonl"
LOAD_S = 6.0
TICK_S = 0.1
PER_TICK = 50  # 500 jobs/s


async def steady_load(
    ledger: Ledger,
    client: DelayClient,
    topic: str,
    seconds: float = LOAD_S,
    extra: Callable[[int], list[dict[str, Any]]] | None = None,
) -> None:
    rng = random.Random(3)
    end = time.monotonic() + seconds
    tick = 0
    while time.monotonic() < end:
        jobs: list[dict[str, Any]] = [
            {"topic": topic, "payload": {"tick": tick, "n": n}, "delay": rng.uniform(0.3, 2.0)}
            for n in range(PER_TICK)
        ]
        await ledger.schedule_many(client, jobs + (extra(tick) if extra else []))
        tick += 1
        await asyncio.sleep(TICK_S)


async def settle(
    name: str,
    ledger: Ledger,
    collector: Collector,
    client: DelayClient,
    redis: RedisClient,
    timeout_s: float = 120,
) -> Verdict:
    """Wait until every job that should fire did, none is still pending or firing (a
    job published but not acked before a fault is retried later), and the stores agree;
    then judge."""
    deadline = time.monotonic() + timeout_s
    result: Verdict | None = None
    while time.monotonic() < deadline:
        await collector.poll()
        try:
            result = await verdict(ledger, collector.records, client, redis)
        except Exception:  # e.g. MySQL just came back and a pooled connection is stale
            await asyncio.sleep(0.5)
            continue
        if not result.lost and not result.violations and not result.unfinished:
            break
        await asyncio.sleep(0.5)
    await collector.quiet_for(1.0)
    result = await verdict(ledger, collector.records, client, redis)
    row = {
        "scenario": name,
        **result.row(),
        "schedule_failed": ledger.schedule_failed,
        "schedule_unknown": ledger.schedule_unknown,
        "cancelled": len(ledger.cancelled),
    }
    print(f"\n[{name}] {row}")
    for job_id in result.lost[:5]:  # what the stores say about a lost job, for the log
        k = client.keys.slot(slot_of(job_id, client.settings.slots))
        in_redis = {
            "jobs": await redis.hexists(k.jobs, job_id),
            "delay": job_id.encode() in {member_id(m) for m in await redis.zrange(k.delay, 0, -1)},
            "inflight": await redis.zscore(k.inflight, job_id),
            "tomb": await redis.zscore(k.tomb, job_id),
            "acked": await redis.zscore(k.acked, job_id),
        }
        print(f"  lost {job_id}: {await client.get(job_id)} redis {in_redis}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("ab") as out:
        out.write(orjson.dumps(row) + b"\n")
    return result


async def down_for(service: str, seconds: float) -> None:
    """Stop a service of the local stack, wait, and start it again."""
    pid = stack.service_pid(service)
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    await asyncio.sleep(seconds)
    await asyncio.to_thread(stack.up)


def assert_safe(result: Verdict, ledger: Ledger) -> None:
    assert result.lost == []
    assert result.early == 0
    assert result.cancelled_but_fired == []
    assert result.fired_at_old_time == []
    assert result.violations == []
    assert result.unexpected <= ledger.schedule_unknown


async def scenario(
    name: str,
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
    fault: Callable[[list[NodeProcess]], Awaitable[None]],
    nodes: int = 2,
    node_env: dict[str, str] | Callable[[int], dict[str, str]] | None = None,
    extra: Callable[[int], list[dict[str, Any]]] | None = None,
) -> tuple[Verdict, Ledger]:
    """`nodes` node processes (node_env: the same variables for each, or each one's by
    its index) under the steady load, `fault` struck 2 s into it; settled and judged."""
    procs = [
        NodeProcess(
            settings, tmp_path, f"{name}-{i}", node_env(i) if callable(node_env) else node_env
        )
        for i in range(nodes)
    ]
    ledger = Ledger()
    try:
        for proc in procs:
            await proc.wait_ready()
        async with reading(collector):
            load = asyncio.create_task(steady_load(ledger, client, topic, extra=extra))
            await asyncio.sleep(2.0)
            await fault(procs)
            await load
        result = await settle(name, ledger, collector, client, redis)
    finally:
        for proc in procs:
            proc.kill()
    return result, ledger


@contextlib.asynccontextmanager
async def reading(collector: Collector) -> AsyncIterator[None]:
    """Keep reading Kafka meanwhile, so that lateness is measured when records arrive.
    Stopped between two polls rather than cancelled, so no fetch is cut off midway."""
    done = asyncio.Event()

    async def poll_until_done() -> None:
        while not done.is_set():
            await collector.poll()

    task = asyncio.create_task(poll_until_done())
    try:
        yield
    finally:
        done.set()
        await task


async def test_sigkill_a_node_mid_dispatch(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    async def fault(procs: list[NodeProcess]) -> None:
        procs[0].signal(signal.SIGKILL)

    result, ledger = await scenario(
        "sigkill-node", settings, client, redis, topic, collector, tmp_path, fault
    )
    assert_safe(result, ledger)


async def test_flushall(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    async def fault(procs: list[NodeProcess]) -> None:
        await redis.flushall()

    result, ledger = await scenario(
        "flushall", settings, client, redis, topic, collector, tmp_path, fault
    )
    assert_safe(result, ledger)


async def test_redis_restarted_without_persistence(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    """Redis dies and comes back empty (its AOF deleted): the lost owner keys fence the
    nodes, which take their slots again and re-add the pending jobs from MySQL."""

    async def fault(procs: list[NodeProcess]) -> None:
        pid = stack.service_pid("redis")
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        await asyncio.sleep(0.5)
        shutil.rmtree(stack.state_dir() / "redis" / "appendonlydir", ignore_errors=True)
        await asyncio.to_thread(stack.up)

    result, ledger = await scenario(
        "redis-restart-empty", settings, client, redis, topic, collector, tmp_path, fault
    )
    assert_safe(result, ledger)


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
        pid = stack.service_pid("redis")
        assert pid is not None
        os.kill(pid, signal.SIGTERM)

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


async def test_broker_unreachable_for_10_s(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    """The broker dies (kill -9) and is started again 10 s later with its log, which
    Apache Kafka keeps on disk: publishing fails meanwhile and is retried with backoff,
    and every record it acknowledged before it died is still there afterwards."""
    pid = stack.service_pid("kafka")
    assert pid is not None

    async def fault(procs: list[NodeProcess]) -> None:
        os.kill(pid, signal.SIGKILL)
        await asyncio.sleep(10)
        await asyncio.to_thread(stack.up)  # starts what does not run: the broker

    result, ledger = await scenario(
        "broker-down-10s", settings, client, redis, topic, collector, tmp_path, fault
    )
    assert_safe(result, ledger)
    assert result.acked_not_in_kafka == []


async def test_mysql_down_for_10_s(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    """schedule() fails with StoreUnavailable and writes nothing; firing goes on and the
    outcomes are recorded when MySQL is back."""

    async def fault(procs: list[NodeProcess]) -> None:
        await down_for("mysql", 10)

    result, ledger = await scenario(
        "mysql-down-10s", settings, client, redis, topic, collector, tmp_path, fault
    )
    assert_safe(result, ledger)
    assert ledger.schedule_failed > 0


async def test_zookeeper_down_for_10_s(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    async def fault(procs: list[NodeProcess]) -> None:
        await down_for("zookeeper", 10)

    result, ledger = await scenario(
        "zookeeper-down-10s", settings, client, redis, topic, collector, tmp_path, fault
    )
    assert_safe(result, ledger)


async def test_a_node_whose_zookeeper_session_expires(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    """A node freezes (SIGSTOP) past its 3 s session timeout: the other node takes its
    slots, fenced by new epochs; it wakes up, finds its session gone and rejoins."""

    async def fault(procs: list[NodeProcess]) -> None:
        procs[0].signal(signal.SIGSTOP)
        try:
            await asyncio.sleep(6.5)
        finally:
            procs[0].signal(signal.SIGCONT)

    result, ledger = await scenario(
        "zk-session-expired", settings, client, redis, topic, collector, tmp_path, fault
    )
    assert_safe(result, ledger)


async def test_poison_jobs_go_dead_and_the_rest_fire(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    poisoned = 0  # how many the load scheduled: it makes fewer ticks on a busy machine

    def poison(tick: int) -> list[dict[str, Any]]:
        nonlocal poisoned
        if tick % 10:
            return []
        poisoned += 1
        return [{"topic": topic, "payload": "x" * 30_000, "delay": 0.5, "max_attempts": 2}]

    async def fault(procs: list[NodeProcess]) -> None:
        return None

    result, ledger = await scenario(
        "poison-jobs",
        settings,
        client,
        redis,
        topic,
        collector,
        tmp_path,
        fault,
        # Payloads over the nodes' record limit, which producers (default limits) accept.
        node_env={"DELAYQ_KAFKA_MAX_BATCH_BYTES": "20000", "DELAYQ_PAYLOAD_MAX_BYTES": "15000"},
        extra=poison,
    )
    assert_safe(result, ledger)
    # No job lost (assert_safe) means every poison job scheduled is dead, as none fires.
    assert 1 <= result.dead <= poisoned


async def test_node_clock_an_hour_ahead(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    async def fault(procs: list[NodeProcess]) -> None:
        return None

    result, ledger = await scenario(
        "clock-1h-ahead",
        settings,
        client,
        redis,
        topic,
        collector,
        tmp_path,
        fault,
        nodes=1,
        node_env={"DELAYQ_CLOCK_OFFSET_MS": "3600000"},
    )
    assert_safe(result, ledger)


async def crash_at(
    failpoint: str,
    name: str,
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
    node_env: dict[str, str] | None = None,
) -> tuple[Verdict, Ledger]:
    """A node (with node_env) dies at `failpoint` under load; a second node (node_env,
    started when the first died) takes over. Settled and judged as `name`."""
    env = node_env or {}
    crashing = NodeProcess(settings, tmp_path, "crashing", {**env, "DELAYQ_FAILPOINT": failpoint})
    ledger = Ledger()
    survivor: NodeProcess | None = None
    try:
        await crashing.wait_ready()
        async with reading(collector):
            load = asyncio.create_task(steady_load(ledger, client, topic, seconds=4.0))
            assert await crashing.wait_exit() == EXIT_CODE
            survivor = NodeProcess(settings, tmp_path, "survivor", env)
            await survivor.wait_ready()
            await load
        result = await settle(name, ledger, collector, client, redis)
    finally:
        crashing.kill()
        if survivor is not None:
            survivor.kill()
    return result, ledger


@pytest.mark.parametrize("failpoint", NAMES)
async def test_crash_at_failpoint(
    failpoint: str,
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    """A node dies at an exact step; a second node (started when it died) loses nothing."""
    result, ledger = await crash_at(
        failpoint, f"crash-{failpoint}", settings, client, redis, topic, collector, tmp_path
    )
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
