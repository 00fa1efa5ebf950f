"""Three and four `delayq node` processes sharing 20,000 jobs: steady state, kill -9,
SIGSTOP past the session timeout, and a node joining mid-run.

Each scenario prints its measurements (failover time, duplicates) for the docs.
"""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from cluster import DelayClient, Job
from cluster.observe.status import read_status
from cluster.settings.config import Settings
from tests.conftest import Collector, wait_for
from tests.processes import NodeProcess, slots_served_by, start_nodes, wait_served

pytestmark = pytest.mark.slow

JOBS = 20_000
NAMES = ["node-a", "node-b", "node-c"]


async def schedule(client: DelayClient, topic: str, spread_s: float) -> list[str]:
    rng = random.Random(5)
    jobs = [Job(topic, i, delay=1.0 + rng.uniform(0, spread_s)) for i in range(JOBS)]
    ids: list[str] = []
    for start in range(0, JOBS, 5000):
        ids += await client.schedule_many(jobs[start : start + 5000])
    return ids


async def collect_all(collector: Collector, ids: list[str], timeout_s: float) -> Counter[str]:
    wanted = set(ids)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if wanted <= {str(r["job_id"]) for r in collector.records}:
            break
        await collector.poll()
    await collector.quiet_for(1.0)
    return Counter(str(r["job_id"]) for r in collector.records)


def tally(ids: list[str], fired: Counter[str]) -> tuple[set[str], int]:
    """(scheduled jobs that never fired, extra copies of those that did)."""
    return set(ids) - set(fired), sum(n - 1 for n in fired.values())


def report(name: str, **facts: object) -> None:
    print(f"\n[{name}] " + ", ".join(f"{k}={v}" for k, v in facts.items()))


def stop_all(nodes: list[NodeProcess]) -> None:
    for node in nodes:
        node.kill()


def retries(collector: Collector, log_dir: Path) -> str:
    """Empty when every record is a first attempt; else the retried records and what
    the nodes logged at WARNING or above, to tell why."""
    retried = [r for r in collector.records if r["attempt"] != 1]
    if not retried:
        return ""
    warnings = [
        f"{log.stem}: {line}"
        for log in sorted(log_dir.glob("*.log"))
        for line in log.read_text(errors="replace").splitlines()
        if " WARNING " in line or " ERROR " in line
    ]
    shown = [{k: r.get(k) for k in ("job_id", "attempt", "node", "due_ms")} for r in retried[:5]]
    return f"{len(retried)} record(s) retried, e.g. {shown}; the nodes logged: " + "\n".join(
        warnings[:30]
    )


async def test_three_nodes_share_jobs_none_lost_none_duplicated(
    settings: Settings, client: DelayClient, collector: Collector, tmp_path: Path, topic: str
) -> None:
    nodes = await start_nodes(settings, tmp_path, NAMES)
    try:
        await wait_served(settings, set(NAMES))
        ids = await schedule(client, topic, spread_s=4.0)
        fired = await collect_all(collector, ids, timeout_s=90)
    finally:
        stop_all(nodes)
    lost, duplicates = tally(ids, fired)
    report("steady", lost=len(lost), duplicates=duplicates)
    assert not lost
    assert duplicates == 0
    # Not one retry either: a duplicate still on its way would show up here first.
    assert not (why := retries(collector, tmp_path)), why
    assert {r["node"] for r in collector.records} == set(NAMES)
    assert all(r["fired_ms"] >= r["due_ms"] for r in collector.records)  # type: ignore


async def test_kill_9_moves_its_slots_and_every_job_fires(
    settings: Settings, client: DelayClient, collector: Collector, tmp_path: Path, topic: str
) -> None:
    nodes = await start_nodes(settings, tmp_path, NAMES)
    try:
        await wait_served(settings, set(NAMES))
        ids = await schedule(client, topic, spread_s=8.0)
        await collector.until(JOBS // 3, timeout_s=60)
        nodes[0].signal(signal.SIGKILL)
        killed_at = time.time()
        served_at = await wait_served(settings, set(NAMES[1:]))
        fired = await collect_all(collector, ids, timeout_s=90)
    finally:
        stop_all(nodes)
    lost, duplicates = tally(ids, fired)
    report(
        "kill -9",
        slots_served_again_after_s=round(served_at - killed_at, 2),
        lost=len(lost),
        duplicates=duplicates,
        max_lateness_ms=max(r["received_ms"] - r["due_ms"] for r in collector.records),
    )
    assert not lost
    assert all(r["fired_ms"] >= r["due_ms"] for r in collector.records)  # type: ignore


async def test_paused_node_fires_nothing_for_slots_it_lost_then_rejoins(
    settings: Settings, client: DelayClient, collector: Collector, tmp_path: Path, topic: str
) -> None:
    nodes = await start_nodes(settings, tmp_path, NAMES)
    paused = nodes[0]
    try:
        await wait_served(settings, set(NAMES))
        ids = await schedule(client, topic, spread_s=10.0)
        await collector.until(JOBS // 4, timeout_s=60)
        paused.signal(signal.SIGSTOP)
        stopped_at = time.time() * 1000
        # Its session expires (3 s) and the others take its slots: from taken_at on,
        # every slot's epoch in Redis is another node's.
        taken_at = await wait_served(settings, set(NAMES[1:])) * 1000
        paused.signal(signal.SIGCONT)
        continued_at = time.time() * 1000
        await wait_served(settings, set(NAMES))
        status = await read_status(settings)
        [rejoined_at] = [
            m["joined_ms"] for m in status.members.values() if m["node_id"] == paused.name
        ]
        # Jobs due after it rejoined, in every slot: the first batch may all have fired
        # by then when the pause came late (e.g. a slow consumer delayed it).
        ids += await client.schedule_many([Job(topic, i, delay=0.5) for i in range(1600)])
        fired = await collect_all(collector, ids, timeout_s=90)
    finally:
        stop_all(nodes)
    from_paused = [r for r in collector.records if r["node"] == paused.name]
    # Claimed while it did not own the slot: after the others had fenced it out, before
    # it rejoined. (A claim it sent just before it froze can still run in Redis after
    # stopped_at, under its own epoch: that one is legitimate.)
    claimed_without_ownership = [
        r
        for r in from_paused
        if taken_at <= r["fired_ms"] < rejoined_at  # type: ignore
    ]
    # Claimed before it froze and already handed to the Kafka producer, delivered after
    # it woke up (the new owner retries them too: duplicates after a failure).
    delivered_late = [
        r
        for r in from_paused
        if r["fired_ms"] < stopped_at and r["received_ms"] > continued_at  # type: ignore
    ]
    lost, duplicates = tally(ids, fired)
    report(
        "SIGSTOP",
        paused_for_s=round((continued_at - stopped_at) / 1000, 2),
        fenced_out_after_s=round((taken_at - stopped_at) / 1000, 2),
        rejoined_after_continue_s=round((rejoined_at - continued_at) / 1000, 2),
        claimed_without_ownership=len(claimed_without_ownership),
        claimed_before_pause_delivered_after=len(delivered_late),
        lost=len(lost),
        duplicates=duplicates,
    )
    assert claimed_without_ownership == []
    assert not lost
    assert any(r["fired_ms"] >= rejoined_at for r in from_paused)  # type: ignore


async def test_a_fourth_node_joins_mid_run_and_takes_its_share(
    settings: Settings, client: DelayClient, collector: Collector, tmp_path: Path, topic: str
) -> None:
    nodes = await start_nodes(settings, tmp_path, NAMES)
    try:
        await wait_served(settings, set(NAMES))
        ids = await schedule(client, topic, spread_s=8.0)
        await collector.until(JOBS // 3, timeout_s=60)
        nodes += await start_nodes(settings, tmp_path, ["node-d"])
        joined_at = time.time()
        await wait_served(settings, {*NAMES, "node-d"})
        # Its slots come one hand-off at a time: until it serves its even share.

        async def served_by_d() -> int:
            return Counter((await slots_served_by(settings)).values())["node-d"]

        async def has_its_share() -> bool:
            return await served_by_d() >= settings.slots // 4

        assert await wait_for(has_its_share, timeout_s=30)
        share = await served_by_d()
        served_at = time.time()
        # Jobs due after it took its share, in every slot: the first batch may all have
        # fired by then when its start and hand-offs were slow.
        ids += await client.schedule_many([Job(topic, i, delay=0.5) for i in range(1600)])
        fired = await collect_all(collector, ids, timeout_s=90)
    finally:
        stop_all(nodes)
    lost, duplicates = tally(ids, fired)
    report(
        "join",
        share_taken_after_s=round(served_at - joined_at, 2),
        slots_taken=share,
        lost=len(lost),
        duplicates=duplicates,
    )
    assert not lost
    assert duplicates == 0  # a graceful hand-off is not a failure
    assert not (why := retries(collector, tmp_path)), why
    assert share == settings.slots // 4  # its even share: 16 slots over 4 nodes
    assert "node-d" in {r["node"] for r in collector.records}
