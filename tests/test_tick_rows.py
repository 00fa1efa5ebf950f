"""A recurring tick's job row lives in its schedule's logical shard; `delayq db migrate`
moves the rows a cluster made before that into place (cluster/store/tick_rows.py)."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator

import pytest

from cluster import DelayClient
from cluster.devstack.databases import create_cluster_database, drop_cluster_database
from cluster.model.contract import JobStatus
from cluster.model.keys import shard_of
from cluster.model.tick_ids import tick_job_id
from cluster.settings.config import Settings
from cluster.store.mysql_store import MySQLStore
from tests.mysql_tools import on_shard

# Against the single Redis only: it makes databases of its own.
pytestmark = pytest.mark.once


@pytest.fixture
async def four_shards(redis_settings: Settings) -> AsyncIterator[Settings]:
    """A cluster with four logical shards on mysql_url's server alone."""
    base = redis_settings.replace(
        mysql_databases=4, mysql_tables=4, mysql_servers="", mysql_shard_map=""
    )
    settings = await create_cluster_database(base, f"delayq_{base.key_prefix}")
    yield settings
    await drop_cluster_database(settings)


def _old_database(job_id: str) -> int:
    """Where a tick's row was before: the logical shard of its own id."""
    return (zlib.crc32(job_id.encode()) >> 8) % 4


async def test_migrate_moves_older_tick_rows_to_their_schedule_shard(
    four_shards: Settings,
) -> None:
    store = MySQLStore(four_shards, "test")
    await store.open()
    try:
        # A tick whose id and schedule hash to different logical shards.
        job_id = next(
            tick_job_id(f"nightly-{n}", 1, 1_000)
            for n in range(100)
            if _old_database(tick_job_id(f"nightly-{n}", 1, 1_000))
            != shard_of(tick_job_id(f"nightly-{n}", 1, 1_000), 4, 4)[0]
        )
        new = shard_of(job_id, 4, 4)
        old = (_old_database(job_id), new[1])
        old_jobs, old_history = store.shard_tables(old)
        await on_shard(
            store,
            old,
            f"INSERT INTO {old_jobs} (job_id, topic, action_time, payload, slot)"
            " VALUES (%s, 't', '2030-01-01', '{}', 3)",
            (job_id,),
        )
        await on_shard(
            store,
            old,
            f"INSERT INTO {old_history} (job_id, status, node, slot, at, note)"
            " VALUES (%s, 0, 'n', 3, NOW(3), 'created')",
            (job_id,),
        )
        assert await store.get(job_id) is None  # looked for where it lives now

        await store.migrate()

        record = await store.get(job_id)
        assert record is not None and record.status == JobStatus.PENDING
        assert [entry["note"] for entry in await store.history(job_id)] == ["created"]
        rows = await on_shard(
            store, old, f"SELECT COUNT(*) FROM {old_jobs} WHERE job_id = %s", (job_id,)
        )
        assert rows[0][0] == 0
        await store.migrate()  # again: nothing to move, nothing lost
        assert await store.get(job_id) is not None
    finally:
        await store.close()


async def test_a_schedule_and_its_ticks_share_a_logical_shard(four_shards: Settings) -> None:
    async with DelayClient(four_shards) as client:
        for n in range(20):
            name = f"every-{n}"
            assert shard_of(tick_job_id(name, 3, 123), 4, 4)[0] == shard_of(name, 4, 4)[0]
        assert client.mysql.settings.mysql_databases == 4
