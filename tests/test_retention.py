"""Retention (cluster/retention.py, actors/retention.py, `delayq db prune`): exactly the
old fired and cancelled jobs and their history go; pending, retrying, dead and young
ones stay, whatever asks: a node for its own slots, or the command for all."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator

import pytest

from actors.ownership import HeldSlots
from actors.retention import Retention
from cluster import DelayClient, Job
from cluster.config import Settings
from cluster.contract import JobStatus
from cluster.keys import slot_of
from cluster.mysql_store import MySQLStore
from cluster.retention import prune
from cluster.rows import Outcome
from devstack.nodes import settings_env

WEEK_S = 7 * 86400
# Which jobs the test makes: (kind, status it ends in, old?).
KINDS = {
    "fired-old": (JobStatus.FIRED, True),
    "cancelled-old": (JobStatus.CANCELLED, True),
    "fired-young": (JobStatus.FIRED, False),
    "cancelled-young": (JobStatus.CANCELLED, False),
    "pending-old": (JobStatus.PENDING, True),
    "retrying-old": (JobStatus.FIRING, True),
    "dead-old": (JobStatus.DEAD, True),
}
PER_KIND = 12


@pytest.fixture
async def mysql(settings: Settings) -> AsyncIterator[MySQLStore]:
    store = MySQLStore(settings, "test")
    await store.open()
    yield store
    await store.close()


async def make_jobs(client: DelayClient, mysql: MySQLStore, topic: str) -> dict[str, list[str]]:
    """PER_KIND jobs of each kind, the old ones last changed 8 days ago; each has history."""
    ids = {kind: [f"{kind}-{i}" for i in range(PER_KIND)] for kind in KINDS}
    await client.schedule_many(
        [
            Job(topic, {"i": 1}, delay=3600, job_id=job_id)
            for group in ids.values()
            for job_id in group
        ]
    )
    now_ms = int(time.time() * 1000)
    outcomes = []
    for kind, (status, _) in KINDS.items():
        for job_id in ids[kind]:
            if status == JobStatus.CANCELLED:
                assert await client.cancel(job_id)
            elif status != JobStatus.PENDING:
                slot = slot_of(job_id, client.settings.slots)
                outcomes.append(Outcome(job_id, JobStatus.FIRING, 1, now_ms, "first try", slot))
                if status != JobStatus.FIRING:
                    outcomes.append(Outcome(job_id, status, 2, now_ms, "", slot))
    await mysql.record_outcomes(outcomes)
    old = [job_id for kind, (_, is_old) in KINDS.items() if is_old for job_id in ids[kind]]
    for job_id in old:
        jobs, _ = mysql.tables_of(job_id)
        async with mysql.pool.acquire() as conn, conn.cursor() as cur:
            await cur.execute(
                f"UPDATE {jobs} SET gmt_modified = NOW(3) - INTERVAL 8 DAY WHERE job_id = %s",
                (job_id,),
            )
    return ids


async def present(mysql: MySQLStore, ids: list[str]) -> set[str]:
    return set((await mysql.get_many(ids)).keys())


async def history_rows(mysql: MySQLStore, ids: list[str]) -> int:
    return sum([len(await mysql.history(job_id)) for job_id in ids])


async def test_prune_deletes_exactly_old_fired_and_cancelled_jobs_and_their_history(
    client: DelayClient, mysql: MySQLStore, topic: str
) -> None:
    ids = await make_jobs(client, mysql, topic)
    every = [job_id for group in ids.values() for job_id in group]
    doomed = ids["fired-old"] + ids["cancelled-old"]
    doomed_history = await history_rows(mysql, doomed)
    assert doomed_history >= len(doomed)  # each has at least one history row
    kept_history = await history_rows(mysql, [j for j in every if j not in doomed])

    counted = await prune(mysql, WEEK_S, batch=5, dry_run=True)
    assert (counted.jobs, counted.history) == (len(doomed), doomed_history)
    assert await present(mysql, every) == set(every)  # a dry run deletes nothing

    pruned = await prune(mysql, WEEK_S, batch=5)  # several batches per shard
    assert (pruned.jobs, pruned.history) == (len(doomed), doomed_history)
    assert await present(mysql, every) == set(every) - set(doomed)
    assert await history_rows(mysql, doomed) == 0
    assert await history_rows(mysql, [j for j in every if j not in doomed]) == kept_history
    again = await prune(mysql, WEEK_S, batch=5)
    assert (again.jobs, again.history) == (0, 0)


async def test_a_node_prunes_only_the_slots_it_owns(
    settings: Settings, client: DelayClient, mysql: MySQLStore, topic: str
) -> None:
    ids = await make_jobs(client, mysql, topic)
    doomed = ids["fired-old"] + ids["cancelled-old"]
    mine = {slot_of(doomed[0], settings.slots)}
    held = HeldSlots()
    for slot in mine:
        held.hold(slot, 1)
    retention = Retention(settings.replace(retention_days=7.0), mysql, held)
    await retention.prune_owned()
    gone = {j for j in doomed if slot_of(j, settings.slots) in mine}
    assert retention.deleted_jobs_total == len(gone)
    assert await present(mysql, doomed) == set(doomed) - gone
    everything = [job_id for group in ids.values() for job_id in group]
    assert await present(mysql, everything) == set(everything) - gone


def db_prune(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cluster.cli", "db", "prune", *args],
        env={**os.environ, **settings_env(settings)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_db_prune_command(
    settings: Settings, client: DelayClient, mysql: MySQLStore, topic: str
) -> None:
    ids = await make_jobs(client, mysql, topic)
    doomed = ids["fired-old"] + ids["cancelled-old"]
    every = [job_id for group in ids.values() for job_id in group]

    dry = db_prune(settings, "--older-than", "7d", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"would delete {len(doomed)} fired or cancelled job(s)" in dry.stdout
    assert await present(mysql, every) == set(every)

    nine_days = db_prune(settings, "--older-than", "9d")  # the old ones are 8 days old
    assert nine_days.returncode == 0 and "deleted 0 fired" in nine_days.stdout

    done = db_prune(settings, "--older-than", "168h")
    assert done.returncode == 0, done.stderr
    assert f"deleted {len(doomed)} fired or cancelled job(s)" in done.stdout
    assert await present(mysql, every) == set(every) - set(doomed)


@pytest.mark.parametrize("age", ["7x", "d", "-1d", "0h", "seven", "nand"])
def test_db_prune_refuses_a_bad_age(settings: Settings, age: str) -> None:
    refused = db_prune(settings, f"--older-than={age}")
    assert refused.returncode == 2
    assert "not an age" in refused.stderr or "more than 0" in refused.stderr


def test_db_prune_needs_an_age(settings: Settings) -> None:
    refused = db_prune(settings)
    assert refused.returncode == 2 and "--older-than AGE is required" in refused.stderr
