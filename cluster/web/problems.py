"""Error answers as problem details (RFC 9457, application/problem+json).

Every error the API gives is one of these: `type` says which kind (a stable URN a
program can test), `title` is its fixed summary, `detail` this occurrence, and `status`
the HTTP status. Some carry more members (job_ids, job_status).
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

CONTENT_TYPE = "application/problem+json"
# How long a client should wait before trying again after a 503, and after a 429.
RETRY_AFTER_S = 5
RETRY_AFTER_BUSY_S = 1

# type suffix → (status, title)
KINDS: dict[str, tuple[int, str]] = {
    "malformed-request": (400, "The request body is not valid JSON"),
    "unauthorized": (401, "A valid bearer token is needed"),
    "forbidden": (403, "The token's role does not allow this"),
    "cross-origin": (403, "Requests from another origin are refused"),
    "not-found": (404, "No such job or schedule"),
    "no-route": (404, "No such route"),
    "method-not-allowed": (405, "Method not allowed"),
    "conflict": (409, "The job is not in a state that allows this"),
    "unconfirmed": (409, "The count to confirm is not the number that match; nothing was changed"),
    "too-large": (413, "The request body is too large"),
    "unsupported-media-type": (415, "The body must be application/json"),
    "misdirected-request": (421, "The Host header names no address this server answers to"),
    "invalid-job": (422, "The request is not acceptable; nothing was changed"),
    "too-many-requests": (429, "Too many of these requests running for this token"),
    "outcome-unknown": (500, "The outcome is unknown"),
    "internal-error": (500, "Internal error"),
    "store-unavailable": (503, "MySQL is unreachable; nothing was changed"),
    "redis-unavailable": (503, "Redis is unreachable"),
    "cluster-unavailable": (503, "ZooKeeper or Redis is unreachable"),
}


def problem_type(kind: str) -> str:
    return f"urn:delayq:problem:{kind}"


def problem(kind: str, detail: str, **members: Any) -> web.Response:
    status, title = KINDS[kind]
    body = {"type": problem_type(kind), "title": title, "status": status, "detail": detail}
    body.update(members)
    headers = {}
    if status in (429, 503):
        headers["Retry-After"] = str(RETRY_AFTER_BUSY_S if status == 429 else RETRY_AFTER_S)
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="delayq"'
    return web.Response(
        body=orjson.dumps(body), status=status, content_type=CONTENT_TYPE, headers=headers
    )


class Problem(Exception):
    """Raised by a handler to answer with a problem."""

    def __init__(self, kind: str, detail: str, **members: Any) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.members = members

    def response(self) -> web.Response:
        return problem(self.kind, self.detail, **self.members)
