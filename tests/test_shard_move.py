"""Moving a logical shard between MySQL servers (`delayq db move-shard`,
cluster/store/shard_move.py): the copy is exact, a store opened before the move follows
it, nothing is lost, early, doubled or uncancelled under load, a crashed move goes on when
run again, and what cannot move says why.

Needs the local stack's extra MariaDB servers (`delayq services up --mysql-servers 3`):
server 0 is mysql_url, servers 1 and 2 the extra ones. Each test's cluster has 4 logical
shards of 2 tables each, placed 0, 0, 1, 2: shard 2 starts on server 1.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pymysql
import pytest
from aiokafka.admin import NewTopic

from actors.node import Node
from cluster import DelayClient, Job
from cluster.connections.kafka_conn import make_admin, start_client
from cluster.devstack import mysql_servers
from cluster.devstack.databases import create_cluster_database, forget_cluster
from cluster.model.contract import JobStatus
from cluster.model.jobs import now_ms
from cluster.model.keys import shard_of
from cluster.settings.config import Settings
from cluster.store.mysql_store import MySQLStore
from cluster.store.rows import Outcome
from cluster.store.shard_copy import shard_table_names
from cluster.store.shard_move import (
    ShardMoveError,
    copy_and_catch_up,
    move_shard,
    prepare_target,
    switch,
)
from cluster.store.shard_plan import check
from tests.conftest import TOPIC_PARTITIONS, Collector, wait_for

# Against the single Redis only: it makes servers and databases of its own.
pytestmark = pytest.mark.once

DATABASES, TABLES = 4, 2
SHARD, SOURCE, TARGET = 2, 1, 2
# Rows padding the moving shard in the load test (DELAYQ_TEST_MOVE_ROWS for a bigger run).
PADDING = int(os.environ.get("DELAYQ_TEST_MOVE_ROWS", "20000"))


def extra_urls() -> list[str]:
    return [mysql_servers.server_url(i) for i in (1, 2)]


@pytest.fixture
async def cluster(redis_settings: Settings) -> AsyncIterator[Settings]:
    """A cluster on three servers with a database of its own on each."""
    for url in extra_urls():
        try:
            pymysql.connect(**_args(url)).close()
        except pymysql.err.Error as exc:
            pytest.skip(f"no extra MariaDB server ({exc}): delayq services up --mysql-servers 3")
    wanted = redis_settings.replace(
        mysql_servers=" ".join(extra_urls()), mysql_databases=DATABASES, mysql_tables=TABLES
    )
    settings = await create_cluster_database(wanted, f"delayq_{wanted.key_prefix}")
    yield settings
    await forget_cluster(settings)


@pytest.fixture
async def store(cluster: Settings) -> AsyncIterator[MySQLStore]:
    s = MySQLStore(cluster, "mover")
    await s.open()
    yield s
    await s.close()


def _args(url: str) -> dict[str, Any]:
    from cluster.store.sql import parse_mysql_url

    args = parse_mysql_url(url)
    return {k: args[k] for k in ("host", "port", "user", "password")}


def ids_in(d: int, count: int, prefix: str) -> list[str]:
    """`count` job ids (or schedule names) of logical shard d."""
    found: list[str] = []
    i = 0
    while len(found) < count:
        candidate = f"{prefix}-{i}"
        if shard_of(candidate, DATABASES, TABLES)[0] == d:
            found.append(candidate)
        i += 1
    return found


async def rows_of(store: MySQLStore, server: int, database: str) -> dict[str, list[Any]]:
    """Every row of every table of one shard database on one server, in key order, and
    each table's CHECKSUM TABLE."""
    pool = await store.server_pool(server)
    found: dict[str, list[Any]] = {}
    async with pool.acquire() as conn, conn.cursor() as cur:
        for kind, name in shard_table_names(TABLES):
            await cur.execute(f"SELECT * FROM `{database}`.`{name}` ORDER BY {kind.key}")
            found[name] = list(await cur.fetchall())
            await cur.execute(f"CHECKSUM TABLE `{database}`.`{name}`")
            found[f"{name} checksum"] = [(await cur.fetchone())[1]]
    return found


async def tables_on(store: MySQLStore, server: int, database: str) -> list[str]:
    pool = await store.server_pool(server)
    async with pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute(
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s",
            (database,),
        )
        return sorted(r[0] for r in await cur.fetchall())


async def state_on(store: MySQLStore, server: int, d: int) -> str | None:
    pool = await store.server_pool(server)
    async with pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute(
            f"SELECT state FROM `{store.database}`.delayq_shards WHERE db_index = %s", (d,)
        )
        row = await cur.fetchone()
    return None if row is None else str(row[0])


async def fill_shard(settings: Settings, store: MySQLStore, d: int) -> list[str]:
    """Jobs of shard d in every status, with history, outbox rows and recurring
    schedules; payloads with quotes, backslashes, NUL and 4-byte characters."""
    ids = ids_in(d, 120, "fill")
    odd = {"text": 'it\'s "quoted" \\ back\\slash \x00 nul é 😀', "n": [1, 2.5, None]}
    async with DelayClient(settings) as client:
        await client.schedule_many(
            [Job("t.moved", {**odd, "i": i}, delay=3600 + i, job_id=j) for i, j in enumerate(ids)]
        )
        for job_id in ids[:20]:
            assert await client.cancel(job_id)
        pool = await store.pool_for(d)
        async with pool.acquire() as conn:
            await conn.autocommit(False)
            for job_id in ids_in(d, 15, "in-transaction"):
                await conn.begin()
                await client.schedule_in(conn, "t.moved", odd, delay=7200, job_id=job_id)
                await conn.commit()
            await conn.autocommit(True)
        for name in ids_in(d, 4, "every")[:4]:
            await client.schedule_recurring(name, "t.moved", odd, every=3600)
    slot = 0
    outcomes = [
        Outcome(j, status, attempt, now_ms(), f"note {status.name} '\\ é", slot)
        for j, status, attempt in (
            *((j, JobStatus.FIRED, 1) for j in ids[20:40]),
            *((j, JobStatus.FIRING, 2) for j in ids[40:50]),
            *((j, JobStatus.DEAD, 3) for j in ids[50:60]),
            *((j, JobStatus.EXPIRED, 1) for j in ids[60:70]),
        )
    ]
    await store.record_outcomes(outcomes)
    return ids


async def test_move_copies_every_row_and_a_store_opened_before_follows(
    cluster: Settings, store: MySQLStore
) -> None:
    ids = await fill_shard(cluster, store, SHARD)
    assert store.homes[SHARD] == SOURCE
    before = await rows_of(store, SOURCE, store.database_name(SHARD))
    assert all(before[name] for _, name in shard_table_names(TABLES) if "history" in name)
    old = MySQLStore(cluster, "opened-before")
    await old.open()
    try:
        assert (await old.get(ids[0])) is not None  # its pool to server 1 is open
        said: list[str] = []
        report = await move_shard(store, SHARD, TARGET, progress=said.append)
        print("\n" + "\n".join(said + report.lines()))
        shard_db = store.database_name(SHARD)
        assert await tables_on(store, SOURCE, shard_db) == []
        assert await tables_on(store, SOURCE, f"{shard_db}_moved") == sorted(
            name for _, name in shard_table_names(TABLES)
        )
        assert (await state_on(store, SOURCE, SHARD), await state_on(store, TARGET, SHARD)) == (
            "moved",
            "home",
        )
        moved = await rows_of(store, SOURCE, f"{shard_db}_moved")
        assert moved == before  # the source was left as it was
        assert await rows_of(store, TARGET, shard_db) == before  # and copied exactly
        # The old store still thinks shard 2 is on server 1: 1146 sends it to the new home.
        assert old.homes[SHARD] == SOURCE
        got = await old.get(ids[25])
        assert got is not None and got.status == JobStatus.FIRED
        assert old.homes[SHARD] == TARGET
        assert report.pause_ms is not None and report.rows["job"] >= len(ids)
    finally:
        await old.close()
    # Run again: nothing to do.
    again = await move_shard(store, SHARD, TARGET)
    assert again.already


async def test_errors_say_why_and_change_nothing(cluster: Settings, store: MySQLStore) -> None:
    async def refused(d: int, target: int, s: MySQLStore = store) -> str:
        with pytest.raises(ShardMoveError) as caught:
            await move_shard(s, d, target)
        return str(caught.value)

    assert "no logical shard 9" in await refused(9, TARGET)
    assert "no server 5" in await refused(SHARD, 5)
    assert "target is the source" in await refused(SHARD, SOURCE)
    one = MySQLStore(cluster.replace(mysql_databases=1, mysql_servers=""), "one")
    assert "mysql_databases is 1" in await refused(0, 0, one)
    # A target that does not answer.
    down = cluster.replace(
        mysql_servers=cluster.mysql_servers + " mysql://delayq:delayq@127.0.0.1:9/"
    )
    with_down = MySQLStore(down, "down")
    await with_down.open(check_schema=False)
    try:
        assert "does not answer" in await refused(SHARD, 3, with_down)
    finally:
        await with_down.close()
    # Migrations that differ.
    pool = await store.server_pool(TARGET)
    async with pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute(
            f"UPDATE `{store.database}`.delayq_migrations SET applied_at = NULL WHERE version = 8"
        )
        assert "not applied" in await refused(SHARD, TARGET)
        await cur.execute(
            f"UPDATE `{store.database}`.delayq_migrations SET applied_at = NOW(3) WHERE version = 8"
        )
    # No server says home.
    pool = await store.server_pool(SOURCE)
    async with pool.acquire() as conn, conn.cursor() as cur:
        shards = f"`{store.database}`.delayq_shards"
        await cur.execute(f"UPDATE {shards} SET state = 'copying' WHERE db_index = {SHARD}")
        assert "has no home" in await refused(SHARD, TARGET)
        await cur.execute(f"UPDATE {shards} SET state = 'home' WHERE db_index = {SHARD}")
    assert (await state_on(store, SOURCE, SHARD), await state_on(store, TARGET, SHARD)) == (
        "home",
        None,
    )
    # Out to server 2, back to server 1, and out again: server 1 still holds the tables
    # the first move renamed.
    await move_shard(store, SHARD, TARGET)
    back = await move_shard(store, SHARD, SOURCE)
    assert not back.already
    message = await refused(SHARD, TARGET)
    assert f"{store.database_name(SHARD)}_moved" in message and "DROP DATABASE" in message
    assert await state_on(store, SOURCE, SHARD) == "home"


async def test_a_move_stopped_at_any_step_goes_on_when_run_again(
    cluster: Settings, store: MySQLStore
) -> None:
    await fill_shard(cluster, store, SHARD)
    shard_db = store.database_name(SHARD)
    before = await rows_of(store, SOURCE, shard_db)
    # Stopped during the copy: runs again from the start of the copy.
    plan = await check(store, SHARD, TARGET)
    await prepare_target(plan)
    assert await state_on(store, TARGET, SHARD) == "copying"
    resumed = await move_shard(store, SHARD, TARGET)
    assert resumed.resumed == "before the switch"
    assert await rows_of(store, TARGET, shard_db) == before
    # Back to server 1, stopped right after the RENAME: nobody serves the shard.
    plan = await check(store, SHARD, SOURCE)
    await prepare_target(plan)
    await copy_and_catch_up(plan)
    await switch(plan)
    assert (await state_on(store, TARGET, SHARD), await state_on(store, SOURCE, SHARD)) == (
        "moved",
        "copying",
    )
    resumed = await move_shard(store, SHARD, SOURCE)
    assert resumed.resumed == "after the switch"
    assert (await state_on(store, SOURCE, SHARD)) == "home"
    assert await rows_of(store, SOURCE, shard_db) == before
    # Stopped between S's 'moved' and the RENAME: the rerun renames, then copies.
    pool = await store.server_pool(SOURCE)
    async with pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute(f"DROP DATABASE `{shard_db}_moved`")  # the first move's leftovers
    plan = await check(store, SHARD, TARGET)
    await prepare_target(plan)
    await copy_and_catch_up(plan)
    pool = await store.server_pool(SOURCE)
    async with pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute(
            f"UPDATE `{store.database}`.delayq_shards SET state = 'moved' WHERE db_index = %s",
            (SHARD,),
        )
    resumed = await move_shard(store, SHARD, TARGET)
    assert resumed.resumed == "after the switch"
    assert await tables_on(store, SOURCE, shard_db) == []
    assert await rows_of(store, TARGET, shard_db) == before


async def _topic(settings: Settings) -> str:
    name = f"test.{uuid.uuid4().hex[:12]}"
    admin = make_admin(settings)
    try:
        await start_client(admin, settings)
        await admin.create_topics([NewTopic(name, TOPIC_PARTITIONS, 1)])
    finally:
        await admin.close()
    return name


async def age(store: MySQLStore, server: int, d: int) -> None:
    """Make the padding rows a day old, as the rows of a shard in use for a while are
    (the catch-up copies only what changed since the copy began)."""
    pool = await store.server_pool(server)
    async with pool.acquire() as conn, conn.cursor() as cur:
        for t in range(TABLES):
            await cur.execute(
                f"UPDATE `{store.database_name(d)}`.`job_{t:04d}` SET"
                " gmt_create = gmt_create - INTERVAL 1 DAY,"
                " gmt_modified = gmt_modified - INTERVAL 1 DAY WHERE job_id LIKE 'pad-%'"
            )


async def test_a_move_under_load_loses_nothing(cluster: Settings, store: MySQLStore) -> None:
    """A node fires jobs due during the move, producers schedule and cancel all along;
    0 lost, 0 early, 0 fired twice, every cancel honoured."""
    topic = await _topic(cluster)
    collector = Collector(cluster, topic)
    await collector.start()
    node = Node(cluster)
    await node.start()
    rng = random.Random(25)
    scheduled: dict[str, int] = {}  # job id -> due ms
    cancelled: set[str] = set()
    try:
        async with DelayClient(cluster) as client:
            # Far-future rows make the copy take a while.
            padding = ids_in(SHARD, PADDING, "pad")
            for start in range(0, len(padding), 5000):
                await client.schedule_many(
                    [
                        Job(topic, {"pad": j}, delay=86400, job_id=j)
                        for j in padding[start : start + 5000]
                    ]
                )
            await age(store, SOURCE, SHARD)
            moving = asyncio.create_task(move_shard(store, SHARD, TARGET, progress=print))
            batch = 0
            began = time.monotonic()
            while not moving.done() or time.monotonic() - began < 3:
                jobs = [
                    Job(
                        topic,
                        {"b": batch, "i": i},
                        delay=rng.uniform(0.5, 6),
                        job_id=f"l{batch}-{i}",
                    )
                    for i in range(100)
                ]
                at = now_ms()
                for job_id in await client.schedule_many(jobs):
                    scheduled[job_id] = at
                # Jobs due later, half of them cancelled a moment after.
                later = [
                    Job(topic, {"c": batch, "i": i}, delay=8, job_id=f"c{batch}-{i}")
                    for i in range(20)
                ]
                await client.schedule_many(later)
                for job in later[::2]:
                    result = await client.cancel(str(job.job_id))
                    assert result, result
                    cancelled.add(str(job.job_id))
                for job in later[1::2]:
                    scheduled[str(job.job_id)] = at
                batch += 1
                await asyncio.sleep(0.05)
            report = await moving
        wanted = set(scheduled)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if wanted <= {str(r["job_id"]) for r in collector.records}:
                break
            await collector.poll()
        await collector.quiet_for(10.0)  # past every cancelled job's due time
        # Every job's durable record made it across: fired, or cancelled.
        wanted_status = {j: JobStatus.FIRED for j in scheduled} | dict.fromkeys(
            cancelled, JobStatus.CANCELLED
        )

        async def recorded() -> bool:
            rows = await store.get_many(list(wanted_status))
            return {j: r.status for j, r in rows.items()} == wanted_status

        assert await wait_for(recorded, 30)
    finally:
        await node.stop()
        await collector.stop()
    fired = Counter(str(r["job_id"]) for r in collector.records)
    lost = wanted - set(fired)
    twice = {j: n for j, n in fired.items() if n > 1}
    early = [r for r in collector.records if int(r["fired_ms"]) < int(r["due_ms"])]  # type: ignore[call-overload]
    fired_cancelled = cancelled & set(fired)
    print(
        "\n".join(report.lines())
        + f"\n[move under load] scheduled={len(wanted)} cancelled={len(cancelled)} "
        f"fired={sum(fired.values())} lost={len(lost)} twice={len(twice)} early={len(early)} "
        f"cancelled_fired={len(fired_cancelled)} pause_ms={report.pause_ms:.0f}"
    )
    assert not lost
    assert not twice
    assert not early
    assert not fired_cancelled
    assert set(fired) <= wanted


async def test_cli_moves_a_shard_and_refuses_bad_arguments(cluster: Settings) -> None:
    env = {
        **os.environ,
        "DELAYQ_MYSQL_URL": cluster.mysql_url,
        "DELAYQ_MYSQL_SERVERS": cluster.mysql_servers,
        "DELAYQ_MYSQL_DATABASES": str(DATABASES),
        "DELAYQ_MYSQL_TABLES": str(TABLES),
        "DELAYQ_KEY_PREFIX": cluster.key_prefix,
    }
    delayq = [sys.executable, "-m", "cluster.cli.main"]

    async def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(
            subprocess.run,
            [*delayq, "db", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )

    target = mysql_servers.server_url(2).split("@")[1].split("/")[0]  # host:port
    done = await cli("move-shard", str(SHARD), "--to", target)
    assert done.returncode == 0, done.stderr
    assert f"moved logical shard {SHARD}" in done.stdout and "pause" in done.stdout
    assert "copying logical shard" in done.stdout
    for args, why in (
        (["move-shard", str(SHARD)], "give the shard and the server"),
        (["move-shard", str(SHARD), "--to", "nowhere:1"], "no server nowhere:1"),
        (["migrate", "3"], "belong to move-shard"),
    ):
        refused = await cli(*args)
        assert refused.returncode == 2 and why in refused.stderr, refused.stderr
    again = await cli("move-shard", str(SHARD), "--to", "1")
    assert again.returncode == 0, again.stderr
    refused = await cli("move-shard", str(SHARD), "--to", "2")
    assert refused.returncode == 1 and "DROP DATABASE" in refused.stderr


async def test_calls_that_start_during_the_switch_wait_for_it(
    cluster: Settings, store: MySQLStore
) -> None:
    """Not only the calls that meet the renamed tables: a call on the shard that starts
    while no server is its home waits for the new home too, rather than failing."""
    ids = ids_in(SHARD, 3000, "during")
    async with DelayClient(cluster) as client:
        await client.schedule_many([Job("t.moved", 1, delay=3600, job_id=j) for j in ids])
    user = MySQLStore(cluster, "user")
    await user.open()
    failures: list[BaseException] = []
    answered = 0
    calls: list[asyncio.Task[None]] = []

    async def get(job_id: str) -> None:
        nonlocal answered
        try:
            assert await user.get(job_id) is not None
            answered += 1
        except Exception as exc:
            failures.append(exc)

    try:
        moving = asyncio.create_task(move_shard(store, SHARD, TARGET))
        i = 0
        while not moving.done():
            calls.append(asyncio.create_task(get(ids[i % len(ids)])))
            i += 1
            await asyncio.sleep(0.002)
        report = await moving
        await asyncio.gather(*calls)
    finally:
        await user.close()
    print(
        f"\n[calls during the move] answered={answered} failed={len(failures)} "
        f"pause_ms={report.pause_ms:.0f} first failure: {failures[:1]}"
    )
    assert not failures
