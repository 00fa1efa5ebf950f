"""retry-reaper: returns in-flight jobs whose deadline passed (their node died, or the
broker never answered) to the delay zset with backoff, or buries them as dead after
their max attempts."""

from __future__ import annotations

import asyncio
import logging

from actors.scanner import SlotScanner
from cluster.config import Settings
from cluster.ownership import Ownership
from cluster.scripts import Fenced, Scripts

log = logging.getLogger(__name__)

REAP_LIMIT = 1000


class RetryReaper:
    name = "retry-reaper"

    def __init__(
        self,
        settings: Settings,
        scripts: Scripts,
        ownership: Ownership,
        scanner: SlotScanner,
    ) -> None:
        self.settings = settings
        self.scripts = scripts
        self.ownership = ownership
        self.scanner = scanner
        self.retried_total = 0
        self.dead_total = 0
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        self._stopping.clear()
        while not self._stopping.is_set():
            for slot in sorted(self.ownership.owned()):
                try:
                    epoch = self.ownership.epoch(slot)
                except KeyError:
                    continue  # the slot moved away meanwhile
                try:
                    await self.reap(slot, epoch)
                except Fenced:
                    self.ownership.lost(slot, epoch)
            try:
                await asyncio.wait_for(
                    self._stopping.wait(), self.settings.reap_interval_ms / 1000
                )
            except TimeoutError:
                pass

    async def reap(self, slot: int, epoch: int) -> None:
        s = self.settings
        while True:
            result = await self.scripts.reap(
                slot, epoch, REAP_LIMIT, s.retry_backoff_ms, s.retry_backoff_max_ms
            )
            if result.retried or result.dead:
                log.info("slot %d: %d in-flight job(s) timed out, %d retried, %d dead",
                         slot, result.retried + result.dead, result.retried, result.dead)
                self.retried_total += result.retried
                self.dead_total += result.dead
            if result.earliest_due_ms >= 0:
                self.scanner.wake(slot, result.earliest_due_ms)
            if not result.more:
                return
