"""The JSON API v1: the Python client's operations over HTTP, with its validation and
guarantees (docs/http.md).

ROUTES is the one list of routes: the server registers them from it, the auth
middleware finds each one's permission in it, and tests check the OpenAPI document
(cluster/web/openapi.py) against it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson
import pymysql
import redis.exceptions
from aiohttp import web

from cluster.client.delay_client import DelayClient
from cluster.client.job_history import history_of
from cluster.client.job_json import dead_json, history_json, parse_time, record_json
from cluster.client.recurring import RecurringSchedule, check_name, describe
from cluster.errors import InvalidJob, OutcomeUnknown, RedisStepFailed, StoreUnavailable
from cluster.model.changes import ChangeResult, ChangeStatus
from cluster.model.job_fields import OPTION_NAMES
from cluster.model.jobs import ValidJob, check_job_id, check_topic
from cluster.web.auth import Permission, shown_to
from cluster.web.batcher import ScheduleBatcher
from cluster.web.bodies import BodyReader, json_object, schedule_request
from cluster.web.counts_api import CountsApi
from cluster.web.problems import Problem
from cluster.web.recurring_api import RecurringApi
from cluster.web.search_api import SearchApi
from cluster.web.search_limits import PerCallerLimit
from cluster.web.stats import StatsSampler

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# How many dead jobs one list answer holds at most, and names one replay or purge takes.
DEAD_LIST_MAX = 1000
DEAD_SELECTION_MAX = 10_000
# What a MySQL connection that cannot be made or broke raises.
_MYSQL_DOWN = (pymysql.err.OperationalError, pymysql.err.InterfaceError)
_REDIS_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, TimeoutError)
_DIGITS = re.compile(r"[0-9]{1,9}")


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    name: str  # the handler's name in Api, and the OpenAPI operationId
    permission: Permission


ROUTES = (
    Route("POST", "/v1/jobs", "schedule", Permission.WRITE_JOBS),
    Route("GET", "/v1/jobs", "search_jobs", Permission.SEARCH_JOBS),
    Route("POST", "/v1/jobs/cancel", "cancel_matching", Permission.BULK_JOBS),
    Route("GET", "/v1/jobs/counts", "pending_counts", Permission.SEARCH_JOBS),
    Route("GET", "/v1/jobs/{job_id}", "get_job", Permission.READ_JOBS),
    Route("DELETE", "/v1/jobs/{job_id}", "cancel", Permission.WRITE_JOBS),
    Route("POST", "/v1/jobs/{job_id}/reschedule", "reschedule", Permission.WRITE_JOBS),
    Route("GET", "/v1/dead-letters", "list_dead", Permission.READ_DEAD),
    Route("GET", "/v1/dead-letters/{job_id}", "get_dead", Permission.READ_DEAD),
    Route("POST", "/v1/dead-letters/replay", "replay_dead", Permission.WRITE_DEAD),
    Route("POST", "/v1/dead-letters/purge", "purge_dead", Permission.WRITE_DEAD),
    Route("GET", "/v1/expired", "list_expired", Permission.READ_DEAD),
    Route("GET", "/v1/recurring", "list_recurring", Permission.READ_JOBS),
    Route("GET", "/v1/recurring/{name}", "get_recurring", Permission.READ_JOBS),
    Route("PUT", "/v1/recurring/{name}", "put_recurring", Permission.WRITE_JOBS),
    Route("DELETE", "/v1/recurring/{name}", "remove_recurring", Permission.WRITE_JOBS),
    Route("POST", "/v1/recurring/{name}/pause", "pause_recurring", Permission.WRITE_JOBS),
    Route("POST", "/v1/recurring/{name}/resume", "resume_recurring", Permission.WRITE_JOBS),
    Route("POST", "/v1/recurring/{name}/run", "run_recurring", Permission.WRITE_JOBS),
    Route("GET", "/v1/recurring/{name}/ticks", "recurring_ticks", Permission.READ_JOBS),
    Route("GET", "/v1/cluster", "cluster", Permission.READ_CLUSTER),
    Route("GET", "/v1/cluster/stats", "cluster_stats", Permission.READ_CLUSTER),
)


def documented_methods(path: str) -> list[str]:
    """The methods ROUTES has for a request path, from the route templates that match it
    with the most literal segments (/v1/dead-letters/purge is the purge route's, not a
    dead job named "purge"). A job id in a path is one segment: a "/" in it is sent as
    %2F, which aiohttp matches before decoding."""
    parts = path.rstrip("/").split("/")
    best: list[str] = []
    best_literals = -1
    for route in ROUTES:
        template = route.path.split("/")
        if len(template) != len(parts):
            continue
        if not all(t.startswith("{") or t == p for t, p in zip(template, parts, strict=True)):
            continue
        literals = sum(not t.startswith("{") for t in template)
        if literals > best_literals:
            best, best_literals = [route.method], literals
        elif literals == best_literals:
            best.append(route.method)
    return sorted(set(best))


def json_response(body: object, status: int = 200, **headers: str) -> web.Response:
    return web.Response(
        body=orjson.dumps(body), status=status, content_type="application/json", headers=headers
    )


class Api(CountsApi, RecurringApi, SearchApi):
    """The handlers of ROUTES, over one DelayClient (one MySQL pool, one Redis client)."""

    def __init__(self, client: DelayClient, stats: StatsSampler) -> None:
        self.client = client
        self.batcher = ScheduleBatcher(client)
        self.settings = client.settings
        self.stats = stats
        self.bodies = BodyReader()
        self.searches = PerCallerLimit(client.settings.web_searches_per_token)

    def handler(self, route: Route) -> Handler:
        handler: Handler = getattr(self, route.name)
        return handler

    # ----- jobs --------------------------------------------------------------------------

    async def schedule(self, request: web.Request) -> web.Response:
        jobs, keyed, batch = await self.bodies.handle(
            request, lambda body: schedule_request(body, self.settings)
        )
        if batch:
            return await self._schedule_many(jobs, keyed)
        return await self._schedule_one(jobs[0], keyed=bool(keyed))

    async def _schedule_one(self, job: ValidJob, keyed: bool) -> web.Response:
        """One job, stored together with other requests' jobs (cluster/web/batcher.py)."""
        try:
            result = await self.batcher.schedule(job, keyed=keyed)
        except RedisStepFailed as exc:
            # Committed in MySQL: scheduled, and the owning node adds it to Redis.
            return json_response({"job_id": job.job_id, "created": None, "warning": str(exc)}, 202)
        return json_response(
            {"job_id": result.job_id, "created": result.created},
            201 if result.created else 200,
            Location=f"/v1/jobs/{quote(result.job_id, safe='')}",
        )

    async def _schedule_many(self, valid: list[ValidJob], keyed: set[str]) -> web.Response:
        """A batch: all of its jobs or none, in one call of the client."""
        try:
            results = await self.client.schedule_validated(valid, keyed)
        except RedisStepFailed as exc:
            listed = [{"job_id": job_id, "created": None} for job_id in exc.job_ids]
            return json_response({"jobs": listed, "warning": str(exc)}, 202)
        return json_response(
            {"jobs": [{"job_id": r.job_id, "created": r.created} for r in results]}
        )

    async def get_job(self, request: web.Request) -> web.Response:
        job_id = check_job_id(request.match_info["job_id"])
        with_history = _flag(request.query.get("history"), "history")
        record = await self.client.get(job_id)
        if record is None:
            raise Problem("not-found", f"no job {job_id!r}")
        answer = shown_to(request, record_json(record))
        if with_history:
            answer["history"] = history_json(await history_of(self.client.mysql, record))
        return json_response(answer)

    async def cancel(self, request: web.Request) -> web.Response:
        job_id = check_job_id(request.match_info["job_id"])
        result = await self.client.cancel(job_id)
        if not result:
            raise _refusal(result, "cancelled")
        return json_response({"job_id": job_id, "cancelled": True})

    async def reschedule(self, request: web.Request) -> web.Response:
        job_id = check_job_id(request.match_info["job_id"])
        body = json_object(await self.bodies.json(request), frozenset({"delay", "at"}), "the body")
        at = body.get("at")
        if isinstance(at, str):
            at = parse_time(at, "at")
        result = await self.client.reschedule(job_id, delay=body.get("delay"), at=at)
        if not result:
            raise _refusal(result, "rescheduled")
        return json_response({"job_id": job_id, "rescheduled": True, "due_ms": result.due_ms})

    # ----- dead letters --------------------------------------------------------------------

    async def list_dead(self, request: web.Request) -> web.Response:
        topic, limit = _listing(request)
        listed = await self.client.dead_letters(topic=topic, limit=limit)
        count = await self.client.count_dead(topic=topic)
        dead = [shown_to(request, dead_json(job)) for job in listed]
        return json_response({"dead_letters": dead, "count": count})

    async def get_dead(self, request: web.Request) -> web.Response:
        job_id = check_job_id(request.match_info["job_id"])
        job = await self.client.dead_job(job_id)
        if job is None:
            raise Problem("not-found", f"no job {job_id!r} in the dead-letter set")
        history = history_json(await self.client.mysql.history(job_id))
        return json_response({**shown_to(request, dead_json(job)), "history": history})

    async def replay_dead(self, request: web.Request) -> web.Response:
        job_ids, topic = _selection(await self.bodies.json(request))
        return json_response({"replayed": await self.client.replay_dead(job_ids, topic=topic)})

    async def purge_dead(self, request: web.Request) -> web.Response:
        job_ids, topic = _selection(await self.bodies.json(request))
        return json_response({"purged": await self.client.purge_dead(job_ids, topic=topic)})

    # ----- expired jobs --------------------------------------------------------------------

    async def list_expired(self, request: web.Request) -> web.Response:
        topic, limit = _listing(request)
        listed = await self.client.expired_jobs(topic=topic, limit=limit)
        count = await self.client.count_expired(topic=topic)
        expired = [shown_to(request, record_json(job)) for job in listed]
        return json_response({"expired": expired, "count": count})

    # ----- recurring schedules -------------------------------------------------------------

    async def list_recurring(self, request: web.Request) -> web.Response:
        removed = _flag(request.query.get("removed"), "removed")
        listed = await self.client.recurring(removed=removed)
        return json_response({"recurring": [recurring_json(s) for s in listed]})

    async def get_recurring(self, request: web.Request) -> web.Response:
        name = check_name(request.match_info["name"])
        schedule = await self.client.get_recurring(name)
        if schedule is None:
            raise Problem("not-found", f"no recurring schedule {name!r}")
        return json_response(recurring_json(schedule))

    async def put_recurring(self, request: web.Request) -> web.Response:
        """Create or replace a schedule; the same definition again changes nothing."""
        name = check_name(request.match_info["name"])
        body = json_object(await self.bodies.json(request), RECURRING_FIELDS, "the schedule")
        for field in ("topic", "payload"):
            if field not in body:
                raise InvalidJob(f"the schedule needs {field!r}")
        # null is "not given" (the default) for the optional fields; a null payload is
        # a payload, and a null topic is refused by the client's checks.
        given = {f: v for f, v in body.items() if v is not None or f in ("topic", "payload")}
        for field in ("start_at", "end_at"):
            if isinstance(given.get(field), str):
                given[field] = parse_time(given[field], field)
        schedule = await self.client.schedule_recurring(name, **given)
        return json_response(recurring_json(schedule))

    async def remove_recurring(self, request: web.Request) -> web.Response:
        name = check_name(request.match_info["name"])
        if not await self.client.remove_recurring(name):
            raise Problem("not-found", f"no recurring schedule {name!r}")
        return json_response({"name": name, "removed": True})

    # ----- the cluster ---------------------------------------------------------------------

    async def cluster(self, _: web.Request) -> web.Response:
        # One ZooKeeper session for the server, and a status at most a second old: many
        # clients asking at once cost one read.
        try:
            status = await self.stats.status.read()
        except Exception as exc:
            raise Problem("cluster-unavailable", f"{type(exc).__name__}: {exc}") from exc
        return json_response(status.as_dict())

    async def cluster_stats(self, _: web.Request) -> web.Response:
        return json_response(await self.stats.figures())


# The problem's job_status for each refusal of a cancel or reschedule.
REFUSAL_STATUS = {
    ChangeStatus.CANCELLED: "cancelled",
    ChangeStatus.ALREADY_FIRED: "fired",
    ChangeStatus.IN_FLIGHT: "in_flight",
    ChangeStatus.DEAD: "dead",
    ChangeStatus.EXPIRED: "expired",
}
_REASONS = {
    ChangeStatus.IN_FLIGHT: "it is being published (it will fire)",
    ChangeStatus.ALREADY_FIRED: "it has fired",
}


def _refusal(result: ChangeResult, change: str) -> Problem:
    """Why a cancel or reschedule changed nothing: 404 for an unknown job, else 409
    with job_status (and, for a job that fired, fired_ms and attempt when recorded)."""
    job_id = result.job_id
    if result.status == ChangeStatus.NOT_FOUND:
        return Problem("not-found", f"no job {job_id!r}")
    status = REFUSAL_STATUS[result.status]
    reason = _REASONS.get(result.status, f"it is {status}")
    more: dict[str, int] = {}
    if result.status == ChangeStatus.ALREADY_FIRED:
        more = {
            name: value
            for name, value in (("fired_ms", result.fired_ms), ("attempt", result.attempt))
            if value is not None
        }
    return Problem(
        "conflict", f"job {job_id!r} cannot be {change}: {reason}", job_status=status, **more
    )


# The fields of PUT /v1/recurring/{name}: schedule_recurring's arguments, the job's
# options among them (cluster/model/job_fields.py).
RECURRING_FIELDS = OPTION_NAMES | frozenset(
    {"topic", "payload", "cron", "every", "tz", "start_at", "end_at", "missed"}
)


def recurring_json(schedule: RecurringSchedule) -> dict[str, Any]:
    """A schedule as `delayq recurring show` prints it, its payload as JSON."""
    return {**describe(schedule), "payload": orjson.Fragment(schedule.definition.payload_json)}


def _flag(text: str | None, name: str) -> bool:
    if text is None or text in ("false", "0"):
        return False
    if text in ("true", "1"):
        return True
    raise InvalidJob(f"{name} must be true, false, 1 or 0")


def _listing(request: web.Request) -> tuple[str | None, int]:
    """A list's ?topic= (checked) and ?limit= (default 100)."""
    topic = request.query.get("topic")
    if topic is not None:
        check_topic(topic)
    return topic, _limit(request.query.get("limit"))


def _limit(text: str | None) -> int:
    if text is None:
        return 100
    # ASCII digits only: str.isdigit() also takes "²" and other digits int() refuses.
    if not _DIGITS.fullmatch(text) or not 1 <= int(text) <= DEAD_LIST_MAX:
        raise InvalidJob(f"limit must be an integer in 1..{DEAD_LIST_MAX}")
    return int(text)


def _selection(body: object) -> tuple[list[str] | None, str | None]:
    """Which dead jobs a replay or purge acts on: exactly one of job_ids, topic, or
    all=true (so "everything" is never the result of a forgotten field)."""
    chosen = json_object(body, frozenset({"job_ids", "topic", "all"}), "the selection")
    if len(chosen) != 1:
        raise InvalidJob('give exactly one of "job_ids", "topic" or "all": true')
    if "all" in chosen:
        if chosen["all"] is not True:
            raise InvalidJob('"all" must be true')
        return None, None
    if "topic" in chosen:
        return None, check_topic(chosen["topic"])
    job_ids = chosen["job_ids"]
    if not isinstance(job_ids, list) or not 1 <= len(job_ids) <= DEAD_SELECTION_MAX:
        raise InvalidJob(f'"job_ids" must be an array of 1..{DEAD_SELECTION_MAX} job ids')
    return [check_job_id(job_id) for job_id in job_ids], None


@web.middleware
async def problems_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure as a problem document (cluster/web/problems.py)."""
    try:
        return await handler(request)
    except Problem as exc:
        return exc.response()
    except InvalidJob as exc:
        return Problem("invalid-job", str(exc)).response()
    except StoreUnavailable as exc:
        return Problem("store-unavailable", str(exc)).response()
    except OutcomeUnknown as exc:
        if isinstance(exc.__cause__, _REDIS_DOWN):  # a cancel or reschedule's first step
            return Problem("redis-unavailable", str(exc), job_ids=exc.job_ids).response()
        return Problem(
            "outcome-unknown",
            f"{exc} (sending the request again with the same job_id is safe)",
            job_ids=exc.job_ids,
        ).response()
    except _MYSQL_DOWN as exc:
        return Problem("store-unavailable", f"MySQL is unreachable: {exc}").response()
    except _REDIS_DOWN as exc:
        return Problem(
            "redis-unavailable",
            f"Redis did not answer, so the change may or may not be made; sending the "
            f"request again is safe: {type(exc).__name__}: {exc}",
        ).response()
    except web.HTTPRequestEntityTooLarge as exc:
        return Problem("too-large", exc.text or "request body too large").response()
    except web.HTTPNotFound:
        return Problem("no-route", f"no route {request.method} {request.path}").response()
    except web.HTTPMethodNotAllowed as exc:
        allowed = ", ".join(documented_methods(request.path) or sorted(exc.allowed_methods))
        response = Problem(
            "method-not-allowed", f"{request.method} is not allowed here (allowed: {allowed})"
        ).response()
        response.headers["Allow"] = allowed
        return response
    except web.HTTPException:
        raise
    except Exception:
        log.exception("%s %s failed", request.method, request.path)
        return Problem("internal-error", "the server failed; see its log").response()
