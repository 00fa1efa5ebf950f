"""GET /v1/jobs (search jobs, a page at a time) and POST /v1/jobs/cancel (cancel the jobs
a filter matches, confirmed by their count): DelayClient.search_jobs and cancel_matching
(cluster/client/job_search.py) over HTTP. A mixin of cluster/web/api.py's Api; its
OpenAPI schemas are SEARCH_SCHEMAS (cluster/web/openapi_search.py).
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import orjson
from aiohttp import web

from cluster.client.delay_client import DelayClient
from cluster.client.job_json import record_json
from cluster.errors import InvalidJob
from cluster.web.auth import shown_to
from cluster.web.bodies import BodyReader, check_query, json_object
from cluster.web.problems import Problem
from cluster.web.search_limits import PerCallerLimit, caller_of

# The query parameters GET /v1/jobs takes; another is refused (a typo would otherwise
# widen the search silently).
SEARCH_PARAMS = frozenset(
    {"topic", "status", "biz_id", "biz_type", "due_from", "due_to", "order", "limit", "cursor"}
)
# The fields of POST /v1/jobs/cancel's body.
CANCEL_FIELDS = frozenset(
    {"topic", "status", "biz_id", "biz_type", "due_from", "due_to", "expected", "selection"}
)
# Status values one search takes at most (repeated ?status= or comma-separated).
STATUS_VALUES_MAX = 12
_TIME_MAX_CHARS = 64
_DIGITS = re.compile(r"[0-9]{1,15}")


class SearchApi:
    client: DelayClient
    bodies: BodyReader
    searches: PerCallerLimit

    async def search_jobs(self, request: web.Request) -> web.Response:
        check_query(request, SEARCH_PARAMS, repeatable=frozenset({"status"}))
        query = request.query
        statuses = [part for text in query.getall("status", []) for part in text.split(",")]
        if len(statuses) > STATUS_VALUES_MAX:
            raise InvalidJob(f"status takes at most {STATUS_VALUES_MAX} values")
        limit = query.get("limit", "100")
        if not _DIGITS.fullmatch(limit):
            raise InvalidJob("limit must be an integer in 1..1000")
        with self.searches.slot(caller_of(request)):
            page = await self.client.search_jobs(
                topic=query.get("topic"),
                status=statuses or None,
                biz_id=query.get("biz_id"),
                biz_type=query.get("biz_type"),
                due_from=query_time(query.get("due_from"), "due_from"),
                due_to=query_time(query.get("due_to"), "due_to"),
                order=query.get("order", "soonest"),
                limit=int(limit),
                cursor=query.get("cursor"),
            )
        jobs = [shown_to(request, record_json(job)) for job in page.jobs]
        body = {"jobs": jobs, "next_cursor": page.next_cursor}
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def cancel_matching(self, request: web.Request) -> web.Response:
        body = json_object(await self.bodies.json(request), CANCEL_FIELDS, "the filter")
        if all(body.get(name) is None for name in CANCEL_FIELDS - {"expected", "selection"}):
            raise InvalidJob(
                "give at least one filter (topic, status, biz_id, biz_type, due_from, "
                "due_to): an empty filter would match every pending job"
            )
        expected = body.get("expected")
        if expected is not None and (
            isinstance(expected, bool) or not isinstance(expected, int) or expected < 0
        ):
            raise InvalidJob('"expected" must be an integer >= 0: the number of jobs to cancel')
        status = body.get("status")
        if isinstance(status, str):  # "pending,retrying", as the query takes it
            status = status.split(",")
        if isinstance(status, list) and len(status) > STATUS_VALUES_MAX:
            raise InvalidJob(f'"status" takes at most {STATUS_VALUES_MAX} values')
        with self.searches.slot(caller_of(request)):
            result = await self.client.cancel_matching(
                topic=body.get("topic"),
                status=status,
                biz_id=body.get("biz_id"),
                biz_type=body.get("biz_type"),
                due_from=body_time(body.get("due_from"), "due_from"),
                due_to=body_time(body.get("due_to"), "due_to"),
                # Over HTTP a cancel confirms the previewed set: without its selection
                # token it is a preview.
                expected=expected if body.get("selection") is not None else None,
                selection=body.get("selection"),
            )
        if not result.done:
            given = "not given" if expected is None else f"{expected}"
            raise Problem(
                "unconfirmed",
                f"{result.matched} pending or retrying jobs match; send the request again "
                f'with "expected": {result.matched} and "selection": "{result.selection}" '
                f"to cancel them (expected was {given}; the selection changes when any job "
                "starts or stops matching)",
                matched=result.matched,
                selection=result.selection,
            )
        answer: dict[str, Any] = {
            "matched": result.matched,
            "cancelled": result.cancelled,
            "already_final": result.already_final,
            "unknown": result.unknown,
            "unknown_job_ids": result.unknown_ids,
        }
        return web.Response(body=orjson.dumps(answer), content_type="application/json")


def query_time(text: str | None, name: str) -> int | None:
    """A due bound of a query: epoch milliseconds, or an RFC 3339 time with its offset."""
    if text is None:
        return None
    if _DIGITS.fullmatch(text):
        return int(text)
    try:
        if len(text) > _TIME_MAX_CHARS:
            raise ValueError
        parsed = dt.datetime.fromisoformat(text)
    except ValueError:
        raise InvalidJob(
            f"{name} must be epoch milliseconds or an RFC 3339 time such as "
            f"2026-11-24T09:00:00Z, got {text[:_TIME_MAX_CHARS]!r}"
        ) from None
    if parsed.tzinfo is None:
        raise InvalidJob(f"{name} must give its UTC offset (Z or +hh:mm): {text!r}")
    return round(parsed.timestamp() * 1000)


def body_time(value: object, name: str) -> Any:
    """A due bound of a body: an integer (epoch ms) as it is, a string as query_time."""
    if isinstance(value, str):
        return query_time(value, name)
    return value
