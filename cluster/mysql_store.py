"""The durable record of every job in MySQL, sharded over databases × tables.

A job's shard is a function of its job_id alone (cluster.keys.shard_of), so get and
cancel need nothing else. The shard layout and the cluster's key prefix are stored in
the delayq_meta table at migration time; opening a store with a different layout fails
instead of silently looking for jobs in the wrong tables, and one database serves one
cluster only (another cluster's reconciler would re-add its jobs).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib.resources
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any
from urllib.parse import unquote, urlparse

import aiomysql
import pymysql

from cluster.config import ConfigError, Settings
from cluster.contract import JobStatus
from cluster.jobs import ValidJob, now_ms
from cluster.keys import shard_of

SCHEMA_FILES = ("001_jobs.sql",)
SCHEMA_VERSION = len(SCHEMA_FILES)
ROWS_PER_STATEMENT = 2000
STATEMENT_BYTES = 4 << 20  # well under MySQL's default max_allowed_packet (16 MiB)
UTC = dt.UTC


class SchemaError(RuntimeError):
    """The database is not migrated, or was migrated with another shard layout."""


class CommitUnknown(RuntimeError):
    """The connection broke while MySQL may have been committing: the write may or may
    not have happened."""


# PyMySQL's "Lost connection to MySQL server during query": the statement was sent, so
# when it was the commit, nobody knows whether it took effect.
_LOST_DURING_QUERY = 2013


def ms_to_datetime(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, UTC).replace(tzinfo=None)


def datetime_to_ms(value: dt.datetime) -> int:
    return round(value.replace(tzinfo=UTC).timestamp() * 1000)


@dataclass(frozen=True)
class JobRecord:
    """What get() returns: the durable state of one job."""

    job_id: str
    topic: str
    biz_id: str | None
    biz_type: str | None
    status: JobStatus
    due_ms: int
    attempts: int
    max_attempts: int
    payload_json: str
    slot: int
    last_error: str | None
    created_ms: int
    modified_ms: int

    @property
    def due(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.due_ms / 1000, UTC)


@dataclass(slots=True)  # not frozen: built per job, and frozen init is slower
class Outcome:
    """One journal entry from Redis: a job fired, is retrying, or went dead."""

    job_id: str
    status: JobStatus
    attempt: int
    at_ms: int
    note: str
    slot: int


def parse_mysql_url(url: str) -> dict[str, Any]:
    parsed = urlparse(url)
    if parsed.scheme not in ("mysql", "mariadb"):
        raise ConfigError(f"mysql_url must start with mysql://, got {url!r}")
    database = parsed.path.lstrip("/")
    if not database:
        raise ConfigError(f"mysql_url must name a database: {url!r}")
    return {
        "host": parsed.hostname or "127.0.0.1",
        "port": parsed.port or 3306,
        "user": unquote(parsed.username or "root"),
        "password": unquote(parsed.password or ""),
        "db": database,
    }


_JOB_COLUMNS = (
    "job_id, topic, biz_id, biz_type, status, action_time, attempts, max_attempts, payload,"
    " slot, last_error, gmt_create, gmt_modified"
)


class MySQLStore:
    """Connection pool plus the few statements delayq needs, grouped by shard."""

    def __init__(self, settings: Settings, node_id: str) -> None:
        self.settings = settings
        self.node_id = node_id[:128]
        self.conn_args = parse_mysql_url(settings.mysql_url)
        self.database = self.conn_args["db"]
        self._pool: aiomysql.Pool | None = None

    # ----- lifecycle -----------------------------------------------------------------

    async def open(self, *, check_schema: bool = True) -> None:
        self._pool = await aiomysql.create_pool(
            minsize=1,
            maxsize=10,
            autocommit=True,
            charset="utf8mb4",
            init_command="SET time_zone = '+00:00'",
            **self.conn_args,
        )
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
        return self._shard_tables(
            shard_of(job_id, self.settings.mysql_databases, self.settings.mysql_tables)
        )

    def _shard_tables(self, shard: tuple[int, int]) -> tuple[str, str]:
        db = self.database_name(shard[0])
        return f"`{db}`.`job_{shard[1]:04d}`", f"`{db}`.`job_history_{shard[1]:04d}`"

    def all_shards(self) -> list[tuple[int, int]]:
        return [
            (d, t)
            for d in range(self.settings.mysql_databases)
            for t in range(self.settings.mysql_tables)
        ]

    def _group(self, job_ids: Iterable[str]) -> dict[tuple[int, int], list[str]]:
        groups: dict[tuple[int, int], list[str]] = defaultdict(list)
        for job_id in job_ids:
            groups[shard_of(job_id, self.settings.mysql_databases,
                            self.settings.mysql_tables)].append(job_id)
        return groups

    # ----- schema ----------------------------------------------------------------------

    async def migrate(self) -> list[str]:
        """Create databases and every shard's tables; record the layout. Idempotent."""
        with warnings.catch_warnings():
            # "IF NOT EXISTS" on an existing database or table is a MySQL warning.
            warnings.simplefilter("ignore", pymysql.Warning)
            return await self._migrate()

    async def _migrate(self) -> list[str]:
        done: list[str] = []
        async with self.pool.acquire() as conn, conn.cursor() as cur:
            await cur.execute(
                f"CREATE TABLE IF NOT EXISTS `{self.database}`.delayq_meta ("
                " name VARCHAR(64) NOT NULL PRIMARY KEY, value VARCHAR(255) NOT NULL)"
            )
            layout = await self._read_meta(cur)
            wanted = self._layout()
            if layout and {k: layout.get(k, wanted[k]) for k in wanted} != wanted:
                raise SchemaError(
                    f"database is laid out as {layout}, settings ask for {wanted}; the "
                    "shard layout and key prefix of an existing deployment cannot change"
                )
            for d in range(self.settings.mysql_databases):
                await cur.execute(f"CREATE DATABASE IF NOT EXISTS `{self.database_name(d)}`")
            statements = [
                s.strip()
                for name in SCHEMA_FILES
                for s in importlib.resources.files("schema").joinpath(name).read_text()
                .split(";\n")
                if s.strip() and not all(
                    line.startswith("--") for line in s.strip().splitlines()
                )
            ]
            for shard in self.all_shards():
                jobs, history = self._shard_tables(shard)
                for statement in statements:
                    await cur.execute(statement.format(jobs=jobs, history=history))
                done.append(jobs)
            for name, value in {**wanted, "schema_version": str(SCHEMA_VERSION)}.items():
                await cur.execute(
                    f"REPLACE INTO `{self.database}`.delayq_meta (name, value) VALUES (%s, %s)",
                    (name, value),
                )
        return done

    def _layout(self) -> dict[str, str]:
        return {
            "databases": str(self.settings.mysql_databases),
            "tables": str(self.settings.mysql_tables),
            "key_prefix": self.settings.key_prefix,
            "slots": str(self.settings.slots),
        }

    async def _read_meta(self, cur: Any) -> dict[str, str]:
        await cur.execute(f"SELECT name, value FROM `{self.database}`.delayq_meta")
        return {name: value for name, value in await cur.fetchall()}

    async def check_layout(self) -> None:
        async with self.pool.acquire() as conn, conn.cursor() as cur:
            try:
                meta = await self._read_meta(cur)
            except aiomysql.ProgrammingError:
                meta = {}
        if not meta:
            raise SchemaError(
                f"database {self.database!r} has no delayq schema: run `delayq db migrate`"
            )
        if int(meta.get("schema_version", "0")) < SCHEMA_VERSION:
            raise SchemaError("the delayq schema is out of date: run `delayq db migrate`")
        wanted = self._layout()
        if meta.get("key_prefix", wanted["key_prefix"]) != wanted["key_prefix"]:
            raise SchemaError(
                f"database {self.database!r} belongs to the cluster with key_prefix "
                f"{meta.get('key_prefix')!r}, not {wanted['key_prefix']!r}: give each cluster "
                "its own database"
            )
        if {k: meta.get(k) for k in ("databases", "tables")} != {
            k: wanted[k] for k in ("databases", "tables")
        }:
            raise SchemaError(
                f"the database holds a {meta.get('databases')}×{meta.get('tables')} shard "
                f"layout but settings say {wanted['databases']}×{wanted['tables']}"
            )
        if meta.get("slots", wanted["slots"]) != wanted["slots"]:
            # A producer with another slot count would put jobs in slots no node owns.
            raise SchemaError(
                f"the cluster has {meta['slots']} slots but settings say "
                f"slots={wanted['slots']}: the slot count is fixed when a cluster is created"
            )

    # ----- producer side -----------------------------------------------------------------

    async def insert_jobs(self, jobs: Sequence[ValidJob], slots: Sequence[int]) -> None:
        """Insert each job; an existing job_id keeps its row. Multi-row statements, in
        one transaction when there are several.

        "ON DUPLICATE KEY UPDATE job_id = job_id" rather than INSERT IGNORE: same effect,
        but no MySQL warning (which costs aiomysql a SHOW WARNINGS round trip).
        """
        if not jobs:
            return
        by_shard: dict[tuple[int, int], list[int]] = defaultdict(list)
        for index, job in enumerate(jobs):
            by_shard[shard_of(job.job_id, self.settings.mysql_databases,
                              self.settings.mysql_tables)].append(index)
        async with self.pool.acquire() as conn:
            statements = self._insert_statements(conn, jobs, slots, by_shard)
            # Several statements go in one transaction: all jobs of the call or none.
            # The first two are built up front to know whether there is a second.
            first, second = next(statements), next(statements, None)
            in_transaction = second is not None
            if in_transaction:
                await conn.begin()
            committing = not in_transaction
            try:
                async with conn.cursor() as cur:
                    await _execute_overlapped(
                        cur, chain([first], [second] if second else [], statements))
                if in_transaction:
                    committing = True
                    await conn.commit()
            except pymysql.err.OperationalError as exc:
                if committing and exc.args and exc.args[0] == _LOST_DURING_QUERY:
                    raise CommitUnknown(str(exc)) from exc
                raise  # not committed: a broken connection rolls the transaction back

    def _insert_statements(
        self, conn: Any, jobs: Sequence[ValidJob], slots: Sequence[int],
        by_shard: dict[tuple[int, int], list[int]],
    ) -> Iterator[str]:
        """Multi-row INSERTs of the jobs, at most ROWS_PER_STATEMENT rows and about
        STATEMENT_BYTES each. Built here rather than by the driver, whose per-parameter
        escaping cost more than the database's work."""
        quote = _quoter(conn)
        times = _DatetimeLiterals()
        topics: dict[str, str] = {}
        for shard, indexes in by_shard.items():
            table, _ = self._shard_tables(shard)
            head = (f"INSERT INTO {table} (job_id, topic, biz_id, biz_type, status,"
                    f" action_time, max_attempts, payload, slot) VALUES ")
            tail = " ON DUPLICATE KEY UPDATE job_id = job_id"
            values: list[str] = []
            size = 0
            for i in indexes:
                job = jobs[i]
                topic = topics.get(job.topic)
                if topic is None:
                    topic = topics[job.topic] = quote(job.topic)
                row = (f"({quote(job.job_id)},{topic},{quote(job.biz_id)},"
                       f"{quote(job.biz_type)},0,{times.of(job.due_ms)},"
                       f"{int(job.max_attempts)},{quote(job.payload_json.decode())},"
                       f"{int(slots[i])})")
                values.append(row)
                size += len(row)
                if len(values) == ROWS_PER_STATEMENT or size >= STATEMENT_BYTES:
                    yield head + ",".join(values) + tail
                    values, size = [], 0
            if values:
                yield head + ",".join(values) + tail

    async def get_many(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        found: dict[str, JobRecord] = {}
        async with self.pool.acquire() as conn, conn.cursor() as cur:
            for shard, ids in self._group(job_ids).items():
                table, _ = self._shard_tables(shard)
                marks = ", ".join(["%s"] * len(ids))
                await cur.execute(
                    f"SELECT {_JOB_COLUMNS} FROM {table} WHERE job_id IN ({marks})", ids
                )
                for row in await cur.fetchall():
                    record = _record(row)
                    found[record.job_id] = record
        return found

    async def get(self, job_id: str) -> JobRecord | None:
        return (await self.get_many([job_id])).get(job_id)

    async def set_status(
        self, job_id: str, status: JobStatus, slot: int, *, from_statuses: tuple[int, ...],
        note: str = "", reset_attempts: bool = False,
    ) -> bool:
        """Move a job to status if it is in one of from_statuses; True if it moved.
        reset_attempts also clears its attempts and last error (a dead-letter replay)."""
        table, history = self.tables_of(job_id)
        marks = ", ".join(["%s"] * len(from_statuses))
        reset = ", attempts = 0, last_error = NULL" if reset_attempts else ""
        async with self.pool.acquire() as conn, conn.cursor() as cur:
            changed = await cur.execute(
                f"UPDATE {table} SET status = %s{reset}"
                f" WHERE job_id = %s AND status IN ({marks})",
                (int(status), job_id, *from_statuses),
            )
            if changed:
                await self._history(cur, _quoter(conn), history,
                                    [(job_id, int(status), 0, slot, note, now_ms())])
        return bool(changed)

    async def set_due(self, job_id: str, due_ms: int, slot: int) -> bool:
        """Record a reschedule of a job that has not fired; True if its row changed."""
        table, history = self.tables_of(job_id)
        async with self.pool.acquire() as conn, conn.cursor() as cur:
            changed = await cur.execute(
                f"UPDATE {table} SET action_time = %s WHERE job_id = %s AND status IN (0, 1)",
                (ms_to_datetime(due_ms), job_id),
            )
            if changed:
                await self._history(
                    cur, _quoter(conn), history,
                    [(job_id, int(JobStatus.PENDING), 0, slot, "rescheduled", now_ms())],
                )
        return bool(changed)

    async def pending_page(
        self, shard: tuple[int, int], status: JobStatus, after: tuple[dt.datetime, str],
        slots: Iterable[int], limit: int, before: dt.datetime | None = None,
    ) -> list[JobRecord]:
        """Jobs of one shard in `status` and in `slots`, due before `before` (if given),
        in (action_time, job_id) order after the cursor `after`; walks the
        (status, action_time) index."""
        table, _ = self._shard_tables(shard)
        slot_list = ",".join(str(int(slot)) for slot in slots) or "NULL"
        bound = "" if before is None else " AND action_time < %s"
        params: tuple[Any, ...] = (int(status), after[0], after[0], after[1])
        if before is not None:
            params += (before,)
        async with self.pool.acquire() as conn, conn.cursor() as cur:
            await cur.execute(
                f"SELECT {_JOB_COLUMNS} FROM {table}"
                f" WHERE status = %s AND slot IN ({slot_list})"
                f" AND (action_time > %s OR (action_time = %s AND job_id > %s)){bound}"
                f" ORDER BY action_time, job_id LIMIT %s",
                (*params, limit),
            )
            return [_record(row) for row in await cur.fetchall()]

    # ----- node side -----------------------------------------------------------------------

    async def record_outcomes(self, outcomes: Sequence[Outcome]) -> None:
        """Apply journal entries from Redis: status, attempts, last error, and history.

        Idempotent: applying the same entries twice leaves the same rows (history may
        repeat a line), so the recorder can retry after a crash. The hot statements are
        built here as multi-row SQL (one escape per text value) because per-parameter
        escaping in the driver cost more than the database work.
        """
        by_shard: dict[tuple[int, int], list[Outcome]] = defaultdict(list)
        for outcome in outcomes:
            by_shard[shard_of(outcome.job_id, self.settings.mysql_databases,
                              self.settings.mysql_tables)].append(outcome)
        async with self.pool.acquire() as conn, conn.cursor() as cur:
            quote = _quoter(conn)
            for shard, items in by_shard.items():
                table, history = self._shard_tables(shard)
                fired = [o for o in items if o.status == JobStatus.FIRED]
                for attempt, ids in _ids_by_attempt(fired).items():
                    for start in range(0, len(ids), ROWS_PER_STATEMENT):
                        id_list = ",".join(map(quote, ids[start : start + ROWS_PER_STATEMENT]))
                        # Dead too: a job the reaper buried whose publish was acked late.
                        await cur.execute(
                            f"UPDATE {table} SET status = 2, attempts = {int(attempt)}"
                            f" WHERE job_id IN ({id_list}) AND status IN (0, 1, 4)"
                        )
                # In journal order: a job's "dead" comes before its "replayed".
                others = [o for o in items if o.status != JobStatus.FIRED]
                if others:
                    await cur.executemany(
                        f"UPDATE {table} SET status = %s, attempts = %s, last_error = %s"
                        f" WHERE job_id = %s AND status IN (0, 1, %s)",
                        [_status_change(o) for o in others],
                    )
                await self._history(
                    cur, quote, history,
                    [(o.job_id, int(o.status), o.attempt, o.slot, o.note, o.at_ms)
                     for o in items],
                )

    async def _history(
        self, cur: Any, quote: Callable[[str | None], str], table: str,
        rows: Sequence[tuple[str, int, int, int, str, int]],
    ) -> None:
        """Insert history rows (job_id, status, attempt, slot, note, at_ms)."""
        node = quote(self.node_id)
        for start in range(0, len(rows), ROWS_PER_STATEMENT):
            values = ",".join(
                f"({quote(job_id)},{int(status)},{int(attempt)},{node},{int(slot)},"
                f"FROM_UNIXTIME({at_ms // 1000}.{at_ms % 1000:03d}),{quote(note[:1000] or None)})"
                for job_id, status, attempt, slot, note, at_ms
                in rows[start : start + ROWS_PER_STATEMENT]
            )
            await cur.execute(
                f"INSERT INTO {table} (job_id, status, attempt, node, slot, at, note)"
                f" VALUES {values}"
            )

    async def history(self, job_id: str) -> list[dict[str, Any]]:
        """A job's status changes, oldest first."""
        _, history = self.tables_of(job_id)
        async with self.pool.acquire() as conn, conn.cursor(aiomysql.DictCursor) as cur:
            await cur.execute(
                f"SELECT status, attempt, node, slot, at, note FROM {history}"
                " WHERE job_id = %s ORDER BY id",
                (job_id,),
            )
            return list(await cur.fetchall())


def _status_change(outcome: Outcome) -> tuple[int, int, str | None, str, int]:
    """Parameters of the UPDATE for a retrying, dead or replayed outcome: status,
    attempts, last error, job id, and the third status the row may be in besides
    pending (0) and retrying (1). A replay (status 0) applies to a dead row and clears
    the last error; retrying and dead apply only to pending and retrying rows."""
    if outcome.status == JobStatus.PENDING:
        return (0, outcome.attempt, None, outcome.job_id, int(JobStatus.DEAD))
    return (int(outcome.status), outcome.attempt, outcome.note[:1000] or None,
            outcome.job_id, int(JobStatus.FIRING))


async def _execute_overlapped(cur: Any, statements: Iterable[str]) -> None:
    """Run the statements in order, building each next one while MySQL runs the last:
    the producer's CPU and the database's work overlap instead of taking turns."""
    running: asyncio.Task[Any] | None = None
    try:
        for statement in statements:
            if running is not None:
                await running
            running = asyncio.create_task(cur.execute(statement))
            await asyncio.sleep(0)  # the task sends the statement before we build on
        if running is not None:
            await running
    finally:
        if running is not None and not running.done():
            # Building failed: the connection must not go back to the pool mid-query.
            await asyncio.wait([running])


class _DatetimeLiterals:
    """SQL DATETIME(3) literals of UTC epoch milliseconds; the second's text is cached,
    since the jobs of one call tend to share seconds."""

    def __init__(self) -> None:
        self._seconds: dict[int, str] = {}

    def of(self, ms: int) -> str:
        second, millis = divmod(ms, 1000)
        text = self._seconds.get(second)
        if text is None:
            text = self._seconds[second] = f"{ms_to_datetime(second * 1000):%Y-%m-%d %H:%M:%S}"
        return f"'{text}.{millis:03d}'"


def _quoter(conn: Any) -> Callable[[str | None], str]:
    """A SQL literal for a text value (or NULL), escaped the way this connection needs."""

    def quote(value: str | None) -> str:
        return "NULL" if value is None else f"'{conn.escape_string(value)}'"

    return quote


def _ids_by_attempt(outcomes: Iterable[Outcome]) -> dict[int, list[str]]:
    groups: dict[int, list[str]] = defaultdict(list)
    for outcome in outcomes:
        groups[outcome.attempt].append(outcome.job_id)
    return groups


def _record(row: Sequence[Any]) -> JobRecord:
    (job_id, topic, biz_id, biz_type, status, action_time, attempts, max_attempts, payload,
     slot, last_error, created, modified) = row
    return JobRecord(
        job_id=job_id, topic=topic, biz_id=biz_id, biz_type=biz_type,
        status=JobStatus(status), due_ms=datetime_to_ms(action_time), attempts=attempts,
        max_attempts=max_attempts, payload_json=payload, slot=slot, last_error=last_error,
        created_ms=datetime_to_ms(created), modified_ms=datetime_to_ms(modified),
    )


async def create_cluster_database(settings: Settings, database: str) -> Settings:
    """Create a new database for one cluster, migrate it, and return settings that
    point at it (benchmarks and tests run each cluster on a database of its own)."""
    admin = {**parse_mysql_url(settings.mysql_url), "db": None}
    conn = await aiomysql.connect(**admin)
    try:
        async with conn.cursor() as cur:
            await cur.execute(f"CREATE DATABASE `{database}`")
    finally:
        conn.close()
    created = settings.replace(mysql_url=settings.mysql_url.rsplit("/", 1)[0] + f"/{database}")
    store = MySQLStore(created, "setup")
    await store.open(check_schema=False)
    try:
        await store.migrate()
    finally:
        await store.close()
    return created


async def drop_cluster_database(settings: Settings) -> None:
    """Drop the database settings.mysql_url names (and every shard database)."""
    store = MySQLStore(settings, "teardown")
    admin = {**store.conn_args, "db": None}
    conn = await aiomysql.connect(**admin)
    try:
        async with conn.cursor() as cur:
            for db in {store.database_name(d) for d in range(settings.mysql_databases)}:
                await cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
    finally:
        conn.close()
