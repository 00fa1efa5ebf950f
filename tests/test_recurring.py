"""Recurring schedules against the real stack: ticks fire as ordinary jobs with
"recurring" and "tick_ms"; replace and remove; bad definitions change nothing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from actors.node import Node
from actors.ownership import HeldSlots
from actors.recurring import RecurringTicks
from cluster import DelayClient, InvalidJob
from cluster.client.recurring import describe
from cluster.model.contract import JobStatus
from cluster.model.keys import slot_of
from cluster.model.tick_ids import tick_job_id
from cluster.scripts.facade import Scripts
from cluster.settings.config import Settings
from tests.conftest import Collector, wait_for
from tests.test_cli import cli

# Ticks are made 2–4 s ahead, so within a test the node makes most of them (the client
# makes the first ones); a tick due more than 1 s ahead is stored lean, so its record is
# built from the tail made from its MySQL row.
FAST = {"recurring_lookahead_ms": 4000, "recurring_poll_ms": 200, "payload_lead_ms": 1000}


@pytest.fixture
def fast(settings: Settings) -> Settings:
    return settings.replace(**FAST)


@pytest.fixture
async def fast_node(fast: Settings) -> AsyncIterator[Node]:
    node = Node(fast)
    await node.start()
    yield node
    await node.stop()


@pytest.fixture
async def fast_client(fast: Settings) -> AsyncIterator[DelayClient]:
    async with DelayClient(fast) as client:
        yield client


def ticks_of(records: list[dict[str, Any]], name: str) -> list[int]:
    return sorted(int(r["tick_ms"]) for r in records if r.get("recurring") == name)


async def test_every_second_fires_each_tick_as_a_record(
    fast_client: DelayClient, fast_node: Node, topic: str, collector: Collector
) -> None:
    schedule = await fast_client.schedule_recurring(
        "heartbeat", topic, {"beat": True}, every=1, biz_type="beat"
    )
    assert (schedule.name, schedule.generation, schedule.removed) == ("heartbeat", 1, False)
    assert schedule.definition.cadence.every_ms == 1000
    records = await collector.until(8, timeout_s=60)
    ticks = ticks_of(records, "heartbeat")
    assert len(ticks) == len(records) >= 8
    assert ticks == list(range(ticks[0], ticks[0] + 1000 * len(ticks), 1000))  # none skipped
    assert ticks[0] % 1000 == 0
    for record in records:
        tick = int(record["tick_ms"])
        assert record["job_id"] == tick_job_id("heartbeat", 1, tick)
        assert record["due_ms"] == tick and int(record["fired_ms"]) >= tick
        assert (record["payload"], record["topic"], record["biz_type"]) == (
            {"beat": True},
            topic,
            "beat",
        )
        assert record["attempt"] == 1
    # The node, not only the client, made ticks: more than the lookahead's worth fired.
    assert fast_node.parts is not None and fast_node.parts.recurring.made_total > 0
    row = await fast_client.get(str(records[-1]["job_id"]))
    assert row is not None and row.status in (JobStatus.FIRED, JobStatus.PENDING)
    assert (row.recurring, row.tick_ms) == ("heartbeat", int(records[-1]["tick_ms"]))
    [listed] = await fast_client.recurring()
    assert listed.name == "heartbeat" and listed.next_tick_ms is not None
    assert listed.last_tick_ms is not None and listed.last_tick_ms > ticks[-1]


async def test_the_first_ticks_are_jobs_when_the_call_returns(
    fast_client: DelayClient, topic: str
) -> None:
    """No node runs: the ticks within the lookahead exist as pending jobs already, with
    ids derived from the schedule (a cron schedule in a zone this time)."""
    await fast_client.schedule_recurring(
        "every-minute", topic, 1, cron="* * * * *", tz="Asia/Kolkata"
    )
    schedule = await fast_client.get_recurring("every-minute")
    assert schedule is not None
    first = schedule.definition.cadence.first_at_or_after(schedule.created_ms)
    assert first is not None and first % 60_000 == 0
    if first < schedule.created_ms + FAST["recurring_lookahead_ms"]:
        job = await fast_client.get(tick_job_id("every-minute", 1, first))
        assert job is not None and job.status == JobStatus.PENDING and job.due_ms == first
        assert schedule.last_tick_ms == first and schedule.next_tick_ms == first + 60_000
    else:
        assert schedule.last_tick_ms is None and schedule.next_tick_ms == first


async def cancelled_or_fired(
    client: DelayClient, generation: int, since_ms: int, fired: list[int]
) -> bool:
    """Every tick of schedule "job" (every 1 s) of this generation that was a job and due
    from since_ms on either fired (is in `fired`) or was cancelled, never both; and at
    least one was cancelled."""
    first = since_ms // 1000 * 1000
    ticks = range(first, first + FAST["recurring_lookahead_ms"] + 2000, 1000)
    rows = await client.mysql.get_many([tick_job_id("job", generation, t) for t in ticks])
    cancelled = 0
    for tick in ticks:
        row = rows.get(tick_job_id("job", generation, tick))
        if row is None or tick < since_ms:
            continue
        was_cancelled = row.status == JobStatus.CANCELLED
        assert was_cancelled != (tick in fired), (tick, row.status)
        cancelled += was_cancelled
    return cancelled > 0


async def test_replace_and_remove(
    fast_client: DelayClient, fast_node: Node, topic: str, collector: Collector
) -> None:
    client = fast_client
    await client.schedule_recurring("job", topic, "old", every=1)
    await collector.until(3, timeout_s=60)

    # The same definition again changes nothing.
    same = await client.schedule_recurring("job", topic, "old", every=1)
    assert same.generation == 1

    replaced_at = int(time.time() * 1000)
    new = await client.schedule_recurring("job", topic, "new", every=1)
    assert new.generation == 2
    await wait_for_payload(collector, "new", count=3)
    removed_at = int(time.time() * 1000)
    assert await client.remove_recurring("job") is True
    assert await client.remove_recurring("job") is False
    records = await collector.quiet_for(3.0)

    ticks = ticks_of(records, "job")
    assert len(ticks) == len(set(ticks)), "a tick time fired twice across the replace"
    old = [int(r["tick_ms"]) for r in records if r["payload"] == "old"]
    new_ticks = [int(r["tick_ms"]) for r in records if r["payload"] == "new"]
    # Old ticks due from the replace on were cancelled, except any being published at
    # that moment, which fired; the new definition took over right after the last old one.
    assert min(new_ticks) > max(old)
    assert await cancelled_or_fired(client, 1, replaced_at, old)
    assert all(r["job_id"] == tick_job_id("job", 2, int(r["tick_ms"])) for r in records
               if r["payload"] == "new")  # fmt: skip
    # Nothing due after the remove fired, but any being published then.
    assert await cancelled_or_fired(client, 2, removed_at, new_ticks)
    assert await client.recurring() == []
    [gone] = await client.recurring(removed=True)
    assert gone.removed and gone.next_tick_ms is None and gone.next_fire_ms(0) is None

    # The name again: a new generation, so its ticks have new ids and fire.
    again = await client.schedule_recurring("job", topic, "again", every=1)
    assert again.generation == 3
    await wait_for_payload(collector, "again", count=2)


async def wait_for_payload(collector: Collector, payload: object, count: int) -> None:
    deadline = time.monotonic() + 60
    while sum(r["payload"] == payload for r in collector.records) < count:
        assert time.monotonic() < deadline, f"fewer than {count} records of {payload!r}"
        await collector.poll()


async def test_a_replaced_tick_time_never_fires_twice(fast_client: DelayClient, topic: str) -> None:
    """Without a node nothing fires, so every made tick is cancellable: replacing an
    every-2 s schedule with an every-1 s one cancels the old ticks and the new one's
    first ticks fall on the same times under new ids."""
    client = fast_client
    await client.schedule_recurring("swap", topic, "a", every=2)
    before = await client.get_recurring("swap")
    assert before is not None and before.last_tick_ms is not None
    old_ids = [
        tick_job_id("swap", 1, t)
        for t in range(before.next_tick_ms - 2000, int(time.time() * 1000), -2000)  # type: ignore[operator]
    ]
    await client.schedule_recurring("swap", topic, "b", every=1)
    rows = await client.mysql.get_many(old_ids)
    assert rows and all(row.status == JobStatus.CANCELLED for row in rows.values())
    after = await client.get_recurring("swap")
    assert after is not None and after.generation == 2 and after.last_tick_ms is not None
    new = await client.get(tick_job_id("swap", 2, after.last_tick_ms))
    assert new is not None and new.status == JobStatus.PENDING and new.payload_json == '"b"'


async def test_bad_calls_change_nothing(client: DelayClient) -> None:
    bad: list[dict[str, Any]] = [
        {"every": 0},
        {"every": 1, "cron": "* * * * *"},
        {},
        {"cron": "not cron"},
        {"cron": "* * * * *", "tz": "Nowhere/Special"},
        {"every": 5, "start_at": 2_000_000_000, "end_at": 1_999_999_999},
        {"every": 5, "missed": "storm"},
        {"every": 5, "max_attempts": 0},
        {"every": 5, "expires_after": 0},
        {"every": 5, "expires_after": -1},
        {"every": 5, "expires_after": "soon"},
        {"every": 5, "expires_after": float("nan")},
        {"every": 5, "expires_after": 10**12},
    ]
    for changes in bad:
        with pytest.raises(InvalidJob):
            await client.schedule_recurring("bad", "topic", 1, **changes)
    with pytest.raises(InvalidJob, match="name"):
        await client.schedule_recurring("bad name", "topic", 1, every=5)
    with pytest.raises(InvalidJob, match="not a valid Kafka topic"):
        await client.schedule_recurring("bad", "a topic", 1, every=5)
    with pytest.raises(InvalidJob, match="kept for the ticks"):
        await client.schedule("topic", 1, delay=1, job_id="@recurring:bad:1:1000")
    with pytest.raises(InvalidJob, match="name"):
        await client.remove_recurring("bad name")
    assert await client.recurring(removed=True) == []
    assert await client.remove_recurring("bad") is False


async def test_a_tick_not_published_within_expires_after_expires_and_later_ones_fire(
    fast: Settings, fast_client: DelayClient, topic: str, collector: Collector
) -> None:
    """No node runs while the first tick's time and expiry pass: that tick ends EXPIRED,
    never published; once a node runs, later ticks fire, each carrying the expiry."""
    schedule = await fast_client.schedule_recurring(
        "short-lived", topic, {"beat": 1}, every=1, expires_after=0.5
    )
    assert schedule.definition.expires_after_ms == 500
    assert schedule.last_tick_ms is not None  # the client made the first ticks
    first = schedule.definition.cadence.first_at_or_after(schedule.created_ms)
    assert first is not None
    first_id = tick_job_id("short-lived", 1, first)
    made = await fast_client.get(first_id)
    assert made is not None and made.expires_after_ms == 500
    await asyncio.sleep((first + 700) / 1000 - time.time())  # past its time + expiry
    node = Node(fast)
    await node.start()
    try:
        records = await collector.until(2, timeout_s=60)

        async def recorded_expired() -> bool:
            # The claim expires it in Redis; the recorder writes the status soon after.
            row = await fast_client.get(first_id)
            return row is not None and row.status == JobStatus.EXPIRED

        assert await wait_for(recorded_expired, timeout_s=30)
    finally:
        await node.stop()
    assert first_id in {job.job_id for job in await fast_client.expired_jobs(topic=topic)}
    fired = ticks_of(records, "short-lived")
    assert first not in fired and all(tick > first for tick in fired)
    for record in records:
        row = await fast_client.get(str(record["job_id"]))
        assert row is not None and row.expires_after_ms == 500
    shown = await fast_client.get_recurring("short-lived")
    assert shown is not None and describe(shown)["expires_after_s"] == 0.5


async def test_two_clients_creating_one_schedule_at_once_make_one(
    settings: Settings, topic: str
) -> None:
    async with DelayClient(settings) as a, DelayClient(settings) as b:
        results = await asyncio.gather(
            *(c.schedule_recurring("race", topic, 1, every=1) for c in (a, b, a, b))
        )
        assert {r.generation for r in results} == {1}
        [schedule] = await a.recurring()
        assert schedule.name == "race"


async def test_the_cli_lists_shows_and_removes(client: DelayClient, settings: Settings) -> None:
    await client.schedule_recurring(
        "daily", "reports", {"r": 1}, cron="30 2 * * *", tz="Europe/Berlin"
    )
    await client.schedule_recurring("often", "pings", 1, every=90, missed="skip")
    listed = await cli(settings, "recurring", "list")
    assert listed.returncode == 0, listed.stderr
    daily, often = listed.stdout.splitlines()
    assert daily.startswith("daily  topic reports  cron '30 2 * * *' Europe/Berlin  next 20")
    assert "missed fire_once  generation 1" in daily
    assert often.startswith("often  topic pings  every 90s  next ") and "missed skip" in often
    shown = await cli(settings, "recurring", "show", "often")
    assert shown.returncode == 0 and '"every_s": 90.0' in shown.stdout

    removed = await cli(settings, "recurring", "remove", "often")
    assert (removed.returncode, removed.stdout.strip()) == (0, "removed often")
    again = await cli(settings, "recurring", "remove", "often")
    assert again.returncode == 1 and "no recurring schedule often" in again.stderr
    assert [s.name for s in await client.recurring()] == ["daily"]
    with_removed = await cli(settings, "recurring", "list", "--removed", "--json")
    assert with_removed.returncode == 0 and '"removed": true' in with_removed.stdout
    usage = await cli(settings, "recurring", "remove")
    assert usage.returncode == 2 and "give a NAME" in usage.stderr
    bad = await cli(settings, "recurring", "remove", "no such")
    assert bad.returncode == 1 and "name 'no such' must be" in bad.stderr


async def test_a_node_that_lost_the_slot_makes_no_ticks(
    settings: Settings, scripts: Scripts, topic: str
) -> None:
    """The actor commits ticks only while the slot's owner key carries its epoch: one
    holding epoch 1 after another node took the slot with epoch 2 writes nothing and
    drops the slot; with the current epoch it makes the ticks and records the epoch."""
    short = settings.replace(recurring_lookahead_ms=2000, recurring_poll_ms=500)
    async with DelayClient(short) as client:
        await client.schedule_recurring("fenced", topic, 1, every=1)
        before = await client.get_recurring("fenced")
        assert before is not None and before.next_tick_ms is not None
        slot = slot_of("fenced", settings.slots)
        held = HeldSlots()
        held.hold(slot, 1)
        assert await scripts.take(slot, 2)
        actor = RecurringTicks(
            short.replace(recurring_lookahead_ms=4000), scripts, client.mysql, held
        )
        assert await actor.make(before) is False
        assert not held.owns(slot)
        assert await client.get_recurring("fenced") == before
        assert await client.get(tick_job_id("fenced", 1, before.next_tick_ms)) is None

        held.hold(slot, 2)
        assert await actor.make(before) is True
        after = await client.get_recurring("fenced")
        assert after is not None and after.epoch == 2
        assert after.next_tick_ms is not None and after.next_tick_ms > before.next_tick_ms
        made = await client.get(tick_job_id("fenced", 1, before.next_tick_ms))
        assert made is not None and made.status == JobStatus.PENDING
        # The same schedule as read before is stale now: nothing more is made from it.
        assert await actor.make(before) is False
        assert held.owns(slot)
