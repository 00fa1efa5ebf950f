"""The OpenAPI parts of GET /v1/jobs and POST /v1/jobs/cancel (cluster/web/search_api.py),
merged into the document by cluster/web/openapi.py: the limits cluster/store/search.py
checks, written as JSON Schema.
"""

from __future__ import annotations

from typing import Any

from cluster.client.job_search import CANCEL_MOST
from cluster.store.search import CURSOR_MAX_CHARS, DUE_MAX_MS, LIMIT_DEFAULT, LIMIT_MAX, ORDERS
from cluster.web.openapi_fields import BIZ_ID, BIZ_TYPE, TOPIC, ref
from cluster.web.search_api import STATUS_VALUES_MAX

_NAMES = "(pending|retrying|firing|fired|cancelled|dead|expired)"
_STATUS = {
    "type": "array",
    "maxItems": STATUS_VALUES_MAX,
    "items": {"type": "string", "pattern": f"^{_NAMES}(,{_NAMES})*$"},
    "description": "one or several statuses (repeat the parameter, or separate by commas); "
    "retrying and firing are the same; none: any status",
}
_DUE_QUERY = {
    "description": "epoch milliseconds, or an RFC 3339 time with its offset",
    "anyOf": [
        {"type": "integer", "minimum": 0, "maximum": DUE_MAX_MS},
        {"type": "string", "format": "date-time"},
    ],
}
_DUE_BODY = {"anyOf": [*_DUE_QUERY["anyOf"], {"type": "null"}]}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "schema": schema, "description": description}


_SEARCH_PARAMETERS = [
    _query("topic", TOPIC, "jobs of this topic"),
    {**_query("status", _STATUS, "by status"), "style": "form", "explode": True},
    _query("biz_id", {k: v for k, v in BIZ_ID.items() if k != "type"} | {"type": "string"}, ""),
    _query("biz_type", {k: v for k, v in BIZ_TYPE.items() if k != "type"} | {"type": "string"}, ""),
    _query("due_from", _DUE_QUERY, "due at or after this"),
    _query("due_to", _DUE_QUERY, "due before this"),
    _query(
        "order", {"type": "string", "enum": list(ORDERS)}, "soonest (default) or latest due first"
    ),
    _query(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": LIMIT_MAX},
        f"jobs a page holds at most; default {LIMIT_DEFAULT}",
    ),
    _query(
        "cursor",
        {"type": "string", "minLength": 1, "maxLength": CURSOR_MAX_CHARS},
        "the next_cursor of the previous page (with the same filters and order)",
    ),
]

# For cluster/web/openapi.py: (summary, request schema, {status: response}, parameters).
SEARCH_OPERATIONS: dict[str, tuple[str, str | None, dict[int, str], list[dict[str, Any]]]] = {
    "search_jobs": (
        "Search jobs by topic, status, biz_id, biz_type and due time, a page at a time",
        None,
        {200: "JobPage"},
        _SEARCH_PARAMETERS,
    ),
    "cancel_matching": (
        "Cancel the pending and retrying jobs a filter matches, confirmed by their count "
        '("expected") and the token of their set ("selection") a preview answered: 409 '
        "with both otherwise (nothing cancelled)",
        "CancelMatching",
        {200: "CancelledMatching"},
        [],
    ),
}
SEARCH_ERRORS = {
    "search_jobs": (422, 429, 503),
    "cancel_matching": (400, 409, 413, 415, 422, 429, 503),
}
SEARCH_SCHEMAS: dict[str, Any] = {
    "JobPage": {
        "type": "object",
        "required": ["jobs", "next_cursor"],
        "properties": {
            "jobs": {"type": "array", "items": ref("Job")},
            "next_cursor": {
                "type": ["string", "null"],
                "description": "give it as ?cursor= for the next page; null after the last",
            },
        },
    },
    "CancelMatching": {
        "type": "object",
        "description": "The filter (as GET /v1/jobs's; status a name, names separated by "
        "commas, or an array of names), and the number of jobs it matches and the token of "
        "their set, as a 409 answer said",
        "additionalProperties": False,
        "properties": {
            "topic": {**TOPIC, "type": ["string", "null"]},
            "status": {
                "anyOf": [
                    _STATUS["items"],
                    {
                        "type": "array",
                        "maxItems": STATUS_VALUES_MAX,
                        "items": {"type": "string", "enum": _NAMES[1:-1].split("|")},
                    },
                    {"type": "null"},
                ]
            },
            "biz_id": BIZ_ID,
            "biz_type": BIZ_TYPE,
            "due_from": _DUE_BODY,
            "due_to": _DUE_BODY,
            "expected": {
                "type": ["integer", "null"],
                "minimum": 0,
                "description": f"the number of jobs to cancel (at most {CANCEL_MOST:,})",
            },
            "selection": {
                "type": ["string", "null"],
                "maxLength": 64,
                "description": "the token of the matched set a 409 answer gave: the cancel "
                "is made only if the same jobs match now",
            },
        },
    },
    "CancelledMatching": {
        "type": "object",
        "required": ["matched", "cancelled", "already_final", "unknown", "unknown_job_ids"],
        "properties": {
            "matched": {"type": "integer", "minimum": 0},
            "cancelled": {"type": "integer", "minimum": 0},
            "already_final": {
                "type": "integer",
                "minimum": 0,
                "description": "fired, being published, dead or expired meanwhile",
            },
            "unknown": {"type": "integer", "minimum": 0},
            "unknown_job_ids": {
                "type": "array",
                "items": {"type": "string"},
                "description": "a store failed: these may or may not be cancelled; "
                "cancelling them again is safe",
            },
        },
    },
}
# The member a 409 of cancel_matching adds to its problem.
PROBLEM_MEMBERS = {
    "matched": {"type": "integer", "description": "409 of a cancel by filter"},
    "selection": {
        "type": "string",
        "description": "409 of a cancel by filter: the token of the matched set, to confirm it",
    },
}
