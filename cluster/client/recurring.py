"""Recurring schedules for producers: checking a definition, and creating, replacing and
removing schedules (DelayClient.schedule_recurring, recurring, remove_recurring).

A schedule's ticks fire as ordinary jobs. Whoever writes a schedule also makes its ticks
of the next recurring_lookahead_ms into jobs, in the same transaction, so they exist
once the call returns; from then on the node owning slot_of(name) makes each further
tick into a job between lookahead/2 and lookahead before it is due (actors/recurring.py).

The same name again with the same definition changes nothing. With another definition
it replaces the schedule: under the schedule row's lock (so no node makes ticks of it
meanwhile) the ticks of the old definition due from now on that are already jobs are
cancelled, and the new definition, one generation up so its ticks have new job ids,
ticks from now on. An old tick that cannot be cancelled any more (it is being published
at this moment) fires, and the new definition then starts after it, so no tick time
fires twice. Ticks due before the call are left to fire. Removing cancels the same way
and keeps the row (removed), so the name added again starts a new generation. A paused
schedule replaced stays paused (pausing is the operator's, the definition the
producer's); removed and added again, it is not paused (cluster/client/recurring_actions.py).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pymysql

from cluster.errors import InvalidJob
from cluster.model.changes import CancelResult
from cluster.model.contract import WAITING_STATUSES, JobStatus
from cluster.model.job_fields import OPTIONS, JobField, kept_options
from cluster.model.jobs import now_ms, validate
from cluster.model.tick_ids import tick_job_id
from cluster.model.ticks import MIN_EVERY_MS, Cadence, Missed, check_cron, plan, zone_of
from cluster.settings.config import Settings
from cluster.store.mysql_store import MySQLStore
from cluster.store.recurring_store import Definition, RecurringSchedule, RecurringStore

__all__ = ["Definition", "RecurringSchedule", "RecurringSchedules", "validate_recurring"]

NAME_MAX_CHARS = 120
_NAME = re.compile(rf"[A-Za-z0-9._:-]{{1,{NAME_MAX_CHARS}}}")
# The latest time a DATETIME column holds, in epoch seconds (9999-12-31 23:59:59).
_LAST_SECOND = 253402300799
# MySQL errors after which the whole change is tried again: a deadlock (two first-time
# creates of one name lock the same gap), and the duplicate key of a concurrent create.
_RETRY_ERRORS = (1213, 1062)
_ATTEMPTS = 5
# Cancels of a replaced definition's ticks in flight at once.
_CANCELS_AT_ONCE = 8


def check_name(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidJob(f"name must be a str, got {type(name).__name__}")
    if not _NAME.fullmatch(name):
        raise InvalidJob(
            f"name {name!r} must be 1..{NAME_MAX_CHARS} of the characters A-Z a-z 0-9 . _ : -"
        )
    return name


def _interval_ms(every: object, settings: Settings) -> int:
    if isinstance(every, dt.timedelta):
        seconds = every.total_seconds()
    elif isinstance(every, bool) or not isinstance(every, int | float):
        raise InvalidJob(f"every must be seconds (a number) or a timedelta, got {every!r}")
    else:
        try:
            seconds = float(every)
        except OverflowError:
            raise InvalidJob("every is out of range") from None
    if not math.isfinite(seconds):
        raise InvalidJob(f"every must be finite, got {every!r}")
    if seconds > settings.max_delay_s:
        raise InvalidJob(f"every must be at most max_delay_s={settings.max_delay_s:g} seconds")
    interval = round(seconds * 1000)
    if interval < MIN_EVERY_MS:
        raise InvalidJob(f"every must be at least {MIN_EVERY_MS / 1000:g} s, got {every!r}")
    return interval


def _time_ms(name: str, value: object) -> int | None:
    """An aware datetime or epoch seconds, as epoch ms; None stays None."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidJob(f"{name} must be a timezone-aware datetime")
        seconds = value.timestamp()
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidJob(f"{name} must be a datetime or epoch seconds, got {type(value).__name__}")
    else:
        try:
            seconds = float(value)
        except OverflowError:
            raise InvalidJob(f"{name} is out of range") from None
    if not math.isfinite(seconds) or not 0 <= seconds <= _LAST_SECOND:
        raise InvalidJob(f"{name} must be a time between 1970 and 9999, got {value!r}")
    return round(seconds * 1000)


def validate_recurring(
    *,
    name: object,
    topic: object,
    payload: object,
    cron: object,
    every: object,
    tz: object,
    start_at: object,
    end_at: object,
    missed: object,
    settings: Settings,
    now: int | None = None,
    **options: object,
) -> Definition:
    """Check every argument of schedule_recurring(); InvalidJob names the first bad one."""
    current = now_ms() if now is None else now
    name = check_name(name)
    # The fields a tick shares with any job get the same checks (topic, payload, ...).
    job = validate(
        topic=topic,
        payload=payload,
        delay=0,
        at=None,
        job_id=None,
        settings=settings,
        now=current,
        **options,
    )
    if (cron is None) == (every is None):
        raise InvalidJob("give exactly one of cron= (an expression) or every= (an interval)")
    if cron is not None:
        cron = check_cron(cron)
        tz = "UTC" if tz is None else tz
        zone_of(tz)
        every_ms = None
    else:
        if tz is not None:
            raise InvalidJob(
                "tz applies to cron= only: every= is an interval in real time, the same in "
                "every zone (use start_at= to place its ticks)"
            )
        tz = "UTC"
        every_ms = _interval_ms(every, settings)
    start_ms = _time_ms("start_at", start_at)
    end_ms = _time_ms("end_at", end_at)
    if start_ms is not None and start_ms - current > settings.max_delay_s * 1000:
        raise InvalidJob(
            f"start_at is more than max_delay_s={settings.max_delay_s:g} seconds ahead"
        )
    if start_ms is not None and end_ms is not None and end_ms <= start_ms:
        raise InvalidJob("end_at must be after start_at")
    try:
        policy = Missed(str(missed)) if isinstance(missed, str) else None
    except ValueError:
        policy = None
    if policy is None:
        raise InvalidJob(
            f"missed must be one of {', '.join(repr(str(m)) for m in Missed)}, got {missed!r}"
        )
    assert isinstance(cron, str | None) and isinstance(tz, str)
    cadence = Cadence(cron=cron, every_ms=every_ms, tz=tz, start_ms=start_ms, end_ms=end_ms)
    if cadence.first_at_or_after(current) is None:
        raise InvalidJob(
            "the schedule has no tick from now on: its end_at has passed, or its cron "
            f"expression matches no date ({cron!r})"
        )
    return Definition(
        name=name,
        topic=job.topic,
        payload_json=job.payload_json,
        cadence=cadence,
        missed=policy,
        **kept_options(job),
    )


class RecurringSchedules:
    """The client's operations on recurring schedules. `cancel` is DelayClient.cancel:
    a replaced or removed definition's ticks are cancelled like any job."""

    def __init__(
        self,
        settings: Settings,
        mysql: MySQLStore,
        cancel: Callable[[str], Awaitable[CancelResult]],
    ) -> None:
        self.settings = settings
        self.mysql = mysql
        self.store = RecurringStore(mysql)
        self._cancel = cancel

    async def put(self, definition: Definition) -> RecurringSchedule:
        """Create the schedule, replace it, or (the same definition) leave it be."""
        for attempt in range(_ATTEMPTS):
            try:
                await self._put(definition)
                break
            except (pymysql.err.OperationalError, pymysql.err.IntegrityError) as exc:
                if attempt + 1 == _ATTEMPTS or not exc.args or exc.args[0] not in _RETRY_ERRORS:
                    raise
                await asyncio.sleep(0.01 * (attempt + 1))
        schedule = await self.store.get(definition.name)
        assert schedule is not None
        return schedule

    async def _put(self, definition: Definition) -> None:
        async with self.store.transaction(definition.name) as (conn, cur):
            current = await self.store.lock(cur, definition.name)
            now = now_ms()
            if current is None:
                generation, start = 1, now
            elif not current.removed and current.definition == definition:
                return  # the same definition again: nothing changes
            else:
                generation = current.generation + 1
                start = await self._cancel_made(current, now) if not current.removed else now
            cadence = definition.cadence
            first = cadence.first_at_or_after(start)
            paused = None if current is None or current.removed else current.paused_ms
            if paused is not None and current is not None:
                # A replaced paused schedule stays paused: it makes no ticks until resumed.
                await self.store.redefine(cur, definition, generation, first, None, paused)
                return
            made = (
                plan(
                    cadence,
                    first,
                    now,
                    now + self.settings.recurring_lookahead_ms,
                    definition.missed,
                )
                if first is not None
                else None
            )
            cursor = None if made is None else made.cursor
            last = made.ticks[-1] if made is not None and made.ticks else None
            if current is None:
                await self.store.create(cur, definition, cursor, last)
            else:
                await self.store.redefine(cur, definition, generation, cursor, last)
            if made is not None and made.ticks:
                await self.store.write_ticks(conn, definition, generation, made.ticks)

    async def remove(self, name: str) -> bool:
        """Stop a schedule: True if it was there. Its ticks that are jobs already and
        due from now on are cancelled (one being published at this moment fires)."""
        async with self.store.transaction(name) as (_, cur):
            current = await self.store.lock(cur, name)
            if current is None or current.removed:
                return False
            await self._cancel_made(current, now_ms())
            await self.store.mark_removed(cur, name)
        return True

    async def _cancel_made(self, schedule: RecurringSchedule, now: int) -> int:
        """Cancel the ticks of a locked schedule's definition that are jobs and due at
        or after `now`; return the time from which another definition may tick without
        a tick time firing twice: just after the last of those that could not be
        cancelled (fired, or being published), or `now`."""
        cadence = schedule.definition.cadence
        last = schedule.last_tick_ms
        ticks: list[int] = []
        tick = cadence.first_at_or_after(now)
        while tick is not None and last is not None and tick <= last:
            ticks.append(tick)
            tick = cadence.next_after(tick)
        if not ticks:
            return now
        ids = [tick_job_id(schedule.name, schedule.generation, t) for t in ticks]
        rows = await self.mysql.get_many(ids)
        boundary = now
        waiting = [
            (t, i)
            for t, i in zip(ticks, ids, strict=True)
            if i in rows and rows[i].status in WAITING_STATUSES
        ]
        for t, i in zip(ticks, ids, strict=True):
            row = rows.get(i)
            if row is not None and row.status in (JobStatus.FIRED, JobStatus.DEAD):
                boundary = max(boundary, t + 1)
        for start in range(0, len(waiting), _CANCELS_AT_ONCE):
            chunk = waiting[start : start + _CANCELS_AT_ONCE]
            results = await asyncio.gather(*(self._cancel(i) for _, i in chunk))
            for (t, _), cancelled in zip(chunk, results, strict=True):
                if not cancelled:
                    boundary = max(boundary, t + 1)
        return boundary

    async def get(self, name: str) -> RecurringSchedule | None:
        return await self.store.get(check_name(name))

    async def list_all(self, *, removed: bool = False) -> list[RecurringSchedule]:
        return await self.store.list_all(removed=removed)


def shown_key(option: JobField) -> str:
    """An option's key in a schedule's JSON (describe): one given in seconds says so
    ("expires_after_s")."""
    return f"{option.name}_s" if option.per_mille else option.name


def describe(schedule: RecurringSchedule) -> dict[str, Any]:
    """A schedule as JSON-ready values (the CLI prints it)."""
    definition = schedule.definition
    cadence = definition.cadence
    return {
        "name": schedule.name,
        "topic": definition.topic,
        "cron": cadence.cron,
        "every_s": None if cadence.every_ms is None else cadence.every_ms / 1000,
        "tz": cadence.tz,
        "start_ms": cadence.start_ms,
        "end_ms": cadence.end_ms,
        "missed": str(definition.missed),
        **{
            shown_key(option): option.shown(getattr(definition, option.kept_as))
            for option in OPTIONS
        },
        "payload": definition.payload_json.decode(),
        "generation": schedule.generation,
        "removed": schedule.removed,
        "paused": schedule.paused_ms is not None,
        "paused_ms": schedule.paused_ms,
        "next_ms": schedule.next_fire_ms(now_ms()),
        "made_until_ms": schedule.next_tick_ms,
        "last_made_ms": schedule.last_tick_ms,
    }
