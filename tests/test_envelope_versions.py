"""Envelopes of both header versions in one slot, through every script that reads or
rewrites them (lua/includes/common.lua: envelope_field), as after an upgrade from a
release that wrote version 1: priority orders them, expiry ends them, max attempts
buries them, a reschedule or a retry keeps their fields, and the dispatcher builds
their records. And an envelope delayq did not write is refused, not fired."""

from __future__ import annotations

import orjson
import pytest

from actors.dispatch_round import SlotClaim, Tails, sort_claimed
from cluster.connections.redis_conn import RedisClient
from cluster.model.contract import PRIORITY_SCALE, ChangeCode
from cluster.model.envelope import EnvelopeFields, fields_of, fields_text, make_tail
from cluster.model.keys import KeySpace
from cluster.scripts.facade import NewJob, Scripts
from cluster.settings.config import Settings
from tests.test_expiry import redis_now_ms

SLOT = 9


@pytest.fixture
def by_version(redis: RedisClient, redis_settings: Settings) -> dict[int, Scripts]:
    """A Scripts writing each envelope version, on one key space."""
    keys = KeySpace(redis_settings.key_prefix)
    return {v: Scripts(redis, keys, envelope_version=v) for v in (1, 2)}


def job(job_id: str, due_ms: int, *, attempts: int = 16, expiry: int | None = None,
        priority: int = 0) -> NewJob:  # fmt: skip
    tail = make_tail(job_id, "topic.v", b'{"n":1}', priority=priority)
    return NewJob(job_id, due_ms, attempts, tail, expiry, priority)


async def stored(scripts: Scripts, job_id: str) -> bytes:
    envelope: bytes | None = await scripts.redis.hget(scripts.keys.slot(SLOT).jobs, job_id)
    assert envelope is not None
    return envelope


async def test_both_versions_order_fire_and_keep_their_fields(
    by_version: dict[int, Scripts], redis: RedisClient
) -> None:
    now = await redis_now_ms(redis)
    due = now - 5
    jobs = {
        "v1-p9": (1, job("v1-p9", due, priority=9)),
        "v2-p5": (2, job("v2-p5", due, priority=5, expiry=3_600_000)),
        "v1-p0": (1, job("v1-p0", due, expiry=3_600_000)),
        "v2-p0": (2, job("v2-p0", due)),
        "v1-p5": (1, job("v1-p5", due, priority=5)),
    }
    for version, one in jobs.values():
        await by_version[version].add(SLOT, [one])
    scripts = by_version[2]
    delay = scripts.keys.slot(SLOT).delay
    for job_id, (version, one) in jobs.items():
        envelope = await stored(scripts, job_id)
        fields = EnvelopeFields(one.max_attempts, one.expires_after_ms, one.priority)
        assert envelope.split(b"|")[1] == fields_text(fields, version).encode()
        assert fields_of(envelope) == fields
        member = envelope[:12] + job_id.encode()
        assert await redis.zscore(delay, member) == due - one.priority / PRIORITY_SCALE
    assert (await scripts.move(SLOT, 0, 100)).moved == 5
    claimed = await scripts.claim(SLOT, 0, 100, 60_000)
    # Highest priority first whatever the version; equal ones in schedule order.
    order = [j.job_id.decode() for j in claimed.jobs]
    assert order == ["v1-p9", "v2-p5", "v1-p5", "v1-p0", "v2-p0"]
    sorted_jobs = sort_claimed(
        [SlotClaim(SLOT, 0, claimed.now_ms, claimed.jobs)], Tails({}, set()), Settings(), 100, 0.0
    )
    assert not sorted_jobs.refused
    records = [orjson.loads(f.value) for f in sorted_jobs.fires]
    assert [(r["job_id"], r["priority"]) for r in records] == [
        (j, jobs[j][1].priority) for j in order
    ]
    # A failed attempt retries each with its fields unchanged, whatever its version.
    result = await scripts.nack(SLOT, 0, [j.job_id for j in claimed.jobs], "no", 1, 1)
    assert result.retried == 5
    for job_id, (version, one) in jobs.items():
        envelope = await stored(scripts, job_id)
        fields = EnvelopeFields(one.max_attempts, one.expires_after_ms, one.priority)
        assert envelope.split(b"|")[1] == fields_text(fields, version).encode()


async def test_both_versions_expire_die_and_reschedule_alike(
    by_version: dict[int, Scripts], redis: RedisClient
) -> None:
    now = await redis_now_ms(redis)
    for version, scripts in by_version.items():
        await scripts.add(
            SLOT,
            [
                job(f"late{version}", now - 10_000, expiry=1000),  # past due + expiry
                job(f"once{version}", now - 5, attempts=1),
                job(f"moved{version}", now + 3_600_000, priority=3),
            ],
        )
    scripts = by_version[2]
    assert (await scripts.move(SLOT, 0, 100)).moved == 4
    claimed = await scripts.claim(SLOT, 0, 100, 60_000)
    assert claimed.expired == 2  # late1 and late2, never handed out
    assert sorted(j.job_id for j in claimed.jobs) == [b"once1", b"once2"]
    result = await scripts.nack(SLOT, 0, [b"once1", b"once2"], "no", 1, 1)
    assert (result.retried, result.dead) == (0, 2)  # their one attempt is used
    for version in (1, 2):
        code, _ = await scripts.reschedule(SLOT, f"moved{version}", now + 7_200_000)
        assert code == ChangeCode.CHANGED
        envelope = await stored(scripts, f"moved{version}")
        assert fields_of(envelope) == EnvelopeFields(16, None, 3)
        score = await redis.zscore(
            scripts.keys.slot(SLOT).delay, envelope[:12] + b"moved%d" % version
        )
        assert score == now + 7_200_000 - 3 / PRIORITY_SCALE


async def test_an_envelope_delayq_did_not_write_is_refused_not_fired(
    by_version: dict[int, Scripts], redis: RedisClient
) -> None:
    scripts = by_version[2]
    now = await redis_now_ms(redis)
    await scripts.add(SLOT, [job("good", now - 5), job("forged", now - 5)])
    jobs_key = scripts.keys.slot(SLOT).jobs
    envelope = await stored(scripts, "forged")
    seq, _fields, rest = envelope.split(b"|", 2)
    await redis.hset(jobs_key, "forged", seq + b"|v=2;a=16;z=1|" + rest)  # an unknown field
    await scripts.move(SLOT, 0, 100)
    claimed = await scripts.claim(SLOT, 0, 100, 60_000)
    assert sorted(j.job_id for j in claimed.jobs) == [b"forged", b"good"]
    result = sort_claimed(
        [SlotClaim(SLOT, 0, claimed.now_ms, claimed.jobs)], Tails({}, set()), Settings(), 100, 0.0
    )
    assert [orjson.loads(f.value)["job_id"] for f in result.fires] == ["good"]
    assert list(result.refused[SLOT, 0]) == [b"forged"]
    assert result.refused[SLOT, 0][b"forged"].startswith("UnreadableEnvelope: not an envelope")
