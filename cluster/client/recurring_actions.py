"""Pausing, resuming and running now recurring schedules, and listing their ticks
(DelayClient.pause_recurring, resume_recurring, run_recurring_now, recurring_ticks).

* Pause: under the schedule row's lock, its ticks made ahead that are still waiting are
  cancelled (as a replace or remove cancels them: one being published at this moment
  fires) and the row is marked paused (migration 011); nodes make no ticks of it.
* Resume: the schedule ticks again from now on, one generation up (so the ids of the
  ticks cancelled by the pause are never reused), from its first tick at or after now
  (and after any tick that fired). The ticks the pause covered are skipped, whatever the
  schedule's missed policy: that policy is for ticks nobody could make (nodes down),
  not for ticks an operator held back.
* Run now: one extra job, due now, with the schedule's topic, payload and other fields,
  id ``@recurring:<name>:<generation>:<now_ms>r`` (cluster/model/tick_ids.py); the regular
  ticks do not change. A paused schedule may be run now too.
* Ticks: the jobs the schedule made, newest first (cluster/store/recurring_ticks.py).
A paused schedule replaced with another definition stays paused (cluster/client/recurring.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable
from typing import TypeVar

from cluster.client.job_writer import UNREACHABLE
from cluster.client.recurring import RecurringSchedule, RecurringSchedules, check_name
from cluster.errors import InvalidJob, StoreUnavailable
from cluster.model.jobs import now_ms
from cluster.model.keys import slot_of
from cluster.model.tick_ids import run_now_job_id
from cluster.model.ticks import plan
from cluster.store.recurring_ticks import MAX_LIMIT, tick_page
from cluster.store.rows import JobRecord

CURSOR_MAX_CHARS = 250
T = TypeVar("T")


async def pause(schedules: RecurringSchedules, name: str) -> RecurringSchedule | None:
    store = schedules.store
    async with store.transaction(name) as (_, cur):
        current = await store.lock(cur, name)
        if current is None or current.removed:
            return None
        if current.paused_ms is None:
            now = now_ms()
            boundary = await schedules._cancel_made(current, now)
            resume = (
                None
                if current.next_tick_ms is None
                else current.definition.cadence.first_at_or_after(boundary)
            )
            await store.mark_paused(cur, name, now, resume)
    return await store.get(name)


async def resume(schedules: RecurringSchedules, name: str) -> RecurringSchedule | None:
    store = schedules.store
    async with store.transaction(name) as (conn, cur):
        current = await store.lock(cur, name)
        if current is None or current.removed:
            return None
        if current.paused_ms is not None:
            now = now_ms()
            definition = current.definition
            generation = current.generation + 1
            start = current.next_tick_ms
            first = None if start is None else definition.cadence.first_at_or_after(max(start, now))
            made = (
                None
                if first is None
                else plan(
                    definition.cadence,
                    first,
                    now,
                    now + schedules.settings.recurring_lookahead_ms,
                    definition.missed,
                )
            )
            cursor = None if made is None else made.cursor
            last = made.ticks[-1] if made is not None and made.ticks else current.last_tick_ms
            await store.redefine(cur, definition, generation, cursor, last, None)
            if made is not None and made.ticks:
                await store.write_ticks(conn, definition, generation, made.ticks)
    return await store.get(name)


async def run_now(schedules: RecurringSchedules, name: str) -> str | None:
    store = schedules.store
    async with store.transaction(name) as (conn, cur):
        current = await store.lock(cur, name)
        if current is None or current.removed:
            return None
        definition = current.definition
        now = now_ms()
        job_id = run_now_job_id(name, current.generation, now)
        tick = definition.tick_jobs(current.generation, [now])[0]
        extra = dataclasses.replace(tick, job_id=job_id)
        await store.mysql.write_with_outbox(
            conn, [extra], [slot_of(job_id, schedules.settings.slots)]
        )
    return job_id


def check_page(limit: object, cursor: object) -> tuple[int, str | None]:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidJob(f"limit must be an integer 1..{MAX_LIMIT}, got {limit!r}")
    if cursor is not None and (not isinstance(cursor, str) or len(cursor) > CURSOR_MAX_CHARS):
        raise InvalidJob(f"cursor must be a str of at most {CURSOR_MAX_CHARS} characters")
    return limit, cursor


async def ticks(
    schedules: RecurringSchedules, name: str, limit: int, cursor: str | None
) -> tuple[list[JobRecord], str | None] | None:
    schedule = await schedules.store.get(name)
    if schedule is None:
        return None
    try:
        return await tick_page(schedules.mysql, name, schedule.generation, limit, cursor)
    except ValueError as exc:
        raise InvalidJob(str(exc)) from None


class RecurringActions:
    """DelayClient's methods for the above; the client gives _recurring_schedules()."""

    def _recurring_schedules(self) -> RecurringSchedules:
        raise NotImplementedError

    async def pause_recurring(self, name: str) -> RecurringSchedule | None:
        """Pause a recurring schedule: no ticks until resumed (its waiting ticks made
        ahead are cancelled); the schedule, or None if there is none by that name."""
        return await _unreachable(pause(self._recurring_schedules(), check_name(name)), name)

    async def resume_recurring(self, name: str) -> RecurringSchedule | None:
        """Resume a paused schedule from its next tick after now (the paused ticks are
        skipped); the schedule, or None if there is none by that name."""
        return await _unreachable(resume(self._recurring_schedules(), check_name(name)), name)

    async def run_recurring_now(self, name: str) -> str | None:
        """Fire the schedule once now, besides its ticks: the extra job's id, or None
        if there is no schedule by that name."""
        return await _unreachable(run_now(self._recurring_schedules(), check_name(name)), name)

    async def recurring_ticks(
        self, name: str, limit: int = 100, cursor: str | None = None
    ) -> tuple[list[JobRecord], str | None] | None:
        """The schedule's tick jobs, newest first: (up to limit 1..1000 of them, the
        cursor of the next page or None); None if there is no schedule by that name."""
        limit, cursor = check_page(limit, cursor)
        page = ticks(self._recurring_schedules(), check_name(name), limit, cursor)
        return await _unreachable(page, name)


async def _unreachable(work: Awaitable[T], name: str) -> T:
    try:
        return await work
    except UNREACHABLE as exc:
        raise StoreUnavailable(
            f"MySQL is unreachable: nothing was changed for the schedule {name!r}: {exc}"
        ) from exc
