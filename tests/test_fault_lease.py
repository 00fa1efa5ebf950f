"""Fault scenarios of slot ownership that fencing in Redis alone cannot cover: a node
frozen past its ZooKeeper session while Redis lost its data (the epochs that would have
fenced it are gone), and the claims of a node killed while it held them (returned when
its session ends, not at their in-flight deadline). Real node processes, real services,
checked like the rest of the fault suite (tests/test_faults.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest

from actors.failpoints import EXIT_CODE
from cluster import DelayClient
from cluster.connections.redis_conn import RedisClient
from cluster.devstack import stack
from cluster.settings.config import Settings
from tests.conftest import Collector
from tests.faults.load import reading, steady_load
from tests.faults.settle import settle
from tests.faults.shared import shared_pid
from tests.faults.verdict import Ledger, assert_safe
from tests.processes import NodeProcess, wait_served

pytestmark = [pytest.mark.slow, pytest.mark.faults]

_ADOPTED = re.compile(r"slot \d+: (\d+) job\(s\) its previous owner had claimed when its session")
_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
BURST = 3000  # jobs due at one moment, so that a node freezes in the middle of sending


def _first_take_after(log_path: Path, after_ms: float) -> float:
    """When the node's log (local times, to the ms) first says it took a slot at or
    after `after_ms` (time.time() ms); infinity if it never did."""
    for line in log_path.read_text().splitlines():
        found = _LOG_TIME.match(line)
        if found is None or "took slot" not in line:
            continue
        at = dt.datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() * 1000
        if at >= after_ms:
            return at
    return float("inf")


async def _burst(ledger: Ledger, client: DelayClient, topic: str, due_s: float) -> None:
    """BURST jobs, all due at time.time() == due_s."""
    for start in range(0, BURST, 500):
        jobs = [
            {"topic": topic, "payload": {"burst": start + n}, "delay": due_s - time.time()}
            for n in range(500)
        ]
        await ledger.schedule_many(client, jobs)


async def _empty_redis(redis: RedisClient, how: str) -> None:
    """FLUSHALL, or a kill -9 and a start without the append-only file."""
    if how == "flushall":
        await redis.flushall()
        return
    os.kill(shared_pid("redis"), signal.SIGKILL)
    await asyncio.sleep(0.5)
    shutil.rmtree(stack.state_dir() / "redis" / "appendonlydir", ignore_errors=True)
    await asyncio.to_thread(stack.up)


@pytest.mark.parametrize("how", ["flushall", "restart-empty"])
@pytest.mark.alone  # it freezes the shared broker and empties the shared Redis
async def test_a_frozen_node_publishes_nothing_after_redis_lost_its_data(
    how: str,
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    """Node A is frozen (SIGSTOP) while it sends a burst of jobs, with records queued
    behind a stalled broker, for longer than its 3 s ZooKeeper session; node B takes
    its slots, then Redis loses its data (flushed, or restarted empty: every epoch
    that would fence A is gone) and A wakes up. A puts no record in a batch from the
    moment it froze until it has taken a slot again through ZooKeeper (its lease ran
    out: it knows from its own clock), and no job is lost: what A had claimed stays
    in flight, and comes back from MySQL after the flush."""
    frozen, other = (NodeProcess(settings, tmp_path, f"frozen-{n}") for n in "ab")
    ledger = Ledger()
    try:
        await frozen.wait_ready()
        await other.wait_ready()
        async with reading(collector):
            load = asyncio.create_task(steady_load(ledger, client, topic, seconds=10.0))
            due_s = time.time() + 2.5
            await _burst(ledger, client, topic, due_s)
            await asyncio.sleep(due_s + 0.1 - time.time())
            # The broker stalls for a moment, so that A's records queue up behind the
            # batch each partition has in flight; A freezes with records queued.
            broker = shared_pid("kafka")
            os.kill(broker, signal.SIGSTOP)
            try:
                await asyncio.sleep(0.3)
                frozen.signal(signal.SIGSTOP)
                frozen_ms = time.time() * 1000
            finally:
                os.kill(broker, signal.SIGCONT)
            try:
                await asyncio.sleep(4.5)  # the session (3 s) expired, B took the slots
                await _empty_redis(redis, how)
                await asyncio.sleep(2.0)
            finally:
                frozen.signal(signal.SIGCONT)
            await load
        result = await settle(f"frozen-node-redis-{how}", ledger, collector, client, redis)
    finally:
        frozen.kill()
        other.kill()
    retaken_ms = _first_take_after(frozen.log_path, frozen_ms)
    unleased = [
        r
        for r in collector.records
        if r["node"] == frozen.name and frozen_ms <= float(r["created_ms"]) < retaken_ms  # type: ignore[arg-type]
    ]
    print(f"published by the frozen node from its freeze to its next take: {len(unleased)}")
    assert unleased == []
    assert_safe(result, ledger)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
async def test_a_killed_nodes_claims_are_retried_when_its_session_ends(
    delivery: str,
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    tmp_path: Path,
) -> None:
    """Three nodes whose in-flight deadline is 10 minutes; one dies (the after-claim
    failpoint: it exits like a kill -9 right after a claim took jobs) holding claims.
    Once its session ends, the nodes that take its slots retry what it had in flight at
    once (exactly-once: after reading the journal): every job fires within this test's
    wait (60 s), which the deadline would not allow, none is lost, and with exactly-once
    none fires twice for a read_committed consumer."""
    slow_deadline = {"DELAYQ_INFLIGHT_TIMEOUT_MS": "600000", "DELAYQ_DELIVERY": delivery}
    isolation = "read_committed" if delivery == "exactly_once" else "read_uncommitted"
    collector = Collector(settings, topic, isolation_level=isolation)
    await collector.start()
    dying = NodeProcess(
        settings, tmp_path, "dying", {**slow_deadline, "DELAYQ_FAILPOINT": "after-claim"}
    )
    takers = [NodeProcess(settings, tmp_path, f"taker-{n}", slow_deadline) for n in "bc"]
    ledger = Ledger()
    try:
        for node in (dying, *takers):
            await node.wait_ready()
        await wait_served(settings, {node.name for node in (dying, *takers)})
        async with reading(collector):
            jobs = [{"topic": topic, "payload": n, "delay": 1.0} for n in range(300)]
            await ledger.schedule_many(client, jobs)
            assert await dying.wait_exit() == EXIT_CODE
        name = (
            "killed-holding-claims" if delivery == "at_least_once" else "eos-killed-holding-claims"
        )
        result = await settle(name, ledger, collector, client, redis, 60)
    finally:
        for node in (dying, *takers):
            node.kill()
        await collector.stop()
    logs = "".join(node.log_path.read_text() for node in takers)
    adopted = sum(int(count) for count in _ADOPTED.findall(logs))
    print(f"claims of the dead node retried when its session ended: {adopted}")
    assert_safe(result, ledger)
    assert adopted > 0
    if delivery == "exactly_once":
        assert result.duplicates == 0
