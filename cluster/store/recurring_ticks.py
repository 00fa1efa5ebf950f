"""The jobs a recurring schedule made: its ticks, newest first, a page at a time.

A tick's job row is in its schedule's database (cluster/model/keys.py: shard_of), in any
of that database's tables, and its id is ``@recurring:<name>:<generation>:<tick_ms>``
(cluster/model/tick_ids.py). Within one generation the ids sort by tick time (13-digit
epoch milliseconds, and a run-now tick's ``r`` after its time), so a page reads, for
each generation from the newest down, a primary-key range of each table in descending
order: at most `limit` rows per table and generation, never a scan of the schedule's
history. The cursor is the last job id returned.
"""

from __future__ import annotations

from typing import Any

from cluster.model.tick_ids import RECURRING_PREFIX, parse_tick_id
from cluster.store.mysql_store import MySQLStore
from cluster.store.rows import JOB_COLUMNS, JobRecord, record_of_row

MAX_LIMIT = 1000
# Generations one page looks through at most; a page that stops there returns a cursor.
GENERATIONS_PER_PAGE = 64


def _range_end(start: str) -> str:
    """The smallest string after every string starting with `start` (it ends in ':')."""
    return start[:-1] + ";"


async def tick_page(
    mysql: MySQLStore, name: str, generation: int, limit: int, cursor: str | None
) -> tuple[list[JobRecord], str | None]:
    """Up to `limit` of schedule `name`'s tick jobs, newest generation first and newest
    tick first within one, after `cursor` (a job id from the previous page); and the
    cursor of the next page (None: no more). `generation` is the schedule's current one."""
    prefix = f"{RECURRING_PREFIX}{name}:"
    below: str | None = None
    if cursor is not None:
        parsed = parse_tick_id(cursor)
        if parsed is None or parsed[0] != name or parsed[1] > generation:
            raise ValueError(f"cursor {cursor[:240]!r} is not a tick of {name!r}")
        generation, below = parsed[1], cursor
    database = mysql.shard_of(f"{prefix}1:0")[0]
    tables = [mysql.shard_tables(shard)[0] for shard in mysql.all_shards([database])]

    async def read(conn: Any) -> tuple[list[JobRecord], str | None]:
        found: list[JobRecord] = []
        gen, upper = generation, below
        async with conn.cursor() as cur:
            for _ in range(GENERATIONS_PER_PAGE):
                if gen < 1:
                    return found, None
                start = f"{prefix}{gen}:"
                end = upper or _range_end(start)
                rows: list[JobRecord] = []
                for table in tables:
                    await cur.execute(
                        f"SELECT {JOB_COLUMNS} FROM {table} WHERE job_id > %s AND job_id < %s"
                        " ORDER BY job_id DESC LIMIT %s",
                        (start, end, limit - len(found)),
                    )
                    rows += [record_of_row(row) for row in await cur.fetchall()]
                rows.sort(key=lambda record: record.job_id, reverse=True)
                found += rows[: limit - len(found)]
                if len(found) == limit:
                    return found, found[-1].job_id
                gen, upper = gen - 1, None
        # Looked through enough generations for one page: go on from the next one.
        return found, f"{prefix}{gen + 1}:0" if gen >= 1 else None

    return await mysql.router.run(database, read)
