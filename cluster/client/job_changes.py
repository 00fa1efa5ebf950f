"""Cancel and reschedule of one job, and the answer each gives (cluster/model/changes.py):
DelayClient.cancel and DelayClient.reschedule (cluster/client/delay_client.py) end here.

Each change runs its Lua script in Redis first (lua/cancel.lua, lua/reschedule.lua), then
records it in MySQL. When Redis does not hold the job, MySQL's row says what to answer.
A try that finds the job changing state under it is made again after a short pause.

A change that fails half-way says what is known: StoreUnavailable when nothing was
changed (MySQL could not be reached and the Redis step was undone, or never ran),
OutcomeUnknown naming the job otherwise. A cancel whose MySQL step failed leaves the
job out of Redis only until the caller puts it back (lua/uncancel.lua, when the UPDATE
surely never reached MySQL) or the node owning its slot does, seconds later, once MySQL
says the job is still waiting (actors/tombstones.py); a cancel's UPDATE applies only to
a row no node restored since its Redis step, so a late one changes nothing and the
cancel is tried again (the job is in Redis again, and this try removes it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import traceback
from collections.abc import Iterator
from typing import TypeVar

import pymysql
import redis.exceptions

from cluster.client.job_writer import REFUSED_RETRY_PAUSES_S, UNREACHABLE
from cluster.errors import OutcomeUnknown, ReplicationUnconfirmed, StoreUnavailable
from cluster.model.changes import CancelResult, ChangeResult, ChangeStatus, RescheduleResult
from cluster.model.contract import WAITING_STATUSES, AddCode, ChangeCode, JobStatus
from cluster.model.jobs import now_ms
from cluster.model.keys import slot_of
from cluster.scripts.codec import CancelStep
from cluster.scripts.facade import NewJob, Scripts
from cluster.scripts.restores import uncancel
from cluster.settings.config import Settings
from cluster.store.mysql_store import JobRecord, MySQLStore

# As plain ints: PyMySQL would quote an IntEnum parameter as a string.
_WAITING_PARAMS = tuple(int(status) for status in WAITING_STATUSES)
# Pauses before trying a cancel or reschedule again when the job changed state under it
# (a tombstone of a concurrent cancel refused the reschedule's add, for one).
CHANGE_RETRY_PAUSES_S = REFUSED_RETRY_PAUSES_S

# What a store that failed to answer raises: the call may or may not have reached it
# (redis-py's own errors in a cluster topology change become ConnectionError through
# _redis_errors).
# StoreUnavailable: no server that answers serves the job's logical shard (nothing sent).
MYSQL_FAILURES = (*UNREACHABLE, TimeoutError, StoreUnavailable)


class NothingChanged(StoreUnavailable):
    """The StoreUnavailable a cancel or reschedule answers having changed nothing (its
    Redis step undone, or none made): passed on as it is, never taken for a failure."""


REDIS_FAILURES = (redis.exceptions.RedisError, OSError, TimeoutError)
STORE_FAILURES = (*MYSQL_FAILURES, *REDIS_FAILURES)
# MySQL errors that mean a statement never reached the server: cannot connect (2002,
# 2003), too many connections (1040), shutting down (1053). A connection lost with the
# statement sent (2006, 2013) or a timeout leaves its outcome unknown.
_NOT_SENT_CODES = frozenset({1040, 1053, 2002, 2003})
# Why a cancel whose outcome is unknown leaves no job out of Redis for long.
_RESTORED_SOON = (
    "if MySQL did not record the cancel, the node owning the job's slot puts the job "
    "back into Redis seconds after MySQL answers again; calling cancel again is safe"
)

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


class JobChanges:
    """Cancels and reschedules for one open DelayClient. Job ids and due times come
    checked (DelayClient does that before any I/O)."""

    def __init__(self, settings: Settings, mysql: MySQLStore, scripts: Scripts) -> None:
        self.settings = settings
        self.mysql = mysql
        self.scripts = scripts

    # ----- cancel ----------------------------------------------------------------------

    async def cancel(self, job_id: str) -> CancelResult:
        """DelayClient.cancel() of a checked job id."""
        slot = slot_of(job_id, self.settings.slots)
        for pause_s in (*CHANGE_RETRY_PAUSES_S, None):
            try:
                with _redis_errors():
                    result = await self._cancel_once(job_id, slot)
            except NothingChanged:
                raise
            except STORE_FAILURES as exc:  # after the Redis step (the others say so)
                raise OutcomeUnknown(
                    f"cancel of {job_id!r}: a store failed after the job's Redis step "
                    f"({_what(exc)}): it may or may not be cancelled; {_RESTORED_SOON}",
                    [job_id],
                ) from exc
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
            with _redis_errors():
                redis_step = await self.scripts.cancel(
                    slot, job_id, self.settings.marker_retention_ms
                )
        except ReplicationUnconfirmed as exc:
            redis_step, doubt = exc.result, exc
        except REDIS_FAILURES as exc:
            raise OutcomeUnknown(
                f"cancel of {job_id!r}: Redis did not answer ({_what(exc)}), so the job may "
                f"be out of Redis, and MySQL was not changed; {_RESTORED_SOON}",
                [job_id],
            ) from exc
        if redis_step.code not in (ChangeCode.CHANGED, ChangeCode.ABSENT):
            return await self._refused(CancelResult, job_id, redis_step.code)
        # A tombstone now refuses a late add of it (e.g. a schedule still on its way).
        # The UPDATE applies only if no node restored the job since the Redis step.
        try:
            changed = await self.mysql.set_status(
                job_id,
                JobStatus.CANCELLED,
                slot,
                from_statuses=_WAITING_PARAMS,
                not_restored_since_ms=redis_step.now_ms,
            )
        except MYSQL_FAILURES as exc:
            raise await self._undo(job_id, slot, redis_step, exc) from exc
        if changed:
            check_confirmed("cancel", job_id, doubt)
            return CancelResult(job_id, ChangeStatus.CANCELLED)
        if redis_step.code == ChangeCode.CHANGED:
            row = await self.mysql.get(job_id)
            if row is not None and row.status in WAITING_STATUSES:
                # The owner of the slot restored the job after this try's Redis step
                # (restored_ms, actors/tombstones.py): it is in Redis again.
                return None
            # Removed from Redis, and MySQL says cancelled (or it has no row): it never
            # fires.
            check_confirmed("cancel", job_id, doubt)
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
        #   (JobWriter._add_refused_again, cluster/client/job_writer.py). The row read
        #   below is then waiting, and the cancel is tried again, now with the job there.
        # Untomb takes back only this cancel's tombstone and restores the one it
        # replaced: a concurrent cancel that did cancel the row keeps its own.
        await self.scripts.untomb(slot, job_id, redis_step)
        result = await self._answer_of_row(CancelResult, job_id, await self.mysql.get(job_id))
        if result:
            check_confirmed("cancel", job_id, doubt)
        return result

    async def _undo(
        self, job_id: str, slot: int, redis_step: CancelStep, error: BaseException
    ) -> OutcomeUnknown | NothingChanged:
        """The error to raise when recording a cancel in MySQL failed after its Redis
        step: StoreUnavailable when the UPDATE never reached MySQL and the Redis step is
        undone (lua/uncancel.lua: nothing was changed), else OutcomeUnknown."""
        if not _not_sent(error):
            return OutcomeUnknown(
                f"cancel of {job_id!r}: the job is out of Redis, but recording the cancel "
                f"in MySQL failed ({_what(error)}) and may or may not have been done; "
                f"{_RESTORED_SOON}",
                [job_id],
            )
        try:
            with _redis_errors():
                undone = await uncancel(self.scripts, slot, job_id, redis_step)
        except REDIS_FAILURES:
            undone = False
        if undone:
            return NothingChanged(
                f"MySQL is unreachable: {job_id!r} was not cancelled and waits as before "
                f"(calling cancel again is safe): {_what(error)}"
            )
        return OutcomeUnknown(
            f"cancel of {job_id!r}: MySQL is unreachable ({_what(error)}), so this call "
            f"did not cancel the job, and the job, removed from Redis, could not be put "
            f"back; {_RESTORED_SOON}",
            [job_id],
        )

    # ----- reschedule ------------------------------------------------------------------

    async def reschedule(self, job_id: str, due_ms: int) -> RescheduleResult:
        """DelayClient.reschedule() of a checked job id to a checked due time."""
        slot = slot_of(job_id, self.settings.slots)
        for pause_s in (*CHANGE_RETRY_PAUSES_S, None):
            try:
                with _redis_errors():
                    result = await self._reschedule_once(job_id, slot, due_ms)
            except NothingChanged:
                raise
            except STORE_FAILURES as exc:  # after MySQL recorded the new time
                raise OutcomeUnknown(
                    f"reschedule of {job_id!r}: a store failed part-way ({_what(exc)}): "
                    "the new due time may be in MySQL and not yet in Redis (the node "
                    "owning the job loads it from MySQL at its next full pass); calling "
                    "reschedule again is safe",
                    [job_id],
                ) from exc
            if result is not None:
                return result
            if pause_s is not None:
                await asyncio.sleep(pause_s)
        raise OutcomeUnknown(
            f"reschedule of {job_id!r}: Redis refuses to add the job, which MySQL has "
            "waiting with its new due time: a cancel of it is under way, or one failed "
            "before MySQL recorded it (then the node owning the job puts it back within "
            "seconds, and it fires at the new time); get() tells which, and calling "
            "reschedule again is safe",
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
            with _redis_errors():
                code, _ = await self.scripts.reschedule(slot, job_id, due_ms)
        except ReplicationUnconfirmed as exc:
            (code, _), doubt = exc.result, exc
        except REDIS_FAILURES as exc:
            raise OutcomeUnknown(
                f"reschedule of {job_id!r}: Redis did not answer ({_what(exc)}), so the job "
                "may fire at its new time or its old one, and MySQL was not changed; "
                "calling reschedule again is safe",
                [job_id],
            ) from exc
        if code == ChangeCode.CHANGED:
            try:
                await self.mysql.set_due(job_id, due_ms, slot)
            except MYSQL_FAILURES as exc:
                raise OutcomeUnknown(
                    f"reschedule of {job_id!r}: the job is in Redis with its new due time "
                    f"and fires then, but recording that in MySQL failed ({_what(exc)}), "
                    "so MySQL may still hold the old time (used only if Redis loses the "
                    "job); calling reschedule again is safe",
                    [job_id],
                ) from exc
            check_confirmed("reschedule", job_id, doubt)
            return done
        if code != ChangeCode.ABSENT:
            return await self._refused(RescheduleResult, job_id, code)
        # Not in Redis: its add may still be on the way, or Redis lost it. If MySQL says
        # it is pending, record the new time and (re)add it; a concurrent add then
        # finds it present and changes nothing.
        try:
            moved = await self.mysql.set_due(job_id, due_ms, slot)
        except MYSQL_FAILURES as exc:
            if _not_sent(exc):
                raise NothingChanged(
                    f"MySQL is unreachable: {job_id!r} was not rescheduled (calling "
                    f"reschedule again is safe): {_what(exc)}"
                ) from exc
            raise OutcomeUnknown(
                f"reschedule of {job_id!r}: recording the new due time in MySQL failed "
                f"({_what(exc)}) and may or may not have been done; calling reschedule "
                "again is safe",
                [job_id],
            ) from exc
        if not moved:
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
            check_confirmed("reschedule", job_id, doubt)
            return done
        if code == ChangeCode.ABSENT:
            return None  # gone again: cancelled or fired meanwhile
        return await self._refused(RescheduleResult, job_id, code)

    # ----- answers ---------------------------------------------------------------------

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
        """ALREADY_FIRED, with the time and attempt of the fire the node recorded (none
        when MySQL does not answer: the answer stands without them)."""
        try:
            fired = await self.mysql.fired_at(job_id)
        except MYSQL_FAILURES:
            fired = None
        if fired is not None:
            return kind(job_id, ChangeStatus.ALREADY_FIRED, fired_ms=fired[0], attempt=fired[1])
        attempt = row.attempts if row is not None and row.attempts else None
        return kind(job_id, ChangeStatus.ALREADY_FIRED, attempt=attempt)


def check_confirmed(change: str, job_id: str, doubt: ReplicationUnconfirmed | None) -> None:
    """Raises ReplicationUnconfirmed for a change the replicas did not confirm."""
    if doubt is not None:
        raise ReplicationUnconfirmed(
            f"{change} of {job_id!r} is done, but {doubt}: a Redis failover now could "
            f"undo it; calling {change} again is safe and confirms it",
            [job_id],
        )


def _what(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _not_sent(error: BaseException) -> bool:
    """Whether a MySQL error means the statement never reached the server."""
    if isinstance(error, pymysql.err.InterfaceError | StoreUnavailable):
        return True  # the connection was closed, or no server found, before sending
    if isinstance(error, pymysql.err.OperationalError):
        return bool(error.args) and error.args[0] in _NOT_SENT_CODES
    return False


@contextlib.contextmanager
def _redis_errors() -> Iterator[None]:
    """Turns what redis-py lets through from its connections while a Redis Cluster
    topology change closes them (AttributeError: 'NoneType' object has no attribute
    'writelines'; RuntimeError: unable to perform operation on a closed transport, from
    the event loop below redis-py) into the ConnectionError it stands for."""
    try:
        yield
    except (AttributeError, RuntimeError) as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        if any(f"{os.sep}redis{os.sep}" in frame.filename for frame in frames):
            raise redis.exceptions.ConnectionError(
                f"connection lost in a topology change: {exc}"
            ) from exc
        raise
