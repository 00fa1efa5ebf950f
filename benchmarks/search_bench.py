"""The cost of a job search (cluster/store/search.py) on a big table, shape by shape.

    python benchmarks/search_bench.py [--rows 1000000] [--hot-key-jobs 120000] [--runs 7]
                                      [--chunk 50000] [--keep]

Makes a database of its own (the environment's mysql_databases and mysql_tables), fills
its job tables directly in MySQL (INSERT ... SELECT from MariaDB's sequence engine, each
row in the table its job id hashes to, --chunk ids a statement, with a progress bar):
--rows jobs over 20 topics and 10 business types, 5 jobs per business key, due over the
next 30 days; 60% pending, 5% retrying, 25% fired, 5% cancelled, 3% dead, 2% expired.
Then it times each search shape --runs times (the median, in ms, of the whole search:
the keys over every shard, then the rows of the page's jobs), as DelayClient.search_jobs
runs it, with limit 100: by biz_id; by topic + status, the first page and the 10th
(reached with the cursor); by biz_type + status; by status + a one-day due range; by
topic alone (every status); with no filter. And the shapes with a filter an index once
left out: --hot-key-jobs more jobs, all pending, share one business key ("hot-key") and
business type ("bulk"), searched by that key and status=dead (none is), and by that type
and a topic none of them has. Drops the database at the end unless --keep.
Needs the local stack (MariaDB).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

import orjson
import uvloop
from rich.progress import Progress

from cluster.devstack.databases import create_cluster_database, drop_cluster_database
from cluster.settings.config import Settings
from cluster.store.mysql_store import MySQLStore
from cluster.store.search import JobSearch, make_search, search_jobs

DAY_MS = 86_400_000
_TYPES = "'order','invoice','refund','remind','ship','bill','alert','report','sync','mail'"
# seq % 100 → status: 60 pending, 5 retrying, 25 fired, 5 cancelled, 3 dead, 2 expired.
_STATUS = (
    "CASE WHEN seq % 100 < 60 THEN 0 WHEN seq % 100 < 65 THEN 1 WHEN seq % 100 < 90 THEN 2"
    " WHEN seq % 100 < 95 THEN 3 WHEN seq % 100 < 98 THEN 4 ELSE 5 END"
)


async def fill(store: MySQLStore, rows: int, chunk: int, hot: bool = False) -> None:
    """rows jobs, each in the shard its id hashes to (cluster/model/keys.py shard_of:
    CRC32(id) >> 8 gives the database, then the table), chunk ids per statement. hot:
    ids "hot-N", all pending, of business key "hot-key" and type "bulk"."""
    prefix = "hot-" if hot else "bench-"
    biz_id = "'hot-key'" if hot else f"CONCAT('order-', seq % {max(rows // 5, 1)})"
    biz_type = "'bulk'" if hot else f"ELT(1 + seq % 10, {_TYPES})"
    status = "0" if hot else _STATUS
    databases, tables = store.settings.mysql_databases, store.settings.mysql_tables
    shards = store.all_shards()
    slots = store.settings.slots
    with Progress() as progress:
        task = progress.add_task(f"filling {len(shards)} tables", total=rows)
        for start in range(1, rows + 1, chunk):
            end = min(start + chunk - 1, rows)
            for shard in shards:
                table = store.shard_tables(shard)[0]
                hashed = f"(CRC32(CONCAT('{prefix}', seq)) >> 8)"
                statement = (
                    f"INSERT INTO {table} (job_id, topic, biz_id, biz_type, status,"
                    " action_time, payload, slot)"
                    f" SELECT CONCAT('{prefix}', seq), CONCAT('bench.t', seq % 20),"
                    f" {biz_id}, {biz_type}, {status},"
                    " UTC_TIMESTAMP(3)"
                    " + INTERVAL ((seq * 2654435761) % 2592000000) * 1000 MICROSECOND,"
                    " CONCAT('{\"order\":', seq, ',\"note\":\"', REPEAT('x', 80), '\"}'),"
                    f" CRC32(CONCAT('{prefix}', seq)) & {slots - 1}"
                    f" FROM seq_{start}_to_{end}"
                    f" WHERE {hashed} % {databases} = {shard[0]}"
                    f" AND ({hashed} DIV {databases}) % {tables} = {shard[1]}"
                )

                async def insert(conn: Any, statement: str = statement) -> None:
                    async with conn.cursor() as cur:
                        await cur.execute(statement)
                    await conn.commit()

                await store.router.run(shard[0], insert, bounded=False)
            progress.advance(task, end - start + 1)

    async def analyze(conn: Any, dbs: list[int]) -> None:
        async with conn.cursor() as cur:
            for shard in store.all_shards(dbs):
                await cur.execute(f"ANALYZE TABLE {store.shard_tables(shard)[0]}")
                await cur.fetchall()

    await store.router.run_grouped(range(databases), analyze, bounded=False)


async def timed(store: MySQLStore, search: JobSearch, runs: int) -> tuple[float, int]:
    """The median ms of `runs` searches, and the jobs the page held."""
    spent: list[float] = []
    found = 0
    for _ in range(runs):
        started = time.perf_counter()
        page = await search_jobs(store, search)
        spent.append((time.perf_counter() - started) * 1000)
        found = len(page.jobs)
    return statistics.median(spent), found


async def tenth_page(store: MySQLStore, **filters: Any) -> JobSearch:
    """The search of the 10th page (its cursor found by walking the 9 before it)."""
    cursor = None
    for _ in range(9):
        page = await search_jobs(store, make_search(cursor=cursor, **filters))
        cursor = page.next_cursor
    return make_search(cursor=cursor, **filters)


async def main(options: argparse.Namespace) -> None:
    base = Settings.from_env().replace(key_prefix=f"srch{uuid.uuid4().hex[:6]}")
    settings = await create_cluster_database(base, f"delayq_{base.key_prefix}")
    store = MySQLStore(settings, "search-bench")
    await store.open()
    try:
        started = time.perf_counter()
        await fill(store, options.rows, options.chunk)
        if options.hot_key_jobs:
            await fill(store, options.hot_key_jobs, options.chunk, hot=True)
        fill_s = time.perf_counter() - started
        now = int(time.time() * 1000)
        topic_status = {"topic": "bench.t3", "status": "pending", "limit": 100}
        shapes: dict[str, JobSearch] = {
            "biz_id": make_search(biz_id=f"order-{options.rows // 10}"),
            "topic + status, page 1": make_search(**topic_status),
            "topic + status, page 10": await tenth_page(store, **topic_status),
            "biz_type + status": make_search(biz_type="refund", status="pending"),
            "status + due range (1 day)": make_search(
                status="pending", due_from=now + 10 * DAY_MS, due_to=now + 11 * DAY_MS
            ),
            "topic alone (every status)": make_search(topic="bench.t7"),
            "no filter": make_search(),
        }
        if options.hot_key_jobs:
            shapes["hot biz_id + status=dead"] = make_search(biz_id="hot-key", status="dead")
            shapes["hot biz_type + topic, none match"] = make_search(
                biz_type="bulk", topic="bench.nomatch"
            )
        results = {}
        for name, search in shapes.items():
            median_ms, found = await timed(store, search, options.runs)
            results[name] = {"index": search.index, "median_ms": round(median_ms, 1), "jobs": found}
        print(
            orjson.dumps(
                {
                    "rows": options.rows,
                    "hot_key_jobs": options.hot_key_jobs,
                    "tables": len(store.all_shards()),
                    "fill_s": round(fill_s, 1),
                    "runs": options.runs,
                    "searches": results,
                },
                option=orjson.OPT_INDENT_2,
            ).decode()
        )
    finally:
        await store.close()
        if not options.keep:
            await drop_cluster_database(settings)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--hot-key-jobs", type=int, default=0)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--chunk", type=int, default=50_000)
    parser.add_argument("--keep", action="store_true", help="keep the database")
    uvloop.run(main(parser.parse_args()))
