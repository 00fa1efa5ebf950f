"""The scripts behind recovery from Redis's own failures, each on its own against a real
Redis: a claim that hands out again the jobs of a claim whose reply was lost
(lua/claim.lua, actors/claims.py), the slot watermarks that keep a node from firing
out of a Redis that came back older (lua/watermark.lua), and the correction that
re-applies MySQL's changes to it (lua/correct.lua; actors/rollback.py)."""

from __future__ import annotations

import pytest

from cluster.connections.redis_conn import RedisClient
from cluster.errors import Fenced, RedisRestarted, SlotFailed
from cluster.model.jobs import now_ms
from cluster.model.keys import KeySpace
from cluster.scripts.facade import ClaimResult, NewJob, Scripts
from cluster.scripts.recovery import (
    correct_jobs,
    move_due_times,
    refresh_watermarks,
    verify_watermarks,
)
from tests.test_lua_scripts import SLOT, job

TIMEOUT_MS = 30_000


@pytest.fixture
def k(scripts: Scripts) -> KeySpace:
    return scripts.keys


async def claim(scripts: Scripts, after: int | None = None) -> ClaimResult:
    [reply] = await scripts.claim_many(
        [(SLOT, 0)], 10, TIMEOUT_MS, after=None if after is None else {SLOT: after}
    )
    assert isinstance(reply, ClaimResult)
    return reply


async def ready(scripts: Scripts, *jobs: NewJob) -> None:
    await scripts.add(SLOT, list(jobs))
    await scripts.move(SLOT, 0, 100)


async def test_a_claim_hands_out_again_what_a_lost_claim_took(scripts: Scripts) -> None:
    await ready(scripts, job("a", now_ms() - 5))
    first = await claim(scripts)
    seen = first.now_ms + TIMEOUT_MS  # the deadline the caller knows of
    await ready(scripts, job("b", now_ms() - 5), job("c", now_ms() - 5))
    lost = await claim(scripts, after=seen)  # its reply never reaches the caller
    assert [j.job_id for j in lost.jobs] == [b"b", b"c"] and lost.reclaimed == 0
    await ready(scripts, job("d", now_ms() - 5))
    again = await claim(scripts, after=seen)
    assert [j.job_id for j in again.jobs] == [b"b", b"c", b"d"]
    assert again.reclaimed == 2
    assert [j.attempt for j in again.jobs] == [1, 1, 1]  # the lost claim's count, kept
    # Its own reply arrived: nothing is handed out twice.
    assert (await claim(scripts, after=again.now_ms + TIMEOUT_MS)).jobs == []


async def test_a_claim_without_a_bound_hands_out_nothing_again(scripts: Scripts) -> None:
    await ready(scripts, job("a", now_ms() - 5))
    await claim(scripts)
    assert (await claim(scripts)).jobs == []


async def test_a_claim_of_an_unverified_slot_is_refused_and_changes_nothing(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    await ready(scripts, job("a", now_ms() - 5))
    scripts.check_verified = True
    [refused] = await scripts.claim_many([(SLOT, 0)], 10, TIMEOUT_MS)
    assert isinstance(refused, SlotFailed) and isinstance(refused.error, RedisRestarted)
    assert await redis.llen(k.slot(SLOT).ready) == 1
    [mark] = (await refresh_watermarks(scripts, [SLOT])).values()
    assert not mark.current and mark.ms == -1  # no watermark yet
    assert await verify_watermarks(scripts, {SLOT: mark.run_id}) == {SLOT}
    assert [j.job_id for j in (await claim(scripts)).jobs] == [b"a"]


async def test_a_watermark_of_another_server_holds_claims_until_verified(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    [mark] = (await refresh_watermarks(scripts, [SLOT])).values()
    assert await verify_watermarks(scripts, {SLOT: mark.run_id}) == {SLOT}
    [fresh] = (await refresh_watermarks(scripts, [SLOT])).values()
    assert fresh.current and fresh.run_id == mark.run_id
    # As a server restored from an older file, or a promoted replica, would show it.
    await redis.set(k.slot(SLOT).watermark, "0123456789abcdef|1234")
    [stale] = (await refresh_watermarks(scripts, [SLOT])).values()
    assert not stale.current and stale.ms == 1234
    assert await redis.get(k.slot(SLOT).watermark) == b"0123456789abcdef|1234"  # untouched
    scripts.check_verified = True
    await ready(scripts, job("a", now_ms() - 5))
    [refused] = await scripts.claim_many([(SLOT, 0)], 10, TIMEOUT_MS)
    assert isinstance(refused, SlotFailed) and isinstance(refused.error, RedisRestarted)
    # Verified against a server that is not this one: refused too.
    assert await verify_watermarks(scripts, {SLOT: "feedface"}) == set()
    assert await verify_watermarks(scripts, {SLOT: stale.run_id}) == {SLOT}
    assert [j.job_id for j in (await claim(scripts)).jobs] == [b"a"]


@pytest.mark.parametrize("kind", ["c", "f"])
async def test_correct_removes_a_job_mysql_finished_and_marks_it(
    scripts: Scripts, redis: RedisClient, k: KeySpace, kind: str
) -> None:
    await scripts.add(SLOT, [job("a", now_ms() + 60_000)])
    await ready(scripts, job("b", now_ms() - 5))
    await claim(scripts)  # b in flight, as a restored state can show it
    changed = [("a", kind), ("b", kind), ("absent", kind)]
    assert await correct_jobs(scripts, {SLOT: 0}, {SLOT: changed}, 60_000) == 2
    keys = k.slot(SLOT)
    assert await redis.hlen(keys.jobs) == 0
    assert await redis.zcard(keys.delay) == 0 and await redis.zcard(keys.inflight) == 0
    marker = keys.tomb if kind == "c" else keys.acked
    assert set(await redis.zrange(marker, 0, -1)) == {b"a", b"b"}  # only those it held
    # A marked job is refused by a late add.
    assert (await scripts.add(SLOT, [job("a", now_ms())]))[1] != [1]


async def test_correct_gives_a_rescheduled_job_mysqls_time_even_out_of_flight(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    await ready(scripts, job("a", now_ms() - 5))
    await claim(scripts)  # restored in flight, though MySQL rescheduled it since
    new_due = now_ms() + 60_000
    assert await correct_jobs(scripts, {SLOT: 0}, {SLOT: [("a", "w")]}, 60_000) == 1
    assert await move_due_times(scripts, {SLOT: [("a", new_due)]}) == 1
    keys = k.slot(SLOT)
    assert await redis.zcard(keys.inflight) == 0
    [(_, score)] = await redis.zrange(keys.delay, 0, -1, withscores=True)
    assert score == new_due


async def test_correct_is_fenced(scripts: Scripts) -> None:
    await scripts.take(SLOT, 5)
    with pytest.raises(Fenced):
        await correct_jobs(scripts, {SLOT: 4}, {SLOT: [("a", "c")]}, 60_000)
