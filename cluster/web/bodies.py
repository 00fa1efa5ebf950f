"""Request bodies: read, checked and decoded without stalling the server.

A body is at most web_body_max_bytes (aiohttp refuses a larger one before reading
it). One larger than OFFLOAD_BYTES is decoded, and a batch of jobs validated, in a
worker thread, one such body at a time: the event loop goes on answering other
requests (/healthz among them), and at most one large body is held as Python objects.
Before decoding, a body with more than MAX_CONTAINERS objects and arrays is refused
(413): decoded, each costs 56 bytes or more, so 16 MiB of "{}," would take 500 MB.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

import orjson
from aiohttp import web

from cluster.client.delay_client import MAX_BATCH
from cluster.client.job_json import job_from_json
from cluster.client.job_writer import validated
from cluster.errors import InvalidJob
from cluster.model.jobs import ValidJob, now_ms, validate_job
from cluster.settings.config import Settings
from cluster.web.problems import Problem

T = TypeVar("T")

OFFLOAD_BYTES = 256 * 1024
# A body (after its headers) must arrive within this; larger ones are read this many at once.
BODY_READ_S = 60.0
LARGE_READS = 4
# Objects and arrays one body may hold ({ and [ counted anywhere in it, also inside
# strings: a fast upper bound). A batch of MAX_BATCH jobs has room for 9 per job.
MAX_CONTAINERS = 1_000_000


def loads(body: bytes) -> Any:
    """A request body as JSON; Problem if it is too large to decode or not JSON."""
    containers = body.count(b"{") + body.count(b"[")
    if containers > MAX_CONTAINERS:
        raise Problem(
            "too-large",
            f"the body holds {containers} JSON objects and arrays (counting every {{ and "
            f"[), more than {MAX_CONTAINERS}; send it in smaller batches",
        )
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise Problem("malformed-request", f"the body is not valid JSON: {exc}") from None


def check_query(
    request: web.Request, known: frozenset[str], repeatable: frozenset[str] = frozenset()
) -> None:
    """Refuse a query parameter not in `known` (a typo would otherwise widen a search
    or go unnoticed), and one given twice unless `repeatable`."""
    query = request.query
    unknown = sorted(set(query) - known)
    if unknown:
        raise InvalidJob(f"unknown query parameters {unknown}; known: {', '.join(sorted(known))}")
    for name in known - repeatable:
        if len(query.getall(name, [])) > 1:
            raise InvalidJob(f"{name} may be given once")


def json_object(body: object, allowed: frozenset[str], what: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise InvalidJob(f"{what} must be a JSON object")
    unknown = set(body) - allowed
    if unknown:
        raise InvalidJob(f"unknown fields in {what}: {sorted(unknown)}")
    return body


def schedule_request(data: bytes, settings: Settings) -> tuple[list[ValidJob], set[str], bool]:
    """A POST /v1/jobs body checked: its jobs, the ids their callers gave, and whether it
    is a batch ({"jobs": [...]}). Pure work, which a large body does in a thread."""
    body = loads(data)
    if not (isinstance(body, dict) and "jobs" in body):
        entry = job_from_json(body)
        job = validate_job(entry, settings, now_ms())
        return [job], {job.job_id} if entry.get("job_id") is not None else set(), False
    jobs = json_object(body, frozenset({"jobs"}), "a batch")["jobs"]
    if not isinstance(jobs, list):
        raise InvalidJob("'jobs' must be an array of jobs")
    if len(jobs) > MAX_BATCH:
        raise InvalidJob(f"a batch holds at most {MAX_BATCH} jobs, got {len(jobs)}")
    entries = []
    for index, job in enumerate(jobs):
        try:
            entries.append(job_from_json(job))
        except InvalidJob as exc:
            raise InvalidJob(f"job {index}: {exc}") from None
    return (*validated(entries, settings), True)


class BodyReader:
    """Runs work on request bodies, large ones in a thread one at a time. A body must
    arrive within BODY_READ_S; bodies not known to be small (by Content-Length) are
    read LARGE_READS at a time, so concurrent uploads hold at most that many bodies."""

    def __init__(self) -> None:
        self._large = asyncio.Semaphore(1)
        self._reading = asyncio.Semaphore(LARGE_READS)

    async def handle(self, request: web.Request, work: Callable[[bytes], T]) -> T:
        """work(the request's body): at once when the body is small, else in a thread."""
        length = request.content_length
        if length is not None and length <= OFFLOAD_BYTES:
            return work(await _read(request))
        async with self._reading:
            body = await _read(request)
            if len(body) <= OFFLOAD_BYTES:
                return work(body)
            async with self._large:
                return await asyncio.to_thread(work, body)

    async def json(self, request: web.Request) -> Any:
        return await self.handle(request, loads)


async def _read(request: web.Request) -> bytes:
    try:
        async with asyncio.timeout(BODY_READ_S):
            return await request.read()
    except TimeoutError:
        raise web.HTTPRequestTimeout(
            text=f"the request body did not arrive within {BODY_READ_S:.0f} s"
        ) from None
