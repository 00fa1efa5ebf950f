"""The OpenAPI 3.1 document of the API, served at /openapi.json.

Written out by hand so that each schema says what the API promises (the limits of the
client's validation, which fields may be null); tests check it against cluster/web/api.py's
ROUTES and fuzz the server with it (schemathesis).
"""

from __future__ import annotations

import copy
from typing import Any

from cluster.client.delay_client import MAX_BATCH
from cluster.client.recurring import NAME_MAX_CHARS
from cluster.model.jobs import (
    BIZ_ID_MAX_CHARS,
    BIZ_TYPE_MAX_CHARS,
    JOB_ID_MAX_CHARS,
    MAX_ATTEMPTS_LIMIT,
)
from cluster.model.tick_ids import RECURRING_PREFIX
from cluster.model.ticks import MIN_EVERY_MS, Missed
from cluster.settings.config import Settings
from cluster.web.api import DEAD_LIST_MAX, DEAD_SELECTION_MAX, ROUTES, Route
from cluster.web.auth import GRANTS, Permission
from cluster.web.problems import KINDS

VERSION = "1.0.0"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(kind: str, **more: Any) -> dict[str, Any]:
    return {"type": [kind, "null"], **more}


_STATUS = {
    "type": "string",
    "enum": ["pending", "firing", "fired", "cancelled", "dead", "expired"],
}
# Why a cancel or reschedule was refused (409): cluster/web/api.py REFUSAL_STATUS.
_REFUSAL = {"type": "string", "enum": ["fired", "cancelled", "dead", "expired", "in_flight"]}
# What cluster/model/jobs.py refuses in text: C0 and C1 controls, DEL and the bidirectional
# controls; a job id also must not end with a space.
_NOT_CONTROL = (
    "[^\\u0000-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]"
)
_NOT_CONTROL_OR_SPACE = _NOT_CONTROL[:-1] + " ]"
_JOB_ID = {
    "type": "string",
    "minLength": 1,
    "maxLength": JOB_ID_MAX_CHARS,
    "pattern": f"^{_NOT_CONTROL}*{_NOT_CONTROL_OR_SPACE}$",
}
_TEXT = {"pattern": f"^{_NOT_CONTROL}*$"}
_NAME = {"type": "string", "pattern": f"^[A-Za-z0-9._:-]{{1,{NAME_MAX_CHARS}}}$"}
_TOPIC = {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,249}$"}
_TIME = {
    "description": "epoch seconds, or an RFC 3339 time with its offset",
    "oneOf": [
        {"type": "number", "minimum": 0},
        {"type": "string", "format": "date-time"},
    ],
}


def _exactly_one(first: tuple[str, Any], second: tuple[str, Any]) -> list[dict[str, Any]]:
    """The oneOf of two fields of which exactly one is given: each (name, the schema it
    has when given); the other is then null or absent."""
    return [
        {"required": [name], "properties": {name: given, other: {"type": "null"}}}
        for (name, given), (other, _) in ((first, second), (second, first))
    ]


# A job's due time, in a schedule and a reschedule: exactly one of delay or at.
_DELAY = _nullable("number", minimum=0, description="seconds from now")
_AT = {"oneOf": [*_TIME["oneOf"], {"type": "null"}]}
_DELAY_OR_AT = _exactly_one(("delay", {"type": "number"}), ("at", {"not": {"type": "null"}}))
# A query parameter that is a flag (cluster/web/api.py _flag).
_FLAG = {"type": "string", "enum": ["true", "false", "1", "0"]}
# The parameters of a list of dead or expired jobs (cluster/web/api.py _listing).
_LISTING = [
    {"name": "topic", "in": "query", "schema": _TOPIC},
    {
        "name": "limit",
        "in": "query",
        "schema": {"type": "integer", "minimum": 1, "maximum": DEAD_LIST_MAX},
        "description": "default 100",
    },
]

_BIZ_ID = _nullable("string", minLength=1, maxLength=BIZ_ID_MAX_CHARS, **_TEXT)
_BIZ_TYPE = _nullable("string", minLength=1, maxLength=BIZ_TYPE_MAX_CHARS, **_TEXT)
_MAX_ATTEMPTS = _nullable("integer", minimum=1, maximum=MAX_ATTEMPTS_LIMIT)
_EXPIRES_AFTER = _nullable(
    "number",
    exclusiveMinimum=0,
    description="seconds after the due time: never published later than that "
    "(the job ends expired instead); at most max_delay_s",
)

SCHEMAS: dict[str, Any] = {
    "JobRequest": {
        "type": "object",
        "description": "One job: exactly one of delay or at. The same job_id twice is one job. "
        "The payload's JSON is at most payload_max_bytes; at is at most max_delay_s ahead.",
        "required": ["topic", "payload"],
        "additionalProperties": False,
        "properties": {
            "topic": {**_TOPIC, "description": "the Kafka topic the job fires to"},
            "payload": {"description": "any JSON value, published verbatim"},
            "delay": _DELAY,
            "at": _AT,
            "job_id": {
                "oneOf": [
                    {**_JOB_ID, "not": {"pattern": f"^{RECURRING_PREFIX}"}},
                    {"type": "null"},
                ],
                "description": "your key; generated when absent. Not starting with "
                f"{RECURRING_PREFIX} (the ids of recurring schedules' ticks)",
            },
            "biz_id": _BIZ_ID,
            "biz_type": _BIZ_TYPE,
            "max_attempts": _MAX_ATTEMPTS,
            "expires_after": _EXPIRES_AFTER,
        },
        "oneOf": _DELAY_OR_AT,
    },
    "JobBatch": {
        "type": "object",
        "required": ["jobs"],
        "additionalProperties": False,
        "properties": {
            "jobs": {"type": "array", "maxItems": MAX_BATCH, "items": _ref("JobRequest")}
        },
    },
    "Scheduled": {
        "type": "object",
        "required": ["job_id", "created"],
        "properties": {
            "job_id": {"type": "string"},
            "created": _nullable(
                "boolean",
                description="true: this request created the job; false: it was already "
                "there; null: stored, but not confirmed in Redis yet (see warning)",
            ),
            "warning": {"type": "string"},
        },
    },
    "ScheduledBatch": {
        "type": "object",
        "required": ["jobs"],
        "properties": {
            "jobs": {"type": "array", "items": _ref("Scheduled")},
            "warning": {"type": "string"},
        },
    },
    "HistoryEntry": {
        "type": "object",
        "required": ["status", "attempt", "node", "slot", "at", "note"],
        "properties": {
            "status": _STATUS,
            "attempt": {"type": "integer"},
            "node": {"type": "string"},
            "slot": {"type": "integer"},
            "at": {"type": "string", "format": "date-time"},
            "note": _nullable("string"),
        },
    },
    "Job": {
        "type": "object",
        "description": "A job's durable record (MySQL's)",
        "required": [
            "job_id",
            "topic",
            "biz_id",
            "biz_type",
            "status",
            "due_ms",
            "due",
            "attempts",
            "max_attempts",
            "payload",
            "slot",
            "last_error",
            "created_ms",
            "modified_ms",
        ],
        "properties": {
            "job_id": {"type": "string"},
            "topic": {"type": "string"},
            "biz_id": _nullable("string"),
            "biz_type": _nullable("string"),
            "status": _STATUS,
            "due_ms": {"type": "integer"},
            "due": {"type": "string", "format": "date-time"},
            "attempts": {"type": "integer"},
            "max_attempts": {"type": "integer"},
            "payload": {},
            "slot": {"type": "integer"},
            "last_error": _nullable("string"),
            "created_ms": {"type": "integer"},
            "modified_ms": {"type": "integer"},
            "recurring": _nullable("string", description="the recurring schedule of a tick"),
            "tick_ms": _nullable("integer", description="the time of that tick"),
            "expires_after": _nullable(
                "number", description="seconds after the due time; null: never expires"
            ),
            "history": {"type": "array", "items": _ref("HistoryEntry")},
        },
    },
    "Cancelled": {
        "type": "object",
        "required": ["job_id", "cancelled"],
        "properties": {"job_id": {"type": "string"}, "cancelled": {"const": True}},
    },
    "Reschedule": {
        "type": "object",
        "description": "exactly one of delay or at",
        "additionalProperties": False,
        "properties": {
            "delay": _DELAY,
            "at": _AT,
        },
        "oneOf": _DELAY_OR_AT,
    },
    "Rescheduled": {
        "type": "object",
        "required": ["job_id", "rescheduled", "due_ms"],
        "properties": {
            "job_id": {"type": "string"},
            "rescheduled": {"const": True},
            "due_ms": _nullable("integer"),
        },
    },
    "DeadJob": {
        "type": "object",
        "required": [
            "job_id",
            "slot",
            "topic",
            "died_ms",
            "died",
            "attempts",
            "last_error",
            "record",
        ],
        "properties": {
            "job_id": {"type": "string"},
            "slot": {"type": "integer"},
            "topic": {"type": "string"},
            "died_ms": {"type": "integer"},
            "died": {"type": "string", "format": "date-time"},
            "attempts": _nullable("integer"),
            "last_error": _nullable("string"),
            "record": {"type": "object", "description": "the record it would have fired"},
            "history": {"type": "array", "items": _ref("HistoryEntry")},
        },
    },
    "DeadList": {
        "type": "object",
        "required": ["dead_letters", "count"],
        "properties": {
            "dead_letters": {"type": "array", "items": _ref("DeadJob")},
            "count": {"type": "integer", "description": "dead jobs in all (of the topic)"},
        },
    },
    "Selection": {
        "description": 'Which dead jobs: exactly one of job_ids, topic, or "all": true',
        "oneOf": [
            {
                "type": "object",
                "required": ["job_ids"],
                "additionalProperties": False,
                "properties": {
                    "job_ids": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": DEAD_SELECTION_MAX,
                        "items": _JOB_ID,
                    }
                },
            },
            {
                "type": "object",
                "required": ["topic"],
                "additionalProperties": False,
                "properties": {"topic": _TOPIC},
            },
            {
                "type": "object",
                "required": ["all"],
                "additionalProperties": False,
                "properties": {"all": {"const": True}},
            },
        ],
    },
    "ExpiredList": {
        "type": "object",
        "required": ["expired", "count"],
        "properties": {
            "expired": {"type": "array", "items": _ref("Job")},
            "count": {"type": "integer", "description": "expired jobs in all (of the topic)"},
        },
    },
    "RecurringRequest": {
        "type": "object",
        "description": "A recurring schedule: exactly one of cron or every. The same "
        "definition again changes nothing; another one replaces the schedule from now on.",
        "required": ["topic", "payload"],
        "additionalProperties": False,
        "properties": {
            "topic": {**_TOPIC, "description": "the Kafka topic every tick fires to"},
            "payload": {"description": "any JSON value, published verbatim by every tick"},
            "cron": _nullable(
                "string",
                description="a 5-field cron expression, read on the wall clock of tz",
            ),
            "every": _nullable(
                "number",
                minimum=MIN_EVERY_MS / 1000,
                description="an interval in seconds: ticks at start_at + k × every, or on "
                "multiples of every since the epoch",
            ),
            "tz": _nullable("string", description="an IANA zone (cron only); default UTC"),
            "start_at": {**_AT, "description": "no tick before"},
            "end_at": {**_AT, "description": "no tick at or after"},
            "biz_id": _BIZ_ID,
            "biz_type": _BIZ_TYPE,
            "max_attempts": _MAX_ATTEMPTS,
            "missed": _nullable(
                "string",
                enum=[*(str(m) for m in Missed), None],
                description="ticks no node made in time: fire the last once (default), or "
                "skip them",
            ),
            "expires_after": _EXPIRES_AFTER,
        },
        "oneOf": _exactly_one(("cron", {"type": "string"}), ("every", {"type": "number"})),
    },
    "Recurring": {
        "type": "object",
        "description": "A recurring schedule as stored, and where its ticks stand",
        "required": [
            "name",
            "topic",
            "payload",
            "cron",
            "every_s",
            "tz",
            "start_ms",
            "end_ms",
            "missed",
            "biz_id",
            "biz_type",
            "max_attempts",
            "expires_after_s",
            "generation",
            "removed",
            "next_ms",
            "made_until_ms",
            "last_made_ms",
        ],
        "properties": {
            "name": {"type": "string"},
            "topic": {"type": "string"},
            "payload": {},
            "cron": _nullable("string"),
            "every_s": _nullable("number"),
            "tz": {"type": "string"},
            "start_ms": _nullable("integer"),
            "end_ms": _nullable("integer"),
            "missed": {"type": "string", "enum": [str(m) for m in Missed]},
            "biz_id": _nullable("string"),
            "biz_type": _nullable("string"),
            "max_attempts": {"type": "integer"},
            "expires_after_s": _nullable("number"),
            "generation": {"type": "integer", "description": "definitions the name has had"},
            "removed": {"type": "boolean"},
            "next_ms": _nullable("integer", description="the next tick; null: no more"),
            "made_until_ms": _nullable("integer", description="ticks before this are jobs already"),
            "last_made_ms": _nullable("integer", description="the last tick made a job"),
        },
    },
    "RecurringList": {
        "type": "object",
        "required": ["recurring"],
        "properties": {"recurring": {"type": "array", "items": _ref("Recurring")}},
    },
    "RecurringRemoved": {
        "type": "object",
        "required": ["name", "removed"],
        "properties": {"name": {"type": "string"}, "removed": {"const": True}},
    },
    "Replayed": {
        "type": "object",
        "required": ["replayed"],
        "properties": {"replayed": {"type": "integer"}},
    },
    "Purged": {
        "type": "object",
        "required": ["purged"],
        "properties": {"purged": {"type": "integer"}},
    },
    "Cluster": {
        "type": "object",
        "description": "Members (ZooKeeper), the slot map with owners, epochs and depths",
        "required": ["root", "slots", "members", "slot_status"],
        "properties": {
            "root": {"type": "string"},
            "slots": {"type": "integer"},
            "members": {"type": "object", "additionalProperties": {"type": "object"}},
            "slot_status": {"type": "array", "items": _ref("SlotStatus")},
        },
    },
    "SlotStatus": {
        "type": "object",
        "required": ["slot", "owner", "delay", "ready", "inflight", "dead", "overdue_ms"],
        "properties": {
            "slot": {"type": "integer"},
            "owner": _nullable("string"),
            "owner_node": _nullable("string"),
            "epoch": {"type": "integer"},
            "redis_epoch": {"type": "integer"},
            "delay": {"type": "integer"},
            "ready": {"type": "integer"},
            "inflight": {"type": "integer"},
            "dead": {"type": "integer"},
            "overdue_ms": {"type": "integer"},
        },
    },
    "Stats": {
        "type": "object",
        "description": "The latest `delayq top` snapshot and the points sampled so far",
        "required": ["snapshot", "error", "interval_s", "points"],
        "properties": {
            "snapshot": _nullable("object"),
            "error": _nullable("string"),
            "interval_s": {"type": "number"},
            "points": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["at_ms", "fire_rate", "p50_ms", "p99_ms"],
                    "properties": {
                        "at_ms": {"type": "integer"},
                        "fire_rate": _nullable("number"),
                        "p50_ms": _nullable("number"),
                        "p99_ms": _nullable("number"),
                        "delay": {"type": "integer"},
                        "ready": {"type": "integer"},
                        "inflight": {"type": "integer"},
                        "dead": {"type": "integer"},
                    },
                },
            },
        },
    },
    "Problem": {
        "type": "object",
        "description": "RFC 9457 problem details",
        "required": ["type", "title", "status", "detail"],
        "properties": {
            "type": {
                "type": "string",
                "enum": [f"urn:delayq:problem:{kind}" for kind in KINDS],
            },
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
            "job_ids": {"type": "array", "items": {"type": "string"}},
            "job_status": _REFUSAL,
            "fired_ms": {"type": "integer", "description": "409 of a fired job, when recorded"},
            "attempt": {"type": "integer", "description": "409 of a fired job, when recorded"},
        },
    },
}

_DESCRIPTIONS = {
    400: "The body is not valid JSON",
    401: "No bearer token, or an unknown one",
    403: "The token's role does not allow this",
    404: "No such job (or recurring schedule)",
    409: "The job's state does not allow this; job_status says which it is in (fired, "
    "cancelled, dead, expired, or in_flight: being published right now)",
    413: "The body is larger than web_body_max_bytes",
    422: "Not acceptable (the client's InvalidJob message); nothing was changed",
    500: "outcome-unknown: the change may or may not be made (job_ids names the jobs; "
    "sending it again with the same ids is safe); or an internal error",
    503: "MySQL, Redis or ZooKeeper is unreachable; see Retry-After",
}

# (operation, summary, request schema, {status: response schema}, extra parameters)
_OPERATIONS: dict[str, tuple[str, str | None, dict[int, str], list[dict[str, Any]]]] = {
    "schedule": (
        'Schedule one job, or a batch of jobs ({"jobs": [...]})',
        "JobRequest|JobBatch",
        {200: "Scheduled|ScheduledBatch", 201: "Scheduled", 202: "Scheduled|ScheduledBatch"},
        [],
    ),
    "get_job": (
        "A job's durable record; ?history=true adds its status changes",
        None,
        {200: "Job"},
        [{"name": "history", "in": "query", "schema": _FLAG}],
    ),
    "cancel": ("Cancel a job: 200 guarantees it never fires", None, {200: "Cancelled"}, []),
    "reschedule": (
        "Give a job that has not fired a new due time",
        "Reschedule",
        {200: "Rescheduled"},
        [],
    ),
    "list_dead": (
        "Dead jobs, oldest death first per slot",
        None,
        {200: "DeadList"},
        _LISTING,
    ),
    "get_dead": ("One job of the dead-letter set, with its history", None, {200: "DeadJob"}, []),
    "replay_dead": (
        "Give dead jobs a new set of attempts, due now",
        "Selection",
        {200: "Replayed"},
        [],
    ),
    "purge_dead": (
        "Forget dead jobs in Redis (MySQL keeps them as dead)",
        "Selection",
        {200: "Purged"},
        [],
    ),
    "list_expired": (
        "Jobs that expired (not published by due time + expires_after), newest first",
        None,
        {200: "ExpiredList"},
        _LISTING,
    ),
    "list_recurring": (
        "The recurring schedules, by name (?removed=true: removed ones too)",
        None,
        {200: "RecurringList"},
        [{"name": "removed", "in": "query", "schema": _FLAG}],
    ),
    "get_recurring": ("One recurring schedule (also a removed one)", None, {200: "Recurring"}, []),
    "put_recurring": (
        "Create or replace a recurring schedule; each tick fires once as an ordinary job",
        "RecurringRequest",
        {200: "Recurring"},
        [],
    ),
    "remove_recurring": (
        "Stop a recurring schedule: its coming ticks are cancelled",
        None,
        {200: "RecurringRemoved"},
        [],
    ),
    "cluster": ("Members, the slot map and each slot's depths", None, {200: "Cluster"}, []),
    "cluster_stats": (
        "Fire rate and lateness over time, for the console",
        None,
        {200: "Stats"},
        [],
    ),
}

# The error statuses each operation can answer, besides 401/403 (with tokens) and 500.
_ERRORS = {
    "schedule": (400, 413, 422, 503),
    "get_job": (404, 422, 503),
    "cancel": (404, 409, 422, 503),
    "reschedule": (400, 404, 409, 413, 422, 503),
    "list_dead": (422, 503),
    "get_dead": (404, 422, 503),
    "replay_dead": (400, 413, 422, 503),
    "purge_dead": (400, 413, 422, 503),
    "list_expired": (422, 503),
    "list_recurring": (422, 503),
    "get_recurring": (404, 422, 503),
    "put_recurring": (400, 413, 422, 503),
    "remove_recurring": (404, 422, 503),
    "cluster": (503,),
    "cluster_stats": (),
}


def _content(names: str) -> dict[str, Any]:
    parts = [_ref(name) for name in names.split("|")]
    schema = parts[0] if len(parts) == 1 else {"oneOf": parts}
    return {"application/json": {"schema": schema}}


def _operation(route: Route) -> dict[str, Any]:
    summary, request, answers, parameters = _OPERATIONS[route.name]
    roles = sorted(role.value for role, granted in GRANTS.items() if route.permission in granted)
    responses: dict[str, Any] = {
        str(status): {"description": "OK", "content": _content(names)}
        for status, names in answers.items()
    }
    for status in (*_ERRORS[route.name], 401, 403, 500):
        responses[str(status)] = {
            "description": _DESCRIPTIONS[status],
            "content": {"application/problem+json": {"schema": _ref("Problem")}},
        }
    if "{job_id}" in route.path:
        parameters = [
            {"name": "job_id", "in": "path", "required": True, "schema": _JOB_ID},
            *parameters,
        ]
    if "{name}" in route.path:
        parameters = [{"name": "name", "in": "path", "required": True, "schema": _NAME}]
    operation: dict[str, Any] = {
        "operationId": route.name,
        "summary": summary,
        "description": f"Permission {route.permission}: roles {', '.join(roles)}.",
        "security": [{"bearer": []}],
        "responses": responses,
    }
    if parameters:
        operation["parameters"] = parameters
    if request is not None:
        operation["requestBody"] = {"required": True, "content": _content(request)}
    return operation


def openapi_document(settings: Settings) -> dict[str, Any]:
    """The document, with this server's limits (max_delay_s) in it."""
    schemas = copy.deepcopy(SCHEMAS)
    for name in ("JobRequest", "Reschedule"):
        schemas[name]["properties"]["delay"]["maximum"] = settings.max_delay_s
    for name in ("JobRequest", "RecurringRequest"):
        schemas[name]["properties"]["expires_after"]["maximum"] = settings.max_delay_s
    schemas["RecurringRequest"]["properties"]["every"]["maximum"] = settings.max_delay_s
    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "delayq HTTP API",
            "version": VERSION,
            "description": "Schedule jobs that fire to Kafka at their time; see docs/http.md. "
            f"Permissions: {', '.join(p.value for p in Permission)}.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "a token of web_tokens; without web_tokens (loopback "
                    "only) no token is needed",
                }
            },
        },
    }
