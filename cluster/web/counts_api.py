"""GET /v1/jobs/counts: pending jobs per topic and in total, due within the Redis horizon
and beyond it (cluster/store/counts.py), for the console and monitoring. A mixin of
cluster/web/api.py's Api; its OpenAPI schema is COUNT_SCHEMAS.

The answer is shared for CACHE_S seconds (PendingCountsCache): any number of consoles
refreshing every few seconds cost one count every CACHE_S seconds.
"""

from __future__ import annotations

import re

import orjson
from aiohttp import web

from cluster.client.counts import PendingCountsCache
from cluster.client.delay_client import DelayClient
from cluster.errors import InvalidJob
from cluster.web.bodies import check_query
from cluster.web.search_limits import PerCallerLimit, caller_of

# Topics one answer lists at most (?limit=, default COUNTS_TOPICS_DEFAULT), biggest first.
COUNTS_TOPICS_MAX = 1000
COUNTS_TOPICS_DEFAULT = 100
_DIGITS = re.compile(r"[0-9]{1,9}")
# The query parameters GET /v1/jobs/counts takes; another is refused.
COUNTS_PARAMS = frozenset({"limit"})


class CountsApi:
    client: DelayClient
    searches: PerCallerLimit
    _counts: PendingCountsCache | None = None

    async def pending_counts(self, request: web.Request) -> web.Response:
        check_query(request, COUNTS_PARAMS)
        limit = topics_limit(request.query.get("limit"))
        if self._counts is None:
            self._counts = PendingCountsCache(
                self.client.mysql, self.client.settings.redis_horizon_ms
            )
        with self.searches.slot(caller_of(request)):
            counts = await self._counts.get()
        return web.Response(
            body=orjson.dumps(counts.as_dict(limit)), content_type="application/json"
        )


def topics_limit(text: str | None) -> int:
    if text is None:
        return COUNTS_TOPICS_DEFAULT
    if not _DIGITS.fullmatch(text) or not 1 <= int(text) <= COUNTS_TOPICS_MAX:
        raise InvalidJob(f"limit must be an integer in 1..{COUNTS_TOPICS_MAX}")
    return int(text)


_TIERS = {
    "in_redis": {
        "type": "integer",
        "minimum": 0,
        "description": "pending or retrying, due within horizon_ms of as_of_ms: in Redis, "
        "or loaded into it by the owning node before they are due",
    },
    "beyond_horizon": {
        "type": "integer",
        "minimum": 0,
        "description": "pending, due later than that: in MySQL alone",
    },
    "approximate": {
        "type": "boolean",
        "description": "some part is InnoDB's estimate (a big index range), not a count",
    },
}

COUNT_SCHEMAS = {
    "PendingTiers": {
        "type": "object",
        "required": list(_TIERS),
        "properties": _TIERS,
    },
    "PendingCounts": {
        "type": "object",
        "required": ["total", "topics", "more_topics", "horizon_ms", "as_of_ms"],
        "properties": {
            "total": {"$ref": "#/components/schemas/PendingTiers"},
            "topics": {
                "type": "array",
                "description": "most pending first, at most ?limit=",
                "items": {
                    "type": "object",
                    "required": ["topic", *_TIERS],
                    "properties": {"topic": {"type": "string"}, **_TIERS},
                },
            },
            "more_topics": {
                "type": "boolean",
                "description": "some topics are left out of `topics` (total counts them)",
            },
            "horizon_ms": {"type": "integer", "description": "redis_horizon_ms"},
            "as_of_ms": {"type": "integer", "description": "when counted (epoch ms)"},
        },
    },
}
