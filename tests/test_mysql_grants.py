"""docs/security.md's MySQL grants suffice: the secure local stack creates its users from
the page's statements (cluster/devstack/mysql_grants.py), the table-level grants are
given for a freshly migrated database, and then

- a client as ``delayq_producer`` schedules, gets a job with its history (as
  ``GET /v1/jobs/{id}?history=true`` reads it), cancels and reschedules;
- a service as ``shop`` schedules inside its own transaction (``schedule_in``);
- a node as ``delayq_node`` fires the jobs;
- and the producer may not do what the page does not grant (delete a job row).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import aiomysql
import pymysql
import pytest
from aiokafka.admin import NewTopic

from actors.node import Node
from cluster import DelayClient
from cluster.client.job_history import history_of
from cluster.connections.kafka_conn import make_admin, start_client
from cluster.devstack import kafka, mariadb, mysql_grants, stack
from cluster.devstack import secure as secure_stack
from cluster.devstack.databases import create_cluster_database, drop_cluster_database
from cluster.devstack.service import Service
from cluster.settings.config import Settings
from cluster.store.mysql_store import MySQLStore
from cluster.store.sql import mysql_connect_args
from tests.conftest import Collector

pytestmark = pytest.mark.once

FIRE_WITHIN_S = 60.0


def as_mysql_user(settings: Settings, user: str) -> Settings:
    """settings with the secure stack's MySQL user `user` instead of the stack's own."""
    keys = secure_stack.load(stack.stack_root(secure=True))
    own = f"{mysql_grants.ADMIN_USER}:{keys.password('mysql_admin')}@"
    assert own in settings.mysql_url
    other = f"{user}:{keys.password(mysql_grants.USERS[user])}@"
    return settings.replace(mysql_url=settings.mysql_url.replace(own, other, 1))


def secure_mysql() -> Service:
    return next(svc for svc in stack.services(secure=True) if svc.name == "mysql")


@pytest.fixture
async def granted(secure_env: dict[str, str]) -> AsyncIterator[Settings]:
    """The secure stack's settings with a new migrated database, on which the page's
    table-level grants were given."""
    base = Settings.from_env(secure_env).replace(
        key_prefix=f"g{uuid.uuid4().hex[:10]}", startup_timeout_s=30.0
    )
    if base.kafka_security_protocol != "SASL_SSL":
        pytest.skip("the secure stack's Kafka has no SASL users (`--kafka tansu`)")
    database = f"delayq_{base.key_prefix}"
    settings = await create_cluster_database(base, database)
    mariadb.grant_documented_tables(secure_mysql(), database, base.mysql_tables)
    yield settings
    await drop_cluster_database(settings)


async def new_topic(admin: Settings) -> str:
    name = f"test.grants.{uuid.uuid4().hex[:10]}"
    client = make_admin(admin)
    try:
        await start_client(client, admin)
        await client.create_topics([NewTopic(name, 3, 1)])
    finally:
        await client.close()
    return name


async def test_the_documented_grants_suffice(granted: Settings) -> None:
    keys = secure_stack.load(stack.stack_root(secure=True))
    admin = granted.replace(
        kafka_sasl_username=kafka.ADMIN_USER,
        kafka_sasl_password=keys.password(kafka.USERS[kafka.ADMIN_USER]),
    )
    topic = await new_topic(admin)
    producer = as_mysql_user(granted, "delayq_producer")
    shop = as_mysql_user(granted, "shop")
    collector = Collector(admin, topic)
    await collector.start()
    node = Node(as_mysql_user(granted, "delayq_node"))
    try:
        async with DelayClient(producer) as client:
            kept = await client.schedule(topic, {"n": 1}, delay=1.0)
            dropped = await client.schedule(topic, {"n": 2}, delay=60.0)
            moved = await client.schedule(topic, {"n": 3}, delay=60.0)
            record = await client.get(kept)
            assert record is not None
            history = await history_of(client.mysql, record)  # ?history=true
            assert [entry["attempt"] for entry in history] == [0]
            assert await client.cancel(dropped)
            assert await client.reschedule(moved, delay=0.5)
            conn = await aiomysql.connect(charset="utf8mb4", **mysql_connect_args(shop))
            try:
                await conn.begin()
                inside = await client.schedule_in(conn, topic, {"n": 4}, delay=0.5)
                await conn.commit()
            finally:
                conn.close()
            await node.start()
            records = await collector.until(3, timeout_s=FIRE_WITHIN_S)
            assert sorted(str(r["job_id"]) for r in records) == sorted([kept, moved, inside])
            cancelled = await client.get(dropped)
            assert cancelled is not None
            assert len(await history_of(client.mysql, cancelled)) >= 2
    finally:
        await node.stop()
        await collector.stop()


async def test_the_producer_may_not_delete_jobs(granted: Settings) -> None:
    producer = as_mysql_user(granted, "delayq_producer")
    database = MySQLStore(granted, "test").database
    conn = await aiomysql.connect(**mysql_connect_args(producer))
    try:
        async with conn.cursor() as cur:
            with pytest.raises(pymysql.err.OperationalError, match="1142"):
                await cur.execute(f"DELETE FROM `{database}`.`job_0000`")
    finally:
        conn.close()
