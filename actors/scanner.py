"""slot-scanner: sleeps exactly until the earliest due time of any owned slot.

The nextTime wait/notify trick, one timer for all slots: a heap holds each slot's
next due time; the scanner sleeps until the top of the heap, or until notified of an
earlier time (a new earliest job, via Redis pub/sub; a retry; the mover's report after
a move). When a slot is due it goes to the mover's queue. A periodic safety wake marks
every owned slot due, in case a notification was lost (a node restart, a dropped
pub/sub message). The scanner never touches jobs itself.

Times are on the Redis server's clock: the mover reports Redis TIME with each move
and the scanner keeps the offset to the local clock, so a node whose clock is off
neither spins nor fires early (the move script judges "due" by Redis TIME anyway).

With a fire advance (fire_advance_ms) a slot is sent half the advance before its next
due time and the move takes the jobs due within the whole advance; the dispatcher holds each one
until its due time by the Redis clock. Only while the offset is fresh (a move reported
within OFFSET_FRESH_S): a node that has not heard the Redis clock lately moves at the
due time, as without an advance.

With a round interval (round_interval_ms) the scanner sends due slots at most once per
interval: the slots that came due meanwhile go to the mover together, so each move and
claim round carries more jobs and costs less per job (docs/benchmarks.md), for up to
that much more lateness.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time

from actors.lifecycle import Actor
from actors.ownership import Ownership
from actors.queues import SlotQueue
from cluster.model.contract import NO_TIME

log = logging.getLogger(__name__)

NEVER = 2**62
# How long a measured offset to the Redis clock is trusted for the fire advance. Every
# owned slot is moved at least every safety_wake_ms, which refreshes it.
OFFSET_FRESH_S = 3.0


class SlotScanner(Actor):
    name = "slot-scanner"

    def __init__(
        self,
        ownership: Ownership,
        mover_queue: SlotQueue,
        safety_wake_ms: int,
        clock_offset_ms: int = 0,
        fire_advance_ms: int = 0,
        round_interval_ms: int = 0,
    ) -> None:
        super().__init__()
        self.ownership = ownership
        self.mover_queue = mover_queue
        self.safety_wake_ms = safety_wake_ms
        self._next_due: dict[int, int] = {}
        # Slots whose move is in flight → earliest wake that arrived meanwhile.
        self._moving: dict[int, int] = {}
        self._heap: list[tuple[int, int]] = []
        self._notified = asyncio.Event()
        self._clock_offset_ms = clock_offset_ms  # a skewed node clock, for fault tests
        self._offset_ms = 0.0  # Redis clock minus local clock
        self._offset_at = -OFFSET_FRESH_S  # time.monotonic() it was measured; never yet
        self.fire_advance_ms = fire_advance_ms
        self._next_safety = 0.0  # time.monotonic() of the next safety wake
        self.round_interval_s = round_interval_ms / 1000
        self._next_round = 0.0  # time.monotonic() before which no slot is sent
        # Slot → Redis ms the mover last moved jobs of it (the claim-stage metric).
        self.moved_ms: dict[int, int] = {}

    # ----- notifications (never block; safe from any actor) ----------------------------

    def wake(self, slot: int, due_ms: int) -> None:
        """Something in `slot` is due at `due_ms` (or earlier than we thought)."""
        if slot in self._moving:
            self._moving[slot] = min(self._moving[slot], due_ms)
        elif due_ms < self._next_due.get(slot, NEVER):
            self._next_due[slot] = due_ms
            heapq.heappush(self._heap, (due_ms, slot))
            self._notified.set()

    def report(self, slot: int, next_due_ms: int, redis_now_ms: int) -> None:
        """The mover's word after a move: the slot's next due time is now exactly this."""
        self._offset_ms = redis_now_ms - self._local_ms()
        self._offset_at = time.monotonic()
        due = NEVER if next_due_ms == NO_TIME else next_due_ms
        # A wake that arrived while the move was running may be earlier.
        due = min(due, self._moving.pop(slot, NEVER))
        self._next_due[slot] = due
        if due < NEVER:
            heapq.heappush(self._heap, (due, slot))
            self._notified.set()

    def retry_later(self, slot: int, retry_in_ms: int) -> None:
        """A move or claim of `slot` failed (its Redis node unreachable, failing over):
        move it again in retry_in_ms, which hands it to the dispatcher again if its
        ready list holds jobs."""
        self._moving.pop(slot, None)
        self._next_due.pop(slot, None)
        self.wake(slot, int(self.redis_now_ms()) + retry_in_ms)

    def _local_ms(self) -> float:
        return time.time() * 1000 + self._clock_offset_ms

    def redis_now_ms(self) -> float:
        return self._local_ms() + self._offset_ms

    def lead_ms(self) -> int:
        """How long before their due time jobs are moved now: the fire advance while
        the offset to the Redis clock is fresh, else 0."""
        if time.monotonic() - self._offset_at < OFFSET_FRESH_S:
            return self.fire_advance_ms
        return 0

    def redis_ms(self, wall_s: float) -> float:
        """A time.time() reading on the Redis clock, in ms."""
        return wall_s * 1000 + self._clock_offset_ms + self._offset_ms

    # ----- the loop -------------------------------------------------------------------

    def stop(self) -> None:
        super().stop()
        self._notified.set()

    async def body(self) -> None:
        while not self.stopping:
            if time.monotonic() >= self._next_safety:
                # On the monotonic clock: right even before the offset to Redis is known.
                self._next_safety = time.monotonic() + self.safety_wake_ms / 1000
                # A move whose report never came (its mover crashed) must not park the
                # slot forever; a duplicate move is harmless, the script is atomic.
                self._moving.clear()
                for slot in self.ownership.owned():
                    self.wake(slot, 0)
            # A slot is sent once its next job is due within half the lead, and the move
            # takes the whole lead: each move of a busy slot covers about half the lead's
            # worth of jobs rather than one job at a time.
            send_ms = self.lead_ms() / 2
            pace_s = self._next_round - time.monotonic()
            if pace_s <= 0 and await self._send_due(self.redis_now_ms() + send_ms):
                self._next_round = time.monotonic() + self.round_interval_s
            wait_s = self._next_safety - time.monotonic()
            if self._heap:
                wait_s = min(wait_s, (self._heap[0][0] - send_ms - self.redis_now_ms()) / 1000)
            if pace_s > 0:
                # Slots due now wait for the next round; a wake meanwhile comes back here.
                wait_s = max(wait_s, pace_s)
            if wait_s > 0:
                self._notified.clear()
                await self.wait_event(self._notified, wait_s)

    async def _send_due(self, now: float) -> int:
        """Send every owned slot due by `now` to the mover; returns how many were sent."""
        sent = 0
        while self._heap and self._heap[0][0] <= now and not self.stopping:
            due, slot = heapq.heappop(self._heap)
            if self._next_due.get(slot) != due:
                continue  # superseded by a later notification
            if not self.ownership.owns(slot):
                self._next_due.pop(slot, None)
                continue
            del self._next_due[slot]
            self._moving[slot] = NEVER  # a move is on its way; report() sets the next time
            await self.mover_queue.put(slot)
            sent += 1
        return sent
