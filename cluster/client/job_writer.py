"""The write path of new jobs: schedule, schedule_many, schedule_batch and schedule_in
of DelayClient (cluster/client/delay_client.py) end here.

Every write goes to MySQL first (committed), then to Redis through the add script, so a
job Redis knows is always a job MySQL knows. A batch is validated as a whole before
anything is written (`validated`). schedule_in writes through the caller's own
transaction and leaves the Redis step to the node owning the job's slot
(`schedule_in_transaction`, actors/outbox.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import pymysql
import redis.exceptions

from cluster.errors import (
    CommitUnknown,
    InvalidJob,
    OutcomeUnknown,
    RedisStepFailed,
    ScheduleIncomplete,
    ShardHomeConflict,
    SlotsFailed,
    StoreMismatch,
    StoreUnavailable,
)
from cluster.model.contract import WAITING_STATUSES, AddCode
from cluster.model.jobs import Job, ValidJob, now_ms, validate_job
from cluster.model.keys import slot_of
from cluster.scripts.facade import NewJob, Scripts
from cluster.settings.config import Settings
from cluster.store.mysql_store import JobRecord, MySQLStore, PartialCommit

MAX_BATCH = 100_000
# Pauses before adding again a job whose add met a cancel's tombstone (_add_refused_again).
REFUSED_RETRY_PAUSES_S = (0.01, 0.05, 0.15, 0.3)
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
UNREACHABLE = (pymysql.err.OperationalError, pymysql.err.InterfaceError, OSError)


@dataclass(frozen=True)
class Scheduled:
    """One job of schedule_batch(): its id, and whether that call created it."""

    job_id: str
    created: bool


def validated(
    jobs: Sequence[Job | Mapping[str, Any]], settings: Settings
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
            checked = validate_job(job, settings, now)
        except InvalidJob as exc:
            raise InvalidJob(f"job {index}: {exc}") from None
        valid.append(checked)
        given_id = job.job_id if isinstance(job, Job) else job.get("job_id")
        if given_id is not None:
            keyed.add(checked.job_id)
    return valid, keyed


def first_of_each_id(jobs: list[ValidJob]) -> list[ValidJob]:
    """The jobs without repeats of a job_id: the same id twice in one batch is one job."""
    seen: set[str] = set()
    unique: list[ValidJob] = []
    for job in jobs:
        if job.job_id not in seen:
            seen.add(job.job_id)
            unique.append(job)
    return unique


async def schedule_in_transaction(mysql: MySQLStore, conn: Any, job: ValidJob) -> None:
    """schedule_in()'s write: the job's row and outbox row through the caller's
    connection, uncommitted. Needs no open client: nothing of delayq's own connections
    is used."""
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
        await mysql.insert_in_transaction(conn, job, slot_of(job.job_id, mysql.settings.slots))
    except pymysql.err.MySQLError as exc:
        if exc.args and exc.args[0] in _NOT_REACHABLE_HERE:
            raise StoreMismatch(
                f"delayq's tables ({mysql.database!r}) cannot be written through "
                f"this connection: it must reach the MySQL server holding the job's "
                f"shard (DelayClient.server_of(job_id)), as a "
                f"user allowed to INSERT into them: {exc}"
            ) from exc
        raise


class JobWriter:
    """Stores validated jobs for one open DelayClient: MySQL, then Redis."""

    def __init__(self, settings: Settings, mysql: MySQLStore, scripts: Scripts) -> None:
        self.settings = settings
        self.mysql = mysql
        self.scripts = scripts

    async def schedule_validated(self, valid: list[ValidJob], keyed: set[str]) -> list[Scheduled]:
        """DelayClient.schedule_validated(): store the jobs and say of each whether this
        call created it (`keyed`: the ids their callers gave, which may exist already)."""
        unique = first_of_each_id(valid)
        created: set[str] = set()
        if unique:
            try:
                rows, unread = await self.mysql.get_answering(sorted(keyed))
            except UNREACHABLE as exc:
                raise StoreUnavailable(
                    f"MySQL is unreachable, nothing was scheduled: {exc}"
                ) from exc
            if unread:
                # Their server did not answer (down, frozen): they are not written, and
                # the other servers' jobs are scheduled all the same.
                await self._store_around(
                    unique, keyed, {job_id: error for ids, error in unread for job_id in ids}
                )
            existing = set(rows)
            new = [job.job_id for job in unique if job.job_id not in existing]
            inserted = await self.store(unique, keyed)
            if inserted is None or inserted == len(new):
                # Every absent id was inserted by this call (or, after a commit of
                # unknown outcome, found there: that commit went through).
                created.update(new)
        results = []
        for job in valid:
            results.append(Scheduled(job.job_id, job.job_id in created))
            created.discard(job.job_id)  # a repeat of an id in the batch is not new
        return results

    async def store(self, jobs: list[ValidJob], keyed: set[str]) -> int | None:
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
            except UNREACHABLE:
                raise unknown from exc
            if len(rows) < len(jobs):
                raise unknown from exc
        except PartialCommit as exc:
            await self._partly_committed(jobs, slots, keyed, exc)
        except ShardHomeConflict:
            raise  # nothing was scheduled: said as it is
        except (*UNREACHABLE, StoreUnavailable) as exc:
            raise StoreUnavailable(f"MySQL is unreachable, nothing was scheduled: {exc}") from exc
        else:
            rows = {}
            if inserted == len(jobs):
                keyed = set()  # every row is new: none to read back (see _add_committed)
        try:
            await self._add_committed(jobs, slots, keyed, rows)
        except (*UNREACHABLE, redis.exceptions.RedisError, TimeoutError) as exc:
            # Committed: the owning nodes re-add them from MySQL (actors/reconciler.py).
            raise RedisStepFailed(
                f"the job(s) are committed in MySQL and will fire, possibly late (their "
                f"nodes re-add them from MySQL within seconds), but the step that adds "
                f"them to Redis failed: {type(exc).__name__}: {exc}",
                [job.job_id for job in jobs],
            ) from exc
        return inserted

    async def _store_around(
        self, jobs: list[ValidJob], keyed: set[str], unread: dict[str, BaseException]
    ) -> NoReturn:
        """store() of the jobs but those in `unread` (caller's ids whose server did not
        answer whether they exist), which are not written: raises what store() would,
        ScheduleIncomplete naming those not scheduled."""
        ids = [job.job_id for job in jobs]
        slots = [slot_of(job_id, self.settings.slots) for job_id in ids]
        skipped = [i for i, job_id in enumerate(ids) if job_id in unread]
        writable = [i for i, job_id in enumerate(ids) if job_id not in unread]
        cause = next(iter(unread.values()))
        if not writable:
            raise StoreUnavailable(
                f"MySQL is unreachable, nothing was scheduled: {cause}"
            ) from cause
        try:
            await self.mysql.insert_jobs([jobs[i] for i in writable], [slots[i] for i in writable])
            done = PartialCommit(writable, skipped, [], cause)
        except PartialCommit as exc:
            done = PartialCommit(
                [writable[i] for i in exc.committed],
                sorted(skipped + [writable[i] for i in exc.refused]),
                [writable[i] for i in exc.unknown],
                exc.cause,
                [writable[i] for i in exc.stalled],
            )
        except CommitUnknown as exc:
            done = PartialCommit([], skipped, writable, exc)
        except ShardHomeConflict:
            raise  # nothing was scheduled: said as it is
        except (*UNREACHABLE, StoreUnavailable) as exc:
            raise StoreUnavailable(f"MySQL is unreachable, nothing was scheduled: {exc}") from exc
        await self._partly_committed(jobs, slots, keyed, done)

    async def _partly_committed(
        self, jobs: list[ValidJob], slots: list[int], keyed: set[str], exc: PartialCommit
    ) -> NoReturn:
        """A batch over several servers of which some committed: add those jobs to
        Redis, and say which jobs are scheduled, which not, and which unknown."""
        ids = [job.job_id for job in jobs]
        committed, unknown = list(exc.committed), list(exc.unknown)
        stalled = set(exc.stalled)
        lost = [i for i in unknown if i not in stalled]
        if lost:
            # As after a lost commit on one server: rows that are there were committed.
            # Not on a server cut off for answering nothing (it would not answer now
            # either), and within mysql_stall_s: no answer about the others waits.
            with contextlib.suppress(*UNREACHABLE, StoreUnavailable):
                rows, _ = await self.mysql.get_answering(
                    [ids[i] for i in lost], self.settings.mysql_stall_s
                )
                committed += [i for i in lost if ids[i] in rows]
                unknown = [i for i in unknown if ids[i] not in rows]
        committed.sort()
        note = ""
        try:
            await self._add_committed(
                [jobs[i] for i in committed],
                [slots[i] for i in committed],
                keyed & {ids[i] for i in committed},
                {},
            )
        except (*UNREACHABLE, redis.exceptions.RedisError, TimeoutError, OutcomeUnknown):
            note = "; adding the scheduled ones to Redis failed: their nodes add them from MySQL"
        raise ScheduleIncomplete(
            f"{len(committed)} of {len(jobs)} job(s) scheduled, {len(exc.refused)} not "
            f"scheduled and {len(unknown)} unknown: a MySQL server failed ({exc.cause}){note}",
            [ids[i] for i in committed],
            [ids[i] for i in exc.refused],
            [ids[i] for i in unknown],
        ) from exc.cause

    async def _add_committed(
        self,
        jobs: list[ValidJob],
        slots: list[int],
        keyed: set[str],
        rows: dict[str, JobRecord],
    ) -> None:
        """The Redis step of store(), for jobs MySQL has committed; `rows` are rows
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
                        NewJob(
                            job.job_id,
                            job.due_ms,
                            job.max_attempts,
                            tail,
                            job.expires_after_ms,
                            job.priority,
                        )
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
        tombstone of a cancel that is still deciding (see JobChanges.cancel in
        cluster/client/job_changes.py): one that finds no row of it takes the tombstone
        back a round trip later, and the job must then be added to fire on time; one
        that finds the row cancels it. So: add again, a few times over about half a
        second, while the row is waiting. Never past a tombstone, so a job cancelled in
        MySQL stays out of Redis."""
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
