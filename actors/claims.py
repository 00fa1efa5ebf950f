"""claims: the dispatcher's claims of its slots, and the claims whose reply was lost.

A claim (lua/claim.lua) that Redis ran but whose reply never arrived (a timeout, a
connection dropped in a Redis Cluster topology change, a Redis stopped right after
it, redis-py running the call again on a new connection) leaves its jobs in flight
with nobody publishing them: without more, they would fire only when the
retry-reaper finds their deadline passed (inflight_timeout_ms later), as attempt 2.

A slot's claims run one at a time, each giving its jobs the deadline of its Redis
TIME + the in-flight timeout (at least 1 ms above the bound it was given, even within
one millisecond). So every job of the slot in flight with a deadline later than that
of the last claim whose reply arrived was taken by a claim whose reply was lost. Each
claim names that deadline, and the script hands such jobs out again first, with the
attempt the lost claim counted and a fresh deadline: the call stays fenced and safe to
repeat, and costs one empty range read when nothing was lost.

A round that failed after its claim ran (reading lean jobs' tails from MySQL, for
one) goes back to the deadline from before it, so its jobs are handed out again too.
A slot whose claim failed comes back to the dispatcher after a pause even when its
ready list is empty. Before the first claim of a slot whose reply arrived, nothing is
handed out again, unless such a claim failed: then the bound is the node's estimate
of the Redis clock at that claim, less DOUBT_SLACK_MS (in-flight jobs of the previous
owner claimed in that last moment may then go out again: a duplicate after a failure,
as the reaper would have made), except with exactly-once delivery, where such jobs may
be committed already: there the reaper takes them after their deadline, reading the
journal first. A deadline seen is never lowered (a Redis clock behind the last one,
after a failover, then leaves a lost claim to the reaper rather than sending a job
still being published again).
"""

from __future__ import annotations

import logging

from actors.scanner import SlotScanner
from cluster.errors import RedisRestarted
from cluster.scripts.facade import ClaimResult, Scripts, SlotFailed
from cluster.settings.config import Settings

log = logging.getLogger(__name__)

DOUBT_SLACK_MS = 1000

Reply = ClaimResult | SlotFailed | None


class Claims:
    """Per slot, the latest claim deadline this node saw (module docstring)."""

    def __init__(
        self, settings: Settings, scripts: Scripts, scanner: SlotScanner, exactly_once: bool
    ) -> None:
        self.settings = settings
        # Exactly-once never guesses a bound: the jobs of the slot's previous owner that
        # it would hand out again may be committed already (the reaper reads the journal).
        self.exactly_once = exactly_once
        self.scripts = scripts
        self.scanner = scanner
        self._deadline: dict[int, int] = {}  # in-flight deadlines above this are lost
        self._epoch: dict[int, int] = {}  # the epoch it was seen at
        self._failed: set[int] = set()  # slots whose last claim (or round) failed
        self.reclaimed_total = 0

    def failed(self, slot: int) -> bool:
        return slot in self._failed

    def bounds(self, held: list[tuple[int, int]]) -> dict[tuple[int, int], int]:
        """Each (slot, epoch)'s deadline bound as it stands before a claim (module
        docstring); none for a slot of another epoch, nor, in exactly-once mode, for one
        without a deadline seen."""
        estimate = int(self.scanner.redis_now_ms()) + self.settings.inflight_timeout_ms
        bounds: dict[tuple[int, int], int] = {}
        for slot, epoch in held:
            if self._epoch.get(slot, epoch) != epoch:
                continue
            if slot in self._deadline:
                bounds[slot, epoch] = self._deadline[slot]
            elif not self.exactly_once:
                bounds[slot, epoch] = estimate - DOUBT_SLACK_MS
        return bounds

    def round_failed(self, bounds: dict[tuple[int, int], int]) -> None:
        """A round failed after its claims may have run: hand their jobs out again, in
        the slots still held at the same epoch."""
        for (slot, epoch), bound in bounds.items():
            if self._epoch.get(slot, epoch) != epoch:
                continue
            self._epoch[slot] = epoch
            self._deadline[slot] = min(bound, self._deadline.get(slot, bound))
            self._failed.add(slot)

    def forget(self, slot: int) -> None:
        """The slot is no longer this node's."""
        self._deadline.pop(slot, None)
        self._epoch.pop(slot, None)
        self._failed.discard(slot)

    async def run(
        self, held: list[tuple[int, int]], count: int, durable: bool
    ) -> list[tuple[int, int, Reply]]:
        """Claim from every (slot, epoch) of held in one round trip: (slot, epoch,
        reply) for each, each slot once (a second claim of a slot in the same round trip
        would take the first one's jobs for a lost claim's)."""
        held = list({slot: (slot, epoch) for slot, epoch in held}.values())
        for slot, epoch in held:
            if self._epoch.get(slot, epoch) != epoch:
                self.forget(slot)  # taken again since: what was seen is another epoch's
            self._epoch[slot] = epoch
        bounds = self.bounds(held)
        after = {
            slot: bounds[slot, epoch]
            for slot, epoch in held
            if (slot, epoch) in bounds and (slot in self._deadline or self.failed(slot))
        }
        replies = await self.scripts.claim_many(
            held, count, self.settings.inflight_timeout_ms, durable, after
        )
        lost: dict[tuple[int, int], SlotFailed] = {}
        for (slot, epoch), reply in zip(held, replies, strict=True):
            if isinstance(reply, ClaimResult):
                if reply.reclaimed:
                    self.reclaimed_total += reply.reclaimed
                    log.warning(
                        "slot %d: handed out again %d job(s) of a claim whose reply was lost",
                        slot,
                        reply.reclaimed,
                    )
                self._failed.discard(slot)
                # Never lowered: a Redis clock behind the last one (a failover) must not
                # make this round's jobs look like a lost claim's to the next one.
                deadline = reply.now_ms + self.settings.inflight_timeout_ms
                if slot in after:  # as claim.lua: above the bound, same millisecond or not
                    deadline = max(deadline, after[slot] + 1)
                self._deadline[slot] = max(self._deadline.get(slot, deadline), deadline)
            elif reply is None:
                self.forget(slot)
            elif not isinstance(reply.error, RedisRestarted):
                lost[slot, epoch] = reply
        new = [held for held in lost if held[0] not in self._failed]
        if new:
            log.warning(
                "the claim of %d slot(s) got no answer (%s): the jobs it may have taken "
                "are handed out again once Redis answers",
                len(new),
                lost[new[0]].error,
            )
        self.round_failed({held: bounds[held] for held in lost if held in bounds})
        return [(slot, epoch, reply) for (slot, epoch), reply in zip(held, replies, strict=True)]
