"""The durable record of every job in MySQL, sharded over databases × tables.

A job's shard is a function of its job_id alone (cluster.model.keys.shard_of), so get and
cancel need nothing else. The versioned migrations of cluster/store/migrations.py create the
tables and record the shard layout and the cluster's key prefix; opening a store with a
different layout, or before a migration is applied, fails instead of silently looking for
jobs in the wrong tables, and one database serves one cluster only (another cluster's
reconciler would re-add its jobs). SQL status numbers come from cluster/model/contract.py.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Sequence
from importlib.resources.abc import Traversable
from itertools import chain
from typing import Any

import aiomysql
import pymysql

from cluster.errors import CommitUnknown, SchemaError, StoreAccessError
from cluster.model.contract import WAITING_STATUSES, JobStatus
from cluster.model.jobs import ValidJob, now_ms
from cluster.model.keys import shard_of
from cluster.settings.config import Settings
from cluster.store import connect, job_writes, listings, migrations, sql
from cluster.store.migrations import MigrationReport
from cluster.store.rows import JOB_COLUMNS, JobRecord, Outcome, record_of_row
from cluster.store.sql import ms_to_datetime

# Re-exported: the client, actors and tests import these from here.
__all__ = ["CommitUnknown", "JobRecord", "MySQLStore", "Outcome", "SchemaError", "ms_to_datetime"]

# Not fired yet (pending or retrying), as SQL, built once from cluster/model/contract.py.
_WAITING = sql.int_list(WAITING_STATUSES)


class MySQLStore:
    """Connection pool plus the few statements delayq needs, grouped by shard."""

    def __init__(
        self, settings: Settings, node_id: str, *, schema_dir: Traversable | None = None
    ) -> None:
        """schema_dir: the migration files to apply and check (default: the packaged
        schema/; tests pass a directory with more)."""
        self.settings = settings
        self.schema_dir = schema_dir
        self.node_id = node_id[:128]
        self.conn_args = sql.parse_mysql_url(settings.mysql_url)
        self.database = self.conn_args["db"]
        self._pool: aiomysql.Pool | None = None

    # ----- lifecycle -----------------------------------------------------------------

    async def open(self, *, check_schema: bool = True) -> None:
        """Connect (one connection at once, up to 10). Raises StoreAccessError when MySQL
        refuses: wrong password, TLS on one side only, an untrusted certificate. With TLS
        asked for, every connection the pool opens later must use it too, or it is
        refused before logging in (cluster/store/connect.py)."""
        args = sql.mysql_connect_args(self.settings)
        try:
            self._pool = await connect.create_pool(
                minsize=1,
                maxsize=10,
                autocommit=True,
                charset="utf8mb4",
                # UTC, utf8mb4 whatever the server's default, and strict: a value too
                # long for its column is an error, never silently truncated.
                init_command=(
                    "SET NAMES utf8mb4, time_zone = '+00:00', "
                    "sql_mode = CONCAT_WS(',', @@sql_mode, 'STRICT_ALL_TABLES')"
                ),
                **args,
            )
        except (pymysql.err.Error, OSError) as error:
            refusal = sql.mysql_refusal(error, args)
            if refusal is None:
                raise  # not reachable yet: a starting node waits this out
            raise StoreAccessError(
                f"MySQL at {args['host']}:{args['port']} refused the connection: {refusal}"
            ) from error
        if check_schema:
            try:
                await self.check_layout()
            except BaseException:
                await self.close()
                raise

    async def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            await self._pool.wait_closed()
            self._pool = None

    @property
    def pool(self) -> aiomysql.Pool:
        if self._pool is None:
            raise RuntimeError("MySQLStore is not open")
        return self._pool

    # ----- naming ----------------------------------------------------------------------

    def database_name(self, db_index: int) -> str:
        if self.settings.mysql_databases == 1:
            return str(self.database)
        return f"{self.database}_{db_index}"

    def tables_of(self, job_id: str) -> tuple[str, str]:
        """(job table, history table), fully qualified, of a job's shard."""
        return self.shard_tables(
            shard_of(job_id, self.settings.mysql_databases, self.settings.mysql_tables)
        )

    def shard_tables(self, shard: tuple[int, int]) -> tuple[str, str]:
        """(job table, history table), fully qualified, of a (database, table) shard."""
        db = self.database_name(shard[0])
        return f"`{db}`.`job_{shard[1]:04d}`", f"`{db}`.`job_history_{shard[1]:04d}`"

    def outbox_table(self, shard: tuple[int, int]) -> str:
        """The outbox table of a shard, fully qualified (migration 004, schedule_in)."""
        return f"`{self.database_name(shard[0])}`.`job_outbox_{shard[1]:04d}`"

    def recurring_table(self, shard: tuple[int, int]) -> str:
        """The recurring schedules table of a shard, fully qualified (migration 005)."""
        return f"`{self.database_name(shard[0])}`.`job_recurring_{shard[1]:04d}`"

    def all_shards(self) -> list[tuple[int, int]]:
        return [
            (d, t)
            for d in range(self.settings.mysql_databases)
            for t in range(self.settings.mysql_tables)
        ]

    def _job_tables(self) -> list[str]:
        """The job table of every shard, fully qualified."""
        return [self.shard_tables(shard)[0] for shard in self.all_shards()]

    def _group(self, job_ids: Iterable[str]) -> dict[tuple[int, int], list[str]]:
        groups: dict[tuple[int, int], list[str]] = defaultdict(list)
        for job_id in job_ids:
            groups[
                shard_of(job_id, self.settings.mysql_databases, self.settings.mysql_tables)
            ].append(job_id)
        return groups

    # ----- schema ----------------------------------------------------------------------

    async def migrate(self) -> MigrationReport:
        """Apply the schema migrations not yet applied to every shard (cluster.store.migrations)."""
        return await migrations.apply_migrations(self, self.schema_dir)

    async def check_layout(self) -> None:
        """Refuse a database that misses a migration or has another layout."""
        await migrations.check_schema(self, self.schema_dir)

    # ----- producer side -----------------------------------------------------------------

    async def insert_jobs(self, jobs: Sequence[ValidJob], slots: Sequence[int]) -> int:
        """Insert each job; an existing job_id keeps its row. Multi-row statements, in
        one transaction when there are several. Returns how many rows were new: when it
        is len(jobs), no job_id existed before, and nothing needs reading back.

        "ON DUPLICATE KEY UPDATE job_id = job_id" rather than INSERT IGNORE: same effect,
        but no MySQL warning (which costs aiomysql a SHOW WARNINGS round trip). Without
        the FOUND_ROWS client flag (never set here) MySQL counts an inserted row as 1
        and a kept one, whose update changes nothing, as 0.
        """
        if not jobs:
            return 0
        by_shard: dict[tuple[int, int], list[int]] = defaultdict(list)
        for index, job in enumerate(jobs):
            by_shard[
                shard_of(job.job_id, self.settings.mysql_databases, self.settings.mysql_tables)
            ].append(index)
        async with self.pool.acquire() as conn:
            statements = job_writes.insert_statements(
                conn, self.shard_tables, jobs, slots, by_shard
            )
            # Several statements go in one transaction: all jobs of the call or none.
            # The first two are built up front to know whether there is a second.
            first, second = next(statements), next(statements, None)
            in_transaction = second is not None
            if in_transaction:
                await conn.begin()
            committing = not in_transaction
            try:
                async with conn.cursor() as cur:
                    inserted = await sql.execute_overlapped(
                        cur, chain([first], [second] if second else [], statements)
                    )
                if in_transaction:
                    committing = True
                    await conn.commit()
                return inserted
            except pymysql.err.OperationalError as exc:
                if committing and exc.args and exc.args[0] == sql.LOST_DURING_QUERY:
                    raise CommitUnknown(str(exc)) from exc
                raise  # not committed: a broken connection rolls the transaction back

    async def insert_in_transaction(self, conn: Any, job: ValidJob, slot: int) -> None:
        """Insert a job's row and its outbox row through the caller's connection, inside
        the caller's transaction (no commit here): both exist if and only if that
        transaction commits. An existing job_id keeps its row (its outbox row only makes
        the owning node look at it again)."""
        shard = shard_of(job.job_id, self.settings.mysql_databases, self.settings.mysql_tables)
        async with conn.cursor() as cur:
            await connect.check_session_charset(cur)
            # Stamped in UTC like every delayq time, whatever the caller's session time
            # zone (CURRENT_TIMESTAMP, the columns' default, would follow it).
            for statement in job_writes.insert_statements(
                conn, self.shard_tables, [job], [slot], {shard: [0]}, stamp_utc=True
            ):
                await cur.execute(statement)
            await cur.execute(
                f"INSERT INTO {self.outbox_table(shard)} (job_id, slot) VALUES (%s, %s)",
                (job.job_id, slot),
            )

    async def write_with_outbox(
        self, conn: Any, jobs: Sequence[ValidJob], slots: Sequence[int]
    ) -> None:
        """Insert jobs' rows (an existing job_id keeps its row) and an outbox row for
        each, through `conn` and inside its open transaction (no commit here): the node
        owning each job's slot adds it to Redis once the transaction commits
        (actors/outbox.py). How recurring schedules' ticks become jobs."""
        by_shard: dict[tuple[int, int], list[int]] = defaultdict(list)
        for index, job in enumerate(jobs):
            by_shard[
                shard_of(job.job_id, self.settings.mysql_databases, self.settings.mysql_tables)
            ].append(index)
        quote = sql.quoter(conn)
        async with conn.cursor() as cur:
            for statement in job_writes.insert_statements(
                conn, self.shard_tables, jobs, slots, by_shard
            ):
                await cur.execute(statement)
            for shard, indexes in by_shard.items():
                rows = (f"({quote(jobs[i].job_id)},{int(slots[i])})" for i in indexes)
                head = f"INSERT INTO {self.outbox_table(shard)} (job_id, slot) VALUES "
                for statement in sql.multi_row(head, rows):
                    await cur.execute(statement)

    async def outbox_pages(
        self, slots: Sequence[int], limit: int
    ) -> dict[tuple[int, int], list[tuple[int, str, int]]]:
        """The oldest outbox rows (id, job_id, slot) of these slots, at most `limit` per
        shard, by shard (only shards that have some), in one round trip
        (listings.outbox_pages)."""
        if not slots:
            return {}
        tables = [(shard, self.outbox_table(shard)) for shard in self.all_shards()]
        return await listings.outbox_pages(self.pool, tables, slots, limit)

    async def delete_outbox(self, shard: tuple[int, int], ids: Sequence[int]) -> None:
        if not ids:
            return
        listed = ",".join(str(int(i)) for i in ids)
        async with self.pool.acquire() as conn, conn.cursor() as cur:
            await cur.execute(f"DELETE FROM {self.outbox_table(shard)} WHERE id IN ({listed})")

    async def get_many(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        found: dict[str, JobRecord] = {}
        async with self.pool.acquire() as conn, conn.cursor() as cur:
            for shard, ids in self._group(job_ids).items():
                table, _ = self.shard_tables(shard)
                marks = ", ".join(["%s"] * len(ids))
                await cur.execute(
                    f"SELECT {JOB_COLUMNS} FROM {table} WHERE job_id IN ({marks})", ids
                )
                for row in await cur.fetchall():
                    record = record_of_row(row)
                    found[record.job_id] = record
        return found

    async def get(self, job_id: str) -> JobRecord | None:
        return (await self.get_many([job_id])).get(job_id)

    async def set_status(
        self,
        job_id: str,
        status: JobStatus,
        slot: int,
        *,
        from_statuses: tuple[int, ...],
        note: str = "",
        reset_attempts: bool = False,
        not_restored_since_ms: int | None = None,
    ) -> bool:
        """Move a job to status if it is in one of from_statuses; True if it moved.
        reset_attempts also clears its attempts and last error (a dead-letter replay).
        not_restored_since_ms: only if no node restored the job at or after that Redis
        TIME (a cancel's; job_writes.mark_restored)."""
        table, history = self.tables_of(job_id)
        marks = ", ".join(["%s"] * len(from_statuses))
        reset = ", attempts = 0, last_error = NULL" if reset_attempts else ""
        since, unrestored = job_writes.unrestored_since(not_restored_since_ms)
        async with self.pool.acquire() as conn, conn.cursor() as cur:
            changed = await cur.execute(
                f"UPDATE {table} SET status = %s{reset} WHERE job_id = %s"
                f" AND status IN ({marks}){unrestored}",
                (int(status), job_id, *from_statuses, *since),
            )
            if changed:
                entry = (job_id, int(status), 0, slot, note, now_ms())
                await job_writes.insert_history(
                    cur, sql.quoter(conn), self.node_id, history, [entry]
                )
        return bool(changed)

    async def set_due(self, job_id: str, due_ms: int, slot: int) -> bool:
        """Record a reschedule of a job that has not fired; True if its row changed."""
        table, history = self.tables_of(job_id)
        async with self.pool.acquire() as conn, conn.cursor() as cur:
            changed = await cur.execute(
                f"UPDATE {table} SET action_time = %s WHERE job_id = %s AND status IN ({_WAITING})",
                (ms_to_datetime(due_ms), job_id),
            )
            if changed:
                entry = (job_id, int(JobStatus.PENDING), 0, slot, "rescheduled", now_ms())
                await job_writes.insert_history(
                    cur, sql.quoter(conn), self.node_id, history, [entry]
                )
        return bool(changed)

    async def pending_page(
        self,
        shard: tuple[int, int],
        status: JobStatus,
        after: tuple[dt.datetime, str],
        slots: Iterable[int],
        limit: int,
        before: dt.datetime | None = None,
    ) -> list[JobRecord]:
        """Jobs of one shard in `status` and in `slots`, due before `before` (if given),
        in (action_time, job_id) order after the cursor `after`; walks the
        (status, action_time) index."""
        table, _ = self.shard_tables(shard)
        slot_list = ",".join(str(int(slot)) for slot in slots) or "NULL"
        bound = "" if before is None else " AND action_time < %s"
        params: tuple[Any, ...] = (int(status), after[0], after[0], after[1])
        if before is not None:
            params += (before,)
        async with self.pool.acquire() as conn, conn.cursor() as cur:
            await cur.execute(
                f"SELECT {JOB_COLUMNS} FROM {table}"
                f" WHERE status = %s AND slot IN ({slot_list})"
                f" AND (action_time > %s OR (action_time = %s AND job_id > %s)){bound}"
                f" ORDER BY action_time, job_id LIMIT %s",
                (*params, limit),
            )
            return [record_of_row(row) for row in await cur.fetchall()]

    async def server_now(self) -> dt.datetime:
        """MySQL's clock (naive UTC, ms): the clock that stamps gmt_create."""
        async with self.pool.acquire() as conn, conn.cursor() as cur:
            await cur.execute("SELECT NOW(3)")
            row = await cur.fetchone()
        now: dt.datetime = row[0]
        return now

    async def recent_waiting_page(
        self,
        shard: tuple[int, int],
        after: tuple[dt.datetime, str],
        slots: Iterable[int],
        limit: int,
        before: dt.datetime,
    ) -> list[tuple[dt.datetime, str, int]]:
        """(gmt_create, job_id, slot) of the pending or retrying jobs of one shard in
        `slots`, due before `before`, created after the cursor `after` (gmt_create,
        job_id), in that order; walks idx_created (migration 002). Narrow on purpose:
        most rows it finds are in Redis, and only the others need their payload."""
        table, _ = self.shard_tables(shard)
        slot_list = ",".join(str(int(slot)) for slot in slots) or "NULL"
        async with self.pool.acquire() as conn, conn.cursor() as cur:
            await cur.execute(
                f"SELECT gmt_create, job_id, slot FROM {table}"
                " WHERE gmt_create >= %s AND (gmt_create > %s OR job_id > %s)"
                f" AND status IN ({_WAITING}) AND slot IN ({slot_list}) AND action_time < %s"
                " ORDER BY gmt_create, job_id LIMIT %s",
                (after[0], after[0], after[1], before, limit),
            )
            return [(created, job_id, slot) for created, job_id, slot in await cur.fetchall()]

    async def fired_at(self, job_id: str) -> tuple[int, int] | None:
        """(ms, attempt) of a job's latest fire in its history, as the recorder wrote it
        (the broker's acknowledgement, on the Redis clock); None when none is recorded."""
        for entry in reversed(await self.history(job_id)):
            if entry["status"] == JobStatus.FIRED:
                return sql.datetime_to_ms(entry["at"]), int(entry["attempt"])
        return None

    async def expired_page(self, topic: str | None, limit: int) -> list[JobRecord]:
        """The jobs that expired most recently (of one topic), newest first, at most
        limit; walks the (status, gmt_modified) index of every shard (migration 003)."""
        return await listings.expired_page(self.pool, self._job_tables(), topic, limit)

    async def count_expired(self, topic: str | None) -> int:
        """How many jobs are expired (of one topic), in every shard."""
        return await listings.count_expired(self.pool, self._job_tables(), topic)

    # ----- node side -----------------------------------------------------------------------

    async def record_outcomes(self, outcomes: Sequence[Outcome]) -> None:
        """Apply journal entries from Redis: status, attempts, last error, and history.

        Idempotent: applying the same entries twice leaves the same rows (history may
        repeat a line), so the recorder can retry after a crash. The statements are
        multi-row SQL built as text (cluster/store/job_writes.py).
        """
        by_shard: dict[tuple[int, int], list[Outcome]] = defaultdict(list)
        for outcome in outcomes:
            by_shard[
                shard_of(outcome.job_id, self.settings.mysql_databases, self.settings.mysql_tables)
            ].append(outcome)
        async with self.pool.acquire() as conn, conn.cursor() as cur:
            quote = sql.quoter(conn)
            for shard, items in by_shard.items():
                table, history = self.shard_tables(shard)
                await job_writes.apply_outcomes(cur, quote, table, items)
                entries = [
                    (o.job_id, int(o.status), o.attempt, o.slot, o.note, o.at_ms) for o in items
                ]
                await job_writes.insert_history(cur, quote, self.node_id, history, entries)

    async def history(self, job_id: str) -> list[dict[str, Any]]:
        """A job's status changes, oldest first."""
        _, history = self.tables_of(job_id)
        return await listings.history(self.pool, history, job_id)
