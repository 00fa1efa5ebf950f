"""mover: runs the move script for each due slot (delay zset → ready list).

The scanner says which slots are due; the mover moves at most move_batch jobs per slot
in one atomic script run per slot, all slots waiting at that moment in one pipelined
round trip. It tells the scanner each slot's next due time and hands the slot to the
dispatcher when its ready list holds jobs.
"""

from __future__ import annotations

import logging

from actors import failpoints
from actors.histogram import LATENESS_BUCKETS_S, Histograms
from actors.lifecycle import Actor
from actors.ownership import Ownership
from actors.queues import SlotQueue
from actors.scanner import SlotScanner
from cluster.errors import SlotFailed
from cluster.scripts.facade import MoveResult, Scripts

log = logging.getLogger(__name__)

RETRY_AFTER_ERROR_MS = 200


class Mover(Actor):
    name = "mover"

    def __init__(
        self,
        scripts: Scripts,
        ownership: Ownership,
        scanner: SlotScanner,
        inbox: SlotQueue,
        dispatch_queue: SlotQueue,
        batch: int,
    ) -> None:
        super().__init__()
        self.scripts = scripts
        self.ownership = ownership
        self.scanner = scanner
        self.inbox = inbox
        self.dispatch_queue = dispatch_queue
        self.batch = batch
        self.moved_total = 0
        # Due → moved, in seconds: each move run's most overdue job, once per job moved
        # (an upper bound for the others of the run).
        self.move_lag = Histograms(LATENESS_BUCKETS_S)

    async def body(self) -> None:
        while (slots := await self.next_batch(self.inbox)) is not None:
            await self.move(slots)

    async def move(self, slots: list[int]) -> None:
        """Move every given slot in one pipelined round trip (one script run each)."""
        if failpoints.STALL_FILE:
            await failpoints.stall(self.name)
        held = [(slot, self.ownership.epoch(slot)) for slot in slots if self.ownership.owns(slot)]
        if not held:
            return
        slots = [slot for slot, _ in held]
        try:
            results = await self.scripts.move_many(held, self.batch, self.scanner.lead_ms())
        except Exception as exc:
            self.warn("move of %d slot(s) failed: %s", len(slots), exc)
            for slot in slots:
                self.scanner.retry_later(slot, RETRY_AFTER_ERROR_MS)
            await self.sleep(RETRY_AFTER_ERROR_MS / 1000)
            return
        if any(isinstance(result, MoveResult) and result.moved for result in results):
            failpoints.hit("after-move")
        failed = 0
        for (slot, epoch), result in zip(held, results, strict=True):
            if result is None:
                self.ownership.lost(slot, epoch)
                continue
            if isinstance(result, SlotFailed):
                # Only this slot's Redis node is in trouble (failing over?): the others go on.
                failed += 1
                self.scanner.retry_later(slot, RETRY_AFTER_ERROR_MS)
                continue
            if result.moved:
                self.moved_total += result.moved
                self.scanner.moved_ms[slot] = result.now_ms
                lag_s = max(result.now_ms - result.first_due_ms, 0) / 1000
                self.move_lag.observe((), lag_s, result.moved)
            self.scanner.report(slot, result.next_due_ms, result.now_ms)
            if result.ready:
                await self.dispatch_queue.put(slot)
        if failed:
            self.warn(
                "move of %d of %d slot(s) failed, retrying in %d ms: %s",
                failed,
                len(held),
                RETRY_AFTER_ERROR_MS,
                next(r for r in results if isinstance(r, SlotFailed)),
            )
