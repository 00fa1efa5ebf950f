"""A job's row as delayq reads it (JobRecord) and an outcome the recorder writes to it
(Outcome): the types the MySQL store hands out and takes in."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cluster.model.contract import JobStatus
from cluster.model.envelope import make_tail
from cluster.model.job_fields import OPTIONS, KeptOptions, record_options
from cluster.model.tick_ids import parse_tick_id
from cluster.store import sql


@dataclass(frozen=True)
class JobRecord(KeptOptions):
    """What get() returns: the durable state of one job; its options (biz_id,
    max_attempts, priority, ...) are keyword fields of KeptOptions."""

    job_id: str
    topic: str
    status: JobStatus
    due_ms: int
    attempts: int
    payload_json: str
    slot: int
    last_error: str | None
    created_ms: int
    modified_ms: int

    @property
    def due(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.due_ms / 1000, sql.UTC)

    @property
    def recurring(self) -> str | None:
        """The name of the recurring schedule this job is a tick of, or None."""
        tick = parse_tick_id(self.job_id)
        return None if tick is None else tick[0]

    @property
    def tick_ms(self) -> int | None:
        """The time of the tick this job is (of a recurring schedule), or None."""
        tick = parse_tick_id(self.job_id)
        return None if tick is None else tick[2]

    @property
    def expires_ms(self) -> int | None:
        """The last moment it may be published (due_ms + expires_after_ms), or None."""
        return None if self.expires_after_ms is None else self.due_ms + self.expires_after_ms

    @property
    def tail(self) -> bytes:
        """The envelope tail of this job (cluster/model/envelope.py), the producer's bytes."""
        return make_tail(
            self.job_id, self.topic, self.payload_json.encode(), **record_options(self)
        )


@dataclass(slots=True)  # not frozen: built per job, and frozen init is slower
class Outcome:
    """One journal entry from Redis: a job fired, is retrying, went dead or expired, or
    was replayed."""

    job_id: str
    status: JobStatus
    attempt: int
    at_ms: int
    note: str
    slot: int


# The job table's own columns, then the declared options' (cluster/model/job_fields.py).
_OWN_COLUMNS = (
    "job_id",
    "topic",
    "status",
    "action_time",
    "attempts",
    "payload",
    "slot",
    "last_error",
    "gmt_create",
    "gmt_modified",
)
OPTION_COLUMNS = tuple(option.column for option in OPTIONS if option.column)
JOB_COLUMNS = ", ".join((*_OWN_COLUMNS, *OPTION_COLUMNS))


def record_of_row(row: Sequence[Any]) -> JobRecord:
    """A JobRecord from a row of JOB_COLUMNS."""
    own, stored = row[: len(_OWN_COLUMNS)], row[len(_OWN_COLUMNS) :]
    (
        job_id,
        topic,
        status,
        action_time,
        attempts,
        payload,
        slot,
        last_error,
        created,
        modified,
    ) = own
    return JobRecord(
        job_id=job_id,
        topic=topic,
        status=JobStatus(status),
        due_ms=sql.datetime_to_ms(action_time),
        attempts=attempts,
        payload_json=payload,
        slot=slot,
        last_error=last_error,
        created_ms=sql.datetime_to_ms(created),
        modified_ms=sql.datetime_to_ms(modified),
        **options_of_columns(stored),
    )


def options_of_columns(values: Sequence[Any]) -> dict[str, Any]:
    """The declared options from their columns' values (in OPTION_COLUMNS' order), by the
    names ValidJob, JobRecord and Definition keep them under."""
    stored = [option for option in OPTIONS if option.column]
    return {
        option.kept_as: option.stored(value) for option, value in zip(stored, values, strict=True)
    }
