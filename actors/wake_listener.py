"""wake-listener: turns "slot:due_ms" messages on the wake channel into scanner wakes.

The add and reschedule scripts PUBLISH when a job becomes its slot's earliest, so a
producer anywhere wakes the owning node at once instead of at its next safety wake.
"""

from __future__ import annotations

import logging

from actors.lifecycle import Actor
from actors.ownership import Ownership
from actors.scanner import SlotScanner
from cluster.config import Settings
from cluster.redis_conn import connect_subscriber

log = logging.getLogger(__name__)


class WakeListener(Actor):
    name = "wake-listener"

    def __init__(
        self, settings: Settings, channel: str, ownership: Ownership, scanner: SlotScanner
    ) -> None:
        super().__init__()
        self.settings = settings  # the subscriber needs the URL and the TLS settings
        self.channel = channel
        self.ownership = ownership
        self.scanner = scanner

    async def body(self) -> None:
        redis = connect_subscriber(self.settings)
        pubsub = redis.pubsub()
        try:
            await pubsub.subscribe(self.channel)
            # Anything published before the subscription is caught by a full rescan.
            for slot in self.ownership.owned():
                self.scanner.wake(slot, 0)
            while not self.stopping:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
                if message is not None:
                    self._on_message(message["data"])
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call]
            await redis.aclose()

    def _on_message(self, data: bytes) -> None:
        try:
            slot_text, due_text = data.split(b":")
            slot, due_ms = int(slot_text), int(due_text)
        except ValueError:
            log.warning("ignoring malformed wake message %r", data[:100])
            return
        if self.ownership.owns(slot):
            self.scanner.wake(slot, due_ms)
