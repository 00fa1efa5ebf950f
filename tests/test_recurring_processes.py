"""Recurring schedules with real `delayq node` processes: each tick fires once through
kill -9 of the node making the ticks, and ticks missed while every node was down fire
once or not at all, as the schedule says."""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from cluster import DelayClient
from cluster.model.jobs import now_ms
from cluster.model.keys import slot_of
from cluster.model.tick_ids import tick_job_id
from cluster.settings.config import Settings
from tests.conftest import Collector
from tests.processes import FAST_FAILOVER, NodeProcess, slots_served_by, wait_served

# Once: the ticks' Redis side is the outbox's and the client's, tested in both passes.
pytestmark = [pytest.mark.slow, pytest.mark.once]

NAMES = ["node-a", "node-b", "node-c"]


def ticks_env(lookahead_ms: int, poll_ms: int) -> dict[str, str]:
    return {
        "DELAYQ_RECURRING_LOOKAHEAD_MS": str(lookahead_ms),
        "DELAYQ_RECURRING_POLL_MS": str(poll_ms),
    }


def by_tick(records: list[dict[str, object]], name: str) -> dict[int, Counter[str]]:
    """tick_ms → how many records of each job id fired for it."""
    found: dict[int, Counter[str]] = defaultdict(Counter)
    for record in records:
        if record.get("recurring") == name:
            found[int(record["tick_ms"])][str(record["job_id"])] += 1  # type: ignore[call-overload]
    return found


async def until_tick(collector: Collector, name: str, tick_ms: int, timeout_s: float) -> None:
    """Poll until a record of a tick at or after tick_ms arrived."""
    deadline = time.monotonic() + timeout_s
    while not any(t >= tick_ms for t in by_tick(collector.records, name)):
        assert time.monotonic() < deadline, f"no tick of {name} at or after {tick_ms}"
        await collector.poll()


async def test_each_tick_fires_once_through_kill_9_of_the_schedule_owner(
    settings: Settings, topic: str, collector: Collector, tmp_path: Path
) -> None:
    lookahead_ms = 6000
    env = ticks_env(lookahead_ms, 250)
    nodes = {name: NodeProcess(settings, tmp_path, name, env) for name in NAMES}
    try:
        for node in nodes.values():
            await node.wait_ready()
        await wait_served(settings, set(NAMES))
        client_settings = settings.replace(recurring_lookahead_ms=lookahead_ms)
        async with DelayClient(client_settings) as client:
            name = "every-second"
            await client.schedule_recurring(name, topic, "tick", every=1)
            first_tick = min(await wait_ticks(collector, name, 4))
            owner = (await slots_served_by(settings))[slot_of(name, settings.slots)]
            assert owner in nodes
            before = await client.get_recurring(name)
            assert before is not None
            killed_at = now_ms()
            nodes[owner].kill()
            survivors = set(NAMES) - {owner}
            await wait_served(settings, survivors)
            # Ticks the killed node cannot have made: due more than a lookahead after
            # the kill. Wait until several of them fired.
            beyond = killed_at + lookahead_ms + 5000
            await until_tick(collector, name, beyond, timeout_s=90)
            after = await client.get_recurring(name)
            assert after is not None and after.epoch > before.epoch  # another owner made them
            removed_at = now_ms()
            assert await client.remove_recurring(name)
        # Long enough for the killed node's jobs in flight to come back (4 s deadline).
        records = await collector.quiet_for(6.0)
    finally:
        for node in nodes.values():
            node.kill()

    fired = by_tick(records, name)
    window = range(first_tick, removed_at - 1000, 1000)
    missing = [t for t in window if t not in fired]
    assert not missing, f"ticks that never fired: {missing}"
    for tick in window:
        # One job per tick: the id derived from the schedule and the tick.
        assert set(fired[tick]) == {tick_job_id(name, 1, tick)}, fired[tick]
    # A job delivered twice is the at-least-once case of any job whose node died while
    # publishing it: the same job id, first from the killed node.
    copies = {tick: sum(ids.values()) for tick, ids in fired.items() if sum(ids.values()) > 1}
    killed_node_ticks = {int(r["tick_ms"]) for r in records if r["node"] == owner}  # type: ignore[call-overload]
    assert all(n == 2 and tick in killed_node_ticks for tick, n in copies.items()), copies
    made_after_kill = [t for t in window if t > killed_at + lookahead_ms]
    print(
        f"\n[recurring kill -9] ticks {len(window)}, made by the new owner "
        f">= {len(made_after_kill)}, delivered twice {len(copies)}"
    )


async def wait_ticks(collector: Collector, name: str, count: int) -> list[int]:
    deadline = time.monotonic() + 60
    while len(by_tick(collector.records, name)) < count:
        assert time.monotonic() < deadline, f"fewer than {count} ticks of {name}"
        await collector.poll()
    return sorted(by_tick(collector.records, name))


MISSED_LOG = re.compile(r"recurring (\S+): ticks from (\d+) to (\d+) ms were not made")


async def test_missed_ticks_fire_once_or_never_after_every_node_was_down(
    settings: Settings, topic: str, collector: Collector, tmp_path: Path
) -> None:
    """The only node stops for 8 s, more than the lookahead: the ticks nobody made in
    that time are missed. "fire_once" fires the last of them once, "skip" none; both go
    on with their next tick, and the ticks made before the stop fire, late."""
    env = {**ticks_env(2000, 200), **FAST_FAILOVER}
    client_settings = settings.replace(recurring_lookahead_ms=2000, recurring_poll_ms=200)
    first = NodeProcess(settings, tmp_path, "first", env)
    second: NodeProcess | None = None
    try:
        await first.wait_ready()
        await wait_served(settings, {"first"})
        async with DelayClient(client_settings) as client:
            await client.schedule_recurring("once", topic, "once", every=1, missed="fire_once")
            await client.schedule_recurring("skip", topic, "skip", every=1, missed="skip")
            await wait_ticks(collector, "once", 2)
            await wait_ticks(collector, "skip", 2)
            assert await first.stop() == 0
            made = {}
            for name in ("once", "skip"):
                schedule = await client.get_recurring(name)
                assert schedule is not None and schedule.next_tick_ms is not None
                made[name] = schedule.next_tick_ms  # the first tick nobody made
            await asyncio.sleep(8)
            second = NodeProcess(settings, tmp_path, "second", env)
            await second.wait_ready()
            restarted = now_ms()
            for name in ("once", "skip"):
                await until_tick(collector, name, restarted + 3000, timeout_s=60)
                assert await client.remove_recurring(name)
        records = await collector.quiet_for(1.0)
    finally:
        first.kill()
        if second is not None:
            second.kill()

    found = {m[1]: int(m[3]) for m in MISSED_LOG.finditer(second.log_path.read_text())}
    assert set(found) == {"once", "skip"}, second.log_tail()
    for name, kept in (("once", 1), ("skip", 0)):
        fired = by_tick(records, name)
        assert all(sum(ids.values()) == 1 for ids in fired.values()), "a tick fired twice"
        ticks = sorted(fired)
        cursor, missed_until = made[name], found[name]
        assert missed_until - cursor > 5000  # a catch-up would have fired 5 or more
        before = [t for t in ticks if t < cursor]
        gap = [t for t in ticks if cursor <= t < missed_until]
        after = [t for t in ticks if t >= missed_until]
        # Every tick made before the stop fired (the last ones late, after the restart).
        assert before == list(range(before[0], cursor, 1000))
        last_missed = (missed_until - 1) // 1000 * 1000
        assert gap == [last_missed][:kept], (name, gap)
        assert after == list(range(after[0], after[-1] + 1, 1000))
        assert after[0] == last_missed + 1000
