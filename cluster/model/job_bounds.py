"""The bounds of a ValidJob made outside validate() (cluster/model/jobs.py), checked
again before it is stored: schedule_validated() takes jobs its callers validated, and
no path may store one out of bounds."""

from __future__ import annotations

from cluster.errors import InvalidJob
from cluster.model.job_fields import OPTIONS
from cluster.model.jobs import ValidJob, check_job_id


def check_valid_job(job: ValidJob) -> ValidJob:
    """A ValidJob made elsewhere (schedule_validated's callers), checked again against
    the bounds validate() keeps, so no path stores one out of them."""
    check_job_id(job.job_id)
    if isinstance(job.due_ms, bool) or not isinstance(job.due_ms, int) or job.due_ms < 0:
        raise InvalidJob(f"due_ms must be an int >= 0, got {job.due_ms!r}")
    for option in OPTIONS:
        assert option.recheck is not None  # every option declares one
        option.recheck(getattr(job, option.kept_as))
    if not isinstance(job.payload_json, bytes):
        raise InvalidJob("payload_json must be bytes")
    return job
