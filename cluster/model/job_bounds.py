"""The bounds of a ValidJob made outside validate() (cluster/model/jobs.py), checked
again before it is stored: schedule_validated() takes jobs its callers validated, and
no path may store one out of bounds."""

from __future__ import annotations

from cluster.errors import InvalidJob
from cluster.model.jobs import (
    BIZ_ID_MAX_CHARS,
    BIZ_TYPE_MAX_CHARS,
    ValidJob,
    _check_text,
    check_job_id,
    check_max_attempts,
    check_priority,
)


def check_valid_job(job: ValidJob) -> ValidJob:
    """A ValidJob made elsewhere (schedule_validated's callers), checked again against
    the bounds validate() keeps, so no path stores one out of them."""
    check_job_id(job.job_id)
    check_priority(job.priority)
    check_max_attempts(job.max_attempts)
    if isinstance(job.due_ms, bool) or not isinstance(job.due_ms, int) or job.due_ms < 0:
        raise InvalidJob(f"due_ms must be an int >= 0, got {job.due_ms!r}")
    if job.expires_after_ms is not None and (
        isinstance(job.expires_after_ms, bool)
        or not isinstance(job.expires_after_ms, int)
        or job.expires_after_ms <= 0
    ):
        raise InvalidJob(f"expires_after_ms must be an int > 0, got {job.expires_after_ms!r}")
    _check_text("biz_id", job.biz_id, BIZ_ID_MAX_CHARS)
    _check_text("biz_type", job.biz_type, BIZ_TYPE_MAX_CHARS)
    if not isinstance(job.payload_json, bytes):
        raise InvalidJob("payload_json must be bytes")
    return job
