"""wake-listener: turns "slot:due_ms" messages on the wake channel into scanner wakes.

The add and reschedule scripts PUBLISH when a job becomes its slot's earliest, so a
producer anywhere wakes the owning node at once instead of at its next safety wake.

On a Redis Cluster a PUBLISH reaches the subscribers of every node, replicas included,
so one subscription to any node hears them all. The listener follows the cluster: when
its node dies or fails over, it subscribes to another one the cluster client knows
(masters first, then replicas, then the seed nodes of redis_url), backing off while
none answers, and never crashes the node over it. After each (re)subscription every
owned slot is rescanned, which covers what was published while it was not listening.
"""

from __future__ import annotations

import logging

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from actors.lifecycle import Actor
from actors.ownership import Ownership
from actors.scanner import SlotScanner
from cluster.connections.redis_conn import (
    RedisClient,
    connect_subscriber,
    seed_nodes,
    subscriber_for,
)
from cluster.settings.config import Settings

log = logging.getLogger(__name__)

BACKOFF_S = (0.1, 0.2, 0.5, 1.0, 2.0)


class WakeListener(Actor):
    name = "wake-listener"

    def __init__(
        self,
        settings: Settings,
        redis: RedisClient,
        channel: str,
        ownership: Ownership,
        scanner: SlotScanner,
    ) -> None:
        super().__init__()
        self.settings = settings  # the subscriber needs the URL and the TLS settings
        self.redis = redis  # on a cluster: who the nodes are now
        self.channel = channel
        self.ownership = ownership
        self.scanner = scanner
        self.resubscribed_total = 0
        self._turn = 0  # which candidate node to try next

    async def body(self) -> None:
        failures = 0
        while not self.stopping:
            subscriber = self._next_subscriber()
            try:
                await self._listen(subscriber)
                failures = 0
            except Exception as exc:
                if failures == 0:
                    log.warning("wake subscription lost, resubscribing: %s", exc)
                failures += 1
                await self.sleep(BACKOFF_S[min(failures, len(BACKOFF_S)) - 1])
            finally:
                await subscriber.aclose()

    def _next_subscriber(self) -> Redis:
        """A client for the next node to subscribe to (a different one on each try)."""
        if not isinstance(self.redis, RedisCluster):
            return connect_subscriber(self.settings)
        nodes = self.redis.get_primaries() + self.redis.get_replicas()
        addresses = [(node.host, int(node.port)) for node in nodes]
        addresses += [seed for seed in seed_nodes(self.settings) if seed not in addresses]
        host, port = addresses[self._turn % len(addresses)]
        self._turn += 1
        return subscriber_for(self.settings, host, port)

    async def _listen(self, redis: Redis) -> None:
        pubsub = redis.pubsub()
        try:
            await pubsub.subscribe(self.channel)
            self.resubscribed_total += 1
            # Anything published before the subscription is caught by a full rescan.
            for slot in self.ownership.owned():
                self.scanner.wake(slot, 0)
            while not self.stopping:
                with self.waiting():
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
                if message is not None:
                    self._on_message(message["data"])
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call]

    def _on_message(self, data: bytes) -> None:
        try:
            slot_text, due_text = data.split(b":")
            slot, due_ms = int(slot_text), int(due_text)
        except ValueError:
            log.warning("ignoring malformed wake message %r", data[:100])
            return
        if self.ownership.owns(slot):
            self.scanner.wake(slot, due_ms)
