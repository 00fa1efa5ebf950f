"""What a fired job costs MariaDB, statement by statement: CPU of the server per job.

    python benchmarks/mysql_fire_cost.py [--jobs 60000] [--batch 500]

Makes a database of its own with delayq's schema (every migration), fills one shard's
job table with --jobs pending rows (the insert at schedule time, 2,000 rows a
statement), then runs each way of recording them as fired, on a fresh copy of the
rows each time, in --batch jobs per transaction, and reads the MariaDB process's CPU
time (psutil, user + system) before and after, a few seconds after the last statement
so that InnoDB's purge of the old index entries is counted too:

  status + history   what the recorder does: UPDATE status (multi-row, by primary key),
                     and a history row per job (cluster/store/job_writes.py)
  status only        the UPDATE alone
  history only       the history rows alone: an append-only log of fires
  unindexed column   an UPDATE of a column no secondary index holds (attempts): the
                     row's own cost without the status indexes' churn (gmt_modified
                     still changes, and with it idx_status_modified)
  read by key        a SELECT of the same rows by primary key: finding them

Needs the local stack's MariaDB (DELAYQ_MYSQL_URL) on this machine (its process is
found by the port). Prints µs of MariaDB CPU per job for each.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Callable
from urllib.parse import urlparse

import psutil
from aiomysql import Connection

from cluster.devstack.databases import create_cluster_database, drop_cluster_database
from cluster.settings.config import Settings
from cluster.store.mysql_store import MySQLStore

PURGE_S = 3.0  # InnoDB purges the delete-marked index entries in the background

Statements = Callable[[str, str, list[str]], list[str]]


def listed(ids: list[str]) -> str:
    return ",".join(f"'{job_id}'" for job_id in ids)


WAYS: dict[str, Statements] = {
    "status + history": lambda jobs, history, ids: [
        f"UPDATE {jobs} SET status = 2, attempts = 1 WHERE job_id IN ({listed(ids)})"
        " AND status IN (0, 1)",
        f"INSERT INTO {history} (job_id, status, attempt, node, slot, at, note) VALUES "
        + ",".join(f"('{i}', 2, 1, 'node-1', 3, NOW(3), NULL)" for i in ids),
    ],
    "status only": lambda jobs, history, ids: [
        f"UPDATE {jobs} SET status = 2, attempts = 1 WHERE job_id IN ({listed(ids)})"
        " AND status IN (0, 1)"
    ],
    "history only": lambda jobs, history, ids: [
        f"INSERT INTO {history} (job_id, status, attempt, node, slot, at, note) VALUES "
        + ",".join(f"('{i}', 2, 1, 'node-1', 3, NOW(3), NULL)" for i in ids)
    ],
    "unindexed column": lambda jobs, history, ids: [
        f"UPDATE {jobs} SET attempts = 1 WHERE job_id IN ({listed(ids)})"
    ],
    "read by key": lambda jobs, history, ids: [
        f"SELECT COUNT(*) FROM {jobs} WHERE job_id IN ({listed(ids)})"
    ],
}


def mariadb_process(port: int) -> psutil.Process:
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and getattr(conn.laddr, "port", 0) == port:
            return psutil.Process(conn.pid)  # the listener is the server's own
    raise SystemExit(f"no process listens on port {port} here: run it on the stack's machine")


def cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


async def fill(conn: Connection, jobs: str, count: int) -> tuple[list[str], float]:
    """`count` pending rows shaped like fire_bench's (100-byte payload); returns their
    ids, shuffled as a round's are, and the seconds it took."""
    ids = [f"order-{n}-{uuid.uuid4().hex[:8]}" for n in range(count)]
    payload = '{"x":"' + "a" * 100 + '"}'
    started = time.monotonic()
    async with conn.cursor() as cur:
        for start in range(0, count, 2000):
            values = ",".join(
                f"('{job_id}','bench.t','b{n}','close',0,"
                f"NOW(3) + INTERVAL {n % 600} SECOND,0,16,'{payload}',{n % 16})"
                for n, job_id in enumerate(ids[start : start + 2000], start)
            )
            await cur.execute(
                f"INSERT INTO {jobs} (job_id, topic, biz_id, biz_type, status, action_time,"
                f" attempts, max_attempts, payload, slot) VALUES {values}"
            )
    # The recorder's rounds come in due order, which is not id order.
    ids.sort(key=lambda job_id: hash(job_id))
    return ids, time.monotonic() - started


async def measure(args: argparse.Namespace) -> None:
    base = Settings.from_env()
    port = urlparse(base.mysql_url).port or 3306
    server = mariadb_process(port)
    settings = await create_cluster_database(base, f"delayq_cost{uuid.uuid4().hex[:6]}")
    store = MySQLStore(settings, "mysql-fire-cost")
    await store.open()
    try:
        jobs, history = store.shard_tables((0, 0))
        pool = await store.pool_for(0)
        async with pool.acquire() as conn:
            await conn.autocommit(True)
            print(f"MariaDB pid {server.pid}, {args.jobs:,} jobs, {args.batch} per transaction")
            for way, statements in WAYS.items():
                async with conn.cursor() as cur:
                    await cur.execute(f"DELETE FROM {jobs}")
                    await cur.execute(f"DELETE FROM {history}")
                await asyncio.sleep(PURGE_S)
                before = cpu_s(server)
                ids, fill_s = await fill(conn, jobs, args.jobs)
                await asyncio.sleep(PURGE_S)
                inserted = cpu_s(server) - before
                before = cpu_s(server)
                started = time.monotonic()
                for start in range(0, len(ids), args.batch):
                    await conn.begin()
                    async with conn.cursor() as cur:
                        for statement in statements(jobs, history, ids[start : start + args.batch]):
                            await cur.execute(statement)
                    await conn.commit()
                took = time.monotonic() - started
                await asyncio.sleep(PURGE_S)
                used = cpu_s(server) - before
                print(
                    f"  {way:<18} {used / args.jobs * 1e6:6.1f} µs/job  ({took:.1f} s)"
                    f"   the insert at schedule time: {inserted / args.jobs * 1e6:.1f} µs/job"
                    f" ({fill_s:.1f} s)",
                    flush=True,
                )
    finally:
        await store.close()
        await drop_cluster_database(settings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=60_000)
    parser.add_argument("--batch", type=int, default=500, help="jobs per transaction")
    asyncio.run(measure(parser.parse_args()))


if __name__ == "__main__":
    main()
