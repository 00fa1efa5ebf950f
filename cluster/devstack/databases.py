"""Throw-away cluster databases for tests and benchmarks: each run gets a MySQL database
(and shard databases) of its own, created, migrated, and dropped afterwards.

Development tooling only: the runtime never imports devstack.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from cluster.connections.redis_conn import open_redis
from cluster.settings.config import Settings
from cluster.store.connect import connect
from cluster.store.mysql_store import MySQLStore
from cluster.store.sql import mysql_connect_args


async def create_cluster_database(
    settings: Settings, database: str, *, migrate: bool = True
) -> Settings:
    """Create a new database for one cluster, migrate it (unless migrate=False), and
    return settings that point at it."""
    admin = {**mysql_connect_args(settings), "db": None}
    conn = await connect(**admin)
    try:
        async with conn.cursor() as cur:
            await cur.execute(f"CREATE DATABASE `{database}`")
    finally:
        conn.close()
    created = settings.replace(mysql_url=settings.mysql_url.rsplit("/", 1)[0] + f"/{database}")
    if migrate:
        store = MySQLStore(created, "setup")
        await store.open(check_schema=False)
        try:
            await store.migrate()
        finally:
            await store.close()
    return created


async def drop_cluster_database(settings: Settings) -> None:
    """Drop the database settings.mysql_url names and every shard database."""
    store = MySQLStore(settings, "teardown")
    # With several shard databases the named one holds only delayq_meta and the migrations.
    names = {store.database} | {store.database_name(d) for d in range(settings.mysql_databases)}
    conn = await connect(**{**mysql_connect_args(settings), "db": None})
    try:
        async with conn.cursor() as cur:
            for db in sorted(names):
                await cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
    finally:
        conn.close()


async def forget_cluster(settings: Settings) -> None:
    """Delete a throw-away cluster: its Redis keys (each starts with its slots' tag,
    "{<key_prefix>:") and its databases."""
    redis = await open_redis(settings)
    try:
        async for key in redis.scan_iter(match=f"{{{settings.key_prefix}:*"):
            await redis.unlink(key)
    finally:
        await redis.aclose()
    await drop_cluster_database(settings)


@contextlib.asynccontextmanager
async def throwaway_cluster(key_prefix: str) -> AsyncIterator[Settings]:
    """Settings from the environment for a new cluster with this key prefix and a
    migrated database "delayq_<key_prefix>" of its own, forgotten after the block."""
    settings = await create_cluster_database(
        Settings.from_env().replace(key_prefix=key_prefix), f"delayq_{key_prefix}"
    )
    try:
        yield settings
    finally:
        await forget_cluster(settings)
