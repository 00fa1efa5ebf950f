"""priority: among jobs due at the same millisecond the higher fires first, and a burst
of overdue jobs published together goes out highest priority first. Where it lives (the
envelope, the delay score, the row), the scripts and the dispatcher's order, a node
publishing to Kafka, and the refusals of bad priorities (client, HTTP, ingress)."""

from __future__ import annotations

import random
import uuid
from typing import Any

import aiomysql
import orjson
import pytest

from actors.dispatch_round import SlotClaim, Tails, sort_claimed
from actors.node import Node
from actors.reconcile_passes import load_bound_ms, reconcile
from cluster import DelayClient, Job
from cluster.client.job_json import record_json
from cluster.connections.redis_conn import RedisClient
from cluster.errors import InvalidJob
from cluster.ingress.records import Refused, parse_record
from cluster.model.contract import PRIORITY_MAX, PRIORITY_SCALE
from cluster.model.envelope import fields_of, make_tail
from cluster.model.jobs import now_ms
from cluster.model.keys import slot_of
from cluster.scripts.facade import NewJob, Scripts
from cluster.settings.config import Settings
from tests.conftest import Collector
from tests.mysql_tools import job_server_args
from tests.test_client import snapshot
from tests.test_expiry import envelope, redis_now_ms
from tests.test_ingress import NOW_MS, Record, job_value
from tests.test_web import (
    Api,
    api,  # noqa: F401  (the fixture)
    ok_job,
)

SLOT = 5
HOUR_S = 3600


def new_job(job_id: str, due_ms: int, priority: int = 0) -> NewJob:
    tail = make_tail(job_id, "topic.p", b'{"n":1}')
    return NewJob(job_id, due_ms, 16, tail, None, priority)


def ids_in_slot(prefix: str, slot: int, slots: int, count: int) -> list[str]:
    """count job ids that all hash to slot."""
    found: list[str] = []
    n = 0
    while len(found) < count:
        job_id = f"{prefix}-{n}"
        if slot_of(job_id, slots) == slot:
            found.append(job_id)
        n += 1
    return found


# ----- the scripts ---------------------------------------------------------------------------


async def test_same_ms_jobs_are_moved_and_claimed_highest_priority_first(
    scripts: Scripts, redis: RedisClient
) -> None:
    due = await redis_now_ms(redis) - 5
    priorities = [0, 3, PRIORITY_MAX, 1, 0, 500, 3, 999, 0, 2] * 5
    random.Random(3).shuffle(priorities)
    jobs = [new_job(f"j{i}", due, p) for i, p in enumerate(priorities)]
    await scripts.add(SLOT, jobs)
    delay = scripts.keys.slot(SLOT).delay
    entries: list[Any] = await redis.zrange(delay, 0, -1, withscores=True)
    scores = {bytes(member[12:]).decode(): score for member, score in entries}
    for i, p in enumerate(priorities):
        # Exactly the due ms for priority 0; less than 1 ms below it otherwise.
        assert scores[f"j{i}"] == due - p / PRIORITY_SCALE
    moved = await scripts.move(SLOT, 0, 1000)
    assert moved.moved == len(jobs) and moved.first_due_ms == due  # a whole ms
    claimed = await scripts.claim(SLOT, 0, 1000, 60_000)
    got = [fields_of(job.envelope).priority for job in claimed.jobs]
    assert got == sorted(priorities, reverse=True)
    # Equal priorities keep the order they were scheduled in (their seq).
    zeros = [job.job_id.decode() for job in claimed.jobs if fields_of(job.envelope).priority == 0]
    assert zeros == [f"j{i}" for i, p in enumerate(priorities) if p == 0]


async def test_a_priority_never_makes_a_job_due_early(scripts: Scripts, redis: RedisClient) -> None:
    due = await redis_now_ms(redis) + HOUR_S * 1000
    woke, _ = await scripts.add(SLOT, [new_job("top", due, PRIORITY_MAX)])
    assert woke
    moved = await scripts.move(SLOT, 0, 1000)
    # Not moved, and the next due time reported is the job's own ms, not the ms before.
    assert moved.moved == 0 and moved.next_due_ms == due
    await scripts.add(SLOT, [new_job("plain", due)])
    assert (await scripts.move(SLOT, 0, 1000)).next_due_ms == due


async def test_an_overdue_burst_is_published_highest_priority_first(
    scripts: Scripts, redis: RedisClient
) -> None:
    """Jobs overdue by different amounts, in two slots, claimed in one round: the round
    publishes them by priority, and in claim order (due order per slot) within one."""
    now = await redis_now_ms(redis)
    rng = random.Random(5)
    claims: list[SlotClaim] = []
    expected: list[tuple[int, int, str]] = []  # (-priority, claim position, job id)
    position = 0
    for slot in (SLOT, SLOT + 1):
        jobs = [
            new_job(f"b{slot}-{i}", now - 10_000 + i * 7, rng.choice([0, 0, 1, 9]))
            for i in range(40)
        ]
        await scripts.add(slot, jobs)
        assert (await scripts.move(slot, 0, 1000)).moved == 40
        result = await scripts.claim(slot, 0, 1000, 60_000)
        # A slot's claim is in due order (a backlog is not reordered within a slot).
        assert [j.job_id.decode() for j in result.jobs] == [j.job_id for j in jobs]
        claims.append(SlotClaim(slot, 0, result.now_ms, result.jobs))
        for job in result.jobs:
            expected.append((-fields_of(job.envelope).priority, position, job.job_id.decode()))
            position += 1
    fires = sort_claimed(claims, Tails({}, set()), Settings(), 1000, 0.0).fires
    assert [orjson.loads(f.value)["job_id"] for f in fires] == [j for *_, j in sorted(expected)]


async def test_ordinary_jobs_are_not_reordered(scripts: Scripts, redis: RedisClient) -> None:
    now = await redis_now_ms(redis)
    jobs = [new_job(f"o{i}", now - 1000 + i) for i in range(30)]
    await scripts.add(SLOT, jobs)
    await scripts.move(SLOT, 0, 1000)
    result = await scripts.claim(SLOT, 0, 1000, 60_000)
    envelope_of = {j.job_id: j.envelope for j in result.jobs}
    assert all(envelope_of[f"o{i}".encode()][12:22] == b"|v=2;a=16|" for i in range(30))
    claims = [SlotClaim(SLOT, 0, result.now_ms, result.jobs)]
    fires = sort_claimed(claims, Tails({}, set()), Settings(), 1000, 0.0).fires
    assert [orjson.loads(f.value)["job_id"] for f in fires] == [j.job_id for j in jobs]


# ----- a node publishing to Kafka -------------------------------------------------------------


async def published_priorities(
    settings: Settings, client: DelayClient, collector: Collector, jobs: list[Job]
) -> list[int]:
    """Schedule jobs (one key: one partition, so Kafka keeps the order they were
    published in), then run a node until they have fired; their priorities in
    publication order."""
    await client.schedule_many(jobs)
    node = Node(settings)
    await node.start()
    try:
        records = await collector.until(len(jobs), timeout_s=60)
    finally:
        await node.stop()
    assert len(records) == len(jobs)
    assert {r["job_id"] for r in records} == {j.job_id for j in jobs}
    return [int(r["payload"]["priority"]) for r in records]  # type: ignore[index]


async def test_jobs_due_at_the_same_ms_fire_to_kafka_highest_priority_first(
    settings: Settings, client: DelayClient, topic: str, collector: Collector
) -> None:
    ids = ids_in_slot("same", 2, settings.slots, 60)
    priorities = [random.Random(i).choice([0, 0, 1, 7, 300, PRIORITY_MAX]) for i in range(60)]
    at = (now_ms() + 2500) / 1000
    jobs = [
        Job(topic, {"priority": p}, at=at, job_id=j, biz_id="one-key", priority=p or None)
        for j, p in zip(ids, priorities, strict=True)
    ]
    got = await published_priorities(settings, client, collector, jobs)
    assert got == sorted(priorities, reverse=True)


async def test_an_overdue_burst_fires_to_kafka_highest_priority_first(
    settings: Settings, client: DelayClient, topic: str, collector: Collector
) -> None:
    ids = ids_in_slot("late", 4, settings.slots, 80)
    start = now_ms() / 1000 - 60
    jobs = [
        Job(topic, {"priority": i % 4}, at=start + i / 10, job_id=j, biz_id="k", priority=i % 4)
        for i, j in enumerate(ids)
    ]
    got = await published_priorities(settings, client, collector, jobs)
    assert got == sorted(got, reverse=True) and sorted(got) == sorted(i % 4 for i in range(80))


# ----- it stays with the job ------------------------------------------------------------------


async def test_the_priority_survives_reschedule_and_a_reload_from_mysql(
    client: DelayClient, redis: RedisClient
) -> None:
    # Within the Redis horizon (held in Redis), and near enough to be stored full.
    job_id = await client.schedule("t", {"v": 1}, delay=60, priority=7)
    plain = await client.schedule("t", {"v": 2}, delay=60)
    row = await client.get(job_id)
    assert row is not None and row.priority == 7 and record_json(row)["priority"] == 7
    plain_row = await client.get(plain)
    assert plain_row is not None and plain_row.priority == 0

    async def score_and_field(job_id: str) -> tuple[float, bytes]:
        keys = client.keys.slot(slot_of(job_id, client.settings.slots))
        found = await envelope(client, redis, job_id)
        assert found is not None
        member = found[:12] + job_id.encode()
        score = await redis.zscore(keys.delay, member)
        assert score is not None
        return score, found.split(b"|")[1]

    assert await score_and_field(job_id) == (row.due_ms - 7 / PRIORITY_SCALE, b"v=2;a=16;p=7")
    assert await client.reschedule(job_id, delay=90)
    moved = await client.get(job_id)
    assert moved is not None and moved.priority == 7
    assert await score_and_field(job_id) == (moved.due_ms - 7 / PRIORITY_SCALE, b"v=2;a=16;p=7")
    # Redis loses them; the reconciler re-adds them from MySQL, priority and all.
    for one in (job_id, plain):
        keys = client.keys.slot(slot_of(one, client.settings.slots))
        await redis.delete(keys.delay, keys.jobs)
    slots = sorted({slot_of(j, client.settings.slots) for j in (job_id, plain)})
    await reconcile(
        client.settings,
        client.mysql,
        client.scripts,
        slots,
        until_ms=load_bound_ms(client.settings),
    )
    assert await score_and_field(job_id) == (moved.due_ms - 7 / PRIORITY_SCALE, b"v=2;a=16;p=7")
    assert await score_and_field(plain) == (plain_row.due_ms, b"v=2;a=16")


async def test_a_job_scheduled_in_the_callers_transaction_keeps_it(client: DelayClient) -> None:
    job_id = f"x-{uuid.uuid4().hex}"
    conn = await aiomysql.connect(charset="utf8mb4", **await job_server_args(client.mysql, job_id))
    try:
        await conn.begin()
        await client.schedule_in(conn, "t", 1, delay=60, job_id=job_id, priority=900)
        await conn.commit()
    finally:
        conn.close()
    row = await client.get(job_id)
    assert row is not None and row.priority == 900
    # The outbox's path to Redis (actors/outbox.py) adds it from the row.
    await client.scripts.add(row.slot, [NewJob.from_record(row)])
    found = await envelope(client, client.scripts.redis, job_id)
    assert found is not None and found.split(b"|")[1] == b"v=2;a=16;p=900"


async def test_a_recurring_schedule_gives_its_ticks_its_priority(client: DelayClient) -> None:
    schedule = await client.schedule_recurring("prio", "t", {"v": 1}, every=60, priority=12)
    assert schedule.definition.priority == 12
    stored = await client.get_recurring("prio")
    assert stored is not None and stored.definition.priority == 12
    [tick] = stored.definition.tick_jobs(1, [now_ms() + 60_000])
    assert tick.priority == 12
    with pytest.raises(InvalidJob, match=r"priority must be an int in 0\.\.1000"):
        await client.schedule_recurring("prio2", "t", 1, every=60, priority=-1)
    assert await client.get_recurring("prio2") is None


# ----- bad priorities --------------------------------------------------------------------------

BAD_PRIORITIES: list[Any] = [-1, PRIORITY_MAX + 1, 1.5, "3", True, [1]]


@pytest.mark.parametrize("bad", BAD_PRIORITIES, ids=[repr(b) for b in BAD_PRIORITIES])
async def test_the_client_refuses_a_bad_priority_and_stores_nothing(
    client: DelayClient, bad: Any
) -> None:
    with pytest.raises(InvalidJob, match=r"priority must be an int in 0\.\.1000"):
        await client.schedule("t", 1, delay=60, priority=bad, job_id="bad-priority")
    with pytest.raises(InvalidJob, match=r"priority must be an int in 0\.\.1000"):
        await client.schedule_many(
            [
                Job("t", 1, delay=60, job_id="ok-one"),
                {"topic": "t", "payload": 1, "delay": 60, "priority": bad},
            ]
        )
    assert await client.mysql.get_many(["bad-priority", "ok-one"]) == {}


async def test_http_takes_a_priority_and_refuses_a_bad_one(api: Api, redis: Any) -> None:  # noqa: F811
    status, body, _ = await api.call("POST", "/v1/jobs", ok_job(priority=5.0))
    assert status == 201, body
    row = await api.client.get(body["job_id"])
    assert row is not None and row.priority == 5
    status, got, _ = await api.call("GET", f"/v1/jobs/{body['job_id']}")
    assert status == 200 and got["priority"] == 5
    before = await snapshot(api.client, redis)
    for bad in (-1, 1001, 2.5, "1", True):
        status, problem, _ = await api.call("POST", "/v1/jobs", ok_job(priority=bad))
        assert status == 422 and "priority must be an int in 0..1000" in problem["detail"]
    assert await snapshot(api.client, redis) == before


def test_the_ingress_refuses_a_bad_priority_and_takes_a_good_one() -> None:
    good = parse_record(Record(job_value(delay=5, priority=40)), Settings(), NOW_MS)
    assert not isinstance(good, Refused) and good.job["priority"] == 40
    for bad in (-1, 1001, 0.5, "high", None):
        outcome = parse_record(Record(job_value(delay=5, priority=bad)), Settings(), NOW_MS)
        if bad is None:  # null: not given, the default 0
            assert not isinstance(outcome, Refused)
            continue
        assert isinstance(outcome, Refused)
        assert "priority must be an int in 0..1000" in outcome.reason
