"""Pending counts for a client (DelayClient.pending_counts) and for long-running readers
that show them every few seconds (the web server, the nodes' metric, `delayq top`):
PendingCountsCache answers from its last refresh while that is fresh, and lets one
refresh run at a time however many callers ask at once.
"""

from __future__ import annotations

import asyncio
import time

from cluster.store import counts
from cluster.store.counts import PendingCounts, TierCounts
from cluster.store.sharded import ShardedStore

__all__ = ["CACHE_S", "PendingCounts", "PendingCountsCache", "TierCounts", "pending_counts"]

# How long a refresh answers for: the counts cost a few statements per table, so readers
# that refresh every second or two share one refresh.
CACHE_S = 5.0


async def pending_counts(store: ShardedStore, horizon_ms: int) -> PendingCounts:
    """Pending jobs per topic and in total, split at now + horizon_ms (cluster/store/counts.py)."""
    return await counts.pending_counts(store, horizon_ms)


class PendingCountsCache:
    def __init__(self, store: ShardedStore, horizon_ms: int, max_age_s: float = CACHE_S) -> None:
        self.store = store
        self.horizon_ms = horizon_ms
        self.max_age_s = max_age_s
        self.last: PendingCounts | None = None
        self._at = 0.0  # time.monotonic() of the last refresh
        self._lock = asyncio.Lock()

    def fresh(self) -> bool:
        return self.last is not None and time.monotonic() - self._at < self.max_age_s

    async def get(self) -> PendingCounts:
        """The last counts if fresh, else a new refresh (one at a time)."""
        async with self._lock:
            if self.last is None or not self.fresh():
                self.last = await pending_counts(self.store, self.horizon_ms)
                self._at = time.monotonic()
            return self.last
