"""The producer client against real MySQL and Redis (no node running)."""

from __future__ import annotations

import datetime as dt
import itertools
import uuid
from typing import Any

import orjson
import pytest

from cluster import (
    CancelResult,
    ChangeStatus,
    DelayClient,
    InvalidJob,
    Job,
    JobStatus,
    RescheduleResult,
)
from cluster.connections.redis_conn import RedisClient
from cluster.errors import ScheduleIncomplete, SchemaError
from cluster.model.contract import AddCode, member_id
from cluster.model.jobs import now_ms, validate_job
from cluster.model.keys import slot_of
from cluster.scripts.facade import NewJob
from cluster.settings.config import Settings
from cluster.store import sql
from cluster.store.rows import Outcome
from tests.mysql_tools import count_rows, on_shard


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


async def test_a_batch_of_new_and_existing_caller_ids_keeps_the_existing_rows(
    client: DelayClient, redis: RedisClient
) -> None:
    """The read-back of existing rows is skipped only when every row was new: a batch
    where one caller id exists keeps that job's first due time and payload in Redis,
    and a cancelled one stays out of Redis."""
    kept, cancelled = new_id(), new_id()
    await client.schedule("t", "first", delay=60, job_id=kept)
    await client.schedule("t", "first", delay=60, job_id=cancelled)
    assert await client.cancel(cancelled)
    fresh = [new_id() for _ in range(3)]
    jobs = [Job("t", "second", delay=90, job_id=job_id) for job_id in [kept, cancelled, *fresh]]
    assert await client.schedule_many(jobs) == [kept, cancelled, *fresh]
    record = await client.get(kept)
    assert record is not None and record.payload_json == '"first"'
    assert await delay_scores(client, redis, kept) == [record.due_ms]
    assert await delay_scores(client, redis, cancelled) == []
    for job_id in fresh:
        row = await client.get(job_id)
        assert row is not None and await delay_scores(client, redis, job_id) == [row.due_ms]


async def test_insert_jobs_counts_only_new_rows(client: DelayClient) -> None:
    now = now_ms()
    ids = [new_id() for _ in range(4)]
    jobs = [
        validate_job(Job("t", 1, delay=60, job_id=job_id), client.settings, now) for job_id in ids
    ]
    slots = [slot_of(job_id, client.settings.slots) for job_id in ids]
    assert await client.mysql.insert_jobs(jobs[:1], slots[:1]) == 1
    assert await client.mysql.insert_jobs(jobs, slots) == 3


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
    first = await client.cancel(job_id)
    assert first and first.status == ChangeStatus.CANCELLED
    assert first == CancelResult(job_id, ChangeStatus.CANCELLED)
    assert await client.cancel(job_id)  # still cancelled: still never fires
    record = await client.get(job_id)
    assert record is not None and record.status == JobStatus.CANCELLED
    assert await delay_scores(client, redis, job_id) == []
    # Scheduling the same job_id again does not bring it back.
    assert await client.schedule("t", 1, delay=1, job_id=job_id) == job_id
    assert await delay_scores(client, redis, job_id) == []


async def test_unknown_job_ids(client: DelayClient) -> None:
    unknown = new_id()
    assert not await client.cancel(unknown)
    assert await client.cancel(unknown) == CancelResult(unknown, ChangeStatus.NOT_FOUND)
    answer = await client.reschedule(unknown, delay=5)
    assert answer == RescheduleResult(unknown, ChangeStatus.NOT_FOUND) and not answer
    assert await client.get(new_id()) is None
    with pytest.raises(InvalidJob):
        await client.cancel("")
    with pytest.raises(InvalidJob):
        await client.reschedule(new_id(), delay=-1)


async def test_reschedule_updates_both_stores(client: DelayClient, redis: RedisClient) -> None:
    job_id = await client.schedule("t", 1, delay=60)
    answer = await client.reschedule(job_id, delay=600)
    assert answer and answer.status == ChangeStatus.RESCHEDULED
    record = await client.get(job_id)
    assert record is not None and answer.due_ms == record.due_ms
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
    assert (await client.reschedule(job_id, delay=30)).status == ChangeStatus.RESCHEDULED
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
        (lambda c: c.schedule("t", 1, delay=1, expires_after=0), "more than 0"),
        (lambda c: c.schedule("t", 1, delay=1, expires_after=-5), "more than 0"),
        (lambda c: c.schedule("t", 1, delay=1, expires_after=float("nan")), "finite"),
        (lambda c: c.schedule("t", 1, delay=1, expires_after=float("inf")), "finite"),
        (lambda c: c.schedule("t", 1, delay=1, expires_after="60"), "must be a number"),
        (lambda c: c.schedule("t", 1, delay=1, expires_after=True), "must be a number"),
        (lambda c: c.schedule("t", 1, delay=1, expires_after=10**400), "out of range"),
        (lambda c: c.schedule("t", 1, delay=1, expires_after=4e7), "max_delay_s"),
        (
            lambda c: c.schedule_many(
                [Job("t", 1, delay=1), Job("t", 1, delay=1, expires_after=0)]
            ),
            "job 1: expires_after must be more than 0",
        ),
        (
            lambda c: c.schedule_many(
                [{"topic": "t", "payload": 1, "delay": 1, "expires_after": []}]
            ),
            "job 0: expires_after must be a number",
        ),
        (lambda c: c.expired_jobs(limit=0), "limit"),
        (lambda c: c.expired_jobs(topic="a b"), "Kafka topic"),
    ],
)
async def test_bad_input_matrix_changes_nothing(
    client: DelayClient, redis: RedisClient, call: Any, message: str
) -> None:
    with pytest.raises(InvalidJob, match=message):
        await call(client)
    assert await redis.keys(f"{{{client.settings.key_prefix}:*") == []
    assert await count_rows(client.mysql) == 0


async def test_hostile_text_is_stored_verbatim(client: DelayClient) -> None:
    for text in HOSTILE:
        job_id = await client.schedule(
            "t", {"v": text}, delay=60, job_id=text + "-id", biz_id=text, biz_type=text[:64]
        )
        record = await client.get(job_id)
        assert record is not None
        assert (record.job_id, record.biz_id, record.biz_type) == (text + "-id", text, text)
        assert record.payload_json == orjson.dumps({"v": text}).decode()
        assert await client.cancel(job_id)


@pytest.mark.parametrize(
    "payload",
    [
        {"v": "中文 é 😀 \u0000 \n \\ ' \" `"},
        "X'41' 0x41 _binary'x'",
        ["\\x00", "\u2028", "\U0010ffff"],
        "",
    ],
)
async def test_payload_text_of_any_kind_is_stored_verbatim(
    client: DelayClient, payload: object
) -> None:
    """The INSERT writes a payload as a hexadecimal literal of its UTF-8 JSON: the row
    holds exactly that text, whatever characters it has."""
    job_id = await client.schedule("t", payload, delay=60)
    record = await client.get(job_id)
    assert record is not None
    assert record.payload_json == orjson.dumps(payload).decode()
    rows = await client.schedule_many([Job("t", payload, delay=60) for _ in range(3)])
    for other in rows:
        stored = await client.get(other)
        assert stored is not None and stored.payload_json == record.payload_json


async def test_schedule_many_over_several_statements_is_all_or_nothing(
    client: DelayClient, redis: RedisClient
) -> None:
    """Jobs of several shards (and more rows than one statement holds) go in one
    transaction: when the statement of one shard fails, no shard keeps its rows."""
    jobs = [Job("t", i, delay=60, job_id=new_id()) for i in range(5000)]
    ids = [str(job.job_id) for job in jobs]
    # The shard whose statement runs last, so that others ran before it failed; with
    # several servers, only those of its server (the others commit on their own).
    last = list(dict.fromkeys(client.mysql.shard_of(job_id) for job_id in ids))[-1]
    broken, _ = client.mysql.shard_tables(last)
    await on_shard(client.mysql, last, f"RENAME TABLE {broken} TO {broken[:-1]}_away`")
    try:
        with pytest.raises(Exception, match="doesn't exist") as raised:
            await client.schedule_many(jobs)
    finally:
        await on_shard(client.mysql, last, f"RENAME TABLE {broken[:-1]}_away` TO {broken}")
    scheduled = getattr(raised.value, "scheduled", [])
    if scheduled:
        # Several servers: exactly the jobs of the others are scheduled, and said so.
        assert isinstance(raised.value, ScheduleIncomplete)
        home = client.mysql.homes[last[0]]
        assert sorted(scheduled) == sorted(
            i for i in ids if client.mysql.homes[client.mysql.shard_of(i)[0]] != home
        )
        assert sorted(raised.value.not_scheduled + scheduled) == sorted(ids)
        assert set(await client.mysql.get_many(ids)) == set(scheduled)
    else:
        assert await client.mysql.get_many(ids) == {}
    for job_id in ids[:50]:
        assert bool(await delay_scores(client, redis, job_id)) == (job_id in scheduled)
    # With the table back, the same call schedules every job.
    assert await client.schedule_many(jobs) == ids
    assert len(await client.mysql.get_many(ids)) == 5000


# ----- the hardening issue's input defects ----------------------------------------------


async def snapshot(client: DelayClient, redis: RedisClient) -> dict[str, Any]:
    """Every Redis key of the cluster with its contents, and every job row."""
    keys: dict[str, Any] = {}
    for key in sorted(await redis.keys(f"{{{client.settings.key_prefix}:*")):
        kind = await redis.type(key)
        if kind == b"zset":
            keys[key] = await redis.zrange(key, 0, -1, withscores=True)
        elif kind == b"hash":
            keys[key] = await redis.hgetall(key)
        elif kind == b"list":
            keys[key] = await redis.lrange(key, 0, -1)
        else:
            keys[key] = await redis.get(key)
    rows = []
    for shard in client.mysql.all_shards():
        table, history = client.mysql.shard_tables(shard)
        select = f"SELECT job_id, status, action_time, attempts FROM {table}"
        rows += sorted(await on_shard(client.mysql, shard, select))
        select = f"SELECT job_id, status, note FROM {history} ORDER BY id"
        rows += await on_shard(client.mysql, shard, select)
    return {"redis": keys, "mysql": rows}


async def test_an_id_with_a_trailing_space_is_refused_everywhere(
    client: DelayClient, redis: RedisClient
) -> None:
    """'X ' and 'X' are one row to MySQL's PAD SPACE collation but two jobs to Redis,
    slots and Kafka: every call that takes an id refuses 'X ' and changes nothing."""
    job_id = new_id()
    await client.schedule("t", {"v": 1}, delay=60, job_id=job_id)
    before = await snapshot(client, redis)
    spaced = job_id + " "
    calls: list[Any] = [
        client.schedule("t", 1, delay=1, job_id=spaced),
        client.schedule("t", 1, delay=1, job_id=job_id + "   "),
        client.schedule_many([Job("t", 1, delay=1, job_id=spaced)]),
        client.schedule_many([{"topic": "t", "payload": 1, "delay": 1, "job_id": spaced}]),
        client.cancel(spaced),
        client.reschedule(spaced, delay=1),
        client.get(spaced),
        client.dead_job(spaced),
        client.replay_dead([spaced]),
        client.purge_dead([job_id, spaced]),
    ]
    for call in calls:
        with pytest.raises(InvalidJob, match="job_id must not end with a space"):
            await call
    assert await snapshot(client, redis) == before
    record = await client.get(job_id)
    assert record is not None and record.status == JobStatus.PENDING


def same_shard_ids(client: DelayClient, *variants: str) -> list[str]:
    """Ids `variant + suffix`, one suffix for all, that share one MySQL table: ids a
    PAD SPACE, case- or accent-insensitive collation would take for one another."""
    # CRC32 is linear: ids of one length that differ at the same distance from their end
    # keep their shard relation whatever else changes, so the suffix length varies; with
    # several databases (h % databases is not linear) the suffix's text matters too.
    for attempt in itertools.count():
        suffix = "-" * (attempt % 150 + 1) + uuid.uuid4().hex
        ids = [variant + suffix for variant in variants]
        if len({client.mysql.tables_of(job_id) for job_id in ids}) == 1:
            return ids
    raise AssertionError("unreachable")


async def test_every_statement_on_job_id_touches_only_its_own_row(client: DelayClient) -> None:
    # Case, accent, a trailing no-break space (not padded), a decomposed accent, ß/ss.
    ids = same_shard_ids(client, "Job-", "job-", "jöb-", "jo\u0308b-", "JOB-")
    ids.append(same_shard_ids(client, "ß-", "ss-")[0])
    ids.append(ids[1] + "\u00a0")
    base = now_ms() + 3_600_000  # beyond the horizon: MySQL alone
    for i, job_id in enumerate(ids):
        await client.schedule("t", {"i": i}, at=(base + i * 1000) / 1000, job_id=job_id)
    rows = await client.mysql.get_many(ids)
    assert {job_id: row.payload_json for job_id, row in rows.items()} == {
        job_id: f'{{"i":{i}}}' for i, job_id in enumerate(ids)
    }

    async def states() -> dict[str, tuple[JobStatus, int, int]]:
        found = await client.mysql.get_many(ids)
        return {job_id: (r.status, r.due_ms, r.attempts) for job_id, r in found.items()}

    expected = {job_id: (JobStatus.PENDING, base + i * 1000, 0) for i, job_id in enumerate(ids)}
    assert await states() == expected
    slot = 0
    assert await client.mysql.set_status(
        ids[0], JobStatus.CANCELLED, slot, from_statuses=(int(JobStatus.PENDING),)
    )
    expected[ids[0]] = (JobStatus.CANCELLED, base, 0)
    assert await states() == expected
    assert await client.mysql.set_due(ids[1], base + 99_000, slot)
    expected[ids[1]] = (JobStatus.PENDING, base + 99_000, 0)
    assert await states() == expected
    at = now_ms()
    await client.mysql.record_outcomes([Outcome(ids[2], JobStatus.FIRED, 1, at, "", slot)])
    expected[ids[2]] = (JobStatus.FIRED, base + 2000, 1)
    assert await states() == expected
    await client.mysql.record_outcomes([Outcome(ids[3], JobStatus.FIRING, 1, at, "boom", slot)])
    expected[ids[3]] = (JobStatus.FIRING, base + 3000, 1)
    assert await states() == expected
    await client.mysql.record_outcomes([Outcome(ids[4], JobStatus.DEAD, 2, at, "gone", slot)])
    expected[ids[4]] = (JobStatus.DEAD, base + 4000, 2)
    assert await states() == expected
    notes = {job_id: [h["note"] for h in await client.mysql.history(job_id)] for job_id in ids}
    assert notes == {
        ids[0]: [None],
        ids[1]: ["rescheduled"],
        ids[2]: [None],
        ids[3]: ["boom"],
        ids[4]: ["gone"],
        ids[5]: [],
        ids[6]: [],
    }


async def test_cancel_of_a_never_scheduled_id_does_not_block_its_schedule(
    client: DelayClient, redis: RedisClient
) -> None:
    job_id = new_id()
    assert (await client.cancel(job_id)).status == ChangeStatus.NOT_FOUND
    await client.schedule("t", 1, delay=1, job_id=job_id)
    record = await client.get(job_id)
    assert record is not None and record.status == JobStatus.PENDING
    assert await delay_scores(client, redis, job_id) == [record.due_ms]


async def test_cancel_of_a_fired_row_does_not_block_its_replay(
    client: DelayClient, redis: RedisClient
) -> None:
    """A dead job Redis no longer holds: cancel says DEAD, and a replay from MySQL
    right after puts it back in Redis (no tombstone left to refuse it)."""
    job_id = await client.schedule("t", 1, delay=60)
    slot = slot_of(job_id, client.settings.slots)
    assert await client.mysql.set_status(
        job_id, JobStatus.DEAD, slot, from_statuses=(int(JobStatus.PENDING),)
    )
    keys = client.keys.slot(slot)
    await redis.delete(keys.delay, keys.jobs)
    assert await client.cancel(job_id) == CancelResult(job_id, ChangeStatus.DEAD)
    assert await client.replay_dead([job_id]) == 1
    record = await client.get(job_id)
    assert record is not None and record.status == JobStatus.PENDING
    assert await delay_scores(client, redis, job_id) == [record.due_ms]


async def test_a_schedule_committed_before_a_cancel_stays_cancelled(
    client: DelayClient, redis: RedisClient
) -> None:
    """The race the tombstone guards: the row is committed, the cancel runs, then the
    schedule's Redis add arrives. The add is refused and the job never fires."""
    valid = [validate_job(Job("t", 1, delay=1, job_id=new_id()), client.settings, now_ms())]
    slots = [slot_of(valid[0].job_id, client.settings.slots)]
    await client.mysql.insert_jobs(valid, slots)  # the schedule's MySQL step
    assert await client.cancel(valid[0].job_id)
    _, [code] = await client.scripts.add(
        slots[0], [NewJob(valid[0].job_id, valid[0].due_ms, 16, valid[0].tail)]
    )
    assert code == AddCode.REFUSED
    assert await delay_scores(client, redis, valid[0].job_id) == []


async def test_allowed_topics_refuses_other_topics_and_changes_nothing(
    settings: Settings, redis: RedisClient
) -> None:
    async with DelayClient(settings.replace(allowed_topics="orders.*")) as client:
        assert await client.schedule("orders.close", 1, delay=60)
        before = await snapshot(client, redis)
        with pytest.raises(InvalidJob, match="allowed_topics"):
            await client.schedule("payments", 1, delay=1)
        with pytest.raises(InvalidJob, match=r"job 1: topic 'payments'.*allowed_topics"):
            await client.schedule_many([Job("orders.a", 1, delay=1), Job("payments", 1, delay=1)])
        with pytest.raises(InvalidJob, match="allowed_topics"):
            await client.replay_dead(topic="payments")
        assert await snapshot(client, redis) == before


async def test_statements_of_multibyte_payloads_stay_under_statement_bytes(
    client: DelayClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The statement size limit counts bytes: payloads of 4-byte characters whose
    character count fits one statement are split over several, each under the limit."""
    sizes: list[int] = []
    execute = sql.execute_overlapped

    async def recording(cur: Any, statements: Any) -> int:
        def each() -> Any:
            for statement in statements:
                sizes.append(len(statement.encode()))
                yield statement

        return await execute(cur, each())

    monkeypatch.setattr(sql, "execute_overlapped", recording)
    payload = "\U0001f600" * 16_000  # 16,000 characters, 64,000 bytes as UTF-8
    # One shard, so that one statement would hold them all.
    table = client.mysql.tables_of("first")
    ids = [
        job_id
        for job_id in (new_id() for _ in range(2000))
        if client.mysql.tables_of(job_id) == table
    ][:100]
    jobs = [Job("t", payload, delay=3600, job_id=job_id) for job_id in ids]
    assert len(payload) * len(jobs) < sql.STATEMENT_BYTES < len(payload.encode()) * len(jobs)
    assert await client.schedule_many(jobs) == ids
    assert len(sizes) > 1 and max(sizes) <= sql.STATEMENT_BYTES
    assert sorted(await client.mysql.get_many(ids)) == sorted(ids)
