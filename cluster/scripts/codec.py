"""What goes into the Lua scripts and what comes out of them, as Python values: a job
to add (NewJob), a claimed job, the results of move and of nack/reap, and the functions
that read the scripts' replies (each script's reply is described in its .lua header)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cluster.model.contract import NO_TIME, ChangeCode
from cluster.model.envelope import EnvelopeFields, fields_text

if TYPE_CHECKING:
    from cluster.store.rows import JobRecord


@dataclass(frozen=True)
class NewJob:
    """What the add script needs for one job."""

    job_id: str
    due_ms: int
    max_attempts: int
    tail: bytes  # see cluster/model/envelope.py
    expires_after_ms: int | None = None
    priority: int = 0  # higher fires first among jobs due at the same ms

    @classmethod
    def from_record(cls, record: JobRecord) -> NewJob:
        """What the add script needs, rebuilt from a job's MySQL row."""
        return cls(
            record.job_id,
            record.due_ms,
            record.max_attempts,
            record.tail,
            record.expires_after_ms,
            record.priority,
        )

    def fields_text(self, version: int) -> str:
        """The envelope header's <fields> of this job (cluster/model/envelope.py)."""
        return _fields_text(self.max_attempts, self.expires_after_ms, self.priority, version)


# Most jobs share a few combinations of these: each text is made once.
@functools.lru_cache(maxsize=4096)
def _fields_text(
    max_attempts: int, expires_after_ms: int | None, priority: int, version: int
) -> str:
    return fields_text(EnvelopeFields(max_attempts, expires_after_ms, priority), version)


@dataclass(slots=True)  # not frozen: built per job, and frozen init is slower
class Claimed:
    job_id: bytes
    envelope: bytes
    attempt: int


@dataclass(frozen=True)
class MoveResult:
    moved: int
    next_due_ms: int  # NO_TIME when the slot is empty
    now_ms: int
    ready: int  # length of the ready list after the move
    first_due_ms: int  # due time of the most overdue job moved; NO_TIME when none


@dataclass(frozen=True)
class RetryResult:
    retried: int
    dead: int
    earliest_due_ms: int  # NO_TIME when nothing was retried
    more: bool = False
    expired: int = 0  # jobs whose retry would have come after due + expires_after


@dataclass(frozen=True)
class CancelStep:
    """What lua/cancel.lua did, and the tombstone it set (for lua/untomb.lua)."""

    code: ChangeCode
    tomb_ms: int  # the tombstone's score; NO_TIME when none was set
    replaced_ms: int  # the unexpired score it replaced; NO_TIME when none
    now_ms: int = NO_TIME  # Redis TIME of the step
    # What a CHANGED step removed, for lua/uncancel.lua: the envelope, its due ms in the
    # delay zset (NO_TIME: it was in the ready list) and its attempts.
    envelope: bytes = b""
    score: int = NO_TIME
    attempts: int = 0


def cancel_step(reply: list[Any]) -> CancelStep:
    return CancelStep(
        ChangeCode(reply[0]),
        int(reply[1]),
        int(reply[2]),
        int(reply[3]),
        bytes(reply[4]),
        int(reply[5]),
        int(reply[6]),
    )


def move_result(reply: list[Any]) -> MoveResult:
    return MoveResult(int(reply[0]), int(reply[1]), int(reply[2]), int(reply[3]), int(reply[4]))


def retry_result(reply: list[Any]) -> RetryResult:
    """The reply of nack or reap: retried, dead, earliest due, more, expired."""
    return RetryResult(int(reply[0]), int(reply[1]), int(reply[2]), reply[3] == 1, int(reply[4]))


@dataclass(slots=True)
class ClaimResult:
    """The claim script's reply: Redis now, the jobs claimed, how many expired, and how
    many of the jobs were a lost claim's, handed out again."""

    now_ms: int
    jobs: list[Claimed]
    expired: int
    reclaimed: int = 0


def claimed_of(reply: list[Any]) -> ClaimResult:
    jobs = [Claimed(reply[i], reply[i + 1], int(reply[i + 2])) for i in range(3, len(reply), 3)]
    return ClaimResult(int(reply[0]), jobs, int(reply[1]), int(reply[2]))
