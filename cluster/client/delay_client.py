"""The producer API: schedule, schedule_many, cancel, reschedule, get, the dead
letters (dead_letters, dead_job, replay_dead, purge_dead: cluster/client/dead_letters.py), and
recurring schedules (schedule_recurring, recurring, remove_recurring:
cluster/client/recurring.py).

    from cluster.client.delay_client import DelayClient

    async with DelayClient.from_env() as client:
        job_id = await client.schedule("orders.close", {"order": 42}, delay=1800)

Every write goes to MySQL first (committed), then to Redis through a Lua script, so a
job Redis knows is always a job MySQL knows. Bad input raises InvalidJob before
anything is written.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import socket
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

import pymysql
import redis.exceptions

from cluster.client.dead_letters import DeadJob, DeadLetters
from cluster.client.recurring import (
    RecurringSchedule,
    RecurringSchedules,
    check_name,
    validate_recurring,
)
from cluster.connections.redis_conn import RedisClient, open_redis
from cluster.errors import (
    CommitUnknown,
    InvalidJob,
    OutcomeUnknown,
    RedisStepFailed,
    ReplicationUnconfirmed,
    SlotsFailed,
    StoreMismatch,
    StoreUnavailable,
)
from cluster.model.changes import CancelResult, ChangeResult, ChangeStatus, RescheduleResult
from cluster.model.contract import WAITING_STATUSES, AddCode, ChangeCode, JobStatus
from cluster.model.jobs import (
    Job,
    ValidJob,
    check_job_id,
    check_topic,
    due_ms_of,
    now_ms,
    validate,
    validate_job,
)
from cluster.model.keys import KeySpace, slot_of
from cluster.scripts.facade import NewJob, Scripts
from cluster.settings.config import Settings
from cluster.store.mysql_store import JobRecord, MySQLStore

__all__ = [
    "CancelResult",
    "ChangeStatus",
    "DeadJob",
    "DelayClient",
    "InvalidJob",
    "Job",
    "JobRecord",
    "JobStatus",
    "OutcomeUnknown",
    "RecurringSchedule",
    "RedisStepFailed",
    "RescheduleResult",
    "Scheduled",
    "StoreMismatch",
    "StoreUnavailable",
]


# As plain ints: PyMySQL would quote an IntEnum parameter as a string.
_WAITING_PARAMS = tuple(int(status) for status in WAITING_STATUSES)
MAX_BATCH = 100_000
# Pauses before adding again a job whose add met a cancel's tombstone (_add_refused_again).
REFUSED_RETRY_PAUSES_S = (0.01, 0.05, 0.15, 0.3)
# Pauses before trying a cancel or reschedule again when the job changed state under it
# (a tombstone of a concurrent cancel refused the reschedule's add, for one).
CHANGE_RETRY_PAUSES_S = REFUSED_RETRY_PAUSES_S
# Pauses before adding again the jobs of slots whose Redis node failed (a Redis Cluster
# master failing over): about as long as a failover takes with cluster-node-timeout 2 s.
FAILED_SLOT_RETRY_PAUSES_S = (0.1, 0.3, 0.6, 1.0, 2.0)
# A job due this much beyond payload_lead_ms (this process's clock) goes to the add
# script without its tail, which the script would drop anyway: the tail is not even made.
# Should Redis's clock be that far ahead, the job is stored lean all the same (a lean
# envelope is the header with an empty tail) and fires with its tail read from MySQL.
LEAN_MARGIN_MS = 1000
# MySQL errors of a statement naming a table this connection cannot write: no such
# table (another server), no INSERT privilege, no access to the database.
_NOT_REACHABLE_HERE = (1146, 1142, 1044, 1049)
# What a MySQL connection that cannot be made or broke raises.
_UNREACHABLE = (pymysql.err.OperationalError, pymysql.err.InterfaceError, OSError)


_Result = TypeVar("_Result", bound=ChangeResult)
# The answer when the Redis step found the job beyond change.
_REFUSED_BY = {
    ChangeCode.IN_FLIGHT: ChangeStatus.IN_FLIGHT,
    ChangeCode.DEAD: ChangeStatus.DEAD,
    ChangeCode.EXPIRED: ChangeStatus.EXPIRED,
}
# The answer when MySQL holds the job in a final status.
_ANSWER_OF_STATUS = {
    JobStatus.CANCELLED: ChangeStatus.CANCELLED,
    JobStatus.DEAD: ChangeStatus.DEAD,
    JobStatus.EXPIRED: ChangeStatus.EXPIRED,
}


@dataclass(frozen=True)
class Scheduled:
    """One job of schedule_batch(): its id, and whether that call created it."""

    job_id: str
    created: bool


class DelayClient:
    """An async producer client. Use as ``async with``; close() is idempotent."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.keys = KeySpace(settings.key_prefix)
        self.mysql = MySQLStore(settings, f"client:{socket.gethostname()}-{os.getpid()}")
        self._redis: RedisClient | None = None
        self._scripts: Scripts | None = None
        self._dead: DeadLetters | None = None
        self._recurring: RecurringSchedules | None = None

    @classmethod
    def from_env(cls, **overrides: Any) -> DelayClient:
        """Settings from DELAYQ_* variables (and DELAYQ_CONFIG), with overrides on top."""
        return cls(Settings.from_env().replace(**overrides))

    async def open(self) -> None:
        if self._scripts is not None:
            return
        await self.mysql.open()
        self._redis = await open_redis(self.settings)
        self._scripts = Scripts(
            self._redis,
            self.keys,
            wait_replicas=self.settings.redis_wait_replicas,
            wait_timeout_ms=self.settings.redis_wait_timeout_ms,
            payload_lead_ms=self.settings.payload_lead_ms,
        )
        self._dead = DeadLetters(self.settings, self._scripts, self.mysql)
        self._recurring = RecurringSchedules(self.settings, self.mysql, self.cancel)

    async def close(self) -> None:
        try:
            await self.mysql.close()
        finally:
            redis, self._redis, self._scripts, self._dead = self._redis, None, None, None
            self._recurring = None
            if redis is not None:
                await redis.aclose()

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
    def scripts(self) -> Scripts:
        if self._scripts is None:
            raise RuntimeError("DelayClient is not open: use `async with` or await open()")
        return self._scripts

    # ----- schedule ------------------------------------------------------------------

    async def schedule(
        self,
        topic: str,
        payload: Any,
        *,
        delay: float | None = None,
        at: dt.datetime | float | None = None,
        job_id: str | None = None,
        biz_id: str | None = None,
        biz_type: str | None = None,
        max_attempts: int | None = None,
        expires_after: float | None = None,
    ) -> str:
        """Schedule one job; returns its job_id. The same job_id twice is one job.

        Give exactly one of delay (seconds from now) or at (an aware datetime or epoch
        seconds). A due time in the past fires at once. With expires_after (seconds),
        the job is never published later than that after its due time: if it could not
        be published by then, it ends EXPIRED instead.
        """
        job = validate(
            topic=topic,
            payload=payload,
            delay=delay,
            at=at,
            job_id=job_id,
            biz_id=biz_id,
            biz_type=biz_type,
            max_attempts=max_attempts,
            settings=self.settings,
            expires_after=expires_after,
        )
        await self._store([job], keyed={job.job_id} if job_id is not None else set())
        return job.job_id

    async def schedule_many(self, jobs: Sequence[Job | Mapping[str, Any]]) -> list[str]:
        """Schedule many jobs in few round trips; returns their ids in input order.

        Each job is a Job or a mapping with schedule()'s argument names. If any job is
        invalid, InvalidJob names it and nothing is scheduled.
        """
        valid, keyed = self._validated(jobs)
        unique = _first_of_each_id(valid)
        if unique:
            await self._store(unique, keyed)
        return [job.job_id for job in valid]

    async def schedule_batch(self, jobs: Sequence[Job | Mapping[str, Any]]) -> list[Scheduled]:
        """schedule_many(), saying of each job whether this call created it or it was
        already there (the same job_id scheduled before: that job stands unchanged).

        Costs one more MySQL read than schedule_many() when the jobs carry their own ids.
        `created` is False for a job a concurrent call with the same id stored at the
        same moment: of two such calls, at most one says True.
        """
        valid, keyed = self._validated(jobs)
        return await self.schedule_validated(valid, keyed)

    async def schedule_validated(self, valid: list[ValidJob], keyed: set[str]) -> list[Scheduled]:
        """schedule_batch() of jobs already validated (cluster.model.jobs.validate_job), with
        `keyed` the ids their callers gave: for servers that validate each request on
        its own and store many requests' jobs together (cluster/web/batcher.py)."""
        unique = _first_of_each_id(valid)
        created: set[str] = set()
        if unique:
            try:
                existing = set(await self.mysql.get_many(sorted(keyed))) if keyed else set()
            except _UNREACHABLE as exc:
                raise StoreUnavailable(
                    f"MySQL is unreachable, nothing was scheduled: {exc}"
                ) from exc
            new = [job.job_id for job in unique if job.job_id not in existing]
            inserted = await self._store(unique, keyed)
            if inserted is None or inserted == len(new):
                # Every absent id was inserted by this call (or, after a commit of
                # unknown outcome, found there: that commit went through).
                created.update(new)
        results = []
        for job in valid:
            results.append(Scheduled(job.job_id, job.job_id in created))
            created.discard(job.job_id)  # a repeat of an id in the batch is not new
        return results

    async def schedule_in(
        self,
        conn: Any,
        topic: str,
        payload: Any,
        *,
        delay: float | None = None,
        at: dt.datetime | float | None = None,
        job_id: str | None = None,
        biz_id: str | None = None,
        biz_type: str | None = None,
        max_attempts: int | None = None,
        expires_after: float | None = None,
    ) -> str:
        """Schedule one job inside the caller's own MySQL transaction; returns its job_id.

        `conn` is the caller's aiomysql connection with a transaction open (after
        `await conn.begin()`), on the MySQL server that holds delayq's database, as a
        user allowed to INSERT into delayq's tables. The job's row (and a row of the
        shard's outbox) is written there and not committed: the job exists if and only
        if the caller's transaction commits. Once it commits, the node owning the job's
        slot finds it in the outbox within about outbox_poll_ms and adds it to Redis
        (actors/outbox.py). Arguments as for schedule(); the same job_id twice is one job.
        """
        job = validate(
            topic=topic,
            payload=payload,
            delay=delay,
            at=at,
            job_id=job_id,
            biz_id=biz_id,
            biz_type=biz_type,
            max_attempts=max_attempts,
            settings=self.settings,
            expires_after=expires_after,
        )
        if conn.get_autocommit():
            raise InvalidJob(
                "schedule_in() needs the caller's transaction: the connection is in "
                "autocommit mode (call await conn.begin() first)"
            )
        if str(getattr(conn, "charset", "utf8mb4")) != "utf8mb4":
            raise InvalidJob(
                f"schedule_in() needs a connection with charset utf8mb4 (payloads and ids "
                f"may hold any Unicode), this one has {conn.charset!r}"
            )
        try:
            await self.mysql.insert_in_transaction(
                conn, job, slot_of(job.job_id, self.settings.slots)
            )
        except pymysql.err.MySQLError as exc:
            if exc.args and exc.args[0] in _NOT_REACHABLE_HERE:
                raise StoreMismatch(
                    f"delayq's tables ({self.mysql.database!r}) cannot be written through "
                    f"this connection: it must reach the MySQL server of mysql_url, as a "
                    f"user allowed to INSERT into them: {exc}"
                ) from exc
            raise
        return job.job_id

    def _validated(
        self, jobs: Sequence[Job | Mapping[str, Any]]
    ) -> tuple[list[ValidJob], set[str]]:
        """The jobs validated, and the ids their callers gave (InvalidJob names the
        first bad job)."""
        if isinstance(jobs, str | bytes | Mapping) or not isinstance(jobs, Sequence):
            raise InvalidJob("schedule_many() takes a list of jobs")
        if len(jobs) > MAX_BATCH:
            raise InvalidJob(f"schedule_many() takes at most {MAX_BATCH} jobs per call")
        now = now_ms()
        valid: list[ValidJob] = []
        keyed: set[str] = set()
        for index, job in enumerate(jobs):
            try:
                checked = validate_job(job, self.settings, now)
            except InvalidJob as exc:
                raise InvalidJob(f"job {index}: {exc}") from None
            valid.append(checked)
            given_id = job.job_id if isinstance(job, Job) else job.get("job_id")
            if given_id is not None:
                keyed.add(checked.job_id)
        return valid, keyed

    async def _store(self, jobs: list[ValidJob], keyed: set[str]) -> int | None:
        """MySQL first (committed), then the add script for every slot in one pipeline.
        Returns how many rows were inserted (None: the commit's outcome was unclear, and
        every row was found there afterwards)."""
        slots = [slot_of(job.job_id, self.settings.slots) for job in jobs]
        inserted: int | None = None
        try:
            inserted = await self.mysql.insert_jobs(jobs, slots)
        except CommitUnknown as exc:
            # Rows that are there were committed (the write is all or nothing); rows
            # that are not may still be on their way, so that outcome stays unknown.
            ids = [job.job_id for job in jobs]
            unknown = OutcomeUnknown(
                f"MySQL connection lost while committing; the job(s) may be scheduled: {exc}", ids
            )
            try:
                rows = await self.mysql.get_many(ids)
            except _UNREACHABLE:
                raise unknown from exc
            if len(rows) < len(jobs):
                raise unknown from exc
        except _UNREACHABLE as exc:
            raise StoreUnavailable(f"MySQL is unreachable, nothing was scheduled: {exc}") from exc
        else:
            rows = {}
            if inserted == len(jobs):
                keyed = set()  # every row is new: none to read back (see _add_committed)
        try:
            await self._add_committed(jobs, slots, keyed, rows)
        except (*_UNREACHABLE, redis.exceptions.RedisError, TimeoutError) as exc:
            # Committed: the owning nodes re-add them from MySQL (actors/reconciler.py).
            raise RedisStepFailed(
                f"the job(s) are committed in MySQL and will fire, possibly late (their "
                f"nodes re-add them from MySQL within seconds), but the step that adds "
                f"them to Redis failed: {type(exc).__name__}: {exc}",
                [job.job_id for job in jobs],
            ) from exc
        return inserted

    async def _add_committed(
        self,
        jobs: list[ValidJob],
        slots: list[int],
        keyed: set[str],
        rows: dict[str, JobRecord],
    ) -> None:
        """The Redis step of _store, for jobs MySQL has committed; `rows` are rows
        already read (after an unclear commit)."""
        if keyed and not rows:
            # A caller's job_id may already exist: Redis must get the row MySQL kept,
            # and nothing if that job has fired, was cancelled or is dead.
            rows = await self.mysql.get_many(sorted(keyed))
        # Jobs due beyond the horizon stay in MySQL alone; the owning node loads them.
        # Judged after the commit, so a row a node's load pass could not see yet is
        # always added here (actors/reconciler.py).
        now = now_ms()
        horizon_end = now + self.settings.redis_horizon_ms
        lead = self.settings.payload_lead_ms
        lean_after = now + lead + LEAN_MARGIN_MS if lead else horizon_end
        by_slot: dict[int, list[NewJob]] = defaultdict(list)
        for slot, job in zip(slots, jobs, strict=True):
            row = rows.get(job.job_id)
            if row is None:
                if job.due_ms < horizon_end:
                    tail = job.tail if job.due_ms <= lean_after else b""
                    by_slot[slot].append(
                        NewJob(job.job_id, job.due_ms, job.max_attempts, tail, job.expires_after_ms)
                    )
            elif row.status in WAITING_STATUSES and row.due_ms < horizon_end:
                by_slot[slot].append(NewJob.from_record(row))
        if by_slot:
            await self._add_refused_again(by_slot, await self._add_retrying(by_slot))

    async def _add_retrying(
        self, by_slot: dict[int, list[NewJob]]
    ) -> dict[int, tuple[bool, list[AddCode]]]:
        """add_many, adding again the slots whose run failed while the others' stand
        (one failing Redis node never holds back the rest). Raises RedisStepFailed naming
        the jobs of the slots that still failed after FAILED_SLOT_RETRY_PAUSES_S."""
        results: dict[int, tuple[bool, list[AddCode]]] = {}
        todo = by_slot
        for pause_s in (*FAILED_SLOT_RETRY_PAUSES_S, None):
            try:
                results.update(await self.scripts.add_many(todo))
                return results
            except SlotsFailed as exc:
                results.update(exc.done)
                todo = {slot: todo[slot] for slot in exc.failed}
                if pause_s is None:
                    raise RedisStepFailed(
                        f"the job(s) are committed in MySQL and will fire, possibly late "
                        f"(their nodes re-add them from MySQL within seconds), but adding "
                        f"them to Redis failed for {len(exc.failed)} slot(s): {exc}",
                        [job.job_id for jobs in todo.values() for job in jobs],
                    ) from exc
                await asyncio.sleep(pause_s)
        raise AssertionError("unreachable")

    async def _add_refused_again(
        self,
        by_slot: dict[int, list[NewJob]],
        results: dict[int, tuple[bool, list[AddCode]]],
    ) -> None:
        """A job whose add was refused though MySQL has its row waiting met the
        tombstone of a cancel that is still deciding (see cancel()): one that finds no
        row of it takes the tombstone back a round trip later, and the job must then be
        added to fire on time; one that finds the row cancels it. So: add again, a few
        times over about half a second, while the row is waiting. Never past a
        tombstone, so a job cancelled in MySQL stays out of Redis."""
        refused = {
            job.job_id: (slot, job)
            for slot, jobs in by_slot.items()
            for job, code in zip(jobs, results[slot][1], strict=True)
            if code == AddCode.REFUSED
        }
        for pause_s in REFUSED_RETRY_PAUSES_S:
            if not refused:
                return
            await asyncio.sleep(pause_s)
            rows = await self.mysql.get_many(list(refused))
            retry: dict[int, list[NewJob]] = defaultdict(list)
            for job_id, (slot, job) in refused.items():
                row = rows.get(job_id)
                if row is not None and row.status in WAITING_STATUSES:
                    retry[slot].append(job)
            again = await self._add_retrying(retry) if retry else {}
            refused = {
                job.job_id: (slot, job)
                for slot, jobs in retry.items()
                for job, code in zip(jobs, again[slot][1], strict=True)
                if code == AddCode.REFUSED
            }

    # ----- cancel / reschedule / get -------------------------------------------------

    async def cancel(self, job_id: str) -> CancelResult:
        """Cancel a job. The result is true (status CANCELLED) when the job will never
        fire, also when it was cancelled before; otherwise its status says why not:
        NOT_FOUND, ALREADY_FIRED (with fired_ms and attempt when recorded), IN_FLIGHT
        (being published: it fires), DEAD or EXPIRED."""
        job_id = check_job_id(job_id)
        slot = slot_of(job_id, self.settings.slots)
        for pause_s in (*CHANGE_RETRY_PAUSES_S, None):
            result = await self._cancel_once(job_id, slot)
            if result is not None:
                return result
            if pause_s is not None:
                await asyncio.sleep(pause_s)
        raise OutcomeUnknown(
            f"cancel of {job_id!r}: the job kept changing state while it was cancelled "
            "(scheduled, replayed or fired meanwhile); calling cancel again is safe",
            [job_id],
        )

    async def _cancel_once(self, job_id: str, slot: int) -> CancelResult | None:
        """One try of cancel(); None when the job changed state under it (try again)."""
        doubt: ReplicationUnconfirmed | None = None
        try:
            redis_step = await self.scripts.cancel(slot, job_id, self.settings.marker_retention_ms)
        except ReplicationUnconfirmed as exc:
            redis_step, doubt = exc.result, exc
        if redis_step.code not in (ChangeCode.CHANGED, ChangeCode.ABSENT):
            return await self._refused(CancelResult, job_id, redis_step.code)
        # A tombstone now refuses a late add of it (e.g. a schedule still on its way).
        changed = await self.mysql.set_status(
            job_id, JobStatus.CANCELLED, slot, from_statuses=_WAITING_PARAMS
        )
        if changed or redis_step.code == ChangeCode.CHANGED:
            _check_confirmed("cancel", job_id, doubt)
            return CancelResult(job_id, ChangeStatus.CANCELLED)
        # Not in Redis, and MySQL has no waiting row of it (none at all, or one fired,
        # cancelled, dead or expired): nothing is cancelled, so the tombstone has
        # nothing to guard and would only refuse a schedule (or dead-letter replay) of
        # this id for marker_retention_ms, which then fired that much late.
        # Interleavings with a schedule S of the id (S1: its MySQL commit, S2: its Redis
        # add), this cancel being C1: tombstone, C2: the UPDATE above, C3: untomb:
        # - S1 before C2: C2 found the row and cancelled it; we are not here, and the
        #   tombstone refuses S2 if it comes after C1 (S2 before C1: C1 removed the job).
        #   This is the race the tombstone exists for, and it stays closed.
        # - S1 after C2: the job did not exist yet when C2 ran. S2 after C3 adds it. S2
        #   before C3 is refused, and S adds it again once C3 took the tombstone back
        #   (_add_refused_again). The row read below is then waiting, and the cancel is
        #   tried again, now with the job there.
        # Untomb takes back only this cancel's tombstone and restores the one it
        # replaced: a concurrent cancel that did cancel the row keeps its own.
        await self.scripts.untomb(slot, job_id, redis_step)
        result = await self._answer_of_row(CancelResult, job_id, await self.mysql.get(job_id))
        if result:
            _check_confirmed("cancel", job_id, doubt)
        return result

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
        slot = slot_of(job_id, self.settings.slots)
        for pause_s in (*CHANGE_RETRY_PAUSES_S, None):
            result = await self._reschedule_once(job_id, slot, due_ms)
            if result is not None:
                return result
            if pause_s is not None:
                await asyncio.sleep(pause_s)
        raise OutcomeUnknown(
            f"reschedule of {job_id!r}: Redis refuses to add the job, which MySQL has "
            "waiting with its new due time: a cancel of it is under way, or one failed "
            "before MySQL recorded it (then the job comes back after marker_retention_ms "
            "and fires at the new time); get() tells which, and calling reschedule again "
            "is safe",
            [job_id],
        )

    async def _reschedule_once(
        self, job_id: str, slot: int, due_ms: int
    ) -> RescheduleResult | None:
        """One try of reschedule(); None when the job changed state under it or a
        tombstone refused its add (try again)."""
        done = RescheduleResult(job_id, ChangeStatus.RESCHEDULED, due_ms=due_ms)
        doubt: ReplicationUnconfirmed | None = None
        try:
            code, _ = await self.scripts.reschedule(slot, job_id, due_ms)
        except ReplicationUnconfirmed as exc:
            (code, _), doubt = exc.result, exc
        if code == ChangeCode.CHANGED:
            await self.mysql.set_due(job_id, due_ms, slot)
            _check_confirmed("reschedule", job_id, doubt)
            return done
        if code != ChangeCode.ABSENT:
            return await self._refused(RescheduleResult, job_id, code)
        # Not in Redis: its add may still be on the way, or Redis lost it. If MySQL says
        # it is pending, record the new time and (re)add it; a concurrent add then
        # finds it present and changes nothing.
        if not await self.mysql.set_due(job_id, due_ms, slot):
            return await self._answer_of_row(RescheduleResult, job_id, await self.mysql.get(job_id))
        row = await self.mysql.get(job_id)
        if row is None or row.status not in WAITING_STATUSES:
            return await self._answer_of_row(RescheduleResult, job_id, row)
        if due_ms >= now_ms() + self.settings.redis_horizon_ms:
            return done  # beyond the horizon: the owning node loads it in time
        _, [added] = await self.scripts.add(slot, [NewJob.from_record(row)])
        if added == AddCode.ADDED:
            return done
        if added == AddCode.REFUSED:
            # A tombstone (a cancel deciding) or the marker of a fire a moment ago.
            return None
        # Added meanwhile, perhaps with the old time.
        try:
            code, _ = await self.scripts.reschedule(slot, job_id, due_ms)
        except ReplicationUnconfirmed as exc:
            (code, _), doubt = exc.result, exc
        if code == ChangeCode.CHANGED:
            _check_confirmed("reschedule", job_id, doubt)
            return done
        if code == ChangeCode.ABSENT:
            return None  # gone again: cancelled or fired meanwhile
        return await self._refused(RescheduleResult, job_id, code)

    async def _refused(self, kind: type[_Result], job_id: str, code: ChangeCode) -> _Result:
        """The answer when the Redis step found the job beyond change (lua/cancel.lua,
        lua/reschedule.lua)."""
        if code == ChangeCode.FIRED:
            return await self._fired(kind, job_id, None)
        return kind(job_id, _REFUSED_BY[code])

    async def _answer_of_row(
        self, kind: type[_Result], job_id: str, row: JobRecord | None
    ) -> _Result | None:
        """The answer MySQL gives when Redis did not hold the job; None when the row is
        waiting after all (it was scheduled or replayed meanwhile: try again)."""
        if row is None:
            return kind(job_id, ChangeStatus.NOT_FOUND)
        if row.status == JobStatus.FIRED:
            return await self._fired(kind, job_id, row)
        if row.status in WAITING_STATUSES:
            return None
        return kind(job_id, _ANSWER_OF_STATUS[row.status])

    async def _fired(self, kind: type[_Result], job_id: str, row: JobRecord | None) -> _Result:
        """ALREADY_FIRED, with the time and attempt of the fire the node recorded."""
        fired = await self.mysql.fired_at(job_id)
        if fired is not None:
            return kind(job_id, ChangeStatus.ALREADY_FIRED, fired_ms=fired[0], attempt=fired[1])
        attempt = row.attempts if row is not None and row.attempts else None
        return kind(job_id, ChangeStatus.ALREADY_FIRED, attempt=attempt)

    async def get(self, job_id: str) -> JobRecord | None:
        """The durable record of a job (status, due time, attempts), or None.

        The status is MySQL's: a job fired a moment ago may still read pending for
        the few milliseconds until its node records it.
        """
        return await self.mysql.get(check_job_id(job_id))

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

    # ----- dead letters (cluster/client/dead_letters.py) -------------------------------------

    @property
    def _dead_letters(self) -> DeadLetters:
        if self._dead is None:
            raise RuntimeError("DelayClient is not open: use `async with` or await open()")
        return self._dead

    async def dead_letters(self, *, topic: str | None = None, limit: int = 100) -> list[DeadJob]:
        """Dead jobs, oldest death first (per slot), with attempts and last error."""
        return await self._dead_letters.dead_letters(topic=topic, limit=limit)

    async def count_dead(self, *, topic: str | None = None) -> int:
        """How many jobs are in the dead-letter set (of one topic)."""
        return await self._dead_letters.count_dead(topic)

    async def dead_job(self, job_id: str) -> DeadJob | None:
        """One job of the dead-letter set, or None if it is not there."""
        return await self._dead_letters.dead_job(job_id)

    async def replay_dead(
        self, job_ids: Sequence[str] | None = None, *, topic: str | None = None
    ) -> int:
        """Give dead jobs a new set of attempts, due now: those named, those of a topic,
        or (neither given) all. Returns how many were replayed.

        A named job that is dead in MySQL but no longer in the dead-letter set (it was
        purged, or Redis lost it) is replayed from its MySQL row."""
        return await self._dead_letters.replay_dead(job_ids, topic=topic)

    async def purge_dead(
        self, job_ids: Sequence[str] | None = None, *, topic: str | None = None
    ) -> int:
        """Forget dead jobs in Redis (MySQL keeps them as dead): those named, those of
        a topic, or (neither given) all. Returns how many were purged."""
        return await self._dead_letters.purge_dead(job_ids, topic=topic)

    # ----- recurring schedules (cluster/client/recurring.py) -----------------------------------

    @property
    def _schedules(self) -> RecurringSchedules:
        if self._recurring is None:
            raise RuntimeError("DelayClient is not open: use `async with` or await open()")
        return self._recurring

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
        biz_id: str | None = None,
        biz_type: str | None = None,
        max_attempts: int | None = None,
        missed: str = "fire_once",
        expires_after: float | None = None,
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
        long after its time ends EXPIRED instead of firing late. The same name again with
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
            biz_id=biz_id,
            biz_type=biz_type,
            max_attempts=max_attempts,
            missed=missed,
            settings=self.settings,
            expires_after=expires_after,
        )
        try:
            return await self._schedules.put(definition)
        except _UNREACHABLE as exc:
            raise StoreUnavailable(
                f"MySQL is unreachable: the schedule {name!r} was not written (calling "
                f"again is safe): {exc}"
            ) from exc

    async def recurring(self, *, removed: bool = False) -> list[RecurringSchedule]:
        """Every recurring schedule, by name (removed ones too with removed=True)."""
        return await self._schedules.list_all(removed=removed)

    async def get_recurring(self, name: str) -> RecurringSchedule | None:
        """One recurring schedule (also a removed one), or None."""
        return await self._schedules.get(name)

    async def remove_recurring(self, name: str) -> bool:
        """Stop a recurring schedule; True if it was there. Its ticks that are jobs
        already and due from now on are cancelled, but one being published at this
        very moment fires. Ticks fired before stay fired."""
        name = check_name(name)
        try:
            return await self._schedules.remove(name)
        except _UNREACHABLE as exc:
            raise StoreUnavailable(
                f"MySQL is unreachable: the schedule {name!r} was not removed (calling again "
                f"is safe): {exc}"
            ) from exc


def _first_of_each_id(jobs: list[ValidJob]) -> list[ValidJob]:
    """The jobs without repeats of a job_id: the same id twice in one batch is one job."""
    seen: set[str] = set()
    unique: list[ValidJob] = []
    for job in jobs:
        if job.job_id not in seen:
            seen.add(job.job_id)
            unique.append(job)
    return unique


def _check_confirmed(change: str, job_id: str, doubt: ReplicationUnconfirmed | None) -> None:
    """Raises ReplicationUnconfirmed for a change the replicas did not confirm."""
    if doubt is not None:
        raise ReplicationUnconfirmed(
            f"{change} of {job_id!r} is done, but {doubt}: a Redis failover now could "
            f"undo it; calling {change} again is safe and confirms it",
            [job_id],
        )
