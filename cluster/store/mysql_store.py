"""The durable record of every job in MySQL: the statements of the client, the nodes
and the tools, each sent to the server of the shards it touches (cluster/store/sharded.py
has the pools, the shard homes, the table names and the schema check). SQL status
numbers come from cluster/model/contract.py.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from cluster.errors import CommitUnknown, SchemaError, StoreMismatch
from cluster.model.contract import WAITING_STATUSES, JobStatus
from cluster.model.jobs import ValidJob, now_ms
from cluster.store import connect, inserts, job_writes, listings, sql
from cluster.store.inserts import PartialCommit
from cluster.store.routing import SERVER_DOWN
from cluster.store.rows import JOB_COLUMNS, JobRecord, Outcome, record_of_row
from cluster.store.sharded import Shard, ShardedStore
from cluster.store.sql import ms_to_datetime

# Re-exported: the client, actors and tests import these from here.
__all__ = [
    "CommitUnknown",
    "JobRecord",
    "MySQLStore",
    "Outcome",
    "PartialCommit",
    "SchemaError",
    "ms_to_datetime",
]

# Not fired yet (pending or retrying), as SQL, built once from cluster/model/contract.py.
_WAITING = sql.int_list(WAITING_STATUSES)


class MySQLStore(ShardedStore):
    """The few statements delayq needs, grouped by shard and by server."""

    # ----- producer side -----------------------------------------------------------------

    async def insert_jobs(self, jobs: Sequence[ValidJob], slots: Sequence[int]) -> int:
        """inserts.insert_jobs: new jobs' rows, one transaction per server."""
        return await inserts.insert_jobs(self, jobs, slots)

    async def insert_in_transaction(self, conn: Any, job: ValidJob, slot: int) -> None:
        """Insert a job's row and its outbox row through the caller's connection, inside
        the caller's transaction (no commit here): both exist if and only if that
        transaction commits. An existing job_id keeps its row (its outbox row only makes
        the owning node look at it again).

        The connection must reach the server serving the job's logical shard (server_of):
        that server's delayq_shards row is read first, under a shared lock that holds
        off a shard move's switch until the caller's transaction ends; a connection to
        another server raises StoreMismatch."""
        shard = self.shard_of(job.job_id)
        async with conn.cursor() as cur:
            await connect.check_session_charset(cur)
            await cur.execute(
                f"SELECT state FROM `{self.database}`.delayq_shards WHERE db_index = %s"
                " LOCK IN SHARE MODE",
                (shard[0],),
            )
            row = await cur.fetchone()
            if row is None or row[0] != "home":
                home = self.router.homes.get(shard[0])
                where = f"{self.servers[home]}" if home is not None else "a server not answering"
                raise StoreMismatch(
                    f"job {job.job_id!r} belongs to logical shard {shard[0]}, served by "
                    f"{where}, and this connection's server does not serve it: open the "
                    f"transaction on the server DelayClient.server_of(job_id) names"
                )
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
        (actors/outbox.py). How recurring schedules' ticks become jobs: `conn` is on the
        server of the schedule's shard, and a tick's job id is in that same logical
        shard (cluster/store/recurring_store.py)."""
        by_shard = self.by_shard(job.job_id for job in jobs)
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
    ) -> dict[Shard, list[tuple[int, str, int]]]:
        """The oldest outbox rows (id, job_id, slot) of these slots, at most `limit` per
        shard, by shard (only shards that have some), in one round trip per server
        (listings.outbox_pages)."""
        if not slots:
            return {}

        async def pages(conn: Any, dbs: list[int]) -> dict[Shard, list[tuple[int, str, int]]]:
            tables = [(shard, self.outbox_table(shard)) for shard in self.all_shards(dbs)]
            return await listings.outbox_pages(conn, tables, slots, limit)

        # A server down holds back only its own shards' rows.
        found: dict[Shard, list[tuple[int, str, int]]] = {}
        parts, _ = await self.router.run_each_server(self._known_dbs(), pages, stall=True)
        for part in parts:
            found.update(part)
        return found

    def _every_db(self) -> list[int]:
        return list(range(self.settings.mysql_databases))

    def _known_dbs(self) -> list[int]:
        """The logical shards a server answering serves (the others: nothing to read)."""
        return sorted(self.router.homes)

    async def delete_outbox(self, shard: Shard, ids: Sequence[int]) -> None:
        if not ids:
            return
        listed = ",".join(str(int(i)) for i in ids)

        async def delete(conn: Any) -> None:
            async with conn.cursor() as cur:
                await cur.execute(f"DELETE FROM {self.outbox_table(shard)} WHERE id IN ({listed})")

        await self.router.run(shard[0], delete)

    async def get_many(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        """The rows of these jobs (a job without a row is absent); raises when a server
        holding some of them does not answer."""
        rows, unread = await self.get_answering(job_ids)
        if unread:
            raise unread[0][1]
        return rows

    async def get_answering(
        self, job_ids: Sequence[str], timeout_s: float | None = None
    ) -> tuple[dict[str, JobRecord], list[tuple[list[str], BaseException]]]:
        """The rows of these jobs that the servers answering (within timeout_s, default
        mysql_statement_timeout_s) hold, and the jobs whose server did not answer, with
        its error: a server down or frozen holds back only its own (one silent for
        mysql_stall_s while another has answered is cut off: ServerStalled)."""
        by_shard = self.by_shard(job_ids)

        async def read(conn: Any, dbs: list[int]) -> dict[str, JobRecord]:
            found: dict[str, JobRecord] = {}
            async with conn.cursor() as cur:
                for shard, indexes in by_shard.items():
                    if shard[0] not in dbs:
                        continue
                    ids = [job_ids[i] for i in indexes]
                    marks = ", ".join(["%s"] * len(ids))
                    await cur.execute(
                        f"SELECT {JOB_COLUMNS} FROM {self.shard_tables(shard)[0]}"
                        f" WHERE job_id IN ({marks})",
                        ids,
                    )
                    for row in await cur.fetchall():
                        record = record_of_row(row)
                        found[record.job_id] = record
            return found

        if not job_ids:
            return {}, []
        dbs = {shard[0] for shard in by_shard}
        bounded = True if timeout_s is None else timeout_s
        parts, failures = await self.router.run_each_server(dbs, read, bounded=bounded, stall=True)
        results: dict[str, JobRecord] = {}
        for part in parts:
            results.update(part)
        unread = [
            ([job_ids[i] for shard, ix in by_shard.items() if shard[0] in dbs for i in ix], error)
            for dbs, error in failures
        ]
        return results, unread

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

        async def update(conn: Any) -> int:
            async with conn.cursor() as cur:
                changed: int = await cur.execute(
                    f"UPDATE {table} SET status = %s{reset} WHERE job_id = %s"
                    f" AND status IN ({marks}){unrestored}",
                    (int(status), job_id, *from_statuses, *since),
                )
                if changed:
                    entry = (job_id, int(status), 0, slot, note, now_ms())
                    await job_writes.insert_history(
                        cur, sql.quoter(conn), self.node_id, history, [entry]
                    )
            return changed

        return bool(await self.router.run(self.shard_of(job_id)[0], update))

    async def set_due(self, job_id: str, due_ms: int, slot: int) -> bool:
        """Record a reschedule of a job that has not fired; True if its row changed."""
        table, history = self.tables_of(job_id)

        async def update(conn: Any) -> int:
            async with conn.cursor() as cur:
                changed: int = await cur.execute(
                    f"UPDATE {table} SET action_time = %s WHERE job_id = %s"
                    f" AND status IN ({_WAITING})",
                    (ms_to_datetime(due_ms), job_id),
                )
                if changed:
                    entry = (job_id, int(JobStatus.PENDING), 0, slot, "rescheduled", now_ms())
                    await job_writes.insert_history(
                        cur, sql.quoter(conn), self.node_id, history, [entry]
                    )
            return changed

        return bool(await self.router.run(self.shard_of(job_id)[0], update))

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

        async def read(conn: Any) -> list[JobRecord]:
            async with conn.cursor() as cur:
                await cur.execute(
                    f"SELECT {JOB_COLUMNS} FROM {table}"
                    f" WHERE status = %s AND slot IN ({slot_list})"
                    f" AND (action_time > %s OR (action_time = %s AND job_id > %s)){bound}"
                    f" ORDER BY action_time, job_id LIMIT %s",
                    (*params, limit),
                )
                return [record_of_row(row) for row in await cur.fetchall()]

        return await self.router.run(shard[0], read)

    async def server_now(self, db_index: int | None = None) -> dt.datetime:
        """The clock (naive UTC, ms) of the server serving a logical shard (None: of the
        first server that answers): the clock that stamps rows' gmt_create. Servers'
        clocks agree within seconds (NTP; docs/cluster.md)."""

        async def read(conn: Any) -> dt.datetime:
            async with conn.cursor() as cur:
                await cur.execute("SELECT NOW(3)")
                row = await cur.fetchone()
            now: dt.datetime = row[0]
            return now

        if db_index is not None:
            return await self.router.run(db_index, read)
        failure: BaseException | None = None
        for d in sorted(self.homes) or [0]:
            try:
                return await self.router.run(d, read)
            except SERVER_DOWN as exc:
                failure = failure or exc
        assert failure is not None
        raise failure

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

        async def read(conn: Any) -> list[tuple[dt.datetime, str, int]]:
            async with conn.cursor() as cur:
                await cur.execute(
                    f"SELECT gmt_create, job_id, slot FROM {table}"
                    " WHERE gmt_create >= %s AND (gmt_create > %s OR job_id > %s)"
                    f" AND status IN ({_WAITING}) AND slot IN ({slot_list}) AND action_time < %s"
                    " ORDER BY gmt_create, job_id LIMIT %s",
                    (after[0], after[0], after[1], before, limit),
                )
                return [(created, job_id, slot) for created, job_id, slot in await cur.fetchall()]

        return await self.router.run(shard[0], read)

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

        async def read(conn: Any, dbs: list[int]) -> list[JobRecord]:
            tables = [self.shard_tables(shard)[0] for shard in self.all_shards(dbs)]
            return await listings.expired_page(conn, tables, topic, limit)

        found = [r for part in await self.router.run_grouped(self._every_db(), read) for r in part]
        found.sort(key=lambda record: (-record.modified_ms, record.job_id))
        return found[:limit]

    async def count_expired(self, topic: str | None) -> int:
        """How many jobs are expired (of one topic), in every shard."""

        async def count(conn: Any, dbs: list[int]) -> int:
            tables = [self.shard_tables(shard)[0] for shard in self.all_shards(dbs)]
            return await listings.count_expired(conn, tables, topic)

        return sum(await self.router.run_grouped(self._every_db(), count))

    # ----- node side -----------------------------------------------------------------------

    async def record_outcomes(self, outcomes: Sequence[Outcome]) -> None:
        """Apply journal entries from Redis: status, attempts, last error, and history.

        Idempotent: applying the same entries twice leaves the same rows (history may
        repeat a line), so the recorder can retry after a crash. The statements are
        multi-row SQL built as text (cluster/store/job_writes.py).
        """
        by_shard: dict[Shard, list[Outcome]] = defaultdict(list)
        for outcome in outcomes:
            by_shard[self.shard_of(outcome.job_id)].append(outcome)

        async def write(conn: Any, dbs: list[int]) -> None:
            # One transaction per server: a reader never sees a status without its
            # history line, and the server flushes its log once per round, not per table.
            await conn.begin()
            try:
                async with conn.cursor() as cur:
                    quote = sql.quoter(conn)
                    for shard, items in by_shard.items():
                        if shard[0] not in dbs:
                            continue
                        table, history = self.shard_tables(shard)
                        await job_writes.apply_outcomes(cur, quote, table, items)
                        entries = [
                            (o.job_id, int(o.status), o.attempt, o.slot, o.note, o.at_ms)
                            for o in items
                        ]
                        await job_writes.insert_history(cur, quote, self.node_id, history, entries)
                await conn.commit()
            except BaseException:
                # A broken connection rolls back by itself; one that works is given back clean.
                with contextlib.suppress(Exception):
                    await conn.rollback()
                raise

        if by_shard:
            await self.router.run_grouped({shard[0] for shard in by_shard}, write)

    async def history(self, job_id: str) -> list[dict[str, Any]]:
        """A job's status changes, oldest first."""
        _, history = self.tables_of(job_id)
        return await self.router.run(
            self.shard_of(job_id)[0], lambda conn: listings.history(conn, history, job_id)
        )
