"""delayq's MySQL connections on a three-node MariaDB Galera cluster (the local stack's,
`delayq services up --galera`, started here through cluster/devstack/galera.py):
read-your-writes across nodes with wsrep_sync_wait=1, a pool that fails over to another
node when the one it uses is killed -9 (and the node rejoining), and what the loser of a
certification conflict gets. docs/galera.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pymysql
import pytest

from cluster.devstack import galera
from cluster.devstack.service import HOST, MYSQL_PASSWORD, MYSQL_USER
from cluster.store import connect
from cluster.store.sql import parse_mysql_url

# One worker runs both Galera modules: they share the stack's Galera cluster.
pytestmark = [pytest.mark.faults, pytest.mark.xdist_group("galera")]

DEADLOCK = 1213  # ER_LOCK_DEADLOCK: what Galera answers a transaction that lost certification


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """The Galera cluster of the local stack, every node up; its URL (wsrep_sync_wait=1)."""
    galera.up()
    yield galera.url()


@pytest.fixture
async def database(cluster: str) -> AsyncIterator[str]:
    """A database of this test's own on the cluster, with a table `t (id, v)`."""
    name = f"delayq_g{uuid.uuid4().hex[:10]}"
    await run_on_cluster(
        cluster,
        f"CREATE DATABASE `{name}`",
        f"CREATE TABLE `{name}`.t (id BIGINT NOT NULL PRIMARY KEY, v INT NOT NULL)",
    )
    yield name
    # A new connection: the test may have killed the node the first one was on.
    await run_on_cluster(cluster, f"DROP DATABASE IF EXISTS `{name}`")


async def run_on_cluster(url: str, *statements: str) -> None:
    conn = await connect.connect(**{**parse_mysql_url(url), "db": None, "autocommit": True})
    try:
        async with conn.cursor() as cur:
            for statement in statements:
                await cur.execute(statement)
    finally:
        conn.close()


def node_url(i: int, database: str) -> str:
    """The URL of node i alone, with wsrep_sync_wait=1."""
    _, port = galera.addresses()[i - 1]
    return f"mysql://{MYSQL_USER}:{MYSQL_PASSWORD}@{HOST}:{port}/{database}?wsrep_sync_wait=1"


async def open_node(i: int, database: str, **extra: Any) -> Any:
    return await connect.connect(**{**parse_mysql_url(node_url(i, database)), **extra})


async def fetch(conn: Any, statement: str) -> list[tuple[Any, ...]]:
    async with conn.cursor() as cur:
        await cur.execute(statement)
        return list(await cur.fetchall())


def node_of_port(port: int) -> int:
    return [p for _, p in galera.addresses()].index(port) + 1


async def test_a_write_on_one_node_is_read_on_another(database: str) -> None:
    """wsrep_sync_wait=1 from the URL: a read on node 2 waits until node 2 has applied
    everything the cluster committed before it, so it sees node 1's write at once."""
    writer = await open_node(1, database, autocommit=True)
    reader = await open_node(2, database, autocommit=True)
    try:
        assert await fetch(reader, "SELECT @@SESSION.wsrep_sync_wait") == [(1,)]
        for k in range(50):
            async with writer.cursor() as cur:
                await cur.execute("INSERT INTO t (id, v) VALUES (%s, %s)", (k, k))
            assert await fetch(reader, f"SELECT v FROM t WHERE id = {k}") == [(k,)]
    finally:
        writer.close()
        reader.close()


async def test_a_pool_fails_over_when_its_node_is_killed(cluster: str, database: str) -> None:
    """A pool over the three addresses; the node it writes to is killed -9 mid-run. The
    next writes go to another node; every write that returned is on the survivors, and
    on the killed node once it has rejoined (IST)."""
    args = {**parse_mysql_url(cluster), "db": database}
    assert len(args["addresses"]) == 3
    pool = await connect.create_pool(minsize=1, maxsize=2, autocommit=True, **args)
    committed: list[int] = []
    kill_at: list[float] = []
    resumed_at: list[float] = []
    failures: list[str] = []
    hundred_written = asyncio.Event()
    victim = 0

    async def writer(count: int) -> None:
        for k in range(count):
            while True:
                try:
                    async with pool.acquire() as conn, conn.cursor() as cur:
                        # Idempotent: a write whose answer was lost is simply redone.
                        await cur.execute(
                            "INSERT INTO t (id, v) VALUES (%s, 1) ON DUPLICATE KEY UPDATE v = 1",
                            (k,),
                        )
                except (pymysql.err.OperationalError, pymysql.err.InterfaceError) as exc:
                    failures.append(f"{type(exc).__name__}{exc.args[:1]}")
                    await asyncio.sleep(0.02)
                    continue
                committed.append(k)
                if len(committed) == 100:
                    hundred_written.set()
                if kill_at and not resumed_at:
                    resumed_at.append(time.monotonic())
                break
            await asyncio.sleep(0.005)

    try:
        async with pool.acquire() as conn:
            victim = node_of_port((await fetch(conn, "SELECT @@port"))[0][0])
        task = asyncio.create_task(writer(400))
        await hundred_written.wait()
        pid = galera.node_pid(victim)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        kill_at.append(time.monotonic())
        await asyncio.wait_for(task, 90)
        async with pool.acquire() as conn:
            now_on = node_of_port((await fetch(conn, "SELECT @@port"))[0][0])
            stored = {row[0] for row in await fetch(conn, "SELECT id FROM t")}
    finally:
        pool.close()
        await pool.wait_closed()
    pause = resumed_at[0] - kill_at[0]
    print(
        f"\n[galera-failover] killed galera-{victim}; writes resumed on galera-{now_on} "
        f"{pause:.2f} s later; {len(failures)} failed attempts: {sorted(set(failures))}"
    )
    assert now_on != victim
    assert set(committed) == set(range(400)) == stored
    started = time.monotonic()
    await asyncio.to_thread(galera.start_node, victim)
    print(f"[galera-failover] galera-{victim} rejoined in {time.monotonic() - started:.1f} s")
    rejoined = await open_node(victim, database, autocommit=True)
    try:
        assert {row[0] for row in await fetch(rejoined, "SELECT id FROM t")} == stored
    finally:
        rejoined.close()


async def test_the_loser_of_a_certification_conflict_gets_a_deadlock(database: str) -> None:
    """Two transactions on two nodes change the same row. Neither waits for the other's
    lock (they hold them on different nodes): the first to commit wins, and the other is
    rolled back whole with error 1213, a definite "not done" - its other row is nowhere."""
    setup = await open_node(1, database, autocommit=True)
    first = await open_node(1, database, autocommit=False)
    second = await open_node(2, database, autocommit=False)
    try:
        async with setup.cursor() as cur:
            await cur.execute("INSERT INTO t (id, v) VALUES (1, 0)")
        async with first.cursor() as cur:
            await cur.execute("UPDATE t SET v = v + 1 WHERE id = 1")
        async with second.cursor() as cur:
            await cur.execute("INSERT INTO t (id, v) VALUES (2, 20)")
            await cur.execute("UPDATE t SET v = v + 10 WHERE id = 1")
        await first.commit()
        with pytest.raises(pymysql.err.OperationalError) as lost:
            await second.commit()
        print(f"\n[galera-conflict] the loser's commit: {lost.value.args}")
        assert lost.value.args[0] == DEADLOCK
        for i in (1, 2, 3):
            node = await open_node(i, database, autocommit=True)
            try:
                assert await fetch(node, "SELECT id, v FROM t ORDER BY id") == [(1, 1)]
            finally:
                node.close()
        # The loser's connection is usable again: a retry of the whole transaction works.
        with contextlib.suppress(pymysql.err.Error):
            await second.rollback()
        async with second.cursor() as cur:
            await cur.execute("INSERT INTO t (id, v) VALUES (2, 20)")
            await cur.execute("UPDATE t SET v = v + 10 WHERE id = 1")
        await second.commit()
        assert await fetch(setup, "SELECT id, v FROM t ORDER BY id") == [(1, 11), (2, 20)]
    finally:
        for conn in (setup, first, second):
            conn.close()
