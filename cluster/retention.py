"""Retention: delete fired and cancelled jobs, with their history, once they are old.

    pruned = await prune(mysql, older_than_s=7 * 86400, batch=1000, slots={0, 1})
    counted = await prune(mysql, older_than_s=7 * 86400, batch=1000, dry_run=True)

A job is old when its row last changed (gmt_modified: the fire or the cancel) before
the cut-off, on the MySQL server's clock. Pending, retrying and dead jobs are never
deleted: a dead job stays, even once purged from Redis (`delayq dead purge`), since
`delayq dead replay --job-id` can still revive it from its row.

Deleting is done in batches of `batch` jobs per shard, one short transaction each: the
batch's rows are locked (READ COMMITTED: only those rows, no gap locks that would hold
up producers' inserts), their history rows deleted, then the rows. Each node prunes the
slots it owns (actors/retention.py); `delayq db prune` prunes every slot by hand.

Once a job's row is gone its id is free: scheduling the same job_id again makes a new
job. Keep retention_days above the time within which producers may retry a schedule.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from dataclasses import dataclass

from cluster.contract import JobStatus
from cluster.mysql_store import MySQLStore
from cluster.sql import int_list

FINISHED = (int(JobStatus.FIRED), int(JobStatus.CANCELLED))


@dataclass
class Pruned:
    """Rows deleted (or, in a dry run, that would be)."""

    jobs: int = 0
    history: int = 0

    def __iadd__(self, other: Pruned) -> Pruned:
        self.jobs += other.jobs
        self.history += other.history
        return self


async def cut_off(mysql: MySQLStore, older_than_s: float) -> dt.datetime:
    """The MySQL server's now minus older_than_s: rows changed before it are old."""
    async with mysql.pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute(
            "SELECT NOW(3) - INTERVAL %s MICROSECOND", (int(older_than_s * 1_000_000),)
        )
        row = await cur.fetchone()
    before: dt.datetime = row[0]
    return before


def _old_rows(slots: Collection[int] | None) -> str:
    """WHERE clause of the old finished rows (parameter: the cut-off)."""
    where = f"status IN ({int_list(FINISHED)}) AND gmt_modified < %s"
    if slots is not None:
        where += f" AND slot IN ({int_list(slots)})"
    return where


async def prune(
    mysql: MySQLStore,
    older_than_s: float,
    batch: int,
    *,
    slots: Collection[int] | None = None,
    dry_run: bool = False,
) -> Pruned:
    """Delete (dry_run: count) the old fired and cancelled jobs of `slots` (None: all)
    and their history, in every shard."""
    total = Pruned()
    if slots is not None and not slots:
        return total
    before = await cut_off(mysql, older_than_s)
    for shard in mysql.all_shards():
        if dry_run:
            total += await _count_shard(mysql, shard, before, slots)
        else:
            while True:
                done = await _prune_batch(mysql, shard, before, batch, slots)
                total += done
                if done.jobs < batch:
                    break
    return total


async def _prune_batch(
    mysql: MySQLStore,
    shard: tuple[int, int],
    before: dt.datetime,
    batch: int,
    slots: Collection[int] | None,
) -> Pruned:
    jobs, history = mysql.shard_tables(shard)
    async with mysql.pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        await conn.begin()
        try:
            await cur.execute(
                f"SELECT job_id FROM {jobs} WHERE {_old_rows(slots)} "
                "ORDER BY status, gmt_modified LIMIT %s FOR UPDATE",
                (before, batch),
            )
            ids = [row[0] for row in await cur.fetchall()]
            if not ids:
                await conn.rollback()
                return Pruned()
            marks = ", ".join(["%s"] * len(ids))
            deleted_history = await cur.execute(
                f"DELETE FROM {history} WHERE job_id IN ({marks})", ids
            )
            deleted_jobs = await cur.execute(f"DELETE FROM {jobs} WHERE job_id IN ({marks})", ids)
            await conn.commit()
        except BaseException:
            await conn.rollback()
            raise
    return Pruned(int(deleted_jobs), int(deleted_history))


async def _count_shard(
    mysql: MySQLStore,
    shard: tuple[int, int],
    before: dt.datetime,
    slots: Collection[int] | None,
) -> Pruned:
    jobs, history = mysql.shard_tables(shard)
    where = _old_rows(slots)
    async with mysql.pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute(f"SELECT COUNT(*) FROM {jobs} WHERE {where}", (before,))
        (job_count,) = await cur.fetchone()
        await cur.execute(
            f"SELECT COUNT(*) FROM {history} h JOIN (SELECT job_id FROM {jobs} "
            f"WHERE {where}) j ON h.job_id = j.job_id",
            (before,),
        )
        (history_count,) = await cur.fetchone()
    return Pruned(int(job_count), int(history_count))
