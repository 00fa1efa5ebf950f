"""schedule_in(): a job written inside the caller's own MySQL transaction exists if and
only if that transaction commits, and its node picks it up from the outbox at once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiomysql
import pytest

from actors.node import Node
from cluster import DelayClient, JobStatus
from cluster.devstack.nodes import settings_env
from cluster.errors import InvalidJob, StoreMismatch
from cluster.settings.config import Settings
from cluster.store.servers import with_database
from cluster.store.sql import mysql_connect_args
from tests.conftest import MYSQL_SERVERS, Collector, wait_for
from tests.mysql_tools import count_outbox, id_on_server, ids_on_server, job_server_args
from tests.processes import NodeProcess, wait_served


@pytest.fixture
async def conn(settings: Settings) -> AsyncIterator[Any]:
    """The caller's own connection (autocommit off, as aiomysql's default), with an
    orders table of the caller's in delayq's database (the same MySQL server)."""
    connection = await aiomysql.connect(charset="utf8mb4", **mysql_connect_args(settings))
    async with connection.cursor() as cur:
        await cur.execute("CREATE TABLE orders (id INT PRIMARY KEY, state VARCHAR(20))")
    await connection.commit()
    yield connection
    connection.close()


async def outbox_rows(client: DelayClient) -> int:
    return await count_outbox(client.mysql)


def here(client: DelayClient, job_id: str) -> str:
    """job_id, or a variant of it, whose row is on the server of the `conn` fixture
    (server 0, mysql_url's): a transaction schedules jobs of its own server."""
    return id_on_server(client.mysql, 0, job_id)


async def test_a_rolled_back_job_never_exists_and_never_fires(
    settings: Settings, conn: Any, topic: str, collector: Collector, node: Node
) -> None:
    async with DelayClient(settings) as client:
        await conn.begin()
        async with conn.cursor() as cur:
            await cur.execute("INSERT INTO orders VALUES (1, 'new')")
        job_id = await client.schedule_in(
            conn, topic, {"order": 1}, delay=0.2, job_id=here(client, "o-1")
        )
        await conn.rollback()
        await client.schedule(topic, "after", delay=0.5)  # proves the node fires meanwhile
        [record] = await collector.until(1, timeout_s=30)
        assert record["payload"] == "after"
        assert await client.get(job_id) is None
        assert await outbox_rows(client) == 0
        assert len(await collector.quiet_for(1.0)) == 1  # nothing more arrives


async def test_a_committed_job_fires_once_with_its_business_row(
    settings: Settings, conn: Any, topic: str, collector: Collector, node: Node
) -> None:
    async with DelayClient(settings) as client:
        await conn.begin()
        async with conn.cursor() as cur:
            await cur.execute("INSERT INTO orders VALUES (2, 'unpaid')")
            # The caller's session time zone is its own: delayq's times stay UTC.
            await cur.execute("SET time_zone = '+05:00'")
        job_id = await client.schedule_in(
            conn, topic, {"order": 2}, delay=0.3, job_id=here(client, "order-2-close"), biz_id="2"
        )
        assert await client.get(job_id) is None  # not committed yet: invisible
        await conn.commit()
        [record] = await collector.until(1, timeout_s=30)
        assert (record["job_id"], record["payload"], record["biz_id"]) == (
            job_id,
            {"order": 2},
            "2",
        )
        row = await client.get(job_id)
        assert row is not None and abs(row.created_ms - row.due_ms + 300) < 60_000
        async with conn.cursor() as cur:
            await cur.execute("SELECT @@session.time_zone")
            assert (await cur.fetchone())[0] == "+05:00"
        assert len(await collector.quiet_for(1.0)) == 1


async def test_a_thousand_transactional_jobs_due_in_a_second_all_fire(
    settings: Settings, conn: Any, topic: str, collector: Collector, node: Node
) -> None:
    async with DelayClient(settings) as client:
        await conn.begin()
        for i, job_id in enumerate(ids_on_server(client.mysql, 0, "tx-", 1000)):
            await client.schedule_in(conn, topic, i, delay=1.0, job_id=job_id)
        await conn.commit()
        records = await collector.until(1000, timeout_s=60)
        assert sorted(int(r["payload"]) for r in records) == list(range(1000))  # type: ignore[call-overload]
        late = sorted(int(r["fired_ms"]) - int(r["due_ms"]) for r in records)  # type: ignore[call-overload]
        print(f"fired_ms - due_ms: p50 {late[500]} ms, max {late[-1]} ms")

        # The node deletes a page's outbox rows after adding its jobs to Redis, so the
        # last jobs can fire before that DELETE commits.
        async def outbox_empty() -> bool:
            return await outbox_rows(client) == 0

        assert await wait_for(outbox_empty, timeout_s=30)


PRODUCER = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    import aiomysql
    from cluster import DelayClient
    from cluster.settings.config import Settings
    from cluster.store.sql import mysql_connect_args

    async def main():
        settings = Settings.from_env()
        async with DelayClient(settings) as client:
            conn = await aiomysql.connect(charset="utf8mb4", **mysql_connect_args(settings))
            await conn.begin()
            await client.schedule_in(conn, sys.argv[1], {"order": 3}, delay=0.5, job_id=sys.argv[2])
            await conn.commit()
            print("committed", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    asyncio.run(main())
    """
)


async def test_commit_then_kill_the_producer_fires_once(
    settings: Settings, topic: str, collector: Collector, node: Node
) -> None:
    # A job of mysql_url's server, where the producer's connection is.
    async with DelayClient(settings) as client:
        job_id = here(client, "killed-3")
    done = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PRODUCER, topic, job_id,
        env={**os.environ, **settings_env(settings)}, stdout=subprocess.PIPE,
    )  # fmt: skip
    output, _ = await done.communicate()
    assert done.returncode == -signal.SIGKILL and b"committed" in output
    [record] = await collector.until(1, timeout_s=30)
    assert record["job_id"] == job_id
    assert len(await collector.quiet_for(1.0)) == 1


async def test_a_node_killed_during_pick_up_loses_nothing(
    settings: Settings, conn: Any, topic: str, collector: Collector, tmp_path: Path
) -> None:
    """Jobs committed while the only node is being killed -9: the node that takes its
    slots finds their outbox rows and fires each job once. They are due seconds after
    the kill, so the killed node cannot have published any (which would allow a
    duplicate: at least once)."""
    first = NodeProcess(settings, tmp_path, "first")
    await first.wait_ready()
    await wait_served(settings, {"first"})
    async with DelayClient(settings) as client:
        await conn.begin()
        for i, job_id in enumerate(ids_on_server(client.mysql, 0, "k-", 2000)):
            await client.schedule_in(conn, topic, i, delay=5, job_id=job_id)
        await conn.commit()
        first.kill()
        second = NodeProcess(settings, tmp_path, "second")
        try:
            await second.wait_ready()
            records = await collector.until(2000, timeout_s=90)
            assert sorted(int(r["payload"]) for r in records) == list(range(2000))  # type: ignore[call-overload]

            async def outbox_empty() -> bool:
                return await outbox_rows(client) == 0

            # Rows the first node added but did not delete are the second's to delete.
            assert await wait_for(outbox_empty, timeout_s=30)
            assert len(await collector.quiet_for(1.0)) == 2000
        finally:
            second.kill()


async def test_bad_calls_change_nothing(settings: Settings, conn: Any) -> None:
    async with DelayClient(settings) as client:
        await conn.begin()
        with pytest.raises(InvalidJob, match="delay must be >= 0"):
            await client.schedule_in(conn, "t", 1, delay=-1)
        with pytest.raises(InvalidJob, match="not a valid Kafka topic"):
            await client.schedule_in(conn, "a b", 1, delay=1)
        with pytest.raises(InvalidJob, match="end with a space"):
            await client.schedule_in(conn, "t", 1, delay=1, job_id="x ")
        with pytest.raises(InvalidJob, match="expires_after must be more than 0"):
            await client.schedule_in(conn, "t", 1, delay=1, expires_after=0)
        await conn.commit()
        await conn.autocommit(True)
        with pytest.raises(InvalidJob, match="autocommit"):
            await client.schedule_in(conn, "t", 1, delay=1)
        assert await outbox_rows(client) == 0
        other = await aiomysql.connect(
            charset="utf8mb4", **{**mysql_connect_args(settings), "db": "mysql"}
        )
        try:
            await other.begin()
            elsewhere = with_database(settings, "delayq_no_such_db")
            stranger = DelayClient(elsewhere)
            with pytest.raises(StoreMismatch, match="cannot be written through"):
                await stranger.schedule_in(other, "t", 1, delay=1)  # never opened: no pool
        finally:
            other.close()


@pytest.mark.skipif(MYSQL_SERVERS < 2, reason="needs several MySQL servers")
async def test_a_connection_to_another_server_than_the_jobs_is_refused(
    settings: Settings, conn: Any
) -> None:
    """The caller's transaction is on server 0; a job whose row server 1 holds is
    refused there, naming server_of, and written nowhere; on its server it is written."""
    async with DelayClient(settings) as client:
        [job_id] = ids_on_server(client.mysql, 1, "far-", 1)
        assert await client.server_of(job_id) == client.mysql.servers[1].name
        await conn.begin()
        with pytest.raises(StoreMismatch, match=rf"job '{job_id}' belongs to .*server_of"):
            await client.schedule_in(conn, "t", 1, delay=60, job_id=job_id)
        await conn.commit()
        assert await client.get(job_id) is None
        assert await outbox_rows(client) == 0
        args = await job_server_args(client.mysql, job_id)
        right = await aiomysql.connect(charset="utf8mb4", **args)
        try:
            await right.begin()
            await client.schedule_in(right, "t", 1, delay=60, job_id=job_id)
            await right.commit()
        finally:
            right.close()
        record = await client.get(job_id)
        assert record is not None and record.status == JobStatus.PENDING
