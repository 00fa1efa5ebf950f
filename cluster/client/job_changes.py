"""Cancel and reschedule of one job, and the answer each gives (cluster/model/changes.py):
DelayClient.cancel and DelayClient.reschedule (cluster/client/delay_client.py) end here.

Each change runs its Lua script in Redis first (lua/cancel.lua, lua/reschedule.lua), then
records it in MySQL. When Redis does not hold the job, MySQL's row says what to answer.
A try that finds the job changing state under it is made again after a short pause.
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

from cluster.client.job_writer import REFUSED_RETRY_PAUSES_S
from cluster.errors import OutcomeUnknown, ReplicationUnconfirmed
from cluster.model.changes import CancelResult, ChangeResult, ChangeStatus, RescheduleResult
from cluster.model.contract import WAITING_STATUSES, AddCode, ChangeCode, JobStatus
from cluster.model.jobs import now_ms
from cluster.model.keys import slot_of
from cluster.scripts.facade import NewJob, Scripts
from cluster.settings.config import Settings
from cluster.store.mysql_store import JobRecord, MySQLStore

# As plain ints: PyMySQL would quote an IntEnum parameter as a string.
_WAITING_PARAMS = tuple(int(status) for status in WAITING_STATUSES)
# Pauses before trying a cancel or reschedule again when the job changed state under it
# (a tombstone of a concurrent cancel refused the reschedule's add, for one).
CHANGE_RETRY_PAUSES_S = REFUSED_RETRY_PAUSES_S

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

    # ----- reschedule ------------------------------------------------------------------

    async def reschedule(self, job_id: str, due_ms: int) -> RescheduleResult:
        """DelayClient.reschedule() of a checked job id to a checked due time."""
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
            check_confirmed("reschedule", job_id, doubt)
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
        """ALREADY_FIRED, with the time and attempt of the fire the node recorded."""
        fired = await self.mysql.fired_at(job_id)
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
