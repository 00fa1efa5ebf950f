"""Throw-away cluster databases for tests and benchmarks: each run gets a MySQL database
(and shard databases) of its own, created, migrated, and dropped afterwards.

Development tooling only: the runtime never imports devstack.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import AsyncIterator

import pymysql

from cluster.connections.redis_conn import open_redis
from cluster.settings.config import Settings
from cluster.store.connect import connect
from cluster.store.mysql_store import MySQLStore
from cluster.store.servers import server_specs, with_database
from cluster.store.sql import mysql_connect_args


async def create_cluster_database(
    settings: Settings, database: str, *, migrate: bool = True
) -> Settings:
    """Create a new database for one cluster on each of its MySQL servers, migrate it
    (unless migrate=False), and return settings that point at it."""
    created = with_database(settings, database)
    for server in server_specs(created):
        conn = await connect(**{**mysql_connect_args(created, server.url), "db": None})
        try:
            async with conn.cursor() as cur:
                await cur.execute(f"CREATE DATABASE `{database}`")
        finally:
            conn.close()
    if migrate:
        store = MySQLStore(created, "setup")
        await store.open(check_schema=False)
        try:
            await store.migrate()
        finally:
            await store.close()
    return created


async def drop_cluster_database(settings: Settings) -> None:
    """Drop, on every server, the database settings.mysql_url names and every shard
    database (and the tables a shard move left behind)."""
    store = MySQLStore(settings, "teardown")
    # With several shard databases the named one holds only delayq_meta and the migrations.
    names = {store.database}
    for d in range(settings.mysql_databases):
        names |= {store.database_name(d), f"{store.database_name(d)}_moved"}
    for server in store.servers:
        conn = await connect(**{**mysql_connect_args(settings, server.url), "db": None})
        try:
            async with conn.cursor() as cur:
                with warnings.catch_warnings():
                    # "IF EXISTS" on a database that is not there is a MySQL warning.
                    warnings.simplefilter("ignore", pymysql.Warning)
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
