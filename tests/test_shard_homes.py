"""Two MySQL servers saying home for one logical shard (a stale or hand-made
delayq_shards row): a client that opened while the real home was unreachable writes to
the other, and must stop once the real home answers again; a fresh client must refuse
the shard rather than miss its jobs; `delayq db homes` shows it and `--resolve` leaves
one home without losing a job (cluster/store/shard_homes.py, docs/cluster.md).

Needs the local stack's extra MariaDB servers (`delayq services up --mysql-servers 3`);
server 0, mysql_url, is reached through a forwarder the test cuts (as if it were down).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator

import pymysql
import pytest

from cluster import DelayClient, StoreUnavailable
from cluster.devstack import mysql_servers
from cluster.devstack.databases import create_cluster_database, forget_cluster
from cluster.errors import ShardHomeConflict
from cluster.model.jobs import now_ms, validate_job
from cluster.model.keys import shard_of, slot_of
from cluster.settings.config import Settings
from cluster.store import job_writes
from cluster.store.mysql_store import MySQLStore
from cluster.store.shard_copy import fetch, q
from cluster.store.sql import parse_mysql_url
from tests.conftest import wait_for
from tests.forwarder import Forwarder, free_port

# Against the single Redis only: it makes servers and databases of its own.
pytestmark = pytest.mark.once

DATABASES, TABLES = 4, 2
SHARD = 0  # placed on server 0; its stale twin is made on server 1


@pytest.fixture
async def server0(redis_settings: Settings) -> AsyncIterator[Forwarder]:
    """A forwarder to the local stack's MariaDB (server 0), open."""
    port = int(redis_settings.mysql_url.rsplit("@", 1)[1].split("/")[0].rsplit(":", 1)[1])
    forward = Forwarder(free_port(), port)
    await forward.open()
    yield forward
    await forward.cut()


@pytest.fixture
async def cluster(redis_settings: Settings, server0: Forwarder) -> AsyncIterator[Settings]:
    extra = [mysql_servers.server_url(i) for i in (1, 2)]
    for url in extra:
        args = parse_mysql_url(url)
        try:
            pymysql.connect(
                host=args["host"], port=args["port"], user=args["user"], password=args["password"]
            ).close()
        except pymysql.err.Error as exc:
            pytest.skip(f"no extra MariaDB server ({exc}): delayq services up --mysql-servers 3")
    head, _, path = redis_settings.mysql_url.rpartition("@")
    through = f"{head}@127.0.0.1:{server0.listen_port}/{path.split('/', 1)[1]}"
    wanted = redis_settings.replace(
        mysql_url=through,
        mysql_servers=" ".join(extra),
        mysql_databases=DATABASES,
        mysql_tables=TABLES,
    )
    settings = await create_cluster_database(wanted, f"delayq_{wanted.key_prefix}")
    yield settings
    await server0.open()
    await forget_cluster(settings)


def ids_in(d: int, count: int, prefix: str) -> list[str]:
    found: list[str] = []
    i = 0
    while len(found) < count:
        if shard_of(f"{prefix}-{i}", DATABASES, TABLES)[0] == d:
            found.append(f"{prefix}-{i}")
        i += 1
    return found


async def twin_home(store: MySQLStore, d: int, server: int) -> None:
    """Logical shard d's tables made on `server` too, and its row there set home."""
    source = await store.pool_for(d)
    target = await store.server_pool(server)
    name = store.database_name(d)
    [(_, create_db)] = await fetch(source, f"SHOW CREATE DATABASE {q(name)}")
    async with target.acquire() as conn, conn.cursor() as cur:
        await cur.execute(create_db)
        for (table,) in await fetch(
            source,
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s",
            (name,),
        ):
            [(_, create)] = await fetch(source, f"SHOW CREATE TABLE {q(name)}.{q(table)}")
            await cur.execute(f"USE {q(name)}")
            await cur.execute(create)
        await cur.execute(
            f"REPLACE INTO {q(store.database)}.delayq_shards (db_index, state, changed_at)"
            " VALUES (%s, 'home', NOW(3))",
            (d,),
        )


async def jobs_on(store: MySQLStore, server: int, d: int) -> set[str]:
    pool = await store.server_pool(server)
    found: set[str] = set()
    for t in range(TABLES):
        rows = await fetch(pool, f"SELECT job_id FROM {store.shard_tables((d, t))[0]}")
        found.update(str(r[0]) for r in rows)
    return found


async def write_row(store: MySQLStore, server: int, job_id: str, topic: str) -> None:
    """A job's row written straight into `server`'s tables of its shard."""
    settings = store.settings
    job = validate_job(
        {"topic": topic, "payload": {}, "delay": 60, "job_id": job_id}, settings, now_ms()
    )
    pool = await store.server_pool(server)
    async with pool.acquire() as conn, conn.cursor() as cur:
        for statement in job_writes.insert_statements(
            conn,
            store.shard_tables,
            [job],
            [slot_of(job_id, settings.slots)],
            {store.shard_of(job_id): [0]},
        ):
            await cur.execute(statement)


def cli_env(settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "DELAYQ_MYSQL_URL": settings.mysql_url,
        "DELAYQ_MYSQL_SERVERS": settings.mysql_servers,
        "DELAYQ_MYSQL_DATABASES": str(DATABASES),
        "DELAYQ_MYSQL_TABLES": str(TABLES),
        "DELAYQ_KEY_PREFIX": settings.key_prefix,
    }


async def db_homes(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "cluster.cli.main", "db", "homes", *args],
        env=cli_env(settings),
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.mark.timeout(240)
async def test_two_homes_stop_writes_and_are_resolved_without_loss(
    cluster: Settings, server0: Forwarder
) -> None:
    topic = "homes.test"
    admin = MySQLStore(cluster, "test")
    await admin.open()
    writer: DelayClient | None = None
    try:
        await twin_home(admin, SHARD, 1)
        names = [str(spec) for spec in admin.servers[:2]]

        # A client opened while server 0 is unreachable takes server 1 for the home.
        await server0.cut()
        writer = DelayClient(cluster)
        await writer.open()
        early = ids_in(SHARD, 5, "early")
        await writer.schedule_many(
            [{"topic": topic, "payload": {}, "delay": 60, "job_id": i} for i in early]
        )
        assert await jobs_on(admin, 1, SHARD) == set(early)

        # Server 0 answers again: the writer finds the second home and stops.
        await server0.open()
        written = set(early)
        attempts = iter(ids_in(SHARD, 10_000, "later"))
        refused: list[ShardHomeConflict] = []

        async def stopped() -> bool:
            job_id = next(attempts)
            try:
                assert writer is not None
                await writer.schedule(topic, {}, delay=60, job_id=job_id)
            except ShardHomeConflict as exc:
                refused.append(exc)
                return True
            written.add(job_id)
            return False

        assert await wait_for(stopped, timeout_s=30, interval_s=0.1)
        assert refused[0].shard == SHARD and refused[0].servers == names
        assert all(name in str(refused[0]) for name in names)
        assert isinstance(refused[0], StoreUnavailable)
        assert await jobs_on(admin, 0, SHARD) == set()  # nothing went to server 0

        # A fresh client refuses the shard rather than answering "no such job".
        async with DelayClient(cluster) as fresh:
            with pytest.raises(ShardHomeConflict):
                await fresh.get(early[0])
            other = ids_in(SHARD + 1, 1, "other")[0]  # the other shards are served
            await fresh.schedule(topic, {}, delay=60, job_id=other)

        shown = await db_homes(cluster)
        print(shown.stdout)
        assert shown.returncode == 1, shown.stderr
        assert f"logical shard {SHARD} has several homes" in shown.stdout
        assert f"(rows: job {len(written)})" in shown.stdout  # what server 1 holds

        # Both hold jobs: refused, nothing changed.
        await write_row(admin, 0, ids_in(SHARD, 1, "stray")[0], topic)
        both = await db_homes(cluster, "--resolve", str(SHARD), "--server", "0")
        assert both.returncode == 1 and "holds jobs on several servers" in both.stderr
        assert await jobs_on(admin, 1, SHARD) == written
        async with (await admin.server_pool(0)).acquire() as conn, conn.cursor() as cur:
            for t in range(TABLES):
                await cur.execute(f"DELETE FROM {admin.shard_tables((SHARD, t))[0]}")

        # Server 0 kept: server 1's jobs are moved there, server 1 serves it no more.
        done = await db_homes(cluster, "--resolve", str(SHARD), "--server", "0")
        print(both.stderr, done.stdout)
        assert done.returncode == 0, done.stderr
        assert f"logical shard {SHARD} lives on {names[0]} alone" in done.stdout
        assert await jobs_on(admin, 0, SHARD) == written
        assert (await db_homes(cluster)).returncode == 0
        async with DelayClient(cluster) as fresh:
            assert set(await fresh.mysql.get_many(sorted(written))) == written

        # The first client serves the shard again, from server 0.
        async def serves_again() -> bool:
            try:
                assert writer is not None
                await writer.schedule(topic, {}, delay=60, job_id=next(attempts))
            except ShardHomeConflict:
                return False
            return True

        assert await wait_for(serves_again, timeout_s=30, interval_s=0.2)
        assert writer.mysql.homes[SHARD] == 0
    finally:
        if writer is not None:
            await writer.close()
        await admin.close()
