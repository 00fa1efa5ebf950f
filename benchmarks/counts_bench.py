"""The cost of one refresh of the pending counts (cluster/store/counts.py) on a big backlog.

    python benchmarks/counts_bench.py [--rows 1000000] [--topics 20] [--runs 7] [--keep]

Makes a database of its own, fills its job tables directly in MySQL (INSERT ... SELECT
from MariaDB's sequence engine, --chunk rows a statement, with a progress bar): --rows
jobs over --topics topics, spread evenly over the tables; 1 in 10 fired, 1 in 20 of the
others due within the next 4 minutes (inside the 5-minute Redis horizon), the rest
30-60 minutes out. Then it times --runs refreshes (the median): as the console, `top`,
`cluster status` and the nodes' metric run them (exact counts up to EXACT_ROWS index
entries per table, estimates beyond), and with estimates alone; and one full exact
COUNT(*) of every topic and tier for comparison, with the estimates' error against it.
Drops the database at the end unless --keep. Needs the local stack (MariaDB).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections import Counter
from typing import Any

import orjson
import uvloop
from rich.progress import Progress

from cluster.devstack.databases import create_cluster_database, drop_cluster_database
from cluster.model.contract import WAITING_STATUSES
from cluster.settings.config import Settings
from cluster.store import counts, sql
from cluster.store.mysql_store import MySQLStore


async def fill(store: MySQLStore, rows: int, topics: int, chunk: int) -> None:
    """rows jobs, spread over every job table, chunk rows per INSERT ... SELECT."""
    tables = [store.shard_tables(shard)[0] for shard in store.all_shards()]
    slots = store.settings.slots
    with Progress() as progress:
        task = progress.add_task(f"filling {len(tables)} tables", total=rows)
        for start in range(1, rows + 1, chunk):
            end = min(start + chunk - 1, rows)
            table = tables[(start // chunk) % len(tables)]

            async def insert(
                conn: Any, table: str = table, start: int = start, end: int = end
            ) -> None:
                async with conn.cursor() as cur:
                    await cur.execute(
                        f"INSERT INTO {table} (job_id, topic, status, action_time, payload, slot)"
                        f" SELECT CONCAT('b-', seq), CONCAT('bench.t', seq % {topics}),"
                        " IF(seq % 10 = 9, 2, 0),"
                        " IF(seq % 20 = 0, UTC_TIMESTAMP(3) + INTERVAL (seq % 240) SECOND,"
                        "    UTC_TIMESTAMP(3) + INTERVAL (1800 + seq % 1800) SECOND),"
                        f" '{{}}', seq % {slots} FROM seq_{start}_to_{end}"
                    )
                await conn.commit()

            await store.router.run(0, insert, bounded=False)
            progress.advance(task, end - start + 1)

    async def analyze(conn: Any) -> None:
        async with conn.cursor() as cur:
            for table in tables:
                await cur.execute(f"ANALYZE TABLE {table}")
                await cur.fetchall()

    await store.router.run(0, analyze, bounded=False)


async def exact_counts(store: MySQLStore, as_of_ms: int, horizon_ms: int) -> Counter[Any]:
    """(topic, tier) -> COUNT(*) over every table: the slow, exact answer."""
    edge = sql.ms_to_datetime(as_of_ms + horizon_ms)
    found: Counter[Any] = Counter()

    async def read(conn: Any, dbs: list[int]) -> None:
        async with conn.cursor() as cur:
            for shard in store.all_shards(dbs):
                await cur.execute(
                    f"SELECT topic, action_time <= %s, COUNT(*) FROM {store.shard_tables(shard)[0]}"
                    f" WHERE status IN ({sql.int_list(WAITING_STATUSES)}) GROUP BY 1, 2",
                    (edge,),
                )
                for topic, near, count in await cur.fetchall():
                    found[topic, "in_redis" if near else "beyond_horizon"] += int(count)

    await store.router.run_grouped(range(store.settings.mysql_databases), read, bounded=False)
    return found


async def topics_plan(store: MySQLStore) -> str:
    """EXPLAIN's Extra for the listing of a table's topics: a loose index scan says
    "Using index for group-by"."""
    table = store.shard_tables(store.all_shards()[0])[0]

    async def explain(conn: Any) -> str:
        async with conn.cursor() as cur:
            await cur.execute(
                f"EXPLAIN SELECT topic FROM {table} FORCE INDEX (idx_status_topic_due)"
                f" WHERE status IN ({sql.int_list(WAITING_STATUSES)}) GROUP BY status, topic"
            )
            columns = [column[0] for column in cur.description]
            return str(dict(zip(columns, await cur.fetchone(), strict=True))["Extra"])

    return await store.router.run(0, explain)


def errors(answer: counts.PendingCounts, exact: Counter[Any]) -> dict[str, float]:
    """The largest relative error of a topic's tier, and of the total, in percent."""
    worst = 0.0
    for topic, tiers in answer.topics.items():
        for tier, value in (("in_redis", tiers.in_redis), ("beyond_horizon", tiers.beyond_horizon)):
            truth = exact[topic, tier]
            if truth:
                worst = max(worst, abs(value - truth) / truth * 100)
    total = sum(exact.values())
    return {
        "worst_topic_tier_error_pct": round(worst, 2),
        "total_error_pct": round(abs(answer.total.pending - total) / total * 100, 2),
    }


async def timed(runs: int, refresh: Any) -> tuple[float, counts.PendingCounts]:
    """The median ms of `runs` refreshes, and the last answer."""
    took = []
    answer = None
    for _ in range(runs):
        started = time.perf_counter()
        answer = await refresh()
        took.append((time.perf_counter() - started) * 1000)
    assert answer is not None
    return statistics.median(took), answer


async def main(options: argparse.Namespace) -> None:
    base = Settings.from_env().replace(key_prefix=f"cnt{uuid.uuid4().hex[:6]}")
    settings = await create_cluster_database(base, f"delayq_{base.key_prefix}")
    store = MySQLStore(settings, "counts-bench")
    await store.open()
    horizon = settings.redis_horizon_ms
    try:
        started = time.perf_counter()
        await fill(store, options.rows, options.topics, options.chunk)
        fill_s = time.perf_counter() - started
        default_ms, answer = await timed(
            options.runs, lambda: counts.pending_counts(store, horizon)
        )
        estimate_ms, estimated = await timed(
            options.runs, lambda: counts.pending_counts(store, horizon, exact_rows=0)
        )
        started = time.perf_counter()
        exact = await exact_counts(store, answer.as_of_ms, horizon)
        exact_ms = (time.perf_counter() - started) * 1000
        plan = await topics_plan(store)
        result = {
            "rows": options.rows,
            "pending": sum(exact.values()),
            "topics": options.topics,
            "tables": len(store.all_shards()),
            "fill_s": round(fill_s, 1),
            "refresh_ms_median": round(default_ms, 1),
            "refresh_approximate": answer.total.approximate,
            "refresh_error": errors(answer, exact),
            "estimates_only_ms_median": round(estimate_ms, 1),
            "estimates_only_error": errors(estimated, exact),
            "exact_count_ms": round(exact_ms, 1),
            "topics_plan": plan,
        }
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    finally:
        await store.close()
        if not options.keep:
            await drop_cluster_database(settings)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--chunk", type=int, default=50_000)
    parser.add_argument("--keep", action="store_true", help="keep the database")
    uvloop.run(main(parser.parse_args()))
