"""Each Lua script on its own, against a real Redis."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.exceptions import ResponseError

from cluster.connections.redis_conn import RedisClient, connect_subscriber
from cluster.errors import Fenced, SlotFailed, SlotsFailed
from cluster.model.contract import (
    NO_TIME,
    SEQ_DIGITS,
    AddCode,
    ChangeCode,
    JobStatus,
    ReplayCode,
    member_id,
    member_of,
    member_seq,
    seq_hex,
)
from cluster.model.envelope import fire_of, make_tail
from cluster.model.jobs import now_ms
from cluster.model.keys import KeySpace
from cluster.scripts.codec import RetryResult
from cluster.scripts.facade import ClaimResult, NewJob, Scripts
from cluster.scripts.takeover import retry_dead_owners_claims
from cluster.settings.config import Settings

SLOT = 3
HOUR_MS = 3600_000


def job(job_id: str, due_ms: int, max_attempts: int = 16) -> NewJob:
    tail = make_tail(job_id, "topic.a", b'{"n":1}')
    return NewJob(job_id, due_ms, max_attempts, tail)


@pytest.fixture
def k(scripts: Scripts) -> KeySpace:
    return scripts.keys


async def ready_ids(redis: RedisClient, k: KeySpace) -> list[bytes]:
    """Job ids in the ready list (its entries are delay members)."""
    return [member_id(member) for member in await redis.lrange(k.slot(SLOT).ready, 0, -1)]


# ----- add --------------------------------------------------------------------------------


async def test_add_stores_member_and_envelope(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    due = now_ms() + HOUR_MS
    woke, statuses = await scripts.add(SLOT, [job("a", due)])
    assert statuses == [AddCode.ADDED]
    assert woke
    members = await redis.zrange(k.slot(SLOT).delay, 0, -1, withscores=True)
    assert len(members) == 1
    member, score = members[0]
    assert member_id(member) == b"a" and len(member_seq(member)) == SEQ_DIGITS
    assert score == due
    envelope = await redis.hget(k.slot(SLOT).jobs, "a")
    assert envelope.startswith(member_seq(member) + b"|v=2;a=16|%d|" % due)


async def test_add_same_id_twice_is_one_job(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    due = now_ms() + HOUR_MS
    await scripts.add(SLOT, [job("a", due)])
    woke, statuses = await scripts.add(SLOT, [job("a", due - 1000)])
    assert statuses == [AddCode.PRESENT]
    assert not woke
    assert await redis.zcard(k.slot(SLOT).delay) == 1
    assert (
        await redis.zscore(k.slot(SLOT).delay, (await redis.zrange(k.slot(SLOT).delay, 0, 0))[0])
        == due
    )


async def test_add_of_the_same_id_twice_in_one_call_keeps_the_first(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    due = now_ms() + HOUR_MS
    _, statuses = await scripts.add(SLOT, [job("a", due), job("b", due), job("a", due - 9)])
    assert statuses == [AddCode.ADDED, AddCode.ADDED, AddCode.PRESENT]
    assert await redis.zcard(k.slot(SLOT).delay) == 2
    assert await redis.zrange(k.slot(SLOT).delay, 0, -1, withscores=True) == [
        (m, float(due)) for m in await redis.zrange(k.slot(SLOT).delay, 0, -1)
    ]


async def test_add_wakes_only_when_earliest_moves_earlier(
    scripts: Scripts, redis_settings: Settings, k: KeySpace
) -> None:
    subscriber = connect_subscriber(redis_settings)
    pubsub = subscriber.pubsub()
    await pubsub.subscribe(k.wake_channel)
    await pubsub.get_message(timeout=1)  # the subscribe confirmation
    base = now_ms() + HOUR_MS
    assert (await scripts.add(SLOT, [job("a", base)]))[0]
    assert not (await scripts.add(SLOT, [job("b", base + 5)]))[0]
    assert (await scripts.add(SLOT, [job("c", base - 5)]))[0]
    messages = []
    for _ in range(5):
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
        if message:
            messages.append(message["data"])
    await pubsub.aclose()
    await subscriber.aclose()
    assert messages == [b"%d:%d" % (SLOT, base), b"%d:%d" % (SLOT, base - 5)]


async def test_add_refuses_a_tombstoned_or_just_fired_job(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    assert (await scripts.cancel(SLOT, "gone", HOUR_MS)).code == ChangeCode.ABSENT  # a tombstone
    await redis.zadd(k.slot(SLOT).acked, {"fired": float("inf")})
    _, statuses = await scripts.add(SLOT, [job("gone", now_ms()), job("fired", now_ms())])
    assert statuses == [AddCode.REFUSED, AddCode.REFUSED]
    assert await redis.zcard(k.slot(SLOT).delay) == 0


async def test_an_expired_tombstone_no_longer_refuses(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    """A cancel whose MySQL step failed leaves the job pending in MySQL: once its
    tombstone expires, the reconciler can add it again."""
    assert (await scripts.cancel(SLOT, "a", 1)).code == ChangeCode.ABSENT
    await asyncio.sleep(0.01)
    _, statuses = await scripts.add(SLOT, [job("a", now_ms())])
    assert statuses == [AddCode.ADDED]


async def test_untomb_takes_back_only_its_own_cancels_tombstone(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    tomb = k.slot(SLOT).tomb
    first = await scripts.cancel(SLOT, "a", HOUR_MS)
    assert first.code == ChangeCode.ABSENT and first.replaced_ms == NO_TIME
    assert await redis.zscore(tomb, "a") == first.tomb_ms
    # A second cancel replaces it with a higher score, naming its own tombstone.
    second = await scripts.cancel(SLOT, "a", HOUR_MS)
    assert second.tomb_ms > first.tomb_ms and second.replaced_ms == first.tomb_ms
    assert await scripts.untomb(SLOT, "a", first) is False  # no longer the first's
    assert await redis.zscore(tomb, "a") == second.tomb_ms
    assert await scripts.untomb(SLOT, "a", second) is True  # the first's comes back
    assert await redis.zscore(tomb, "a") == first.tomb_ms
    _, statuses = await scripts.add(SLOT, [job("a", now_ms())])
    assert statuses == [AddCode.REFUSED]
    assert await scripts.untomb(SLOT, "a", first) is True  # none left to restore
    assert await redis.zscore(tomb, "a") is None
    _, statuses = await scripts.add(SLOT, [job("a", now_ms())])
    assert statuses == [AddCode.ADDED]


async def test_untomb_does_not_restore_an_expired_tombstone(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    old = await scripts.cancel(SLOT, "a", 1)
    await asyncio.sleep(0.01)  # the first tombstone expires (its score is its expiry)
    mine = await scripts.cancel(SLOT, "a", HOUR_MS)
    assert mine.replaced_ms == NO_TIME and old.tomb_ms < mine.tomb_ms
    assert await scripts.untomb(SLOT, "a", mine) is True
    assert await redis.zscore(k.slot(SLOT).tomb, "a") is None


async def test_add_in_chunks(scripts: Scripts, redis: RedisClient, k: KeySpace) -> None:
    due = now_ms() + HOUR_MS
    _, statuses = await scripts.add(SLOT, [job(f"j{i}", due + i) for i in range(2345)])
    assert statuses == [AddCode.ADDED] * 2345
    assert await redis.zcard(k.slot(SLOT).delay) == 2345
    assert await redis.hlen(k.slot(SLOT).jobs) == 2345


# ----- move -------------------------------------------------------------------------------


async def test_move_takes_only_due_jobs_and_reports_next(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    now = now_ms()
    await scripts.add(SLOT, [job("past", now - 1000), job("future", now + HOUR_MS)])
    result = await scripts.move(SLOT, 0, 100)
    assert result.moved == 1
    assert result.next_due_ms == now + HOUR_MS
    assert result.ready == 1
    assert result.first_due_ms == now - 1000  # the most overdue job moved
    assert abs(result.now_ms - now) < 60_000  # Redis TIME, same machine
    assert await ready_ids(redis, k) == [b"past"]


async def test_move_with_a_lead_takes_jobs_due_within_it(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    """The fire advance: a lead of L ms moves the jobs due by Redis TIME + L, no later."""
    now = now_ms()
    await scripts.add(SLOT, [job("soon", now + 30_000), job("later", now + HOUR_MS)])
    assert (await scripts.move(SLOT, 0, 100)).moved == 0
    result = await scripts.move(SLOT, 0, 100, lead_ms=60_000)
    assert result.moved == 1 and result.next_due_ms == now + HOUR_MS
    assert await ready_ids(redis, k) == [b"soon"]


async def test_move_keeps_schedule_order_within_one_millisecond(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    due = now_ms() - 10
    # Ids chosen so that their lexical order is the reverse of the schedule order.
    ids = [f"z{9 - i}" for i in range(10)]
    for job_id in ids[:5]:
        await scripts.add(SLOT, [job(job_id, due)])
    await scripts.add(SLOT, [job(job_id, due) for job_id in ids[5:]])
    await scripts.move(SLOT, 0, 100)
    assert await ready_ids(redis, k) == [i.encode() for i in ids]


async def test_move_is_bounded_by_its_limit(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    due = now_ms() - 1000
    await scripts.add(SLOT, [job(f"j{i:04d}", due + i % 7) for i in range(2500)])
    first = await scripts.move(SLOT, 0, 1000)
    assert first.moved == 1000
    assert first.next_due_ms == first.now_ms  # more are due already
    second = await scripts.move(SLOT, 0, 1000)
    third = await scripts.move(SLOT, 0, 1000)
    assert (second.moved, third.moved) == (1000, 500)
    assert third.next_due_ms == NO_TIME
    assert await redis.llen(k.slot(SLOT).ready) == 2500


# ----- claim / ack ------------------------------------------------------------------------


async def test_claim_puts_jobs_in_flight_with_deadline_and_attempt(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    await scripts.add(SLOT, [job("a", now_ms() - 5), job("b", now_ms() - 5)])
    await scripts.move(SLOT, 0, 100)
    claim = await scripts.claim(SLOT, 0, 1, 30_000)
    now, claimed = claim.now_ms, claim.jobs
    assert [c.job_id for c in claimed] == [b"a"]
    assert claimed[0].attempt == 1
    assert await redis.zscore(k.slot(SLOT).inflight, "a") == now + 30_000
    assert await ready_ids(redis, k) == [b"b"]
    fire = fire_of(claimed[0].envelope, claimed[0].attempt, now)
    assert fire.topic == "topic.a" and fire.key == b"a"


async def test_claim_drops_ids_whose_job_is_gone(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    await redis.rpush(k.slot(SLOT).ready, member_of(seq_hex(1), "ghost"))
    claimed = (await scripts.claim(SLOT, 0, 10, 30_000)).jobs
    assert claimed == []
    assert await redis.zcard(k.slot(SLOT).inflight) == 0


async def test_ack_forgets_the_job_and_journals_it(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    await scripts.add(SLOT, [job("a", now_ms() - 5)])
    await scripts.move(SLOT, 0, 100)
    await scripts.claim(SLOT, 0, 10, 30_000)
    assert await scripts.ack(SLOT, [b"a"]) == 1
    assert await scripts.ack(SLOT, [b"a"]) == 0
    s = k.slot(SLOT)
    assert await redis.zcard(s.inflight) == 0
    assert await redis.hlen(s.jobs) == 0
    assert await redis.hlen(s.attempts) == 0
    assert await redis.zscore(s.acked, "a") == float("inf")
    [entry] = await scripts.read_journal(SLOT, 10)
    assert entry.startswith(b"%d|1|" % JobStatus.FIRED) and entry.endswith(b"|1|a")


async def test_a_batch_is_claimed_and_acked_in_order_each_job_once(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    # More jobs than one chunk of a variadic call (1,000), and one listed twice.
    ids = [f"j{n:05d}" for n in range(2500)]
    await scripts.add(SLOT, [job(i, now_ms() - 5) for i in ids])
    await scripts.move(SLOT, 0, 5000)
    s = k.slot(SLOT)
    await redis.rpush(s.ready, (await redis.lrange(s.ready, 0, 0))[0])
    claimed = (await scripts.claim(SLOT, 0, 5000, 30_000)).jobs
    # Each once (the order of jobs due in the same millisecond is not promised).
    assert sorted(c.job_id.decode() for c in claimed) == ids
    assert {c.attempt for c in claimed} == {1}
    assert await redis.zcard(s.inflight) == 2500
    assert await redis.hget(s.attempts, "j02499") == b"1"
    acked = [i.encode() for i in ids]
    assert await scripts.ack(SLOT, [*acked, acked[0]]) == 2500
    assert await redis.zcard(s.inflight) == 0
    assert await redis.hlen(s.jobs) == 0 and await redis.hlen(s.attempts) == 0
    assert await redis.zcard(s.acked) == 2500
    entries = await scripts.read_journal(SLOT, 5000)
    assert [e.rpartition(b"|")[2] for e in entries] == acked
    assert all(e.startswith(b"%d|1|" % JobStatus.FIRED) for e in entries)


# ----- nack / reap ------------------------------------------------------------------------


async def test_nack_retries_with_backoff_then_buries(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    s = k.slot(SLOT)
    await scripts.add(SLOT, [job("a", now_ms() - 5, max_attempts=2)])
    await scripts.move(SLOT, 0, 100)
    now = (await scripts.claim(SLOT, 0, 10, 30_000)).now_ms
    retry = await scripts.nack(SLOT, 0, [b"a"], "broker down", 1000, 60_000)
    assert (retry.retried, retry.dead) == (1, 0)
    assert retry.earliest_due_ms >= now + 1000
    [member] = await redis.zrange(s.delay, 0, -1)
    assert member_id(member) == b"a"
    # Second attempt fails too: max_attempts=2 is used up.
    await redis.zadd(s.delay, {member: now - 1})
    await scripts.move(SLOT, 0, 100)
    claimed = (await scripts.claim(SLOT, 0, 10, 30_000)).jobs
    assert claimed[0].attempt == 2
    buried = await scripts.nack(SLOT, 0, [b"a"], "still down", 1000, 60_000)
    assert (buried.retried, buried.dead) == (0, 1)
    assert await redis.zscore(s.dead, "a") is not None
    assert await redis.hexists(s.jobs, "a")  # kept for inspection and replay
    entries = await scripts.read_journal(SLOT, 10)
    assert entries[0].startswith(b"%d|1|" % JobStatus.FIRING)
    assert entries[0].endswith(b"abroker down")
    assert entries[1].startswith(b"%d|2|" % JobStatus.DEAD)
    assert entries[1].endswith(b"astill down")


async def test_nack_skips_jobs_no_longer_in_flight(scripts: Scripts) -> None:
    retry = await scripts.nack(SLOT, 0, [b"nobody"], "x", 1000, 60_000)
    assert (retry.retried, retry.dead, retry.earliest_due_ms) == (0, 0, NO_TIME)


async def test_reap_returns_only_expired_in_flight_jobs(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    s = k.slot(SLOT)
    await scripts.add(SLOT, [job("old", now_ms() - 5), job("young", now_ms() - 5)])
    await scripts.move(SLOT, 0, 100)
    await scripts.claim(SLOT, 0, 1, 0)  # "old": deadline is now
    await scripts.claim(SLOT, 0, 1, HOUR_MS)  # "young": deadline in an hour
    await asyncio.sleep(0.01)
    result = await scripts.reap(SLOT, 0, 100, 1000, 60_000)
    assert (result.retried, result.dead, result.more) == (1, 0, False)
    assert await redis.zrange(s.inflight, 0, -1) == [b"young"]
    [member] = await redis.zrange(s.delay, 0, -1)
    assert member_id(member) == b"old"


async def test_reap_of_a_slot_taken_from_a_dead_owner_retries_every_claim_now(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    """cluster/scripts/takeover.py: every job in flight is retried at once, its deadline
    passed or not, due now (no backoff), the reason journalled; fenced like the reaper."""
    s = k.slot(SLOT)
    await scripts.add(SLOT, [job("a", now_ms() - 5), job("b", now_ms() - 5)])
    await scripts.move(SLOT, 0, 100)
    await scripts.claim(SLOT, 0, 2, HOUR_MS)  # both: deadline in an hour
    assert await retry_dead_owners_claims(scripts, SLOT, 1, 100) is None  # fenced
    assert await redis.zcard(s.inflight) == 2
    result = await retry_dead_owners_claims(scripts, SLOT, 0, 100)
    after = now_ms()
    assert isinstance(result, RetryResult)
    assert (result.retried, result.dead, result.more) == (2, 0, False)
    assert await redis.zcard(s.inflight) == 0
    delayed = await redis.zrange(s.delay, 0, -1, withscores=True)
    assert sorted(member_id(m) for m, _ in delayed) == [b"a", b"b"]
    assert all(score <= after for _, score in delayed)  # due at once
    assert result.earliest_due_ms <= after
    journal = b"".join(await redis.lrange(s.done, 0, -1))
    assert b"session ended" in journal


# ----- cancel / reschedule ----------------------------------------------------------------


async def test_cancel_in_each_state(scripts: Scripts, redis: RedisClient, k: KeySpace) -> None:
    s = k.slot(SLOT)
    now = now_ms()
    await scripts.add(
        SLOT, [job("waiting", now + HOUR_MS), job("ready", now - 4), job("flying", now - 5)]
    )
    await scripts.move(SLOT, 0, 100)
    await scripts.claim(SLOT, 0, 1, HOUR_MS)  # "flying", the earliest
    assert (await scripts.cancel(SLOT, "waiting", HOUR_MS)).code == ChangeCode.CHANGED
    assert (await scripts.cancel(SLOT, "ready", HOUR_MS)).code == ChangeCode.CHANGED
    assert (await scripts.cancel(SLOT, "flying", HOUR_MS)).code == ChangeCode.IN_FLIGHT
    assert (await scripts.cancel(SLOT, "nobody", HOUR_MS)).code == ChangeCode.ABSENT
    assert await redis.zcard(s.delay) == 0
    assert await redis.hkeys(s.jobs) == [b"flying"]
    # The cancelled ready job's entry is stale: claim drops it.
    assert (await scripts.claim(SLOT, 0, 10, HOUR_MS)).jobs == []
    assert await ready_ids(redis, k) == []
    await redis.zadd(s.acked, {"done": float("inf")})
    assert (await scripts.cancel(SLOT, "done", HOUR_MS)).code == ChangeCode.FIRED


async def test_cancel_of_dead_job_is_refused(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    await scripts.add(SLOT, [job("a", now_ms() - 5, max_attempts=1)])
    await scripts.move(SLOT, 0, 10)
    await scripts.claim(SLOT, 0, 10, 30_000)
    await scripts.nack(SLOT, 0, [b"a"], "bad", 1000, 60_000)
    assert (await scripts.cancel(SLOT, "a", HOUR_MS)).code == ChangeCode.DEAD


async def test_reschedule_moves_due_time_and_wakes(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    s = k.slot(SLOT)
    now = now_ms()
    await scripts.add(SLOT, [job("a", now + HOUR_MS), job("b", now + 2 * HOUR_MS)])
    code, woke = await scripts.reschedule(SLOT, "b", now + 60_000)
    assert (code, woke) == (ChangeCode.CHANGED, True)
    scores = {member_id(m): sc for m, sc in await redis.zrange(s.delay, 0, -1, withscores=True)}
    assert scores == {b"b": now + 60_000, b"a": now + HOUR_MS}
    envelope = await redis.hget(s.jobs, "b")
    assert b"|%d|" % (now + 60_000) in envelope
    code, woke = await scripts.reschedule(SLOT, "a", now + 3 * HOUR_MS)
    assert (code, woke) == (ChangeCode.CHANGED, False)
    assert (await scripts.reschedule(SLOT, "nobody", now))[0] == ChangeCode.ABSENT


async def test_reschedule_pulls_a_ready_job_back(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    await scripts.add(SLOT, [job("a", now_ms() - 5)])
    await scripts.move(SLOT, 0, 10)
    code, _ = await scripts.reschedule(SLOT, "a", now_ms() + HOUR_MS)
    assert code == ChangeCode.CHANGED
    assert await redis.zcard(k.slot(SLOT).delay) == 1
    assert (await scripts.claim(SLOT, 0, 10, HOUR_MS)).jobs == []  # its ready entry is stale
    await scripts.reschedule(SLOT, "a", now_ms() - 5)
    await scripts.move(SLOT, 0, 10)
    await scripts.claim(SLOT, 0, 10, HOUR_MS)
    assert (await scripts.reschedule(SLOT, "a", now_ms()))[0] == ChangeCode.IN_FLIGHT


# ----- journal ------------------------------------------------------------------------------


async def test_trim_journal_drops_recorded_entries_and_fired_markers(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    s = k.slot(SLOT)
    await scripts.add(SLOT, [job(f"j{i}", now_ms() - 5) for i in range(3)])
    await scripts.move(SLOT, 0, 10)
    await scripts.claim(SLOT, 0, 10, HOUR_MS)
    await scripts.ack(SLOT, [b"j0", b"j1", b"j2"])
    read = await scripts.read_journal(SLOT, 2)
    assert len(read) == 2
    assert await scripts.trim_journal(SLOT, 0, read, ["j0", "j1"], 60_000)
    # Recorded markers now expire in a minute; the unrecorded one never does.
    scores = dict(await redis.zrange(s.acked, 0, -1, withscores=True))
    assert scores[b"j2"] == float("inf")
    assert now_ms() < scores[b"j0"] <= now_ms() + 60_000
    assert await scripts.trim_journal(SLOT, 0, [], ["j0", "j1"], -1)  # expire them now
    assert await redis.zrange(s.acked, 0, -1) == [b"j2"]
    [entry] = await scripts.read_journal(SLOT, 10)
    assert entry.endswith(b"j2")


async def test_trim_journal_keeps_a_journal_that_is_not_the_one_read(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    """As after a failover between the recorder's read and its trim: the promoted
    replica lacked the last entry read (j1's ack) and has a newer one (j2's)."""
    s = k.slot(SLOT)
    await scripts.add(SLOT, [job(f"j{i}", now_ms() - 5) for i in range(3)])
    await scripts.move(SLOT, 0, 10)
    await scripts.claim(SLOT, 0, 10, HOUR_MS)
    await scripts.ack(SLOT, [b"j0", b"j1"])
    read = await scripts.read_journal(SLOT, 10)
    await redis.rpop(s.done)  # j1's entry, lost with the old master
    await scripts.ack(SLOT, [b"j2"])
    assert not await scripts.trim_journal(SLOT, 0, read, ["j0", "j1"], 60_000)
    journal = await scripts.read_journal(SLOT, 10)
    assert [entry[-2:] for entry in journal] == [b"j0", b"j2"]
    scores = dict(await redis.zrange(s.acked, 0, -1, withscores=True))
    assert scores[b"j2"] == float("inf")  # recorded by the next pass, not dropped


# ----- fencing ------------------------------------------------------------------------------


async def test_take_installs_only_newer_epochs(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    assert await scripts.take(SLOT, 3)
    assert not await scripts.take(SLOT, 3)  # an epoch is issued once
    assert not await scripts.take(SLOT, 2)  # stale
    assert await redis.get(k.slot(SLOT).owner) == b"3"


async def test_scripts_acting_as_owner_refuse_an_old_epoch(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    s = k.slot(SLOT)
    await scripts.add(SLOT, [job("a", now_ms() - 5), job("b", now_ms() - 5)])
    await scripts.take(SLOT, 1)
    await scripts.move(SLOT, 1, 10)
    await scripts.claim(SLOT, 1, 1, 0)  # "a" in flight, deadline now
    await scripts.take(SLOT, 2)  # another node took the slot
    with pytest.raises(Fenced, match="slot epoch is 2, caller has 1") as refused:
        await scripts.move(SLOT, 1, 10)
    assert refused.value.slot == SLOT
    with pytest.raises(Fenced):
        await scripts.claim(SLOT, 1, 10, 30_000)
    with pytest.raises(Fenced):
        await scripts.nack(SLOT, 1, [b"a"], "x", 1000, 60_000)
    with pytest.raises(Fenced):
        await scripts.reap(SLOT, 1, 100, 1000, 60_000)
    with pytest.raises(Fenced):
        await scripts.trim_journal(SLOT, 1, [b"x"], [], 60_000)
    with pytest.raises(Fenced):
        await scripts.release(SLOT, 1, [b"a"], 1000)
    assert await scripts.fill_many([(SLOT, 1, [(b"b", b"0" * SEQ_DIGITS, b"x")])]) == [None]
    # Nothing changed: "b" still ready, "a" still in flight.
    assert await ready_ids(redis, k) == [b"b"]
    assert await redis.zrange(s.inflight, 0, -1) == [b"a"]
    # The batched forms report the fenced slot in place instead of failing the batch.
    fenced, other = await scripts.claim_many([(SLOT, 1), (SLOT + 1, 0)], 10, 30_000)
    assert fenced is None
    assert isinstance(other, ClaimResult) and (other.jobs, other.expired) == ([], 0)
    assert other.now_ms == pytest.approx(now_ms(), abs=60_000)
    # The current epoch works.
    claimed = (await scripts.claim(SLOT, 2, 10, 30_000)).jobs
    assert [c.job_id for c in claimed] == [b"b"]


async def test_a_failed_run_fails_its_slot_only(scripts: Scripts, redis: RedisClient) -> None:
    """A run that fails (here Redis rejects its arguments; in production its node is
    down or failing over) comes back as SlotFailed in its place, and the other slots'
    runs of the batch stand."""
    bad_limit: Any = "many"  # the script's LIMIT gets nil: Redis rejects the command
    results = await scripts.move_many([(SLOT, 0), (SLOT + 1, 0)], bad_limit)
    assert all(isinstance(r, SlotFailed) for r in results)
    assert isinstance(results[0], SlotFailed)
    assert isinstance(results[0].error, ResponseError)
    with pytest.raises(ResponseError, match="arguments must be strings or integers"):
        await scripts.move(SLOT, 0, bad_limit)  # a one-slot call raises the error itself

    bad: Any = "soon"
    with pytest.raises(SlotsFailed) as failed:
        await scripts.add_many({SLOT: [job("bad", bad)], SLOT + 1: [job("good", now_ms())]})
    assert set(failed.value.failed) == {SLOT}
    assert failed.value.done == {SLOT + 1: (True, [AddCode.ADDED])}
    assert await redis.hexists(scripts.keys.slot(SLOT + 1).jobs, "good")


# ----- dead letters ----------------------------------------------------------------------


async def bury(scripts: Scripts, job_id: str) -> None:
    """Add a job with one attempt, claim it and fail it: it goes dead."""
    await scripts.add(SLOT, [job(job_id, now_ms() - 5, max_attempts=1)])
    await scripts.move(SLOT, 0, 100)
    await scripts.claim(SLOT, 0, 10, 30_000)
    buried = await scripts.nack(SLOT, 0, [job_id.encode()], "no", 1000, 60_000)
    assert buried.dead == 1


async def test_dead_replay_makes_dead_jobs_due_now_and_journals_it(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    s = k.slot(SLOT)
    await bury(scripts, "a")
    await scripts.add(SLOT, [job("b", now_ms() + HOUR_MS)])  # pending, not dead
    before = now_ms()
    assert await scripts.dead_replay(SLOT, ["a", "b", "nobody"]) == [
        ReplayCode.REPLAYED,
        ReplayCode.NOT_DEAD,
        ReplayCode.NOT_DEAD,
    ]
    assert await redis.zcard(s.dead) == 0
    assert not await redis.hexists(s.attempts, "a")  # a fresh set of attempts
    delay = dict(await redis.zrange(s.delay, 0, -1, withscores=True))
    [a_member] = [m for m in delay if member_id(m) == b"a"]
    assert before - 1000 <= delay[a_member] <= now_ms() + 1000
    envelope = await redis.hget(s.jobs, "a")
    assert envelope.startswith(member_seq(a_member) + b"|v=2;a=1|")  # a new seq, same max attempts
    entries = await scripts.read_journal(SLOT, 10)
    assert entries[-2].startswith(b"%d|1|" % JobStatus.DEAD)  # died ...
    replayed = entries[-1]
    assert replayed.startswith(b"%d|0|" % JobStatus.PENDING) and b"replayed" in replayed


async def test_dead_purge_forgets_only_dead_jobs(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    s = k.slot(SLOT)
    await bury(scripts, "a")
    await scripts.add(SLOT, [job("b", now_ms() + HOUR_MS)])
    assert await scripts.dead_purge(SLOT, ["a", "b", "nobody"]) == 1
    assert await redis.zcard(s.dead) == 0
    assert not await redis.hexists(s.jobs, "a")
    assert await redis.hexists(s.jobs, "b")  # a pending job is not purged
    assert await scripts.dead_purge(SLOT, ["a"]) == 0


# ----- loading ---------------------------------------------------------------------------


@pytest.mark.alone  # SCRIPT FLUSH empties the shared Redis's script cache
async def test_scripts_are_reloaded_after_redis_forgets_them(
    scripts: Scripts, redis: RedisClient, k: KeySpace
) -> None:
    await scripts.add(SLOT, [job("a", now_ms() - 5)])
    await redis.script_flush()  # as after a Redis restart
    assert (await scripts.move_many([(SLOT, 0)], 10))[0].moved == 1  # type: ignore[union-attr]
    await redis.script_flush()
    assert (await scripts.cancel(SLOT, "a", 60_000)).code == ChangeCode.CHANGED
