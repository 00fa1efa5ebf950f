"""What cancel() and reschedule() answer: a result whose `status` says what happened,
true only when the change was made.

    result = await client.cancel(job_id)
    if result:                                    # CANCELLED: it never fires
        ...
    elif result.status is ChangeStatus.ALREADY_FIRED:
        print("fired at", result.fired_ms, "attempt", result.attempt)

So `if await client.cancel(job_id):` means what it always meant.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar


class ChangeStatus(StrEnum):
    """Why a cancel or reschedule did or did not change the job."""

    CANCELLED = "cancelled"  # cancel: done, it never fires; reschedule: it was cancelled
    RESCHEDULED = "rescheduled"  # reschedule: done, it fires at the new time
    NOT_FOUND = "not_found"  # no such job (never scheduled, or deleted by retention)
    ALREADY_FIRED = "already_fired"  # it was published (fired_ms, attempt when known)
    # Being published at this moment (claimed by a node): too late to change. It fires,
    # unless this attempt fails and the job then uses up its attempts or expires.
    IN_FLIGHT = "in_flight"
    DEAD = "dead"  # in the dead letters: it used up its attempts
    EXPIRED = "expired"  # not published by its due time + expires_after: it never will be


@dataclass(frozen=True)
class ChangeResult:
    """The answer of a cancel or reschedule. True only when the change was made."""

    job_id: str
    status: ChangeStatus
    # ALREADY_FIRED: when the broker acknowledged the job's record (epoch ms, the Redis
    # clock) and its attempt number, from the job's MySQL history; None while the node
    # has not recorded the fire yet (a few ms), or once retention deleted the row.
    fired_ms: int | None = None
    attempt: int | None = None
    # RESCHEDULED: the new due time (epoch ms).
    due_ms: int | None = None

    done: ClassVar[ChangeStatus]  # the status that means the change was made

    def __bool__(self) -> bool:
        return self.status is self.done


@dataclass(frozen=True)
class CancelResult(ChangeResult):
    """What cancel() answers: true (status CANCELLED) guarantees the job never fires."""

    done: ClassVar[ChangeStatus] = ChangeStatus.CANCELLED


@dataclass(frozen=True)
class RescheduleResult(ChangeResult):
    """What reschedule() answers: true (status RESCHEDULED) when the job fires at due_ms
    instead of its old time."""

    done: ClassVar[ChangeStatus] = ChangeStatus.RESCHEDULED
