"""Jobs as JSON, for producers that are not Python: the fields of a job request (an HTTP
body of `delayq web`, a record of the ingress topic) in, a job's durable record out.

A request has schedule()'s argument names (cluster/model/job_fields.py FIELDS). JSON has
no datetime, so `at` is epoch seconds (a number) or an RFC 3339 time with its offset
("2026-11-24T09:00:00Z").
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson

from cluster.client.dead_letters import DeadJob
from cluster.errors import InvalidJob
from cluster.model.contract import JobStatus
from cluster.model.job_fields import JOB_KEYS, OPTIONS
from cluster.store.rows import JobRecord

# The options whose JSON value is an integer (cluster/model/job_fields.py).
_INTEGER_OPTIONS = tuple(
    option.name for option in OPTIONS if option.json_schema["type"] == "integer"
)
# The longest RFC 3339 time worth parsing ("2026-11-24T09:00:00.123456+05:30" is 32).
_AT_MAX_CHARS = 40


def job_from_json(value: object) -> dict[str, Any]:
    """A decoded JSON job request as a schedule_many() entry; InvalidJob if its shape is
    wrong. The values are checked by the client like any other job's."""
    if not isinstance(value, dict):
        raise InvalidJob(f"a job must be a JSON object, got {_json_type(value)}")
    unknown = set(value) - JOB_KEYS
    if unknown:
        raise InvalidJob(f"unknown job fields: {sorted(unknown)}")
    if "topic" not in value or "payload" not in value:
        raise InvalidJob("a job needs 'topic' and 'payload'")
    job = dict(value)
    for field in _INTEGER_OPTIONS:
        number = job.get(field)
        if isinstance(number, float) and number.is_integer():
            job[field] = int(number)  # JSON has one number type: 3.0 is 3
    at = job.get("at")
    if isinstance(at, str):
        job["at"] = parse_time(at, "at")
    return job


def parse_time(text: str, name: str) -> dt.datetime:
    """An RFC 3339 time with its offset, as an aware datetime."""
    try:
        if len(text) > _AT_MAX_CHARS:
            raise ValueError
        parsed = dt.datetime.fromisoformat(text)
    except ValueError:
        raise InvalidJob(
            f"{name} must be epoch seconds or an RFC 3339 time such as "
            f"2026-11-24T09:00:00Z, got {text[:_AT_MAX_CHARS]!r}"
        ) from None
    if parsed.tzinfo is None:
        raise InvalidJob(f"{name} must give its UTC offset (Z or +hh:mm): {text!r}")
    return parsed


def _json_type(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


def record_json(record: JobRecord) -> dict[str, Any]:
    """What get() returns, as JSON: the status as a lowercase name, the payload as JSON."""
    return {
        "job_id": record.job_id,
        "topic": record.topic,
        **{option.name: option.shown(getattr(record, option.kept_as)) for option in OPTIONS},
        "status": record.status.name.lower(),
        "due_ms": record.due_ms,
        "due": _iso(record.due_ms),
        "attempts": record.attempts,
        "payload": orjson.loads(record.payload_json),
        "slot": record.slot,
        "last_error": record.last_error,
        "created_ms": record.created_ms,
        "modified_ms": record.modified_ms,
        "recurring": record.recurring,
        "tick_ms": record.tick_ms,
    }


def history_json(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A job's history rows (MySQLStore.history) as JSON."""
    return [
        {
            "status": JobStatus(row["status"]).name.lower(),
            "attempt": row["attempt"],
            "node": row["node"],
            "slot": row["slot"],
            "at": row["at"].replace(tzinfo=dt.UTC).isoformat(timespec="milliseconds"),
            "note": row["note"],
        }
        for row in rows
    ]


def dead_json(job: DeadJob) -> dict[str, Any]:
    """A job of the dead-letter set as JSON."""
    return {
        "job_id": job.job_id,
        "slot": job.slot,
        "topic": job.topic,
        "died_ms": job.died_ms,
        "died": _iso(job.died_ms),
        "attempts": job.attempts,
        "last_error": job.last_error,
        "record": job.record,
    }
