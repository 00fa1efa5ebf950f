"""Listings of the job tables: the expired jobs over every shard, one job's history, the
outbox's oldest rows, and the jobs changed since a moment (after Redis lost writes).
Each reads, through `conn` (a connection to the server of the shards it reads), the
tables MySQLStore (cluster/store/mysql_store.py) names for it; MySQLStore's methods of the
same names call these, and actors/rollback.py calls changed_page itself.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import aiomysql

from cluster.model.contract import JobStatus
from cluster.store.rows import JOB_COLUMNS, JobRecord, record_of_row
from cluster.store.sql import datetime_to_ms

Shard = tuple[int, int]

_EXPIRED = str(int(JobStatus.EXPIRED))


async def expired_page(
    conn: Any, job_tables: Sequence[str], topic: str | None, limit: int
) -> list[JobRecord]:
    """The jobs that expired most recently (of one topic), newest first, at most
    limit; walks the (status, gmt_modified) index of every shard (migration 003)."""
    by_topic = "" if topic is None else " AND topic = %s"
    params: tuple[Any, ...] = () if topic is None else (topic,)
    found: list[JobRecord] = []
    async with conn.cursor() as cur:
        for table in job_tables:
            await cur.execute(
                f"SELECT {JOB_COLUMNS} FROM {table} WHERE status = {_EXPIRED}{by_topic}"
                " ORDER BY gmt_modified DESC LIMIT %s",
                (*params, limit),
            )
            found += [record_of_row(row) for row in await cur.fetchall()]
    found.sort(key=lambda record: (-record.modified_ms, record.job_id))
    return found[:limit]


async def count_expired(conn: Any, job_tables: Sequence[str], topic: str | None) -> int:
    """How many jobs are expired (of one topic), in every shard."""
    by_topic = "" if topic is None else " AND topic = %s"
    params: tuple[Any, ...] = () if topic is None else (topic,)
    count = 0
    async with conn.cursor() as cur:
        for table in job_tables:
            await cur.execute(
                f"SELECT COUNT(*) FROM {table} WHERE status = {_EXPIRED}{by_topic}", params
            )
            (counted,) = await cur.fetchone()
            count += int(counted)
    return count


async def history(conn: Any, history_table: str, job_id: str) -> list[dict[str, Any]]:
    """A job's status changes, oldest first."""
    async with conn.cursor(aiomysql.DictCursor) as cur:
        await cur.execute(
            f"SELECT status, attempt, node, slot, at, note FROM {history_table}"
            " WHERE job_id = %s ORDER BY id",
            (job_id,),
        )
        return list(await cur.fetchall())


async def outbox_pages(
    conn: Any,
    outbox_tables: Sequence[tuple[Shard, str]],
    slots: Sequence[int],
    limit: int,
) -> dict[Shard, list[tuple[int, str, int]]]:
    """The oldest outbox rows (id, job_id, slot) of these slots, at most `limit` per
    shard, by shard (only shards that have some); `outbox_tables`: (shard, its outbox
    table) of every shard. One statement for every shard (a UNION ALL of one page per
    shard): a node polls the outbox often, and an idle poll then costs one round trip,
    not one per shard."""
    listed = ",".join(str(int(slot)) for slot in slots)
    pages = " UNION ALL ".join(
        f"(SELECT {index} AS shard, id, job_id, slot FROM {table}"
        f" WHERE slot IN ({listed}) ORDER BY id LIMIT {int(limit)})"
        for index, (_, table) in enumerate(outbox_tables)
    )
    async with conn.cursor() as cur:
        await cur.execute(pages)
        rows = await cur.fetchall()
    found: dict[Shard, list[tuple[int, str, int]]] = {}
    for index, row_id, job_id, slot in rows:
        shard = outbox_tables[int(index)][0]
        found.setdefault(shard, []).append((int(row_id), str(job_id), int(slot)))
    for page in found.values():
        page.sort()  # the order of a UNION's rows is not guaranteed
    return found


async def changed_page(
    conn: Any,
    job_table: str,
    status: JobStatus,
    after: tuple[dt.datetime, str],
    slots: Sequence[int],
    limit: int,
    updated_only: bool = False,
) -> list[tuple[dt.datetime, str, int, int]]:
    """(gmt_modified, job_id, slot, due ms) of one shard's jobs in `status` and `slots`
    last changed at or after the cursor `after` (gmt_modified, job_id), in that order;
    updated_only: only rows changed after their insert (an insert stamps gmt_create and
    gmt_modified alike). Walks the (status, gmt_modified) index (migration 003)."""
    slot_list = ",".join(str(int(slot)) for slot in slots) or "NULL"
    created = " AND gmt_modified > gmt_create" if updated_only else ""
    params: tuple[Any, ...] = (int(status), after[0], after[0], after[1])
    async with conn.cursor() as cur:
        await cur.execute(
            f"SELECT gmt_modified, job_id, slot, action_time FROM {job_table}"
            " WHERE status = %s AND gmt_modified >= %s AND (gmt_modified > %s OR job_id > %s)"
            f" AND slot IN ({slot_list}){created} ORDER BY gmt_modified, job_id LIMIT %s",
            (*params, limit),
        )
        return [
            (modified, job_id, int(slot), datetime_to_ms(due))
            for modified, job_id, slot, due in await cur.fetchall()
        ]
