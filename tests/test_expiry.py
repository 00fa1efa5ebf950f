"""expires_after: a job is never published after its due time plus that long; it ends
EXPIRED instead. Where it lives (the envelope, the row), the scripts that decide (claim,
nack, reap), and real node processes: a node down past a job's expiry, a job in flight
on a node that died, a job whose publishes fail until its retry would come too late."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import aiomysql

from actors.reconcile_passes import load_bound_ms, reconcile
from cluster import ChangeStatus, DelayClient, JobStatus
from cluster.connections.redis_conn import RedisClient
from cluster.devstack.nodes import free_port, settings_env
from cluster.model.contract import NO_TIME
from cluster.model.jobs import now_ms
from cluster.model.keys import slot_of
from cluster.scripts.facade import Scripts
from cluster.settings.config import Settings
from cluster.store.rows import Outcome
from tests.conftest import Collector, wait_for
from tests.mysql_tools import job_server_args
from tests.processes import NodeProcess
from tests.test_answers import claim
from tests.test_operations import fetch

HOUR_S = 3600


async def envelope(client: DelayClient, redis: RedisClient, job_id: str) -> bytes | None:
    keys = client.keys.slot(slot_of(job_id, client.settings.slots))
    found: bytes | None = await redis.hget(keys.jobs, job_id)
    return found


async def redis_now_ms(redis: RedisClient) -> int:
    seconds, micros = await redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def until_redis_time(redis: RedisClient, ms: int) -> None:
    """Wait until the Redis clock, which the scripts read, has passed ms."""

    async def passed() -> bool:
        return await redis_now_ms(redis) > ms

    assert await wait_for(passed, timeout_s=60)


# ----- where it lives -----------------------------------------------------------------------


async def test_the_row_and_the_envelope_keep_it_lean_and_reloaded(
    client: DelayClient, redis: RedisClient
) -> None:
    near = await client.schedule("t", {"v": 1}, delay=60, expires_after=90)
    # Due past payload_lead_ms (lean), within half the horizon (re-added by a reconcile).
    lean = await client.schedule("t", {"v": 2}, delay=130, expires_after=0.25)
    plain = await client.schedule("t", {"v": 3}, delay=60)
    rows = await client.mysql.get_many([near, lean, plain])
    assert [rows[j].expires_after_ms for j in (near, lean, plain)] == [90_000, 250, None]
    assert rows[near].expires_ms == rows[near].due_ms + 90_000
    assert rows[plain].expires_ms is None
    near_envelope = await envelope(client, redis, near)
    assert near_envelope is not None
    header = rb"[0-9a-f]{12}\|v=2;a=16;x=90000\|%d\|t\|.*" % rows[near].due_ms
    assert re.fullmatch(header, near_envelope)
    lean_envelope = await envelope(client, redis, lean)
    assert lean_envelope is not None
    assert lean_envelope[12:] == b"|v=2;a=16;x=250|%d|" % rows[lean].due_ms  # the header alone
    plain_envelope = await envelope(client, redis, plain)
    assert plain_envelope is not None and plain_envelope[12:22] == b"|v=2;a=16|"
    # Redis loses them; the reconciler re-adds them from MySQL, expiry and all.
    for job_id in (near, lean):
        keys = client.keys.slot(slot_of(job_id, client.settings.slots))
        await redis.delete(keys.delay, keys.jobs)
    slots = sorted({slot_of(j, client.settings.slots) for j in (near, lean)})
    until_ms = load_bound_ms(client.settings)
    await reconcile(client.settings, client.mysql, client.scripts, slots, until_ms=until_ms)
    assert (await envelope(client, redis, near) or b"")[12:30] == b"|v=2;a=16;x=90000|"
    assert (await envelope(client, redis, lean) or b"")[12:28] == b"|v=2;a=16;x=250|"


async def test_a_job_scheduled_in_the_callers_transaction_keeps_it(
    settings: Settings, client: DelayClient
) -> None:
    job_id = f"x-{uuid.uuid4().hex}"
    args = await job_server_args(client.mysql, job_id)
    conn = await aiomysql.connect(charset="utf8mb4", **args)
    try:
        await conn.begin()
        await client.schedule_in(conn, "t", 1, delay=60, expires_after=30, job_id=job_id)
        await conn.commit()
    finally:
        conn.close()
    row = await client.get(job_id)
    assert row is not None and row.expires_after_ms == 30_000


# ----- the scripts that decide ----------------------------------------------------------------


async def test_a_job_claimed_after_its_expiry_expires_instead(
    client: DelayClient, scripts: Scripts, redis: RedisClient
) -> None:
    now_s = now_ms() / 1000
    late = await client.schedule("t", "late", at=now_s - 10, expires_after=5)
    in_time = await client.schedule("t", "in time", at=now_s - 10, expires_after=HOUR_S)
    forever = await client.schedule("t", "no expiry", at=now_s - 10)
    claimed, expired = await claim_all(client, scripts, [late, in_time, forever])
    assert (claimed, expired) == ({in_time, forever}, 1)
    keys = client.keys.slot(slot_of(late, client.settings.slots))
    assert await redis.hget(keys.jobs, late) is None
    assert await redis.zscore(keys.inflight, late) is None
    assert await redis.zscore(keys.expired, late) == float("inf")  # until recorded
    [entry] = [e for e in await scripts.read_journal(keys_slot(client, late), 10) if late in str(e)]
    assert entry.startswith(b"%d|0|" % JobStatus.EXPIRED)
    assert b"expired: not published by its due time + expires_after" in entry
    # Cancel and reschedule know, before MySQL does.
    assert (await client.cancel(late)).status == ChangeStatus.EXPIRED
    assert (await client.reschedule(late, delay=1)).status == ChangeStatus.EXPIRED
    row = await client.get(late)
    assert row is not None and row.status == JobStatus.PENDING  # no node recorded it yet


def keys_slot(client: DelayClient, job_id: str) -> int:
    return slot_of(job_id, client.settings.slots)


async def test_a_retry_that_would_come_after_the_expiry_expires(
    client: DelayClient, scripts: Scripts, redis: RedisClient
) -> None:
    job_id = await client.schedule("t", 1, delay=0, expires_after=60)
    slot = keys_slot(client, job_id)
    keys = client.keys.slot(slot)
    await claim(client, scripts, job_id)
    # A retry 1 s later is within the minute: retried.
    retried = await scripts.nack(slot, 0, [job_id.encode()], "broker down", 1000, 1000)
    assert (retried.retried, retried.expired) == (1, 0)
    [member] = await redis.zrange(keys.delay, 0, -1)
    await redis.zadd(keys.delay, {member: 0})  # due again now
    assert await claim(client, scripts, job_id) == 2
    # The next one would come two minutes later, after the expiry: it expires now.
    expired = await scripts.nack(slot, 0, [job_id.encode()], "broker down", 120_000, 120_000)
    assert (expired.retried, expired.dead, expired.expired) == (0, 0, 1)
    assert expired.earliest_due_ms == NO_TIME
    assert await redis.hget(keys.jobs, job_id) is None
    assert await redis.zcard(keys.delay) == 0
    entry = (await scripts.read_journal(slot, 10))[-1]
    assert entry.startswith(b"%d|2|" % JobStatus.EXPIRED)
    assert entry.endswith(
        b"its retry would come after due + expires_after; last error: broker down"
    )


async def test_used_up_attempts_are_dead_before_they_are_expired(
    client: DelayClient, scripts: Scripts, redis: RedisClient
) -> None:
    job_id = await client.schedule("t", 1, delay=0, expires_after=60, max_attempts=1)
    slot = keys_slot(client, job_id)
    await claim(client, scripts, job_id)
    buried = await scripts.nack(slot, 0, [job_id.encode()], "no", 120_000, 120_000)
    assert (buried.dead, buried.expired) == (1, 0)


async def test_the_reaper_expires_a_timed_out_job_and_a_late_ack_records_the_fire(
    client: DelayClient, scripts: Scripts, redis: RedisClient
) -> None:
    """The node that claimed it died (or stalled): the reaper would retry it two minutes
    later, after its expiry, so it expires. Then the stalled node's ack arrives: the job
    was published after all, and is recorded fired with the attempt MySQL has."""
    job_id = await client.schedule("t", 1, delay=0, expires_after=60)
    slot = keys_slot(client, job_id)
    keys = client.keys.slot(slot)
    await scripts.move(slot, 0, 100)
    await scripts.claim(slot, 0, 100, 0)  # its in-flight deadline is now
    await until_redis_time(redis, await redis_now_ms(redis))
    reaped = await scripts.reap(slot, 0, 100, 120_000, 120_000)
    assert (reaped.retried, reaped.dead, reaped.expired) == (0, 0, 1)
    assert await redis.zscore(keys.expired, job_id) == float("inf")
    assert await scripts.ack(slot, [job_id.encode()]) == 1
    assert await redis.zscore(keys.expired, job_id) is None
    assert await redis.zscore(keys.acked, job_id) == float("inf")
    entries = await scripts.read_journal(slot, 10)
    assert [e.split(b"|")[:2] for e in entries] == [
        [b"%d" % JobStatus.EXPIRED, b"1"],
        [b"%d" % JobStatus.FIRED, b"0"],
    ]
    # The recorder's writes: expired (attempts 1), then fired (attempts kept).
    at = now_ms()
    await client.mysql.record_outcomes([Outcome(job_id, JobStatus.EXPIRED, 1, at, "x", slot)])
    await client.mysql.record_outcomes([Outcome(job_id, JobStatus.FIRED, 0, at, "", slot)])
    row = await client.get(job_id)
    assert row is not None and (row.status, row.attempts) == (JobStatus.FIRED, 1)


async def test_the_recorded_marker_expires_like_a_fired_one(
    client: DelayClient, scripts: Scripts, redis: RedisClient
) -> None:
    job_id = await client.schedule("t", 1, at=now_ms() / 1000 - 10, expires_after=1)
    slot = keys_slot(client, job_id)
    keys = client.keys.slot(slot)
    assert await claim_all(client, scripts, [job_id]) == (set(), 1)
    assert await scripts.trim_journal(
        slot, 0, await scripts.read_journal(slot, 1), [job_id], 60_000
    )
    score = await redis.zscore(keys.expired, job_id)
    assert score is not None and now_ms() < score <= now_ms() + 60_000
    await scripts.trim_journal(slot, 0, [], [job_id], -1)  # expire it now
    assert await redis.zscore(keys.expired, job_id) is None
    assert await scripts.read_journal(slot, 10) == []


async def claim_all(
    client: DelayClient, scripts: Scripts, job_ids: list[str]
) -> tuple[set[str], int]:
    """Claim every ready job of these jobs' slots, as a dispatcher would; returns the ids
    claimed and how many expired instead."""
    claimed: set[str] = set()
    expired = 0
    for slot in sorted({keys_slot(client, job_id) for job_id in job_ids}):
        await scripts.move(slot, 0, 100)
        result = await scripts.claim(slot, 0, 100, 60_000)
        claimed |= {job.job_id.decode() for job in result.jobs}
        expired += result.expired
    return claimed, expired


async def test_the_expiry_moves_with_a_reschedule(
    client: DelayClient, scripts: Scripts, redis: RedisClient
) -> None:
    """expires_after counts from the due time: rescheduled into the past by more than
    it, the job expires at its claim; rescheduled to now, it is claimed."""
    gone = await client.schedule("t", 1, delay=HOUR_S, expires_after=60)
    kept = await client.schedule("t", 2, delay=HOUR_S, expires_after=60)
    assert await client.reschedule(gone, at=now_ms() / 1000 - 120)
    assert await client.reschedule(kept, delay=0)
    for job_id in (gone, kept):
        assert (await envelope(client, redis, job_id) or b"")[12:30] == b"|v=2;a=16;x=60000|"
    assert await claim_all(client, scripts, [gone, kept]) == ({kept}, 1)


# ----- real node processes --------------------------------------------------------------------


def expired_counter(metrics: str) -> float:
    [value] = re.findall(r"^delayq_jobs_expired_total (\S+)$", metrics, re.MULTILINE)
    return float(value)


async def expired_recorded(client: DelayClient, job_id: str) -> bool:
    row = await client.get(job_id)
    return row is not None and row.status == JobStatus.EXPIRED


async def test_jobs_whose_nodes_were_down_past_their_expiry_never_arrive(
    settings: Settings,
    client: DelayClient,
    scripts: Scripts,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    """No node runs while the jobs come due: one expiring soon, one claimed by a node
    that then died (in flight, its deadline short), one that may wait an hour, one
    without expiry. When a node comes, the first two are past their expiry: they end
    EXPIRED and never reach Kafka, the others fire, and the node counts two expired."""
    # "claimed" alone in its slot: the dead node claims everything ready there.
    slot = keys_slot(client, "claimed")
    ids = [job_id for job_id in map(str, range(100)) if keys_slot(client, job_id) != slot]
    soon = await client.schedule(topic, "soon", delay=0, expires_after=0.3, job_id=ids[0])
    claimed = await client.schedule(topic, "claimed", delay=0, expires_after=0.3, job_id="claimed")
    patient = await client.schedule(topic, "p", delay=0, expires_after=HOUR_S, job_id=ids[1])
    forever = await client.schedule(topic, "forever", delay=0, job_id=ids[2])
    await scripts.move(slot, 0, 100)
    result = await scripts.claim(slot, 0, 100, 100)  # a node that died: deadline 100 ms
    assert claimed.encode() in [job.job_id for job in result.jobs]
    rows = await client.mysql.get_many([soon, claimed])
    await until_redis_time(redis, max(row.due_ms for row in rows.values()) + 300)
    port = free_port()
    node = NodeProcess(settings, tmp_path, "n1", {"DELAYQ_METRICS_PORT": str(port)})
    try:
        await node.wait_ready()
        records = await collector.until(2, timeout_s=60)
        for job_id in (soon, claimed):
            assert await wait_for(lambda j=job_id: expired_recorded(client, j), timeout_s=60)
        _, metrics = await fetch(port, "/metrics")
        assert expired_counter(metrics) == 2
    finally:
        assert await node.stop() == 0
    await collector.quiet_for(0.5)
    assert sorted(str(r["job_id"]) for r in records) == sorted([patient, forever])
    expired = {row.job_id: row for row in await client.expired_jobs(topic=topic)}
    assert set(expired) == {soon, claimed} and await client.count_expired(topic=topic) == 2
    assert "claimed" in (expired[soon].last_error or "")
    assert "in-flight deadline passed" in (expired[claimed].last_error or "")
    assert (expired[soon].attempts, expired[claimed].attempts) == (0, 1)
    history = await client.mysql.history(soon)
    assert [entry["status"] for entry in history] == [JobStatus.EXPIRED]
    assert (await client.cancel(soon)).status == ChangeStatus.EXPIRED  # from MySQL now
    assert await client.expired_jobs(topic="other.topic") == []
    listed = subprocess.run(
        [sys.executable, "-m", "cluster.cli.main", "expired", "--topic", topic],
        env={**os.environ, **settings_env(settings)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert {line.split()[0] for line in lines[:-1]} == {soon, claimed}
    assert "expires_after 0.3s" in lines[0] and "why expired:" in lines[0]
    assert lines[-1] == f"2 expired job(s) of topic {topic}"


async def test_a_job_whose_publishes_fail_expires_when_its_retry_would_be_too_late(
    settings: Settings, client: DelayClient, topic: str, collector: Collector, tmp_path: Path
) -> None:
    """Each publish fails (the record is larger than the node's producer sends), so the
    job is retried with backoff doubling from 1 s; with 2.5 s to live, a retry comes
    after its expiry within its first attempts, long before its 16 are used up: it
    expires, with the last error, and never reaches Kafka. A job that fits fires."""
    env = {
        "DELAYQ_KAFKA_MAX_BATCH_BYTES": "50000",
        "DELAYQ_PAYLOAD_MAX_BYTES": "40000",
        "DELAYQ_RETRY_BACKOFF_MS": "1000",
    }
    node = NodeProcess(settings, tmp_path, "n1", env)
    try:
        await node.wait_ready()
        # The producer accepts 64 KiB payloads; the node's broker records are smaller.
        poison = await client.schedule(topic, "x" * 55_000, delay=0, expires_after=2.5)
        fine = await client.schedule(topic, "fine", delay=0, expires_after=HOUR_S)
        [record] = await collector.until(1, timeout_s=60)
        assert await wait_for(lambda: expired_recorded(client, poison), timeout_s=60)
    finally:
        assert await node.stop() == 0
    await collector.quiet_for(0.5)
    assert [r["job_id"] for r in collector.records] == [fine] == [record["job_id"]]
    row = await client.get(poison)
    assert row is not None and row.status == JobStatus.EXPIRED
    assert 1 <= row.attempts < row.max_attempts
    assert row.last_error is not None
    assert row.last_error.startswith("expired: its retry would come after due + expires_after")
    assert "MessageSizeTooLarge" in row.last_error
    statuses = [entry["status"] for entry in await client.mysql.history(poison)]
    assert statuses[-1] == JobStatus.EXPIRED and set(statuses[:-1]) <= {JobStatus.FIRING}
