"""Pausing, resuming and running now a recurring schedule, and listing its ticks, over
HTTP (cluster/client/recurring_actions.py): a mixin of cluster/web/api.py's Api, with
its routes' OpenAPI operations, errors and schemas (merged by cluster/web/openapi.py).

    POST /v1/recurring/{name}/pause    the schedule, paused
    POST /v1/recurring/{name}/resume   the schedule, ticking again
    POST /v1/recurring/{name}/run      the extra job, due now
    GET  /v1/recurring/{name}/ticks    its tick jobs, newest first (?limit=&cursor=)
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from aiohttp import web

from cluster.client.delay_client import DelayClient
from cluster.client.job_json import record_json
from cluster.client.recurring import RecurringSchedule, check_name, describe
from cluster.client.recurring_actions import CURSOR_MAX_CHARS
from cluster.errors import InvalidJob
from cluster.store.recurring_ticks import MAX_LIMIT
from cluster.web.bodies import BodyReader, json_object
from cluster.web.openapi_fields import ref
from cluster.web.problems import Problem

TICKS_DEFAULT = 100
_DIGITS = re.compile(r"[0-9]{1,9}")


def _json(body: object) -> web.Response:
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def _schedule_json(schedule: RecurringSchedule) -> dict[str, Any]:
    return {**describe(schedule), "payload": orjson.Fragment(schedule.definition.payload_json)}


def _not_found(name: str) -> Problem:
    return Problem("not-found", f"no recurring schedule {name!r}")


class RecurringApi:
    client: DelayClient
    bodies: BodyReader

    async def _name(self, request: web.Request) -> str:
        """The path's schedule name, after the body: an empty JSON object (these actions
        take no fields; a body is what makes a browser POST need a CORS preflight)."""
        name = check_name(request.match_info["name"])
        json_object(await self.bodies.json(request), frozenset(), "the body")
        return name

    async def pause_recurring(self, request: web.Request) -> web.Response:
        name = await self._name(request)
        schedule = await self.client.pause_recurring(name)
        if schedule is None:
            raise _not_found(name)
        return _json(_schedule_json(schedule))

    async def resume_recurring(self, request: web.Request) -> web.Response:
        name = await self._name(request)
        schedule = await self.client.resume_recurring(name)
        if schedule is None:
            raise _not_found(name)
        return _json(_schedule_json(schedule))

    async def run_recurring(self, request: web.Request) -> web.Response:
        name = await self._name(request)
        job_id = await self.client.run_recurring_now(name)
        if job_id is None:
            raise _not_found(name)
        return _json({"name": name, "job_id": job_id})

    async def recurring_ticks(self, request: web.Request) -> web.Response:
        name = check_name(request.match_info["name"])
        text = request.query.get("limit")
        if text is not None and (not _DIGITS.fullmatch(text) or not 1 <= int(text) <= MAX_LIMIT):
            raise InvalidJob(f"limit must be an integer in 1..{MAX_LIMIT}")
        limit = TICKS_DEFAULT if text is None else int(text)
        page = await self.client.recurring_ticks(name, limit, request.query.get("cursor"))
        if page is None:
            raise _not_found(name)
        jobs, cursor = page
        return _json({"ticks": [record_json(job) for job in jobs], "cursor": cursor})


# For cluster/web/openapi.py: (summary, request schema, {status: response}, parameters).
RECURRING_OPERATIONS: dict[str, tuple[str, str | None, dict[int, str], list[dict[str, Any]]]] = {
    "pause_recurring": (
        "Pause a recurring schedule: no ticks until resumed (its waiting ticks are cancelled)",
        "NoFields",
        {200: "Recurring"},
        [],
    ),
    "resume_recurring": (
        "Resume a paused schedule from its next tick after now; the paused ticks are skipped",
        "NoFields",
        {200: "Recurring"},
        [],
    ),
    "run_recurring": (
        "Fire a recurring schedule once now, besides its regular ticks",
        "NoFields",
        {200: "RecurringRun"},
        [],
    ),
    "recurring_ticks": (
        "The jobs a recurring schedule made, newest generation and tick first",
        None,
        {200: "RecurringTicks"},
        [
            {
                "name": "limit",
                "in": "query",
                "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
                "description": f"default {TICKS_DEFAULT}",
            },
            {
                "name": "cursor",
                "in": "query",
                "schema": {"type": "string", "maxLength": CURSOR_MAX_CHARS},
                "description": "the cursor of the previous page",
            },
        ],
    ),
}
RECURRING_ERRORS = {
    "pause_recurring": (400, 404, 413, 415, 422, 503),
    "resume_recurring": (400, 404, 413, 415, 422, 503),
    "run_recurring": (400, 404, 413, 415, 422, 503),
    "recurring_ticks": (404, 422, 503),
}
RECURRING_SCHEMAS: dict[str, Any] = {
    "NoFields": {
        "type": "object",
        "description": "An empty JSON object: the action takes no fields",
        "additionalProperties": False,
    },
    "RecurringRun": {
        "type": "object",
        "required": ["name", "job_id"],
        "properties": {
            "name": {"type": "string"},
            "job_id": {
                "type": "string",
                "description": "the extra job: @recurring:<name>:<generation>:<ms>r",
            },
        },
    },
    "RecurringTicks": {
        "type": "object",
        "required": ["ticks", "cursor"],
        "properties": {
            "ticks": {"type": "array", "items": ref("Job")},
            "cursor": {
                "type": ["string", "null"],
                "description": "pass as ?cursor= for the next page; null: no more",
            },
        },
    },
}
