"""The store on three MySQL servers, one of them reached through a forwarder that the
tests cut (as if that server were down): where shards live, what each call answers
when one server does not, a batch over several servers, schedule_in on the wrong
server, migrations and `cluster status` with a server down (docs/cluster.md)."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import aiomysql
import pytest

from cluster import DelayClient, Job
from cluster.devstack import stack
from cluster.devstack.databases import create_cluster_database, drop_cluster_database
from cluster.errors import ConfigError, ScheduleIncomplete, StoreMismatch, StoreUnavailable
from cluster.observe.mysql_layout import read_layout, render_layout
from cluster.settings.config import Settings
from cluster.store.mysql_store import MySQLStore
from cluster.store.servers import initial_placement, server_specs
from cluster.store.sql import mysql_connect_args
from tests.conftest import SECURE_RUN
from tests.forwarder import Forwarder, free_port
from tests.mysql_tools import job_server_args

# Against the single Redis only: it makes servers and databases of its own.
pytestmark = pytest.mark.once

COUNT_VARIABLE = "DELAYQ_SERVICES_MYSQL_SERVERS"


@pytest.fixture(scope="module")
def servers_env(stack_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """The plain local stack with three MariaDB servers: its `services env` settings."""
    if os.environ.get("DELAYQ_TEST_EXTERNAL") == "1" or SECURE_RUN:
        pytest.skip("the plain local stack is not started here")
    saved = os.environ.get(COUNT_VARIABLE)
    os.environ[COUNT_VARIABLE] = "3"
    try:
        stack.up()
        yield stack.stack_env()
    finally:
        if saved is None:
            os.environ.pop(COUNT_VARIABLE, None)
        else:
            os.environ[COUNT_VARIABLE] = saved


@pytest.fixture
async def cut_server(servers_env: dict[str, str]) -> AsyncIterator[Forwarder]:
    """A forwarder to the third server (open)."""
    target = int(servers_env["DELAYQ_MYSQL_SERVERS"].split()[1].rsplit(":", 1)[1].split("/")[0])
    forward = Forwarder(free_port(), target)
    await forward.open()
    yield forward
    await forward.cut()


@pytest.fixture
async def spread(
    redis_settings: Settings, servers_env: dict[str, str], cut_server: Forwarder
) -> AsyncIterator[Settings]:
    """A cluster with six logical shards, two on each server; server 2 through the
    forwarder."""
    first = servers_env["DELAYQ_MYSQL_SERVERS"].split()[0]
    third = f"mysql://delayq:delayq@127.0.0.1:{cut_server.listen_port}/delayq"
    base = redis_settings.replace(
        mysql_url=servers_env["DELAYQ_MYSQL_URL"],
        mysql_servers=f"{first} {third}",
        mysql_databases=6,
        mysql_shard_map="",
    )
    settings = await create_cluster_database(base, f"delayq_{base.key_prefix}")
    yield settings
    await cut_server.open()  # back, to drop its database too
    await drop_cluster_database(settings)


def test_placement_and_server_settings() -> None:
    settings = Settings(mysql_databases=6, mysql_servers="mysql://u:p@h1:3306 mysql://u:p@h2/")
    assert initial_placement(settings, 3) == {0: 0, 1: 0, 2: 1, 3: 1, 4: 2, 5: 2}
    assert [s.name for s in server_specs(settings)] == [
        "127.0.0.1:3306",
        "h1:3306",
        "h2:3306",
    ]
    assert server_specs(settings)[1].url == "mysql://u:p@h1:3306/delayq"
    mapped = settings.replace(mysql_shard_map="0-4:1 5:0")
    assert initial_placement(mapped, 3) == {0: 1, 1: 1, 2: 1, 3: 1, 4: 1, 5: 0}
    for bad, message in [
        ("0-4:1", r"leaves out shard\(s\) \[5\]"),
        ("0-5:3", "names server 3"),
        ("0-5:1 2:0", "placed twice"),
        ("0-x:1", "is not FIRST-LAST:SERVER"),
    ]:
        with pytest.raises(ConfigError, match=message):
            initial_placement(settings.replace(mysql_shard_map=bad), 3)
    with pytest.raises(ConfigError, match="mysql_databases >= 2"):
        server_specs(Settings(mysql_servers="mysql://u:p@h1/delayq"))
    with pytest.raises(ConfigError, match="names database 'other'"):
        server_specs(settings.replace(mysql_servers="mysql://u:p@h1/other"))
    with pytest.raises(ConfigError, match="name a server twice"):
        server_specs(settings.replace(mysql_servers="mysql://u:p@127.0.0.1:3306/delayq"))


async def test_each_server_serves_its_shards_and_a_call_needs_only_its_own(
    spread: Settings, cut_server: Forwarder
) -> None:
    async with DelayClient(spread) as client:
        assert client.mysql.homes == {0: 0, 1: 0, 2: 1, 3: 1, 4: 2, 5: 2}
        ids = [f"j-{n}-{uuid.uuid4().hex[:6]}" for n in range(60)]
        await client.schedule_many([Job("t", n, delay=600, job_id=i) for n, i in enumerate(ids)])
        on_cut = [i for i in ids if client.mysql.homes[client.mysql.shard_of(i)[0]] == 2]
        others = [i for i in ids if i not in on_cut]
        assert on_cut and others
        rows = await client.mysql.get_many(ids)
        assert set(rows) == set(ids)  # read from all three servers

        await cut_server.cut()
        # The other servers' jobs: every call works.
        assert (await client.get(others[0])) is not None
        assert await client.cancel(others[1])
        # The cut server's: StoreUnavailable, nothing changed anywhere.
        with pytest.raises(StoreUnavailable):
            await client.get(on_cut[0])
        with pytest.raises(StoreUnavailable):
            await client.cancel(on_cut[0])
        # A batch over all servers: the two answering commit, and the answer says so.
        batch = [Job("t", n, delay=600, job_id=f"b-{n}-{uuid.uuid4().hex[:6]}") for n in range(90)]
        with pytest.raises(ScheduleIncomplete) as raised:
            await client.schedule_many(batch)
        answer = raised.value
        batch_ids = [str(job.job_id) for job in batch]
        assert sorted(answer.scheduled + answer.not_scheduled + answer.unknown) == sorted(batch_ids)
        assert answer.unknown == [] and answer.job_ids == answer.not_scheduled
        homes = client.mysql.homes
        assert sorted(answer.not_scheduled) == sorted(
            i for i in batch_ids if homes.get(client.mysql.shard_of(i)[0], 2) == 2
        )
        assert set(await client.mysql.get_many(answer.scheduled)) == set(answer.scheduled)

        await cut_server.open()
        # Back: its jobs answer again, and the batch again schedules the rest.
        assert (await client.get(on_cut[0])) is not None
        assert await client.schedule_many(batch) == batch_ids
        assert set(await client.mysql.get_many(batch_ids)) == set(batch_ids)
        assert set(await client.mysql.get_many(answer.not_scheduled)) == set(answer.not_scheduled)


async def test_schedule_in_needs_the_server_of_the_jobs_shard(spread: Settings) -> None:
    async with DelayClient(spread) as client:
        job_id = next(
            f"tx-{n}" for n in range(100) if client.mysql.shard_of(f"tx-{n}")[0] in (2, 3)
        )
        assert await client.server_of(job_id) == client.mysql.servers[1].name
        wrong = await aiomysql.connect(charset="utf8mb4", **mysql_connect_args(spread))
        try:
            await wrong.begin()
            with pytest.raises(StoreMismatch, match="belongs to logical shard"):
                await client.schedule_in(wrong, "t", {}, delay=60, job_id=job_id)
            await wrong.rollback()
        finally:
            wrong.close()
        right = await aiomysql.connect(
            charset="utf8mb4", **await job_server_args(client.mysql, job_id)
        )
        try:
            await right.begin()
            await client.schedule_in(right, "t", {}, delay=60, job_id=job_id)
            await right.commit()
        finally:
            right.close()
        assert (await client.get(job_id)) is not None


async def test_migrate_and_status_with_a_server_down(
    spread: Settings, cut_server: Forwarder
) -> None:
    await cut_server.cut()
    store = MySQLStore(spread, "test")
    await store.open(check_schema=False)
    try:
        report = await store.migrate()
    finally:
        await store.close()
    assert len(report.servers_down) == 1 and f":{cut_server.listen_port}" in report.servers_down[0]
    assert report.shards == 2 * 2 * spread.mysql_tables  # two servers' two databases
    layout = await read_layout(spread)
    shown = render_layout(layout, 6)
    assert "server 0 127.0.0.1:" in shown and "shards 0-1" in shown and "shards 2-3" in shown
    assert "NOT ANSWERING" in shown
    assert "not served by a server answering: 4-5" in shown
    await cut_server.open()
    shown = render_layout(await read_layout(spread), 6)
    assert "NOT ANSWERING" not in shown and "shards 4-5" in shown
