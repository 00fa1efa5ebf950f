"""The row copier of a shard move (cluster/store/shard_move.py): copies one logical
shard's tables from the source server's database to the target server's, in rounds, each
safe to repeat (multi-row INSERT ... ON DUPLICATE KEY UPDATE of every column).

What a round copies, by table kind:

- job and job_recurring rows change in place (every UPDATE moves gmt_modified, `ON UPDATE
  CURRENT_TIMESTAMP(3)`; inserts stamp it too): a round copies the rows whose gmt_modified
  is at or after the round's `changed_since` (the first round: every row).
- job_history and job_outbox rows are only ever inserted (and deleted): a round copies
  the rows whose id is above the table's floor.

Neither a time nor an id says when a row was committed: a transaction may stamp a row or
take an id and commit seconds later, after a round looked. So each round first takes a
snapshot on the source: the highest id of each insert-only table, the server's clock
(NOW(3), the clock that stamps gmt_modified), and the start of the oldest transaction
still open (information_schema.INNODB_TRX, which needs the PROCESS privilege). A row
changed after the round looked was changed by a transaction that was open at the
snapshot, or that started after it: its gmt_modified is at or after the earlier of the
two, which is the next round's `changed_since` (less a margin). Once every transaction
open at the snapshot has ended (the round waits for that a little), every id up to the
snapshot's highest is committed, so this round sees them all: that id is the next
round's floor. The final round runs after the switch renamed the source tables, when no
transaction can touch them any more, with the marks of the round before it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiomysql

from cluster.model.contract import JobStatus

Progress = Callable[[str], None]

PAGE_ROWS = 2000
PAGE_BYTES = 4 << 20  # a statement well under MySQL's default max_allowed_packet
WORKERS = 4  # tables copied at once
# Between a statement's start (its NOW(), what it stamps) and its transaction's start.
MARGIN = dt.timedelta(seconds=1)
SETTLE_WAIT_S = 3.0  # how long a snapshot waits for the transactions open at it to end
SETTLE_POLL_S = 0.1
PROGRESS_EVERY_S = 2.0
_STATUSES = ", ".join(str(int(s)) for s in JobStatus)  # walks idx_status_modified


@dataclass(frozen=True)
class Kind:
    prefix: str  # table name without _NNNN
    key: str  # primary key column
    appended: bool  # rows only inserted and deleted (copied by id), else changed in place
    exact: bool  # rows deleted on the source are deleted on the target at the final round


JOB = Kind("job", "job_id", appended=False, exact=False)
HISTORY = Kind("job_history", "id", appended=True, exact=False)
OUTBOX = Kind("job_outbox", "id", appended=True, exact=True)
RECURRING = Kind("job_recurring", "name", appended=False, exact=True)
KINDS = (JOB, HISTORY, OUTBOX, RECURRING)


def shard_table_names(tables: int) -> list[tuple[Kind, str]]:
    """Every table of one logical shard, with its kind."""
    return [(kind, f"{kind.prefix}_{t:04d}") for t in range(tables) for kind in KINDS]


@dataclass
class Marks:
    """Where a round starts: rows changed at or after changed_since (None: every row) and
    ids above each insert-only table's floor."""

    changed_since: dt.datetime | None
    floors: dict[str, int] = field(default_factory=dict)


def q(name: str) -> str:
    return f"`{name}`"


async def fetch(pool: aiomysql.Pool, statement: str, args: Any = None) -> list[tuple[Any, ...]]:
    async with pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute(statement, args)
        return list(await cur.fetchall())


class Copier:
    """Copies the tables of one logical shard from `source_db` on the source server to
    `target_db` on the target, counting rows per kind."""

    def __init__(
        self,
        source: aiomysql.Pool,
        target: aiomysql.Pool,
        target_db: str,
        tables: list[tuple[Kind, str]],
        columns: dict[str, list[str]],
        progress: Progress | None = None,
    ) -> None:
        self.source, self.target = source, target
        self.target_db = target_db
        self.tables = tables
        self.columns = columns  # table -> its columns, in order
        self.progress = progress
        self.rows: Counter[str] = Counter()  # rows written to the target, by kind
        self._phase = ""
        self._phase_rows = 0
        self._phase_start = 0.0
        self._said_at = 0.0

    # ----- rounds ----------------------------------------------------------------------

    async def snapshot(self, source_db: str, marks: Marks) -> Marks:
        """Take a round's snapshot (the module's docstring) and return the marks of the
        round after it."""
        appended = [name for kind, name in self.tables if kind.appended]
        highest = await fetch(
            self.source,
            " UNION ALL ".join(
                f"SELECT '{name}', COALESCE(MAX(id), 0) FROM {q(source_db)}.{q(name)}"
                for name in appended
            ),
        )
        [(now,)] = await fetch(self.source, "SELECT NOW(3)")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_WAIT_S
        while True:
            # Whole seconds: a start shown after `now` began after it. A transaction
            # that has changed nothing and runs no statement now writes, if ever, with
            # a later statement's time and ids: it does not hold the marks back.
            [(oldest,)] = await fetch(
                self.source,
                "SELECT MIN(trx_started) FROM information_schema.INNODB_TRX"
                " WHERE trx_rows_modified > 0 OR trx_query IS NOT NULL",
            )
            settled = oldest is None or oldest > now
            if settled or loop.time() >= deadline:
                break
            await asyncio.sleep(SETTLE_POLL_S)
        since = now if oldest is None else min(now, oldest)
        floors = {name: int(top) for name, top in highest} if settled else dict(marks.floors)
        return Marks(since - MARGIN, floors)

    async def copy_round(self, source_db: str, marks: Marks, phase: str) -> int:
        """Copy what `marks` says may be missing from the target; the rows written."""
        self._start_phase(phase)
        before = sum(self.rows.values())
        jobs = asyncio.Queue[tuple[Kind, str]]()
        for item in self.tables:
            jobs.put_nowait(item)

        async def worker() -> None:
            while not jobs.empty():
                kind, name = jobs.get_nowait()
                if kind.appended:
                    await self._copy_appended(source_db, kind, name, marks.floors.get(name, 0))
                elif marks.changed_since is None:
                    await self._copy_all(source_db, kind, name)
                else:
                    await self._copy_changed(source_db, kind, name, marks.changed_since)

        await _gather_all(worker() for _ in range(min(WORKERS, len(self.tables))))
        return sum(self.rows.values()) - before

    async def make_exact(self, source_db: str) -> int:
        """Delete from the target's exact tables (outbox, recurring) the rows the source
        no longer has; the rows deleted."""
        deleted = 0
        for kind, name in self.tables:
            if not kind.exact:
                continue
            have = {r[0] for r in await fetch(self.source, self._keys(source_db, kind, name))}
            extra = [
                r[0]
                for r in await fetch(self.target, self._keys(self.target_db, kind, name))
                if r[0] not in have
            ]
            for start in range(0, len(extra), PAGE_ROWS):
                chunk = extra[start : start + PAGE_ROWS]
                async with self.target.acquire() as conn, conn.cursor() as cur:
                    deleted += await cur.execute(
                        f"DELETE FROM {q(self.target_db)}.{q(name)} WHERE {kind.key} IN "
                        f"({', '.join(['%s'] * len(chunk))})",
                        chunk,
                    )
        return deleted

    async def match_counters(self, source_db: str) -> None:
        """Give each target table at least the source's AUTO_INCREMENT, so that no id the
        source handed out (to a row deleted before it was copied) is handed out again."""
        query = (
            "SELECT TABLE_NAME, AUTO_INCREMENT FROM information_schema.TABLES"
            " WHERE TABLE_SCHEMA = %s AND AUTO_INCREMENT IS NOT NULL"
        )
        source = dict(await fetch(self.source, query, (source_db,)))
        target = dict(await fetch(self.target, query, (self.target_db,)))
        for name, counter in source.items():
            if name in target and int(counter) > int(target[name]):
                async with self.target.acquire() as conn, conn.cursor() as cur:
                    await cur.execute(
                        f"ALTER TABLE {q(self.target_db)}.{q(name)} AUTO_INCREMENT = {int(counter)}"
                    )

    # ----- one table -------------------------------------------------------------------

    @staticmethod
    def _keys(db: str, kind: Kind, name: str) -> str:
        return f"SELECT {kind.key} FROM {q(db)}.{q(name)}"

    async def _copy_all(self, source_db: str, kind: Kind, name: str) -> None:
        """Every row, in pages by primary key."""
        select = f"SELECT {self._column_list(name)} FROM {q(source_db)}.{q(name)}"
        position = self.columns[name].index(kind.key)
        after: Any = None
        while True:
            where = "" if after is None else f" WHERE {kind.key} > %s"
            rows = await fetch(
                self.source,
                f"{select}{where} ORDER BY {kind.key} LIMIT {PAGE_ROWS}",
                None if after is None else (after,),
            )
            await self._write(kind, name, rows)
            if len(rows) < PAGE_ROWS:
                return
            after = rows[-1][position]

    async def _copy_appended(self, source_db: str, kind: Kind, name: str, floor: int) -> None:
        """The rows with an id above floor, in pages by id."""
        select = f"SELECT {self._column_list(name)} FROM {q(source_db)}.{q(name)}"
        position = self.columns[name].index("id")
        while True:
            rows = await fetch(
                self.source, f"{select} WHERE id > %s ORDER BY id LIMIT {PAGE_ROWS}", (floor,)
            )
            await self._write(kind, name, rows)
            if len(rows) < PAGE_ROWS:
                return
            floor = int(rows[-1][position])

    async def _copy_changed(
        self, source_db: str, kind: Kind, name: str, since: dt.datetime
    ) -> None:
        """The rows changed at or after `since`: their keys first (job tables: through
        the (status, gmt_modified) index), then the rows, a page at a time."""
        table = f"{q(source_db)}.{q(name)}"
        status = f"status IN ({_STATUSES}) AND " if kind is JOB else ""
        keys = [
            r[0]
            for r in await fetch(
                self.source,
                f"SELECT {kind.key} FROM {table} WHERE {status}gmt_modified >= %s",
                (since,),
            )
        ]
        for start in range(0, len(keys), PAGE_ROWS):
            chunk = keys[start : start + PAGE_ROWS]
            rows = await fetch(
                self.source,
                f"SELECT {self._column_list(name)} FROM {table} WHERE {kind.key} IN "
                f"({', '.join(['%s'] * len(chunk))})",
                chunk,
            )
            await self._write(kind, name, rows)

    def _column_list(self, name: str) -> str:
        return ", ".join(q(c) for c in self.columns[name])

    async def _write(self, kind: Kind, name: str, rows: Sequence[tuple[Any, ...]]) -> None:
        """Upsert rows into the target table: every column as the source has it. Values
        go as parameters (PyMySQL escapes each by its type: text, bytes, DATETIME(3)
        with its milliseconds, NULL), in statements of at most PAGE_ROWS rows and about
        PAGE_BYTES bytes."""
        if not rows:
            return
        columns = self.columns[name]
        updates = ", ".join(f"{q(c)} = VALUES({q(c)})" for c in columns if c != kind.key)
        head = f"INSERT INTO {q(self.target_db)}.{q(name)} ({self._column_list(name)}) VALUES "
        tail = f" ON DUPLICATE KEY UPDATE {updates or f'{kind.key} = {kind.key}'}"
        mark = "(" + ", ".join(["%s"] * len(columns)) + ")"
        batch: list[tuple[Any, ...]] = []
        size = 0
        async with self.target.acquire() as conn, conn.cursor() as cur:
            for row in rows:
                batch.append(row)
                size += sum(map(_size, row))
                if len(batch) == PAGE_ROWS or size >= PAGE_BYTES:
                    await cur.execute(head + ",".join([mark] * len(batch)) + tail, _flat(batch))
                    batch, size = [], 0
            if batch:
                await cur.execute(head + ",".join([mark] * len(batch)) + tail, _flat(batch))
        self.rows[kind.prefix] += len(rows)
        self._advance(len(rows))

    # ----- progress --------------------------------------------------------------------

    def _start_phase(self, phase: str) -> None:
        now = asyncio.get_running_loop().time()
        self._phase, self._phase_rows, self._phase_start, self._said_at = phase, 0, now, now

    def _advance(self, rows: int) -> None:
        self._phase_rows += rows
        now = asyncio.get_running_loop().time()
        if self.progress is not None and now - self._said_at >= PROGRESS_EVERY_S:
            self._said_at = now
            rate = self._phase_rows / max(now - self._phase_start, 1e-9)
            self.progress(f"{self._phase}: {self._phase_rows:,} rows so far ({rate:,.0f} rows/s)")


def _size(value: Any) -> int:
    """About the bytes a value takes in a statement (max_allowed_packet counts UTF-8)."""
    if isinstance(value, str):
        return len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))
    return len(value) if isinstance(value, bytes) else 8


def _flat(rows: list[tuple[Any, ...]]) -> list[Any]:
    return [value for row in rows for value in row]


async def _gather_all(tasks: Any) -> None:
    """Run the coroutines at once; raise the first failure once all have ended."""
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
