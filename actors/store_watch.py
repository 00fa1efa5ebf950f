"""store-watch: whether this node reaches Redis and Kafka, each checked on its own.

ZooKeeper decides who holds a slot, so a node that ZooKeeper still hears from keeps its
slots however long it cannot do their work: cut off from Redis it can move, claim and
ack nothing; cut off from the broker it can publish nothing. This actor asks Redis (a
PING) and Kafka (a metadata request, through the node's producer) every `interval_s`,
each question bounded by `timeout_s`, and keeps when each last answered and since when
it has answered every time. The membership (actors/withdrawal.py) reads it: a store
that has not answered for store_unreachable_release_ms makes the node give its slots up
to the other members, and it takes its share back only once every store has answered
every check for that long again, so a link that comes and goes does not move the slots
back and forth.

MySQL is not watched: a node cut off from MySQL alone keeps its slots and fires what
Redis holds (docs/guarantees.md, partial partitions).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from actors.lifecycle import Actor

# Checks per bound: a store is found unanswering within a tenth of the bound after it.
CHECKS_PER_BOUND = 10
MIN_INTERVAL_S = 0.05
MAX_INTERVAL_S = 1.0


@dataclass
class Link:
    """What the checks of one store found (time.monotonic() values)."""

    last_ok: float
    ok_since: float | None  # the first check of the current run of answers; None: failing


class StoreWatch(Actor):
    """Checks each store of `asks` (name → a check that returns True when the store
    answered) until stopped. Every store counts as answering from the start: the node
    reached them all to start."""

    name = "store-watch"

    def __init__(self, bound_s: float, asks: Mapping[str, Callable[[], Awaitable[bool]]]) -> None:
        super().__init__()
        self.bound_s = bound_s
        self.asks = asks
        self.interval_s = min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, bound_s / CHECKS_PER_BOUND))
        # A check cut off after half the bound leaves time for the next one within it.
        self.timeout_s = max(self.interval_s, bound_s / 2)
        now = time.monotonic()
        self.links = {store: Link(now, now) for store in asks}

    async def body(self) -> None:
        for store, ask in self.asks.items():
            self.spawn(self._watch(store, ask), store)
        await super().body()

    async def _watch(self, store: str, ask: Callable[[], Awaitable[bool]]) -> None:
        while not self.stopping:
            asked_at = time.monotonic()
            try:
                async with asyncio.timeout(self.timeout_s):
                    answered = await ask()
            except Exception as error:
                self.warn("%s did not answer the node's check: %s", store, error, every_s=10)
                answered = False
            self.record(store, answered, asked_at)
            if not await self.sleep(self.interval_s):
                return

    def record(self, store: str, answered: bool, asked_at: float) -> None:
        """The check of `store` asked at `asked_at` was answered, or not."""
        link = self.links[store]
        if not answered:
            link.ok_since = None
            return
        link.last_ok = max(link.last_ok, asked_at)
        if link.ok_since is None:
            # From the answer, not the question: a check left waiting by a cut link and
            # answered when it healed says nothing about the time before that.
            link.ok_since = time.monotonic()

    def unanswered(self, for_s: float) -> list[str]:
        """The stores that have not answered a check for longer than `for_s`."""
        now = time.monotonic()
        return sorted(store for store, link in self.links.items() if now - link.last_ok > for_s)

    def steady(self, for_s: float) -> bool:
        """Whether every store has answered every check for at least `for_s`."""
        now = time.monotonic()
        return all(
            link.ok_since is not None and now - link.ok_since >= for_s
            for link in self.links.values()
        )
