"""The producer client against real MySQL and Redis (no node running)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import orjson
import pytest

from cluster import DelayClient, InvalidJob, Job, JobStatus
from cluster.config import Settings
from cluster.contract import member_id
from cluster.jobs import now_ms
from cluster.keys import slot_of
from cluster.mysql_store import SchemaError
from cluster.redis_conn import RedisClient


def new_id() -> str:
    return f"c-{uuid.uuid4().hex}"


async def delay_scores(client: DelayClient, redis: RedisClient, job_id: str) -> list[float]:
    keys = client.keys.slot(slot_of(job_id, client.settings.slots))
    return [
        score
        for member, score in await redis.zrange(keys.delay, 0, -1, withscores=True)
        if member_id(member) == job_id.encode()
    ]


async def test_schedule_writes_mysql_then_redis(client: DelayClient, redis: RedisClient) -> None:
    before = now_ms()
    job_id = await client.schedule(
        "orders.close", {"order": 7}, delay=60, biz_id="order-7", biz_type="close", max_attempts=3
    )
    record = await client.get(job_id)
    assert record is not None
    assert record.status == JobStatus.PENDING
    assert before + 60_000 <= record.due_ms <= now_ms() + 60_000
    assert (record.topic, record.biz_id, record.biz_type) == ("orders.close", "order-7", "close")
    assert (record.attempts, record.max_attempts) == (0, 3)
    assert record.payload_json == '{"order":7}'
    assert record.slot == slot_of(job_id, client.settings.slots)
    assert await delay_scores(client, redis, job_id) == [record.due_ms]


async def test_at_with_aware_datetime(client: DelayClient) -> None:
    at = dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(hours=1)
    job_id = await client.schedule("t", None, at=at)
    record = await client.get(job_id)
    assert record is not None and record.due == at


async def test_same_job_id_twice_is_one_job(client: DelayClient, redis: RedisClient) -> None:
    job_id = new_id()
    first = await client.schedule("t", {"v": 1}, delay=60, job_id=job_id)
    second = await client.schedule("t", {"v": 2}, delay=120, job_id=job_id)
    assert first == second == job_id
    record = await client.get(job_id)
    assert record is not None and record.payload_json == '{"v":1}'
    assert await delay_scores(client, redis, job_id) == [record.due_ms]


async def test_schedule_many_returns_ids_in_order(client: DelayClient, redis: RedisClient) -> None:
    keyed = new_id()
    jobs: list[Job | dict[str, object]] = [Job("t", i, delay=60 + i) for i in range(5)]
    jobs += [
        {"topic": "t", "payload": "x", "delay": 60, "job_id": keyed},
        {"topic": "t", "payload": "y", "delay": 90, "job_id": keyed},
    ]
    ids = await client.schedule_many(jobs)  # type: ignore[arg-type]
    assert len(ids) == 7 and ids[5] == ids[6] == keyed
    assert len(set(ids)) == 6
    for i, job_id in enumerate(ids[:5]):
        record = await client.get(job_id)
        assert record is not None and record.payload_json == str(i)
    record = await client.get(keyed)
    assert record is not None and record.payload_json == '"x"'
    assert len(await delay_scores(client, redis, keyed)) == 1


async def test_bad_input_changes_nothing(client: DelayClient, redis: RedisClient) -> None:
    good, bad = new_id(), new_id()
    with pytest.raises(InvalidJob, match="job 1: topic"):
        await client.schedule_many(
            [
                {"topic": "t", "payload": 1, "delay": 1, "job_id": good},
                {"topic": "bad topic", "payload": 1, "delay": 1, "job_id": bad},
            ]
        )
    with pytest.raises(InvalidJob, match="payload_max_bytes"):
        await client.schedule(
            "t", "x" * (client.settings.payload_max_bytes + 1), delay=1, job_id=bad
        )
    with pytest.raises(InvalidJob):
        await client.schedule("t", 1, delay=float("nan"), job_id=bad)
    with pytest.raises(InvalidJob, match="list of jobs"):
        await client.schedule_many("not a list")  # type: ignore[arg-type]
    assert await client.get(good) is None
    assert await client.get(bad) is None
    assert await redis.keys(f"{{{client.settings.key_prefix}:*") == []


async def test_empty_batch(client: DelayClient) -> None:
    assert await client.schedule_many([]) == []


async def test_cancel(client: DelayClient, redis: RedisClient) -> None:
    job_id = await client.schedule("t", 1, delay=60)
    assert await client.cancel(job_id) is True
    assert await client.cancel(job_id) is True  # still cancelled: still never fires
    record = await client.get(job_id)
    assert record is not None and record.status == JobStatus.CANCELLED
    assert await delay_scores(client, redis, job_id) == []
    # Scheduling the same job_id again does not bring it back.
    assert await client.schedule("t", 1, delay=1, job_id=job_id) == job_id
    assert await delay_scores(client, redis, job_id) == []


async def test_unknown_job_ids(client: DelayClient) -> None:
    assert await client.cancel(new_id()) is False
    assert await client.reschedule(new_id(), delay=5) is False
    assert await client.get(new_id()) is None
    with pytest.raises(InvalidJob):
        await client.cancel("")
    with pytest.raises(InvalidJob):
        await client.reschedule(new_id(), delay=-1)


async def test_reschedule_updates_both_stores(client: DelayClient, redis: RedisClient) -> None:
    job_id = await client.schedule("t", 1, delay=60)
    assert await client.reschedule(job_id, delay=600) is True
    record = await client.get(job_id)
    assert record is not None and record.due_ms > now_ms() + 500_000
    assert await delay_scores(client, redis, job_id) == [record.due_ms]
    history = await client.mysql.history(job_id)
    assert [h["note"] for h in history] == ["rescheduled"]


async def test_reschedule_readds_a_pending_job_redis_lost(
    client: DelayClient, redis: RedisClient
) -> None:
    job_id = await client.schedule("t", 1, delay=60)
    keys = client.keys.slot(slot_of(job_id, client.settings.slots))
    await redis.delete(keys.delay, keys.jobs)
    assert await client.reschedule(job_id, delay=30) is True
    record = await client.get(job_id)
    assert record is not None
    assert await delay_scores(client, redis, job_id) == [record.due_ms]


async def test_a_database_serves_one_cluster_only(settings: Settings) -> None:
    other = DelayClient(settings.replace(key_prefix="another-cluster"))
    with pytest.raises(SchemaError, match="belongs to the cluster with key_prefix"):
        await other.open()
    await other.close()


HOSTILE = ["'; DROP TABLE job_0000; --", "redis.call('FLUSHALL')", "\\\\", "{dq:1}", "%s%s"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda c: c.schedule_many([{"topic": "t", "payload": 1, "delay": 1}] * 100_001),
            "at most",
        ),
        (
            lambda c: c.schedule_many([{"topic": "t", "payload": 1, "delay": 1}, "job"]),
            "job 1: each job must be a Job or a mapping",
        ),
        (lambda c: c.schedule("t", 1, delay=1, job_id="x" * 201), "job_id"),
        (lambda c: c.schedule("t", 1, delay=1, job_id=7), "job_id must be a str"),
        (lambda c: c.schedule(HOSTILE[0], 1, delay=1), "not a valid Kafka topic"),
        (lambda c: c.schedule("t", 1, delay=10**12), "max_delay_s"),
        (lambda c: c.schedule("t", 1, at=-1), ">= 0"),
        (lambda c: c.schedule("t", 1, at=float("inf")), "finite"),
        (lambda c: c.schedule("t", {1, 2}, delay=1), "JSON-serialisable"),
        (lambda c: c.cancel(123), "job_id must be a str"),
        (lambda c: c.get(None), "job_id must be a str"),
        (lambda c: c.reschedule("x", at="tomorrow"), "number"),
        (lambda c: c.replay_dead(topic="no such topic!"), "Kafka topic"),
    ],
)
async def test_bad_input_matrix_changes_nothing(
    client: DelayClient, redis: RedisClient, call: Any, message: str
) -> None:
    with pytest.raises(InvalidJob, match=message):
        await call(client)
    assert await redis.keys(f"{{{client.settings.key_prefix}:*") == []
    async with client.mysql.pool.acquire() as conn, conn.cursor() as cur:
        for shard in client.mysql.all_shards():
            table, _ = client.mysql.shard_tables(shard)
            await cur.execute(f"SELECT COUNT(*) FROM {table}")
            assert (await cur.fetchone())[0] == 0


async def test_hostile_text_is_stored_verbatim(client: DelayClient) -> None:
    for text in HOSTILE:
        job_id = await client.schedule(
            "t", {"v": text}, delay=60, job_id=text + "-id", biz_id=text, biz_type=text[:64]
        )
        record = await client.get(job_id)
        assert record is not None
        assert (record.job_id, record.biz_id, record.biz_type) == (text + "-id", text, text)
        assert record.payload_json == orjson.dumps({"v": text}).decode()
        assert await client.cancel(job_id) is True


async def test_schedule_many_over_several_statements_is_all_or_nothing(
    client: DelayClient, redis: RedisClient
) -> None:
    """Jobs of several shards (and more rows than one statement holds) go in one
    transaction: when the statement of one shard fails, no shard keeps its rows."""
    jobs = [Job("t", i, delay=60, job_id=new_id()) for i in range(5000)]
    ids = [str(job.job_id) for job in jobs]
    # The shard whose statement runs last, so that others ran before it failed.
    last_shard = list(dict.fromkeys(client.mysql.tables_of(job_id)[0] for job_id in ids))[-1]
    broken = last_shard
    async with client.mysql.pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute(f"RENAME TABLE {broken} TO {broken[:-1]}_away`")
    try:
        with pytest.raises(Exception, match="doesn't exist"):
            await client.schedule_many(jobs)
    finally:
        async with client.mysql.pool.acquire() as conn, conn.cursor() as cur:
            await cur.execute(f"RENAME TABLE {broken[:-1]}_away` TO {broken}")
    assert await client.mysql.get_many(ids) == {}
    assert not any([await delay_scores(client, redis, job_id) for job_id in ids[:50]])
    # With the table back, the same call schedules every job.
    assert await client.schedule_many(jobs) == ids
    assert len(await client.mysql.get_many(ids)) == 5000
