"""SQL of tests on a store's shards, whichever MySQL server each lives on
(DELAYQ_TEST_MYSQL_SERVERS=3 puts them on three)."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Sequence
from typing import Any
from urllib.parse import urlparse

from cluster.settings.config import Settings
from cluster.store.mysql_store import MySQLStore
from cluster.store.servers import server_specs
from cluster.store.sql import mysql_connect_args
from tests.forwarder import Forwarder, free_port

Shard = tuple[int, int]


async def on_shard(
    store: MySQLStore, shard: Shard | int, statement: str, params: Any = None
) -> list[tuple[Any, ...]]:
    """Run one statement on the server of a shard (or logical shard); its rows."""
    pool = await store.pool_for(shard if isinstance(shard, int) else shard[0])
    async with pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute(statement, params)
        return list(await cur.fetchall())


async def on_job(
    store: MySQLStore, job_id: str, statement: str, params: Any = None
) -> list[tuple[Any, ...]]:
    """Run one statement on the server holding job_id's row; {jobs}, {history} and
    {outbox} in it are that job's tables."""
    shard = store.shard_of(job_id)
    jobs, history = store.shard_tables(shard)
    text = (
        statement.replace("{jobs}", jobs)
        .replace("{history}", history)
        .replace("{outbox}", store.outbox_table(shard))
    )
    return await on_shard(store, shard, text, params)


async def count_rows(store: MySQLStore, where: str = "1") -> int:
    """Job rows matching `where`, in every shard of every server."""
    total = 0
    for shard in store.all_shards():
        table, _ = store.shard_tables(shard)
        rows = await on_shard(store, shard, f"SELECT COUNT(*) FROM {table} WHERE {where}")
        total += int(rows[0][0])
    return total


async def count_outbox(store: MySQLStore) -> int:
    """Outbox rows (schedule_in's), in every shard of every server."""
    total = 0
    for shard in store.all_shards():
        rows = await on_shard(store, shard, f"SELECT COUNT(*) FROM {store.outbox_table(shard)}")
        total += int(rows[0][0])
    return total


async def job_server_args(store: MySQLStore, job_id: str) -> dict[str, Any]:
    """aiomysql.connect() arguments of the server holding job_id's row (schedule_in)."""
    await store.pool_for(store.shard_of(job_id)[0])
    return mysql_connect_args(store.settings, store.server_of(job_id).url)


def mysql_ports(settings: Settings) -> list[int]:
    """The port of every MySQL server of settings, server 0 (mysql_url's) first."""
    return [int(spec.name.rsplit(":", 1)[1]) for spec in server_specs(settings)]


def through_ports(settings: Settings, ports: Sequence[int]) -> Settings:
    """settings that reach MySQL server i at ports[i] of the same host (a forwarder's)."""
    urls = []
    for spec, port in zip(server_specs(settings), ports, strict=True):
        url = urlparse(spec.url)
        urls.append(url._replace(netloc=f"{url.netloc.rsplit(':', 1)[0]}:{port}").geturl())
    return settings.replace(mysql_url=urls[0], mysql_servers=" ".join(urls[1:]))


class MySQLLinks:
    """A Forwarder in front of every MySQL server: `settings` reach them through it, and
    cut() makes all of them unreachable at once (open() undoes it)."""

    def __init__(self, settings: Settings) -> None:
        real = mysql_ports(settings)
        self.forwarders = [Forwarder(free_port(), port) for port in real]
        self.settings = through_ports(settings, [f.listen_port for f in self.forwarders])

    async def open(self) -> None:
        for forward in self.forwarders:
            await forward.open()

    async def cut(self) -> None:
        for forward in self.forwarders:
            await forward.cut()


@contextlib.asynccontextmanager
async def mysql_links(settings: Settings) -> AsyncIterator[MySQLLinks]:
    """MySQLLinks, open for the block."""
    links = MySQLLinks(settings)
    await links.open()
    try:
        yield links
    finally:
        await links.cut()


def ids_on_server(store: MySQLStore, server: int, prefix: str, count: int) -> list[str]:
    """`count` ids prefix0, prefix1, … skipping those whose row another server holds:
    jobs a caller's transaction on that server can schedule_in (all of them with one
    server)."""
    found: list[str] = []
    for n in itertools.count():
        if len(found) == count:
            return found
        job_id = f"{prefix}{n}"
        if store.homes[store.shard_of(job_id)[0]] == server:
            found.append(job_id)
    raise AssertionError("unreachable")


def id_on_server(store: MySQLStore, server: int, job_id: str) -> str:
    """job_id itself when `server` holds its row, else job_id-1, job_id-2, … the first
    that it holds."""
    if store.homes[store.shard_of(job_id)[0]] == server:
        return job_id
    return ids_on_server(store, server, f"{job_id}-", 1)[0]
