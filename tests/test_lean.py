"""Lean envelopes: jobs due beyond payload_lead_ms are kept in Redis without their
payload; the filler loads it shortly before they are due, the dispatcher when they are
claimed still lean. They fire the same records, on time, and cancel, reschedule and the
dead letters work on them."""

from __future__ import annotations

import asyncio

import pytest

from actors import filler as filler_module
from actors.filler import Filler
from actors.node import Node
from actors.ownership import StaticOwnership
from cluster import DelayClient, Job, JobStatus
from cluster.connections.redis_conn import RedisClient
from cluster.errors import ConfigError, Fenced
from cluster.model.contract import SEQ_DIGITS, AddCode, ChangeCode, member_of
from cluster.model.envelope import fire_of, is_lean, make_tail, with_tail
from cluster.model.jobs import now_ms
from cluster.model.keys import KeySpace, slot_of
from cluster.scripts.facade import NewJob, Scripts
from cluster.settings.config import Settings
from tests.conftest import Collector, wait_for

SLOT = 5
LEAD_MS = 1000
TAIL = make_tail("a", "topic.a", b'{"n":[1,"|"]}', biz_id="biz-1", biz_type="kind")


@pytest.fixture
def lean_scripts(redis: RedisClient, redis_settings: Settings) -> Scripts:
    return Scripts(redis, KeySpace(redis_settings.key_prefix), payload_lead_ms=LEAD_MS)


@pytest.fixture
def lean(settings: Settings) -> Settings:
    """A payload lead of one second: a job due in three is stored lean."""
    return settings.replace(payload_lead_ms=LEAD_MS)


async def envelope_of(redis: RedisClient, scripts: Scripts, slot: int, job_id: str) -> bytes:
    envelope: bytes | None = await redis.hget(scripts.keys.slot(slot).jobs, job_id)
    assert envelope is not None
    return envelope


def test_payload_lead_is_checked() -> None:
    Settings(payload_lead_ms=0)
    Settings(payload_lead_ms=150_000)
    for bad in (-1, 999, 150_001):
        with pytest.raises(ConfigError, match="payload_lead_ms"):
            Settings(payload_lead_ms=bad)
    with pytest.raises(ConfigError, match=r"redis_horizon_ms / 2 \(5000\)"):
        Settings(redis_horizon_ms=10_000)  # the default lead, 30 s, is too long for it
    Settings(redis_horizon_ms=10_000, payload_lead_ms=5000)


def test_a_lean_envelope_filled_is_the_full_one() -> None:
    header = b"00000000000a|3|1700000000000|"
    assert is_lean(header)
    full = with_tail(header, TAIL)
    assert not is_lean(full)
    fire = fire_of(full, 2, 1700000000005)
    assert fire.topic == "topic.a" and fire.key == b"biz-1" and fire.due_ms == 1700000000000


# ----- the scripts ---------------------------------------------------------------------------


async def test_add_stores_far_jobs_lean_and_near_jobs_full(
    lean_scripts: Scripts, scripts: Scripts, redis: RedisClient
) -> None:
    now = now_ms()
    _, codes = await lean_scripts.add(
        SLOT,
        [
            NewJob("far", now + 60_000, 7, TAIL),
            NewJob("near", now + 200, 7, TAIL),
            NewJob("past", now - 10, 7, TAIL),
        ],
    )
    assert codes == [AddCode.ADDED] * 3
    far = await envelope_of(redis, lean_scripts, SLOT, "far")
    assert far == b"%s|v=2;a=7|%d|" % (far[:SEQ_DIGITS], now + 60_000) and is_lean(far)
    for job_id, due in (("near", now + 200), ("past", now - 10)):
        full = await envelope_of(redis, lean_scripts, SLOT, job_id)
        assert full.endswith(b"|v=2;a=7|%d|%s" % (due, TAIL)) and not is_lean(full)
    # A lead of 0 never leans.
    await scripts.add(SLOT, [NewJob("far0", now + 3600_000, 7, TAIL)])
    assert not is_lean(await envelope_of(redis, scripts, SLOT, "far0"))


async def test_fill_fills_only_lean_envelopes_of_the_same_seq(
    lean_scripts: Scripts, redis: RedisClient
) -> None:
    due = now_ms() + 60_000
    await lean_scripts.add(SLOT, [NewJob(j, due, 16, TAIL) for j in ("a", "b", "c", "d")])
    await lean_scripts.add(SLOT, [NewJob("full", now_ms(), 16, TAIL)])
    seqs = {j: (await envelope_of(redis, lean_scripts, SLOT, j))[:SEQ_DIGITS] for j in "abcd"}
    full_before = await envelope_of(redis, lean_scripts, SLOT, "full")
    await lean_scripts.cancel(SLOT, "c", 60_000)  # gone
    await lean_scripts.reschedule(SLOT, "d", due + 5)  # another seq now
    await lean_scripts.take(SLOT, 4)
    fills = [
        (b"a", seqs["a"], TAIL),
        (b"b", b"f" * SEQ_DIGITS, TAIL),  # a seq the envelope does not carry
        (b"c", seqs["c"], TAIL),
        (b"d", seqs["d"], TAIL),
        (b"full", full_before[:SEQ_DIGITS], b"other"),
    ]
    assert await lean_scripts.fill_many([(SLOT, 4, fills)]) == [1]
    assert await envelope_of(redis, lean_scripts, SLOT, "a") == b"%s|v=2;a=16|%d|%s" % (
        seqs["a"],
        due,
        TAIL,
    )
    for job_id in ("b", "d"):
        assert is_lean(await envelope_of(redis, lean_scripts, SLOT, job_id))
    assert not await redis.hexists(lean_scripts.keys.slot(SLOT).jobs, "c")
    assert await envelope_of(redis, lean_scripts, SLOT, "full") == full_before
    # Filling again changes nothing; a stale epoch is refused.
    assert await lean_scripts.fill_many([(SLOT, 4, fills[:1])]) == [0]
    await lean_scripts.take(SLOT, 5)
    assert await lean_scripts.fill_many([(SLOT, 4, [(b"b", seqs["b"], TAIL)])]) == [None]
    assert is_lean(await envelope_of(redis, lean_scripts, SLOT, "b"))


async def test_lean_jobs_reschedule_cancel_retry_and_die_like_full_ones(
    lean_scripts: Scripts, redis: RedisClient
) -> None:
    k = lean_scripts.keys.slot(SLOT)
    due = now_ms() + 60_000
    await lean_scripts.add(SLOT, [NewJob(j, due, 2, TAIL) for j in ("a", "b")])
    assert (await lean_scripts.reschedule(SLOT, "a", 100))[0] == ChangeCode.CHANGED
    envelope = await envelope_of(redis, lean_scripts, SLOT, "a")
    assert envelope.endswith(b"|v=2;a=2|100|")
    assert await redis.zscore(k.delay, member_of(envelope[:SEQ_DIGITS], b"a")) == 100
    assert (await lean_scripts.cancel(SLOT, "b", 60_000)).code == ChangeCode.CHANGED
    assert await redis.zcard(k.delay) == 1
    await lean_scripts.move(SLOT, 0, 10)
    [claimed] = (await lean_scripts.claim(SLOT, 0, 10, 30_000)).jobs
    assert claimed.envelope == envelope and claimed.attempt == 1
    result = await lean_scripts.nack(SLOT, 0, [b"a"], "no", 10, 10)
    assert result.retried == 1
    retried = await envelope_of(redis, lean_scripts, SLOT, "a")
    assert is_lean(retried) and retried.endswith(b"|v=2;a=2|100|")
    await asyncio.sleep(0.05)
    await lean_scripts.move(SLOT, 0, 10)
    await lean_scripts.claim(SLOT, 0, 10, 30_000)
    assert (await lean_scripts.nack(SLOT, 0, [b"a"], "no", 10, 10)).dead == 1
    assert is_lean(await envelope_of(redis, lean_scripts, SLOT, "a"))


async def test_release_puts_claimed_jobs_back_without_using_an_attempt(
    lean_scripts: Scripts, redis: RedisClient
) -> None:
    k = lean_scripts.keys.slot(SLOT)
    await lean_scripts.add(SLOT, [NewJob("a", now_ms() - 5, 3, TAIL)])
    await lean_scripts.move(SLOT, 0, 10)
    await lean_scripts.claim(SLOT, 0, 10, 30_000)
    before = now_ms()
    released, due = await lean_scripts.release(SLOT, 0, [b"a", b"unknown"], 500)
    assert released == 1 and before + 500 <= due <= now_ms() + 500
    assert await redis.zcard(k.inflight) == 0
    assert not await redis.hexists(k.attempts, "a")  # the claim's count undone
    assert await redis.llen(k.done) == 0  # nothing was tried: nothing to record
    [(member, score)] = await redis.zrange(k.delay, 0, -1, withscores=True)
    envelope = await envelope_of(redis, lean_scripts, SLOT, "a")
    assert member == member_of(envelope[:SEQ_DIGITS], b"a") and score == due
    assert (await lean_scripts.release(SLOT, 0, [b"a"], 500))[0] == 0  # not in flight
    await lean_scripts.take(SLOT, 1)
    with pytest.raises(Fenced):
        await lean_scripts.release(SLOT, 0, [b"a"], 500)


async def test_filler_walks_pages_that_end_inside_runs_of_equal_scores(
    lean: Settings, redis: RedisClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(filler_module, "FILL_BATCH", 7)  # pages end inside runs of equal scores
    async with DelayClient(lean) as client:
        due = now_ms() + 2500
        ids = await client.schedule_many([Job("t", i, at=(due + i % 3) / 1000) for i in range(300)])
        ids += await client.schedule_many([Job("t", "later", at=(due + 60_000) / 1000)])
        keys = KeySpace(lean.key_prefix)

        async def envelopes() -> list[bytes]:
            return [await redis.hget(keys.slot(slot_of(j, lean.slots)).jobs, j) for j in ids]

        assert all(is_lean(e) for e in await envelopes())
        filler = Filler(lean, client.scripts, client.mysql, StaticOwnership(lean.slots))
        assert await filler.fill_owned() == 0  # none within the lead yet
        await asyncio.sleep(max(due - LEAD_MS - now_ms(), 0) / 1000 + 0.1)
        assert await filler.fill_owned() == 300
        assert await filler.fill_owned() == 0  # nothing left within the lead
        rows = await client.mysql.get_many(ids)
        filled = await envelopes()
        for job_id, envelope in zip(ids[:300], filled[:300], strict=True):
            header = b"%s|v=2;a=16|%d|" % (envelope[:SEQ_DIGITS], rows[job_id].due_ms)
            assert envelope == with_tail(header, rows[job_id].tail)
        assert is_lean(filled[300])


# ----- a node -------------------------------------------------------------------------------


def expected_record(job: Job, job_id: str, due_ms: int) -> dict[str, object]:
    return {
        "job_id": job_id,
        "topic": job.topic,
        "biz_id": job.biz_id,
        "biz_type": job.biz_type,
        "priority": 0,
        "payload": job.payload,
        "due_ms": due_ms,
    }


async def test_node_fires_lean_jobs_on_time_with_their_records(
    lean: Settings, redis: RedisClient, topic: str, collector: Collector
) -> None:
    jobs = [
        Job(
            topic,
            {"n": i, "text": 'é|"x"' * (i % 3)},
            delay=3 + (i % 10) / 10,
            biz_id=f"b{i}" if i % 2 else None,
            biz_type="kind" if i % 3 else None,
        )
        for i in range(200)
    ]
    node = Node(lean)
    await node.start()
    try:
        async with DelayClient(lean) as client:
            ids = await client.schedule_many(jobs)
            keys = KeySpace(lean.key_prefix)
            envelopes = [await redis.hget(keys.slot(slot_of(j, lean.slots)).jobs, j) for j in ids]
            assert all(e is not None and is_lean(e) for e in envelopes)
            records = await collector.until(200, timeout_s=30)
            await collector.quiet_for(0.5)
            rows = await client.mysql.get_many(ids)
    finally:
        await node.stop()
    assert len(records) == 200
    by_id = {record["job_id"]: record for record in records}
    for job, job_id in zip(jobs, ids, strict=True):
        record = dict(by_id[job_id])
        due_ms = rows[job_id].due_ms
        received, fired = record.pop("received_ms"), record.pop("fired_ms")
        record.pop("created_ms")  # the Kafka timestamp the collector adds
        assert isinstance(fired, int) and isinstance(received, float)
        assert due_ms <= fired  # never early (how late is measured by benchmarks/)
        assert record.pop("attempt") == 1 and record.pop("node") == lean.node_id
        assert record == expected_record(job, job_id, due_ms)
    # Mostly by the filler; one whose due time fell between two of its passes may still
    # be lean when claimed (and be filled while in flight, so counted twice).
    stats = node.stats()
    assert stats["filled"] + stats["tails_loaded_at_claim"] >= 200
    assert stats["filled"] >= 100


async def test_a_job_still_lean_when_claimed_fires_the_same_bytes(
    lean: Settings, redis: RedisClient, topic: str, collector: Collector
) -> None:
    """Rescheduled to now after the filler passed: the dispatcher loads its payload."""
    node = Node(lean)
    await node.start()
    try:
        async with DelayClient(lean) as client:
            job_id = await client.schedule(
                topic, {"a": [1, "|"], "b": "ü"}, delay=60, biz_id="k|1", biz_type="t"
            )
            keys = KeySpace(lean.key_prefix).slot(slot_of(job_id, lean.slots))
            assert node.parts is not None
            filler = node.parts.filler

            async def filler_passed() -> bool:
                return slot_of(job_id, lean.slots) in filler._cursors

            assert await wait_for(filler_passed, timeout_s=10)
            await asyncio.sleep(1.1)  # its cursor is past now
            before = await redis.hget(keys.jobs, job_id)
            assert before is not None and is_lean(before)
            assert await client.reschedule(job_id, delay=0)
            [record] = await collector.until(1, timeout_s=20)
            raw = await raw_value(lean, topic)
            row = await client.get(job_id)
            assert row is not None
            # Still lean when claimed: the dispatcher made its tail.
            assert node.stats()["tails_loaded_at_claim"] == 1
    finally:
        await node.stop()
    # The job is acked and gone from Redis by now: its lean header with the new due time
    # stands for the envelope claimed (the seq is not part of the record). The record a
    # full envelope would have fired, byte for byte.
    seq, max_attempts, _due, _ = before.split(b"|", 3)
    envelope = b"%s|%s|%d|" % (seq, max_attempts, row.due_ms)
    full = with_tail(
        envelope,
        make_tail(job_id, topic, b'{"a":[1,"|"],"b":"\xc3\xbc"}', biz_id="k|1", biz_type="t"),
    )
    assert raw == fire_of(full, 1, int(str(record["fired_ms"]))).value
    assert record["due_ms"] == row.due_ms


async def raw_value(settings: Settings, topic: str) -> bytes:
    """The value of the one record of `topic`, as the broker holds it."""
    collector = Collector(settings, topic)
    await collector.start()
    try:
        deadline = asyncio.get_running_loop().time() + 20
        while asyncio.get_running_loop().time() < deadline:
            batch = await collector.consumer.getmany(timeout_ms=500)
            for messages in batch.values():
                for message in messages:
                    return bytes(message.value)
    finally:
        await collector.stop()
    raise AssertionError("no record")


async def test_lean_jobs_wait_for_mysql_and_fire_once_it_answers(
    lean: Settings, topic: str, collector: Collector
) -> None:
    """A lean job claimed while the node cannot read MySQL is put back, its attempt not
    used, and fires once MySQL answers again."""
    node = Node(lean.replace(retry_backoff_ms=200))
    await node.start()
    try:
        async with DelayClient(lean) as client:
            job_id = await client.schedule(topic, {"x": 1}, delay=60, max_attempts=1)
            assert node.parts is not None
            await node.mysql.close()  # the node's MySQL pool is gone: every read fails
            assert await client.reschedule(job_id, delay=0)
            dispatcher = node.parts.dispatcher

            async def released() -> bool:
                return dispatcher.released_total >= 2

            assert await wait_for(released, timeout_s=20)
            assert collector.records == [] and dispatcher.failed_total == 0
            await node.mysql.open()
            [record] = await collector.until(1, timeout_s=20)
            assert record["job_id"] == job_id and record["attempt"] == 1
            assert record["payload"] == {"x": 1}
    finally:
        await node.stop()


# ----- cancel, reschedule, dead letters through the client ----------------------------------


async def test_client_cancels_and_reschedules_lean_jobs(lean: Settings, redis: RedisClient) -> None:
    async with DelayClient(lean) as client:
        a, b = await client.schedule_many([Job("t", 1, delay=60), Job("t", 2, delay=60)])
        keys = KeySpace(lean.key_prefix)
        assert await client.cancel(a)
        assert not await redis.hexists(keys.slot(slot_of(a, lean.slots)).jobs, a)
        assert await client.reschedule(b, delay=120)
        envelope = await redis.hget(keys.slot(slot_of(b, lean.slots)).jobs, b)
        row = await client.get(b)
        assert row is not None and row.status == JobStatus.PENDING
        assert envelope is not None and envelope.endswith(b"|%d|" % row.due_ms)


async def test_dead_lean_jobs_are_listed_and_replayed(
    lean: Settings, redis: RedisClient, topic: str
) -> None:
    async with DelayClient(lean) as client:
        job_id = await client.schedule(topic, {"p": "q"}, delay=60, max_attempts=1, biz_id="z")
        slot = slot_of(job_id, lean.slots)
        scripts = client.scripts
        await scripts.reschedule(slot, job_id, now_ms() - 5)
        await scripts.move(slot, 0, 10)
        [claimed] = (await scripts.claim(slot, 0, 10, 30_000)).jobs
        assert is_lean(claimed.envelope)
        assert (await scripts.nack(slot, 0, [claimed.job_id], "no", 10, 10)).dead == 1
        [dead] = await client.dead_letters()
        assert (dead.job_id, dead.topic) == (job_id, topic)
        record = dict(dead.record)
        assert record.pop("due_ms") == int(claimed.envelope.split(b"|")[2])
        assert record == {
            "job_id": job_id,
            "topic": topic,
            "biz_id": "z",
            "biz_type": None,
            "priority": 0,
            "payload": {"p": "q"},
        }
        assert await client.dead_job(job_id) == dead
        assert await client.count_dead(topic=topic) == 1
        assert await client.replay_dead([job_id]) == 1
        envelope = await redis.hget(scripts.keys.slot(slot).jobs, job_id)
        assert envelope is not None and is_lean(envelope)
        assert await client.dead_letters() == []
