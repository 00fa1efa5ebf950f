"""How many searches, bulk cancels and pending counts one bearer token may have running
at once (web_searches_per_token): each walks indexes of every shard, so one caller
asking many at once would slow every producer's writes. One more is answered 429 with
Retry-After, and runs nothing; a caller that waits its turn is never refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web

from cluster.web.problems import Problem

# Who a request counts against: its bearer token (the authenticating middleware sets it;
# without tokens every request is the same caller).
CALLER_KEY = web.RequestKey("delayq.caller", str)


def caller_of(request: web.Request) -> str:
    caller: str = request.get(CALLER_KEY, "")
    return caller


class PerCallerLimit:
    """At most `most` of these requests running per caller."""

    def __init__(self, most: int) -> None:
        self._most = most
        self._running: dict[str, int] = {}

    @contextmanager
    def slot(self, caller: str) -> Iterator[None]:
        """One request of `caller` running; Problem too-many-requests (429) if it has
        `most` already."""
        running = self._running.get(caller, 0)
        if running >= self._most:
            raise Problem(
                "too-many-requests",
                f"this token already has {running} searches, bulk cancels or pending "
                f"counts running (web_searches_per_token={self._most}); wait for one "
                "to finish",
            )
        self._running[caller] = running + 1
        try:
            yield
        finally:
            left = self._running[caller] - 1
            if left:
                self._running[caller] = left
            else:
                del self._running[caller]  # no entry kept per token once idle

    def running(self, caller: str = "") -> int:
        return self._running.get(caller, 0)
