"""The producer API, DelayClient: schedule, schedule_many, cancel, reschedule, get, the
dead letters (dead_letters, dead_job, replay_dead, purge_dead:
cluster/client/dead_letters.py), and recurring schedules (schedule_recurring, recurring,
remove_recurring: cluster/client/recurring.py).

    from cluster.client.delay_client import DelayClient

    async with DelayClient.from_env() as client:
        job_id = await client.schedule("orders.close", {"order": 42}, delay=1800)

Every write goes to MySQL first (committed), then to Redis through a Lua script, so a
job Redis knows is always a job MySQL knows. Bad input raises InvalidJob before
anything is written. This class checks arguments and hands the work on: new jobs to
JobWriter (cluster/client/job_writer.py), cancel and reschedule to JobChanges
(cluster/client/job_changes.py).
"""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Unpack

from cluster.client.counts import PendingCounts, pending_counts
from cluster.client.dead_letters import DeadJob, DeadLetters
from cluster.client.job_changes import JobChanges
from cluster.client.job_search import JobSearchActions
from cluster.client.job_writer import (
    MAX_BATCH,
    UNREACHABLE,
    JobWriter,
    Scheduled,
    first_of_each_id,
    schedule_in_transaction,
    validated,
)
from cluster.client.opening import open_stores
from cluster.client.recurring import (
    RecurringSchedule,
    RecurringSchedules,
    check_name,
    validate_recurring,
)
from cluster.client.recurring_actions import RecurringActions
from cluster.connections.redis_conn import RedisClient
from cluster.errors import InvalidJob, StoreUnavailable
from cluster.model.changes import CancelResult, RescheduleResult
from cluster.model.job_bounds import check_valid_job
from cluster.model.job_fields import JobOptions
from cluster.model.jobs import Job, ValidJob, check_job_id, check_topic, due_ms_of, validate
from cluster.model.keys import KeySpace
from cluster.scripts.facade import Scripts
from cluster.settings.config import Settings
from cluster.store.mysql_store import JobRecord, MySQLStore

__all__ = ["MAX_BATCH", "DelayClient", "Scheduled"]

_NOT_OPEN = "DelayClient is not open: use `async with` or await open()"


@dataclass(frozen=True)
class _Opened:
    """What exists while the client is open: its Redis connection, the scripts on it,
    and the parts that need them."""

    redis: RedisClient
    scripts: Scripts
    writes: JobWriter
    changes: JobChanges
    dead_letters: DeadLetters
    schedules: RecurringSchedules


class DelayClient(RecurringActions, JobSearchActions):
    """An async producer client. Use as ``async with``; close() is idempotent."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.keys = KeySpace(settings.key_prefix)
        self.mysql = MySQLStore(settings, f"client:{socket.gethostname()}-{os.getpid()}")
        self._opened: _Opened | None = None

    @classmethod
    def from_env(cls, **overrides: Any) -> DelayClient:
        """Settings from DELAYQ_* variables (and DELAYQ_CONFIG), with overrides on top."""
        return cls(Settings.from_env().replace(**overrides))

    async def open(self) -> None:
        if self._opened is not None:
            return
        redis = await open_stores(self.settings, self.mysql)  # StoreUnavailable: not there
        scripts = Scripts(
            redis,
            self.keys,
            wait_replicas=self.settings.redis_wait_replicas,
            wait_timeout_ms=self.settings.redis_wait_timeout_ms,
            payload_lead_ms=self.settings.payload_lead_ms,
            envelope_version=self.settings.envelope_version,
        )
        scripts.wait_fallback = self.settings.redis_wait_fallback
        self._opened = _Opened(
            redis,
            scripts,
            JobWriter(self.settings, self.mysql, scripts),
            JobChanges(self.settings, self.mysql, scripts),
            DeadLetters(self.settings, scripts, self.mysql),
            RecurringSchedules(self.settings, self.mysql, self.cancel),
        )

    async def close(self) -> None:
        try:
            await self.mysql.close()
        finally:
            opened, self._opened = self._opened, None
            if opened is not None:
                await opened.redis.aclose()

    async def __aenter__(self) -> DelayClient:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def _open(self) -> _Opened:
        if self._opened is None:
            raise RuntimeError(_NOT_OPEN)
        return self._opened

    def _job_changes(self) -> JobChanges:
        return self._open.changes

    @property
    def scripts(self) -> Scripts:
        return self._open.scripts

    def _recurring_schedules(self) -> RecurringSchedules:
        return self._open.schedules

    # ----- schedule (cluster/client/job_writer.py) -------------------------------------

    async def schedule(
        self,
        topic: str,
        payload: Any,
        *,
        delay: float | None = None,
        at: dt.datetime | float | None = None,
        job_id: str | None = None,
        **options: Unpack[JobOptions],
    ) -> str:
        """Schedule one job; returns its job_id. The same job_id twice is one job.

        Give exactly one of delay (seconds from now) or at (an aware datetime or epoch
        seconds). A due time in the past fires at once. With expires_after (seconds),
        the job is never published later than that after its due time: if it could not
        be published by then, it ends EXPIRED instead. priority (0..1000, default 0):
        among jobs due at the same millisecond, higher fires first (docs/guarantees.md).
        """
        job = validate(
            topic=topic,
            payload=payload,
            delay=delay,
            at=at,
            job_id=job_id,
            settings=self.settings,
            **options,
        )
        await self._open.writes.store([job], keyed={job.job_id} if job_id is not None else set())
        return job.job_id

    async def schedule_many(self, jobs: Sequence[Job | Mapping[str, Any]]) -> list[str]:
        """Schedule many jobs in few round trips; returns their ids in input order.

        Each job is a Job or a mapping with schedule()'s argument names. If any job is
        invalid, InvalidJob names it and nothing is scheduled.
        """
        valid, keyed = validated(jobs, self.settings)
        unique = first_of_each_id(valid)
        if unique:
            await self._open.writes.store(unique, keyed)
        return [job.job_id for job in valid]

    async def schedule_batch(self, jobs: Sequence[Job | Mapping[str, Any]]) -> list[Scheduled]:
        """schedule_many(), saying of each job whether this call created it or it was
        already there (the same job_id scheduled before: that job stands unchanged).

        Costs one more MySQL read than schedule_many() when the jobs carry their own ids.
        `created` is False for a job a concurrent call with the same id stored at the
        same moment: of two such calls, at most one says True.
        """
        valid, keyed = validated(jobs, self.settings)
        return await self._open.writes.schedule_validated(valid, keyed) if valid else []

    async def schedule_validated(self, valid: list[ValidJob], keyed: set[str]) -> list[Scheduled]:
        """schedule_batch() of jobs already validated (cluster.model.jobs.validate_job), with
        `keyed` the ids their callers gave: for servers that validate each request on
        its own and store many requests' jobs together (cluster/web/batcher.py). Their
        bounds are checked again (InvalidJob, nothing stored)."""
        for job in valid:
            check_valid_job(job)
        return await self._open.writes.schedule_validated(valid, keyed) if valid else []

    async def schedule_in(
        self,
        conn: Any,
        topic: str,
        payload: Any,
        *,
        delay: float | None = None,
        at: dt.datetime | float | None = None,
        job_id: str | None = None,
        **options: Unpack[JobOptions],
    ) -> str:
        """Schedule one job inside the caller's own MySQL transaction; returns its job_id.

        `conn` is the caller's aiomysql connection with a transaction open (after
        `await conn.begin()`), on the MySQL server that holds the job's shard (with
        several servers: give a job_id and use the server server_of(job_id) names), as
        a user allowed to INSERT into delayq's tables; another server: StoreMismatch.
        The job's row (and a row of the shard's outbox) is written there and not
        committed: the job exists if and only if the caller's transaction commits. Once
        it commits, the node owning the job's slot finds it in the outbox within about
        outbox_poll_ms and adds it to Redis (actors/outbox.py). Arguments as for
        schedule(); the same job_id twice is one job.
        """
        job = validate(
            topic=topic,
            payload=payload,
            delay=delay,
            at=at,
            job_id=job_id,
            settings=self.settings,
            **options,
        )
        # Works on a client that is not open: the write uses the caller's connection.
        await schedule_in_transaction(self.mysql, conn, job)
        return job.job_id

    async def server_of(self, job_id: str) -> str:
        """ "host:port" of the MySQL server holding job_id's row: where schedule_in()'s
        connection must be (docs/cluster.md). StoreUnavailable: its server is down."""
        await self.mysql.router.home_of(self.mysql.shard_of(job_id)[0])
        return self.mysql.server_of(job_id).name

    # ----- cancel, reschedule (cluster/client/job_changes.py), get ----------------------

    async def cancel(self, job_id: str) -> CancelResult:
        """Cancel a job. The result is true (status CANCELLED) when the job will never
        fire, also when it was cancelled before; otherwise its status says why not:
        NOT_FOUND, ALREADY_FIRED (with fired_ms and attempt when recorded), IN_FLIGHT
        (being published: it fires), DEAD or EXPIRED."""
        job_id = check_job_id(job_id)  # before the open check: bad input says so first
        return await self._open.changes.cancel(job_id)

    async def reschedule(
        self,
        job_id: str,
        *,
        delay: float | None = None,
        at: dt.datetime | float | None = None,
    ) -> RescheduleResult:
        """Give a job that has not fired a new due time (its expiry, if it has one, moves
        with it). The result is true (status RESCHEDULED, due_ms the new time) when the
        job fires at the new time; otherwise its status says why not: NOT_FOUND,
        CANCELLED, ALREADY_FIRED (with fired_ms and attempt when recorded), IN_FLIGHT
        (being published: it fires at its old time), DEAD or EXPIRED."""
        job_id = check_job_id(job_id)
        due_ms = due_ms_of(delay, at, self.settings)
        return await self._open.changes.reschedule(job_id, due_ms)

    async def get(self, job_id: str) -> JobRecord | None:
        """The durable record of a job (status, due time, attempts), or None.

        The status is MySQL's: a job fired a moment ago may still read pending for
        the few milliseconds until its node records it. StoreUnavailable when the MySQL
        server holding it does not answer.
        """
        job_id = check_job_id(job_id)
        try:
            return await self.mysql.get(job_id)
        except UNREACHABLE as exc:
            raise StoreUnavailable(f"MySQL is unreachable, {job_id!r} was not read: {exc}") from exc

    # ----- expired jobs ------------------------------------------------------------------

    async def expired_jobs(self, *, topic: str | None = None, limit: int = 100) -> list[JobRecord]:
        """Jobs that expired (not published by their due time + expires_after), the most
        recent first: their MySQL records, status EXPIRED, last_error saying why. MySQL
        alone keeps them (retention deletes them after retention_days, like fired and
        cancelled jobs); an expired job is not replayed: schedule it again if need be."""
        if topic is not None:
            check_topic(topic)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidJob(f"limit must be an int >= 1, got {limit!r}")
        return await self.mysql.expired_page(topic, limit)

    async def count_expired(self, *, topic: str | None = None) -> int:
        """How many jobs are expired (of one topic), as MySQL records them."""
        if topic is not None:
            check_topic(topic)
        return await self.mysql.count_expired(topic)

    async def pending_counts(self) -> PendingCounts:
        """Pending jobs per topic and in total, due within redis_horizon_ms and beyond
        it (MySQL alone); some figures are estimates on big tables (cluster/store/counts.py)."""
        _ = self._open  # RuntimeError when not open
        return await pending_counts(self.mysql, self.settings.redis_horizon_ms)

    # ----- dead letters (cluster/client/dead_letters.py) -------------------------------------

    async def dead_letters(self, *, topic: str | None = None, limit: int = 100) -> list[DeadJob]:
        """Dead jobs, oldest death first (per slot), with attempts and last error."""
        return await self._open.dead_letters.dead_letters(topic=topic, limit=limit)

    async def count_dead(self, *, topic: str | None = None) -> int:
        """How many jobs are in the dead-letter set (of one topic)."""
        return await self._open.dead_letters.count_dead(topic)

    async def dead_job(self, job_id: str) -> DeadJob | None:
        """One job of the dead-letter set, or None if it is not there."""
        return await self._open.dead_letters.dead_job(job_id)

    async def replay_dead(
        self, job_ids: Sequence[str] | None = None, *, topic: str | None = None
    ) -> int:
        """Give dead jobs a new set of attempts, due now: those named, those of a topic,
        or (neither given) all. Returns how many were replayed.

        A named job that is dead in MySQL but no longer in the dead-letter set (it was
        purged, or Redis lost it) is replayed from its MySQL row."""
        return await self._open.dead_letters.replay_dead(job_ids, topic=topic)

    async def purge_dead(
        self, job_ids: Sequence[str] | None = None, *, topic: str | None = None
    ) -> int:
        """Forget dead jobs in Redis (MySQL keeps them as dead): those named, those of
        a topic, or (neither given) all. Returns how many were purged."""
        return await self._open.dead_letters.purge_dead(job_ids, topic=topic)

    # ----- recurring schedules (cluster/client/recurring.py) -----------------------------------

    async def schedule_recurring(
        self,
        name: str,
        topic: str,
        payload: Any,
        *,
        cron: str | None = None,
        every: float | dt.timedelta | None = None,
        tz: str | None = None,
        start_at: dt.datetime | float | None = None,
        end_at: dt.datetime | float | None = None,
        missed: str = "fire_once",
        **options: Unpack[JobOptions],
    ) -> RecurringSchedule:
        """Fire `payload` to `topic` at every tick of a schedule, each tick once, as an
        ordinary job whose record also carries "recurring" (the name) and "tick_ms".

        Give exactly one of cron (a 5-field expression, read on the wall clock of tz, an
        IANA zone name, UTC by default) or every (seconds, at least 1, or a timedelta;
        ticks at start_at + k × every, or on multiples of every since the epoch).
        start_at and end_at (aware datetimes or epoch seconds) bound the ticks. missed
        says what happens to ticks no node made into jobs in time (every node down):
        "fire_once" fires the last of them once, "skip" none. expires_after (seconds)
        gives every tick that expiry, as for any job: a tick not published within that
        long after its time ends EXPIRED instead of firing late; priority, every tick's
        priority (as for schedule()). The same name again with
        the same definition changes nothing; with another definition it replaces the
        schedule from now on. Returns the schedule as stored. Calling again after an
        error is safe.
        """
        definition = validate_recurring(
            name=name,
            topic=topic,
            payload=payload,
            cron=cron,
            every=every,
            tz=tz,
            start_at=start_at,
            end_at=end_at,
            missed=missed,
            settings=self.settings,
            **options,
        )
        try:
            return await self._open.schedules.put(definition)
        except UNREACHABLE as exc:
            raise StoreUnavailable(
                f"MySQL is unreachable: the schedule {name!r} was not written (calling "
                f"again is safe): {exc}"
            ) from exc

    async def recurring(self, *, removed: bool = False) -> list[RecurringSchedule]:
        """Every recurring schedule, by name (removed ones too with removed=True)."""
        return await self._open.schedules.list_all(removed=removed)

    async def get_recurring(self, name: str) -> RecurringSchedule | None:
        """One recurring schedule (also a removed one), or None."""
        return await self._open.schedules.get(name)

    async def remove_recurring(self, name: str) -> bool:
        """Stop a recurring schedule; True if it was there. Its ticks that are jobs
        already and due from now on are cancelled, but one being published at this
        very moment fires. Ticks fired before stay fired."""
        name = check_name(name)
        try:
            return await self._open.schedules.remove(name)
        except UNREACHABLE as exc:
            raise StoreUnavailable(
                f"MySQL is unreachable: the schedule {name!r} was not removed (calling again "
                f"is safe): {exc}"
            ) from exc
