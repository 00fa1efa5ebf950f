"""Recurring schedules in MySQL: their rows (one table per shard, migrations 005 and 007), the
statements that read and change them, and the jobs their ticks become.

A schedule's row lives in the shard of its name and belongs to slot_of(name). Its
`next_tick` is the cursor: the first tick not made into a job yet. Ticks become jobs in
a transaction that moves the cursor with a compare-and-set (make_ticks) and writes
each tick's job row and outbox row (MySQLStore.write_with_outbox): a tick's job id is
derived from the schedule (cluster/model/tick_ids.py), so a tick is one job whoever makes it
and however often. The client changes a definition under the row's lock (lock()), so a
node making ticks of the old definition meanwhile finds the cursor or the generation
changed and makes nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from cluster.model.job_fields import OPTIONS, KeptOptions, kept_options
from cluster.model.jobs import ValidJob
from cluster.model.keys import shard_of, slot_of
from cluster.model.tick_ids import tick_job_id
from cluster.model.ticks import Cadence, Missed
from cluster.store.mysql_store import MySQLStore
from cluster.store.rows import OPTION_COLUMNS, options_of_columns
from cluster.store.sql import datetime_to_ms, ms_to_datetime


@dataclass(frozen=True)
class Definition(KeptOptions):
    """What a recurring schedule fires and when (validated: cluster/client/recurring.py);
    its options (KeptOptions' keyword fields) are every tick job's."""

    name: str
    topic: str
    payload_json: bytes
    cadence: Cadence
    missed: Missed

    def tick_jobs(self, generation: int, ticks: Sequence[int]) -> list[ValidJob]:
        """The jobs these ticks of this definition's generation are."""
        return [
            ValidJob(
                job_id=tick_job_id(self.name, generation, tick),
                topic=self.topic,
                due_ms=tick,
                payload_json=self.payload_json,
                **kept_options(self),
            )
            for tick in ticks
        ]


@dataclass(frozen=True)
class RecurringSchedule:
    """A recurring schedule as stored: its definition and where its ticks stand."""

    definition: Definition
    slot: int
    generation: int
    removed: bool
    next_tick_ms: int | None  # the first tick not made into a job yet; None: no more
    last_tick_ms: int | None  # the last tick made into a job
    epoch: int  # the slot epoch of the node that last made ticks (for operators)
    created_ms: int
    modified_ms: int
    paused_ms: int | None = None  # when it was paused (migration 011); None: not paused

    @property
    def name(self) -> str:
        return self.definition.name

    def next_fire_ms(self, now_ms: int) -> int | None:
        """The schedule's next tick at or after now_ms; None once it has no more."""
        if self.removed or self.paused_ms is not None or self.next_tick_ms is None:
            return None
        return self.definition.cadence.first_at_or_after(now_ms)


# A schedule's own columns, then its definition's options' (the job's: OPTION_COLUMNS).
_OWN_COLUMNS = (
    "name, slot, generation, removed, topic, payload, cron, every_ms, tz, start_at, end_at,"
    " missed, next_tick, last_tick, epoch, gmt_create, gmt_modified, paused_at"
)
_OWN_COUNT = len(_OWN_COLUMNS.split(","))
_COLUMNS = ", ".join((_OWN_COLUMNS, *OPTION_COLUMNS))
# The definition's columns as create() and redefine() write them (_definition_values).
_DEFINITION_COLUMNS = (
    "topic",
    "payload",
    "cron",
    "every_ms",
    "tz",
    "start_at",
    "end_at",
    "missed",
    *OPTION_COLUMNS,
)


def _ms_or_none(value: Any) -> int | None:
    return None if value is None else datetime_to_ms(value)


def _time_or_none(ms: int | None) -> Any:
    return None if ms is None else ms_to_datetime(ms)


def schedule_of_row(row: Sequence[Any]) -> RecurringSchedule:
    (
        name,
        slot,
        generation,
        removed,
        topic,
        payload,
        cron,
        every_ms,
        tz,
        start_at,
        end_at,
        missed,
        next_tick,
        last_tick,
        epoch,
        created,
        modified,
        paused_at,
    ) = row[:_OWN_COUNT]
    cadence = Cadence(
        cron=cron,
        every_ms=None if every_ms is None else int(every_ms),
        tz=tz,
        start_ms=_ms_or_none(start_at),
        end_ms=_ms_or_none(end_at),
    )
    definition = Definition(
        name=name,
        topic=topic,
        payload_json=payload.encode(),
        cadence=cadence,
        missed=Missed(missed),
        **options_of_columns(row[_OWN_COUNT:]),
    )
    return RecurringSchedule(
        definition=definition,
        slot=int(slot),
        generation=int(generation),
        removed=bool(removed),
        next_tick_ms=_ms_or_none(next_tick),
        last_tick_ms=_ms_or_none(last_tick),
        epoch=int(epoch),
        created_ms=datetime_to_ms(created),
        modified_ms=datetime_to_ms(modified),
        paused_ms=_ms_or_none(paused_at),
    )


def _definition_values(definition: Definition) -> tuple[Any, ...]:
    cadence = definition.cadence
    return (
        definition.topic,
        definition.payload_json.decode(),
        cadence.cron,
        cadence.every_ms,
        cadence.tz,
        _time_or_none(cadence.start_ms),
        _time_or_none(cadence.end_ms),
        str(definition.missed),
        *(getattr(definition, option.kept_as) for option in OPTIONS if option.column),
    )


class RecurringStore:
    """The statements on schedule rows, over a MySQLStore's pool and shard layout."""

    def __init__(self, mysql: MySQLStore) -> None:
        self.mysql = mysql
        self.settings = mysql.settings

    def table_of(self, name: str) -> str:
        return self.mysql.recurring_table(
            shard_of(name, self.settings.mysql_databases, self.settings.mysql_tables)
        )

    def slot_of(self, name: str) -> int:
        return slot_of(name, self.settings.slots)

    # ----- reading ---------------------------------------------------------------------

    def _db_of(self, name: str) -> int:
        return shard_of(name, self.settings.mysql_databases, self.settings.mysql_tables)[0]

    async def get(self, name: str) -> RecurringSchedule | None:
        async def read(conn: Any) -> Any:
            async with conn.cursor() as cur:
                await cur.execute(
                    f"SELECT {_COLUMNS} FROM {self.table_of(name)} WHERE name = %s", name
                )
                return await cur.fetchone()

        row = await self.mysql.router.run(self._db_of(name), read)
        return None if row is None else schedule_of_row(row)

    async def list_all(self, *, removed: bool = False) -> list[RecurringSchedule]:
        """Every schedule of every shard, by name; removed ones too with removed=True."""
        found: list[RecurringSchedule] = []
        where = "" if removed else " WHERE removed = 0"

        async def read(conn: Any, dbs: list[int]) -> list[RecurringSchedule]:
            rows: list[RecurringSchedule] = []
            async with conn.cursor() as cur:
                for shard in self.mysql.all_shards(dbs):
                    await cur.execute(
                        f"SELECT {_COLUMNS} FROM {self.mysql.recurring_table(shard)}{where}"
                    )
                    rows += [schedule_of_row(row) for row in await cur.fetchall()]
            return rows

        every = range(self.settings.mysql_databases)
        for part in await self.mysql.router.run_grouped(every, read):
            found += part
        return sorted(found, key=lambda schedule: schedule.name)

    async def due_page(
        self, shard: tuple[int, int], slots: Sequence[int], before_ms: int, limit: int
    ) -> list[RecurringSchedule]:
        """The schedules of these slots in one shard whose next tick is before before_ms,
        earliest first."""
        if not slots:
            return []
        listed = ",".join(str(int(slot)) for slot in slots)

        async def read(conn: Any) -> list[RecurringSchedule]:
            async with conn.cursor() as cur:
                await cur.execute(
                    f"SELECT {_COLUMNS} FROM {self.mysql.recurring_table(shard)}"
                    f" WHERE next_tick < %s AND slot IN ({listed}) AND removed = 0"
                    " AND paused_at IS NULL"
                    " ORDER BY next_tick LIMIT %s",
                    (ms_to_datetime(before_ms), limit),
                )
                return [schedule_of_row(row) for row in await cur.fetchall()]

        return await self.mysql.router.run(shard[0], read)

    # ----- changing ----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def transaction(self, name: str) -> AsyncIterator[tuple[Any, Any]]:
        """(connection, cursor) in a transaction on the server of schedule `name`'s
        shard (which holds its ticks' jobs too): committed when the block ends, rolled
        back when it raises."""
        pool = await self.mysql.pool_for(self._db_of(name))
        async with pool.acquire() as conn:
            await conn.begin()
            try:
                async with conn.cursor() as cur:
                    yield conn, cur
            except BaseException:
                with contextlib.suppress(Exception):
                    await conn.rollback()
                raise
            await conn.commit()

    async def lock(self, cur: Any, name: str) -> RecurringSchedule | None:
        """The schedule's row, locked until the transaction ends (None: no row)."""
        await cur.execute(
            f"SELECT {_COLUMNS} FROM {self.table_of(name)} WHERE name = %s FOR UPDATE", name
        )
        row = await cur.fetchone()
        return None if row is None else schedule_of_row(row)

    async def create(
        self,
        cur: Any,
        definition: Definition,
        next_tick_ms: int | None,
        last_tick_ms: int | None,
    ) -> None:
        """A new schedule, generation 1, whose ticks before next_tick_ms are made (the
        last at last_tick_ms); IntegrityError if the name has a row."""
        await cur.execute(
            f"INSERT INTO {self.table_of(definition.name)} (name, slot, generation, removed,"
            f" {', '.join(_DEFINITION_COLUMNS)}, next_tick, last_tick) VALUES"
            f" (%s, %s, 1, 0, {', '.join(['%s'] * len(_DEFINITION_COLUMNS))}, %s, %s)",
            (
                definition.name,
                self.slot_of(definition.name),
                *_definition_values(definition),
                _time_or_none(next_tick_ms),
                _time_or_none(last_tick_ms),
            ),
        )

    async def redefine(
        self,
        cur: Any,
        definition: Definition,
        generation: int,
        next_tick_ms: int | None,
        last_tick_ms: int | None,
        paused_ms: int | None = None,
    ) -> None:
        """Give a locked schedule a new definition and generation, whose ticks before
        next_tick_ms are made (the last at last_tick_ms), paused since paused_ms (None:
        not paused)."""
        await cur.execute(
            f"UPDATE {self.table_of(definition.name)} SET generation = %s, removed = 0,"
            f" {''.join(f'{column} = %s, ' for column in _DEFINITION_COLUMNS)}"
            "next_tick = %s, last_tick = %s, paused_at = %s WHERE name = %s",
            (
                generation,
                *_definition_values(definition),
                _time_or_none(next_tick_ms),
                _time_or_none(last_tick_ms),
                _time_or_none(paused_ms),
                definition.name,
            ),
        )

    async def mark_removed(self, cur: Any, name: str) -> None:
        """A locked schedule makes no more ticks (its row and generation stay)."""
        await cur.execute(
            f"UPDATE {self.table_of(name)} SET removed = 1, next_tick = NULL, paused_at = NULL"
            " WHERE name = %s",
            name,
        )

    async def mark_paused(self, cur: Any, name: str, paused_ms: int, resume_ms: int | None) -> None:
        """A locked schedule makes no ticks until resumed; resume_ms: the first tick it
        may make then (None: it has no more)."""
        await cur.execute(
            f"UPDATE {self.table_of(name)} SET paused_at = %s, next_tick = %s WHERE name = %s",
            (ms_to_datetime(paused_ms), _time_or_none(resume_ms), name),
        )

    async def make_ticks(
        self,
        conn: Any,
        cur: Any,
        schedule: RecurringSchedule,
        epoch: int,
        ticks: Sequence[int],
        cursor_ms: int | None,
    ) -> bool:
        """In the caller's transaction: move the schedule's cursor from where `schedule`
        read it to cursor_ms, recording the maker's slot epoch, and write `ticks` as
        jobs. Nothing is written, and False returned, when the row changed meanwhile
        (another node made these ticks, the client redefined or removed it)."""
        assert schedule.next_tick_ms is not None
        changed = await cur.execute(
            f"UPDATE {self.table_of(schedule.name)} SET next_tick = %s,"
            " last_tick = COALESCE(%s, last_tick), epoch = %s"
            " WHERE name = %s AND generation = %s AND removed = 0 AND next_tick = %s"
            " AND paused_at IS NULL",
            (
                _time_or_none(cursor_ms),
                _time_or_none(ticks[-1] if ticks else None),
                epoch,
                schedule.name,
                schedule.generation,
                ms_to_datetime(schedule.next_tick_ms),
            ),
        )
        if not changed:
            return False
        if ticks:
            await self.write_ticks(conn, schedule.definition, schedule.generation, ticks)
        return True

    async def write_ticks(
        self, conn: Any, definition: Definition, generation: int, ticks: Sequence[int]
    ) -> None:
        """The ticks' job rows and outbox rows, in the caller's transaction."""
        jobs = definition.tick_jobs(generation, ticks)
        slots = [slot_of(job.job_id, self.settings.slots) for job in jobs]
        await self.mysql.write_with_outbox(conn, jobs, slots)
