"""mover: runs the move script for each due slot (delay zset → ready list).

The scanner says which slot is due; the mover moves at most move_batch jobs in one
atomic script call, tells the scanner the slot's next due time, and hands the slot to
the dispatcher when its ready list holds jobs.
"""

from __future__ import annotations

import asyncio
import logging

from actors.base import SlotQueue, next_or_stop
from actors.scanner import SlotScanner
from cluster.scripts import Scripts

log = logging.getLogger(__name__)

RETRY_AFTER_ERROR_MS = 200


class Mover:
    name = "mover"

    def __init__(
        self,
        scripts: Scripts,
        scanner: SlotScanner,
        inbox: SlotQueue,
        dispatch_queue: SlotQueue,
        batch: int,
        workers: int = 2,
    ) -> None:
        self.scripts = scripts
        self.scanner = scanner
        self.inbox = inbox
        self.dispatch_queue = dispatch_queue
        self.batch = batch
        self.workers = workers
        self.moved_total = 0
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        self._stopping.clear()
        async with asyncio.TaskGroup() as group:
            for _ in range(self.workers):
                group.create_task(self._work())

    async def _work(self) -> None:
        while (slot := await next_or_stop(self.inbox, self._stopping)) is not None:
            await self._move(slot)

    async def _move(self, slot: int) -> None:
        try:
            result = await self.scripts.move(slot, self.batch)
        except Exception as exc:
            log.warning("move of slot %d failed: %s", slot, exc)
            self.scanner.move_failed(slot, RETRY_AFTER_ERROR_MS)
            await asyncio.sleep(RETRY_AFTER_ERROR_MS / 1000)
            return
        self.moved_total += result.moved
        self.scanner.report(slot, result.next_due_ms, result.now_ms)
        if result.ready:
            await self.dispatch_queue.put(slot)
