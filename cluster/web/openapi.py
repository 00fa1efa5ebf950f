"""The OpenAPI 3.1 document of the API, served at /openapi.json: one operation per route
of cluster/web/api.py's ROUTES, with the components of cluster/web/openapi_schemas.py.

Written out by hand so that each schema says what the API promises (the limits of the
client's validation, which fields may be null); tests check it against cluster/web/api.py's
ROUTES and fuzz the server with it (schemathesis).
"""

from __future__ import annotations

import copy
from typing import Any

from cluster.client.recurring import NAME_MAX_CHARS
from cluster.model.job_fields import OPTIONS
from cluster.settings.config import Settings
from cluster.web.api import DEAD_LIST_MAX, ROUTES, Route
from cluster.web.auth import GRANTS, Permission
from cluster.web.bodies import MAX_CONTAINERS
from cluster.web.counts_api import COUNT_SCHEMAS, COUNTS_TOPICS_MAX
from cluster.web.openapi_fields import JOB_ID, TOPIC, ref
from cluster.web.openapi_schemas import SCHEMAS
from cluster.web.openapi_search import (
    PROBLEM_MEMBERS,
    SEARCH_ERRORS,
    SEARCH_OPERATIONS,
    SEARCH_SCHEMAS,
)
from cluster.web.recurring_api import RECURRING_ERRORS, RECURRING_OPERATIONS, RECURRING_SCHEMAS

VERSION = "1.0.0"

# The operations' parameters (the bodies' schemas are components: SCHEMAS).
# A recurring schedule's name in a path.
_NAME = {"type": "string", "pattern": f"^[A-Za-z0-9._:-]{{1,{NAME_MAX_CHARS}}}$"}
# A query parameter that is a flag (cluster/web/api.py _flag).
_FLAG = {"type": "string", "enum": ["true", "false", "1", "0"]}
# The parameters of a list of dead or expired jobs (cluster/web/api.py _listing).
_LISTING = [
    {"name": "topic", "in": "query", "schema": TOPIC},
    {
        "name": "limit",
        "in": "query",
        "schema": {"type": "integer", "minimum": 1, "maximum": DEAD_LIST_MAX},
        "description": "default 100",
    },
]

_DESCRIPTIONS = {
    400: "The body is not valid JSON",
    401: "No bearer token, or an unknown one",
    403: "The token's role does not allow this, or the request came from another origin "
    "(its Origin header)",
    404: "No such job (or recurring schedule)",
    409: "The job's state does not allow this; job_status says which it is in (fired, "
    "cancelled, dead, expired, or in_flight: being published right now); for a cancel by "
    "filter, expected was not the number of matching jobs (matched), and nothing changed",
    413: "The body is larger than web_body_max_bytes, or holds more than "
    f"{MAX_CONTAINERS:,} JSON objects and arrays",
    415: "The body is not sent as Content-Type: application/json; nothing was changed",
    422: "Not acceptable (the client's InvalidJob message); nothing was changed",
    500: "outcome-unknown: the change may or may not be made (job_ids names the jobs; "
    "sending it again with the same ids is safe); or an internal error",
    429: "This token already has web_searches_per_token searches, bulk cancels or pending "
    "counts running; nothing was run; see Retry-After",
    503: "MySQL, Redis or ZooKeeper is unreachable; see Retry-After",
    421: "The Host header names no address this server answers to (web_allowed_hosts)",
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
    "pending_counts": (
        "Pending jobs per topic and in total: due within the Redis horizon, and beyond it",
        None,
        {200: "PendingCounts"},
        [
            {
                "name": "limit",
                "in": "query",
                "schema": {"type": "integer", "minimum": 1, "maximum": COUNTS_TOPICS_MAX},
                "description": "topics listed, most pending first; default 100",
            }
        ],
    ),
    "cluster_stats": (
        "Fire rate and lateness over time, for the console",
        None,
        {200: "Stats"},
        [],
    ),
}

# The error statuses each operation can answer, besides 401/403 (with tokens) and 500.
_ERRORS = {
    "schedule": (400, 413, 415, 422, 503),
    "get_job": (404, 422, 503),
    "cancel": (404, 409, 415, 422, 503),
    "reschedule": (400, 404, 409, 413, 415, 422, 503),
    "list_dead": (422, 503),
    "get_dead": (404, 422, 503),
    "replay_dead": (400, 413, 415, 422, 503),
    "purge_dead": (400, 413, 415, 422, 503),
    "list_expired": (422, 503),
    "list_recurring": (422, 503),
    "get_recurring": (404, 422, 503),
    "put_recurring": (400, 413, 415, 422, 503),
    "remove_recurring": (404, 415, 422, 503),
    "cluster": (503,),
    "pending_counts": (422, 429, 503),
    "cluster_stats": (),
}


def _content(names: str) -> dict[str, Any]:
    parts = [ref(name) for name in names.split("|")]
    schema = parts[0] if len(parts) == 1 else {"oneOf": parts}
    return {"application/json": {"schema": schema}}


def _operation(route: Route) -> dict[str, Any]:
    operations = {**_OPERATIONS, **RECURRING_OPERATIONS, **SEARCH_OPERATIONS}
    summary, request, answers, parameters = operations[route.name]
    roles = sorted(role.value for role, granted in GRANTS.items() if route.permission in granted)
    responses: dict[str, Any] = {
        str(status): {"description": "OK", "content": _content(names)}
        for status, names in answers.items()
    }
    errors = {**_ERRORS, **RECURRING_ERRORS, **SEARCH_ERRORS}[route.name]
    for status in (*errors, 401, 403, 421, 500):
        responses[str(status)] = {
            "description": _DESCRIPTIONS[status],
            "content": {"application/problem+json": {"schema": ref("Problem")}},
        }
    if "{job_id}" in route.path:
        parameters = [
            {"name": "job_id", "in": "path", "required": True, "schema": JOB_ID},
            *parameters,
        ]
    if "{name}" in route.path:
        parameters = [
            {"name": "name", "in": "path", "required": True, "schema": _NAME},
            *parameters,
        ]
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
    schemas = copy.deepcopy({**SCHEMAS, **COUNT_SCHEMAS, **RECURRING_SCHEMAS, **SEARCH_SCHEMAS})
    schemas["Problem"]["properties"].update(PROBLEM_MEMBERS)
    for name in ("JobRequest", "Reschedule"):
        schemas[name]["properties"]["delay"]["maximum"] = settings.max_delay_s
    for option in OPTIONS:  # an option bounded by a setting (expires_after: max_delay_s)
        if option.maximum_setting is not None:
            maximum = getattr(settings, option.maximum_setting)
            for name in ("JobRequest", "RecurringRequest"):
                schemas[name]["properties"][option.name]["maximum"] = maximum
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
