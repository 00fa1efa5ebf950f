"""Retention (cluster/store/retention.py, actors/retention.py, `delayq db prune`): exactly the
old fired, cancelled and expired jobs and their history go; pending, retrying, dead and young
ones stay, whatever asks: a node for its own slots, or the command for all."""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator

import pytest

from actors.ownership import HeldSlots
from actors.retention import Retention
from cluster import DelayClient, Job
from cluster.devstack.nodes import settings_env
from cluster.model.contract import JobStatus
from cluster.model.keys import slot_of
from cluster.settings.config import Settings
from cluster.store.mysql_store import MySQLStore
from cluster.store.retention import prune, prune_batches
from cluster.store.rows import Outcome
from tests.forwarder import free_port
from tests.mysql_tools import MySQLLinks, mysql_ports, on_job, through_ports
from tests.unit.test_supervisor import until

WEEK_S = 7 * 86400
# Which jobs the test makes: kind → (status it ends in, old?).
KINDS = {
    "fired-old": (JobStatus.FIRED, True),
    "cancelled-old": (JobStatus.CANCELLED, True),
    "fired-young": (JobStatus.FIRED, False),
    "cancelled-young": (JobStatus.CANCELLED, False),
    "expired-old": (JobStatus.EXPIRED, True),
    "expired-young": (JobStatus.EXPIRED, False),
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
    """PER_KIND jobs of each kind, through the client and the recorder's store call;
    the old ones last changed 8 days ago (by the MySQL clock). Every job but the
    pending ones has history."""
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
        await on_job(
            mysql,
            job_id,
            "UPDATE {jobs} SET gmt_modified = NOW(3) - INTERVAL 8 DAY WHERE job_id = %s",
            (job_id,),
        )
    records = await mysql.get_many([j for group in ids.values() for j in group])
    for kind, (status, _) in KINDS.items():
        assert {records[j].status for j in ids[kind]} == {status}, kind
    return ids


def every_id(ids: dict[str, list[str]]) -> list[str]:
    return [job_id for group in ids.values() for job_id in group]


def doomed_ids(ids: dict[str, list[str]]) -> list[str]:
    return ids["fired-old"] + ids["cancelled-old"] + ids["expired-old"]


async def present(mysql: MySQLStore, ids: list[str]) -> set[str]:
    return set((await mysql.get_many(ids)).keys())


async def history_rows(mysql: MySQLStore, ids: list[str]) -> int:
    return sum([len(await mysql.history(job_id)) for job_id in ids])


async def test_prune_deletes_exactly_old_fired_and_cancelled_jobs_and_their_history(
    client: DelayClient, mysql: MySQLStore, topic: str
) -> None:
    ids = await make_jobs(client, mysql, topic)
    every = every_id(ids)
    doomed = doomed_ids(ids)
    kept = [j for j in every if j not in doomed]
    doomed_history = await history_rows(mysql, doomed)
    assert doomed_history >= len(doomed)  # each has at least one history row
    kept_history = await history_rows(mysql, kept)
    kept_records = await mysql.get_many(kept)

    counted = await prune(mysql, WEEK_S, batch=5, dry_run=True)
    assert (counted.jobs, counted.history) == (len(doomed), doomed_history)
    assert await present(mysql, every) == set(every)  # a dry run deletes nothing
    assert await history_rows(mysql, doomed) == doomed_history

    pruned = await prune(mysql, WEEK_S, batch=5)  # several batches per shard
    assert (pruned.jobs, pruned.history) == (len(doomed), doomed_history)
    assert await present(mysql, every) == set(kept)
    assert await history_rows(mysql, doomed) == 0
    assert await history_rows(mysql, kept) == kept_history
    assert await mysql.get_many(kept) == kept_records  # the rest untouched
    again = await prune(mysql, WEEK_S, batch=5)
    assert (again.jobs, again.history) == (0, 0)


async def test_batches_are_committed_one_by_one_and_stop_with_the_slots(
    client: DelayClient, mysql: MySQLStore, topic: str
) -> None:
    ids = await make_jobs(client, mysql, topic)
    doomed = doomed_ids(ids)
    batches = [done.jobs async for done in prune_batches(mysql, WEEK_S, 3)]
    assert sum(batches) == len(doomed) and max(batches) <= 3
    assert await present(mysql, doomed) == set()

    # slots() is asked before each batch: none left ends the run before any batch.
    asked = 0

    def no_slots() -> frozenset[int]:
        nonlocal asked
        asked += 1
        return frozenset()

    assert [done async for done in prune_batches(mysql, WEEK_S, 3, slots=no_slots)] == []
    assert asked == 1


async def test_prune_only_of_given_slots(
    settings: Settings, client: DelayClient, mysql: MySQLStore, topic: str
) -> None:
    ids = await make_jobs(client, mysql, topic)
    doomed = doomed_ids(ids)
    some = {slot_of(job_id, settings.slots) for job_id in doomed[::3]}
    in_some = {j for j in doomed if slot_of(j, settings.slots) in some}
    assert 0 < len(in_some) < len(doomed)

    counted = await prune(mysql, WEEK_S, batch=4, slots=some, dry_run=True)
    pruned = await prune(mysql, WEEK_S, batch=4, slots=some)
    assert counted.jobs == pruned.jobs == len(in_some)
    assert counted.history == pruned.history
    assert await present(mysql, every_id(ids)) == set(every_id(ids)) - in_some
    assert (await prune(mysql, WEEK_S, batch=4, slots=set())).jobs == 0


@pytest.mark.parametrize("age_s", [0.0, -1.0, math.nan])
async def test_prune_refuses_an_age_that_is_not_more_than_0(
    client: DelayClient, mysql: MySQLStore, topic: str, age_s: float
) -> None:
    ids = await make_jobs(client, mysql, topic)
    for dry_run in (False, True):
        with pytest.raises(ValueError, match="more than 0"):
            await prune(mysql, age_s, batch=10, dry_run=dry_run)
    with pytest.raises(ValueError, match="at least 1"):
        await prune(mysql, WEEK_S, batch=0)
    assert await present(mysql, every_id(ids)) == set(every_id(ids))


@pytest.mark.parametrize("age_s", [math.inf, 1e6 * 365 * 86400])
async def test_an_age_beyond_the_calendar_deletes_nothing(
    client: DelayClient, mysql: MySQLStore, topic: str, age_s: float
) -> None:
    ids = await make_jobs(client, mysql, topic)
    assert (await prune(mysql, age_s, batch=10, dry_run=True)).jobs == 0
    assert (await prune(mysql, age_s, batch=10)).jobs == 0
    assert await present(mysql, every_id(ids)) == set(every_id(ids))


# ----- the node's actor ----------------------------------------------------------------


def held(slots: set[int]) -> HeldSlots:
    ownership = HeldSlots()
    for slot in slots:
        ownership.hold(slot, 1)
    return ownership


async def test_a_node_prunes_only_the_slots_it_owns(
    settings: Settings, client: DelayClient, mysql: MySQLStore, topic: str
) -> None:
    ids = await make_jobs(client, mysql, topic)
    doomed = doomed_ids(ids)
    mine = {slot_of(j, settings.slots) for j in doomed[::4]}
    gone = {j for j in doomed if slot_of(j, settings.slots) in mine}
    assert 0 < len(gone) < len(doomed)
    gone_history = await history_rows(mysql, sorted(gone))
    # Batches of 2: a pass of several batches, each its own step.
    retention = Retention(settings.replace(retention_batch=2), mysql, held(mine))
    await retention.prune_owned()
    assert retention.deleted_jobs_total == len(gone)
    assert retention.deleted_history_total == gone_history
    everything = every_id(ids)
    assert await present(mysql, everything) == set(everything) - gone
    await retention.prune_owned()  # nothing left of its slots
    assert retention.deleted_jobs_total == len(gone)

    nothing_owned = Retention(settings, mysql, HeldSlots())
    await nothing_owned.prune_owned()
    assert nothing_owned.deleted_jobs_total == 0
    assert await present(mysql, everything) == set(everything) - gone


class HandedOverAfter(HeldSlots):
    """HeldSlots that gives up `slot` once owned() was asked `asks` times, as when
    membership hands it to another node in the middle of a retention pass."""

    def __init__(self, slots: set[int], slot: int, asks: int) -> None:
        super().__init__()
        for held_slot in slots:
            self.hold(held_slot, 1)
        self.slot, self.asks = slot, asks

    def owned(self) -> frozenset[int]:
        owned = super().owned()
        self.asks -= 1
        if self.asks == 0:
            self.release(self.slot)
        return owned


async def test_a_slot_handed_over_mid_pass_is_left_to_its_new_owner(
    settings: Settings, client: DelayClient, mysql: MySQLStore, topic: str
) -> None:
    ids = await make_jobs(client, mysql, topic)
    doomed = doomed_ids(ids)
    by_slot: dict[int, set[str]] = {}
    for job_id in doomed:
        by_slot.setdefault(slot_of(job_id, settings.slots), set()).add(job_id)
    kept_slot, lost_slot = sorted(by_slot, key=lambda slot: -len(by_slot[slot]))[:2]
    assert len(by_slot[lost_slot]) >= 2
    other_slots = set(doomed) - by_slot[kept_slot] - by_slot[lost_slot]
    # Asked once before the pass and once before its first batch (of one job), then
    # lost_slot belongs to another node.
    ownership = HandedOverAfter({kept_slot, lost_slot}, lost_slot, asks=2)
    retention = Retention(settings.replace(retention_batch=1), mysql, ownership)
    await retention.prune_owned()
    left = await present(mysql, doomed)
    assert not left & by_slot[kept_slot]
    assert len(by_slot[lost_slot] - left) <= 1  # at most the first batch's job
    assert other_slots <= left
    assert retention.deleted_jobs_total == len(set(doomed) - left)


async def test_the_actor_runs_every_interval_and_is_off_with_retention_days_0(
    settings: Settings, client: DelayClient, mysql: MySQLStore, topic: str
) -> None:
    every_slot = set(range(settings.slots))
    off = Retention(settings.replace(retention_days=0.0), mysql, held(every_slot))
    assert off.timers() == []
    retention = Retention(settings.replace(retention_interval_s=0.05), mysql, held(every_slot))
    [(interval_s, _)] = retention.timers()
    assert interval_s == 0.05

    ids = await make_jobs(client, mysql, topic)
    running = asyncio.create_task(retention.run())
    try:
        await until(lambda: retention.deleted_jobs_total == len(doomed_ids(ids)), timeout_s=30)
    finally:
        retention.stop()
        await running
    assert await present(mysql, every_id(ids)) == set(every_id(ids)) - set(doomed_ids(ids))


async def test_the_actor_survives_mysql_going_away_and_prunes_once_it_is_back(
    settings: Settings, client: DelayClient, mysql: MySQLStore, topic: str
) -> None:
    ids = await make_jobs(client, mysql, topic)
    doomed = doomed_ids(ids)
    # The actor's store reaches every MySQL server through a forwarder that the test cuts.
    links = MySQLLinks(settings)
    await links.open()
    through = links.settings
    store = MySQLStore(through, "test-retention")
    await store.open()
    try:
        retention = Retention(through, store, held(set(range(settings.slots))))
        await links.cut()
        await retention.prune_owned()  # logs a warning, raises nothing
        assert retention.deleted_jobs_total == 0
        assert await present(mysql, doomed) == set(doomed)

        await links.open()
        await retention.prune_owned()  # the next interval
        assert retention.deleted_jobs_total == len(doomed)
        assert await present(mysql, doomed) == set()
    finally:
        await store.close()
        await links.cut()


# ----- delayq db prune -----------------------------------------------------------------


def db_command(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    """`delayq db ARGS` in a subprocess, with settings as DELAYQ_* variables (the
    stack's, from `delayq services env`, with this test's own database)."""
    return subprocess.run(
        [sys.executable, "-m", "cluster.cli.main", "db", *args],
        env={**os.environ, **settings_env(settings)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def db_prune(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(db_command, settings, "prune", *args)


async def test_db_prune_command(
    settings: Settings, client: DelayClient, mysql: MySQLStore, topic: str
) -> None:
    ids = await make_jobs(client, mysql, topic)
    doomed = doomed_ids(ids)
    every = every_id(ids)
    doomed_history = await history_rows(mysql, doomed)

    dry = await db_prune(settings, "--older-than", "7d", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout == (
        f"would delete {len(doomed)} fired, cancelled or expired job(s) and {doomed_history} "
        "history row(s) older than 7d\n"
    )
    assert await present(mysql, every) == set(every)

    nine_days = await db_prune(settings, "--older-than", "9d")  # the old ones are 8 days old
    assert nine_days.returncode == 0, nine_days.stderr
    assert nine_days.stdout.startswith("deleted 0 fired, cancelled or expired job(s)")
    assert await present(mysql, every) == set(every)

    done = await db_prune(settings, "--older-than", "168h")
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"deleted {len(doomed)} fired, cancelled or expired job(s) and {doomed_history} "
        "history row(s) older than 7d\n"
    )
    assert await present(mysql, every) == set(every) - set(doomed)


@pytest.mark.parametrize(
    ("age", "error"),
    [
        ("7x", "'7x' is not an age"),
        ("d", "'d' is not an age"),
        ("seven", "'seven' is not an age"),
        ("nand", "'nand' is not an age"),
        ("infd", "'infd' is not an age"),
        ("", "'' is not an age"),
        ("-1d", "'-1d': the age must be more than 0"),
        ("0h", "'0h': the age must be more than 0"),
    ],
)
async def test_db_prune_refuses_a_bad_age_and_deletes_nothing(
    settings: Settings, client: DelayClient, mysql: MySQLStore, topic: str, age: str, error: str
) -> None:
    ids = await make_jobs(client, mysql, topic)
    refused = await db_prune(settings, f"--older-than={age}")
    assert refused.returncode == 2
    assert error in refused.stderr and "Traceback" not in refused.stderr
    assert await present(mysql, every_id(ids)) == set(every_id(ids))


def test_db_prune_needs_an_age(settings: Settings) -> None:
    refused = db_command(settings, "prune")
    assert refused.returncode == 2 and "--older-than AGE is required" in refused.stderr


@pytest.mark.parametrize("extra", [["--dry-run"], ["--older-than", "7d"]])
def test_db_migrate_refuses_the_options_of_prune(settings: Settings, extra: list[str]) -> None:
    refused = db_command(settings, "migrate", *extra)
    assert refused.returncode == 2 and "belong to prune" in refused.stderr
    assert refused.stdout == ""


def test_db_prune_without_mysql_fails_with_a_message(settings: Settings) -> None:
    nowhere = through_ports(settings, [free_port() for _ in mysql_ports(settings)])
    failed = db_command(nowhere, "prune", "--older-than", "7d")
    assert failed.returncode == 1
    assert "delayq db prune: MySQL failed" in failed.stderr
    assert "nothing was deleted" in failed.stderr and "Traceback" not in failed.stderr


def test_db_help_describes_prune(settings: Settings) -> None:
    shown = db_command(settings, "prune", "--help")
    assert shown.returncode == 0
    text = "".join(shown.stdout.split())  # as wrapped to any width
    for part in (
        "{migrate,prune,move-shard,homes}",
        "prune: delete the fired, cancelled and expired jobs last changed more than",
        "(--dry-run: how many would)",
        "7d, 12h, 30m, 90s",
    ):
        assert "".join(part.split()) in text
