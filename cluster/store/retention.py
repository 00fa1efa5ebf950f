"""Retention: delete fired, cancelled and expired jobs, with their history, once they
are old.

    pruned = await prune(mysql, older_than_s=7 * 86400, batch=1000, slots={0, 1})
    counted = await prune(mysql, older_than_s=7 * 86400, batch=1000, dry_run=True)
    async for done in prune_batches(mysql, 7 * 86400, 1000, slots=ownership.owned):
        ...  # one committed batch at a time

A job is old when its row last changed (gmt_modified: the fire or the cancel) before
the cut-off: now minus the age on the MySQL server's clock, fixed once per call. Pending,
retrying and dead jobs are never deleted: a dead job stays, even once purged from Redis
(`delayq dead purge`), since `delayq dead replay --job-id` can still revive it from its
row.

Deleting is done in batches of at most `batch` jobs per shard, one short transaction
each: the batch's rows are chosen and locked (READ COMMITTED: only those rows, no gap
locks that would hold up producers' inserts), their history rows deleted, then the rows,
both DELETEs re-checking status and age so that a row changed meanwhile stays with its
history. Each node prunes the slots it owns (actors/retention.py); `delayq db prune`
prunes every slot by hand.

Once a job's row is gone its id is free: scheduling the same job_id again makes a new
job. Keep retention_days above the time within which producers may retry a schedule.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections.abc import AsyncGenerator, Callable, Collection
from dataclasses import dataclass

import pymysql

from cluster.model.contract import JobStatus
from cluster.store.mysql_store import MySQLStore
from cluster.store.sql import int_list

log = logging.getLogger(__name__)

FINISHED = (int(JobStatus.FIRED), int(JobStatus.CANCELLED), int(JobStatus.EXPIRED))
# MySQL errors after which a batch is simply tried again: InnoDB rolled it back because
# another transaction (another node's prune, the recorder) held a row it wanted.
LOCK_CONFLICTS = frozenset({1205, 1213})  # lock wait timeout, deadlock
BATCH_TRIES = 3
# No row is older than this: a cut-off further back would fall before MySQL's calendar
# (DATETIME starts in the year 1000), where it answers NULL with a warning.
MAX_AGE_S = 1000 * 365.25 * 86400.0


@dataclass
class Pruned:
    """Rows deleted (or, in a dry run, that would be)."""

    jobs: int = 0
    history: int = 0

    def __iadd__(self, other: Pruned) -> Pruned:
        self.jobs += other.jobs
        self.history += other.history
        return self


AGE_UNITS_S = {"d": 86400, "h": 3600, "m": 60, "s": 1}  # largest first


def age_text(seconds: float) -> str:
    """An age in the largest unit that holds it whole: 604800 → 7d, 5400 → 90m."""
    for unit, size in AGE_UNITS_S.items():
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def check_arguments(older_than_s: float, batch: int) -> None:
    """ValueError unless the age is more than 0 (NaN is not) and the batch at least 1:
    an age of 0 would delete every fired, cancelled and expired job at once."""
    if not older_than_s > 0:
        raise ValueError(f"the age must be more than 0 seconds, got {older_than_s}")
    if batch < 1:
        raise ValueError(f"the batch must be at least 1 job, got {batch}")


async def cut_off(mysql: MySQLStore, older_than_s: float) -> dt.datetime | None:
    """The MySQL server's now minus older_than_s: rows changed before it are old. None
    for an age beyond MAX_AGE_S (or infinite): no row is that old."""
    if older_than_s > MAX_AGE_S:
        return None
    now = await mysql.server_now()  # servers' clocks agree within seconds (NTP)
    return now - dt.timedelta(microseconds=int(older_than_s * 1_000_000))


def _old_rows(slots: Collection[int] | None, table: str = "") -> str:
    """WHERE clause of the old finished rows of `table` (an alias with its dot, or ""),
    of `slots` (None: every slot); its one parameter is the cut-off."""
    where = f"{table}status IN ({int_list(FINISHED)}) AND {table}gmt_modified < %s"
    if slots is not None:
        where += f" AND {table}slot IN ({int_list(sorted(slots))})"
    return where


async def prune_batches(
    mysql: MySQLStore,
    older_than_s: float,
    batch: int,
    *,
    slots: Callable[[], Collection[int]] | None = None,
) -> AsyncGenerator[Pruned, None]:
    """Delete the old fired, cancelled and expired jobs and their history, shard by shard, one
    committed transaction of at most `batch` jobs at a time, yielding what each batch
    deleted. slots() is asked before every batch (a node's slots change while it works;
    none left ends the run); None: every slot. ValueError for a bad age or batch."""
    check_arguments(older_than_s, batch)
    before = await cut_off(mysql, older_than_s)
    if before is None:
        return
    for shard in mysql.all_shards():
        while True:
            wanted = None if slots is None else frozenset(slots())
            if wanted is not None and not wanted:
                return
            done, chosen = await _prune_batch(mysql, shard, before, batch, wanted)
            yield done
            if chosen < batch:
                break  # the shard has no more old rows (of these slots)


async def prune(
    mysql: MySQLStore,
    older_than_s: float,
    batch: int,
    *,
    slots: Collection[int] | None = None,
    dry_run: bool = False,
) -> Pruned:
    """Delete (dry_run: count) the old fired, cancelled and expired jobs of `slots` (None: all)
    and their history, in every shard; returns the totals."""
    check_arguments(older_than_s, batch)
    total = Pruned()
    if slots is not None and not slots:
        return total
    if dry_run:
        before = await cut_off(mysql, older_than_s)
        if before is not None:
            for shard in mysql.all_shards():
                total += await _count_shard(mysql, shard, before, slots)
        return total
    if slots is None:
        batches = prune_batches(mysql, older_than_s, batch)
    else:
        fixed = frozenset(slots)
        batches = prune_batches(mysql, older_than_s, batch, slots=lambda: fixed)
    async with contextlib.aclosing(batches):
        async for done in batches:
            total += done
    return total


async def _prune_batch(
    mysql: MySQLStore,
    shard: tuple[int, int],
    before: dt.datetime,
    batch: int,
    slots: Collection[int] | None,
) -> tuple[Pruned, int]:
    """One batch, tried again after a lock conflict; (deleted, jobs chosen)."""
    tries = 0
    while True:
        tries += 1
        try:
            return await _delete_batch(mysql, shard, before, batch, slots)
        except pymysql.err.OperationalError as exc:
            code = exc.args[0] if exc.args else None
            if code not in LOCK_CONFLICTS or tries >= BATCH_TRIES:
                raise
            log.info("retention: batch rolled back by a lock conflict, trying again: %s", exc)


async def _delete_batch(
    mysql: MySQLStore,
    shard: tuple[int, int],
    before: dt.datetime,
    batch: int,
    slots: Collection[int] | None,
) -> tuple[Pruned, int]:
    jobs, history = mysql.shard_tables(shard)
    # Should anything below fail, the connection goes back to the pool inside the
    # transaction, and the pool closes it: MySQL rolls the batch back.
    pool = await mysql.pool_for(shard[0])
    async with pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")  # this one only
        await conn.begin()
        await cur.execute(
            f"SELECT job_id FROM {jobs} WHERE {_old_rows(slots)} "
            "ORDER BY status, gmt_modified LIMIT %s FOR UPDATE",
            (before, batch),
        )
        ids = [row[0] for row in await cur.fetchall()]
        if not ids:
            await conn.commit()
            return Pruned(), 0
        marks = ", ".join(["%s"] * len(ids))
        # Both re-check status and age: a row that changed since it was chosen stays,
        # and so does its history.
        deleted_history = await cur.execute(
            f"DELETE h FROM {history} AS h JOIN {jobs} AS j ON j.job_id = h.job_id "
            f"WHERE h.job_id IN ({marks}) AND {_old_rows(None, 'j.')}",
            (*ids, before),
        )
        deleted_jobs = await cur.execute(
            f"DELETE FROM {jobs} WHERE job_id IN ({marks}) AND {_old_rows(None)}",
            (*ids, before),
        )
        await conn.commit()
    return Pruned(int(deleted_jobs), int(deleted_history)), len(ids)


async def _count_shard(
    mysql: MySQLStore,
    shard: tuple[int, int],
    before: dt.datetime,
    slots: Collection[int] | None,
) -> Pruned:
    jobs, history = mysql.shard_tables(shard)
    where = _old_rows(slots)
    pool = await mysql.pool_for(shard[0])
    async with pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute(f"SELECT COUNT(*) FROM {jobs} WHERE {where}", (before,))
        (job_count,) = await cur.fetchone()
        await cur.execute(
            f"SELECT COUNT(*) FROM {history} AS h JOIN (SELECT job_id FROM {jobs} "
            f"WHERE {where}) AS j ON h.job_id = j.job_id",
            (before,),
        )
        (history_count,) = await cur.fetchone()
    return Pruned(int(job_count), int(history_count))
