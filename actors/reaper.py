"""retry-reaper: returns in-flight jobs whose deadline passed (their node died, or the
broker never answered) to the delay zset with backoff, or buries them as dead after
their max attempts.

With delivery = exactly_once it first asks the journal which of them a transaction
committed (actors/transactions.py) and acks those; it retries only the rest, and only
those it asked about (reap.lua's upto), a tick's worth at a time. When the journal
cannot be read, nothing is retried.

A dead node's claims do not wait for their deadline: when the membership takes a slot
from a node whose session ended, and before this node claims from it, adopt() retries
every job in flight there at once (cluster/scripts/takeover.py), the same way (the
journal read first with exactly_once)."""

from __future__ import annotations

import logging

from actors.lifecycle import Actor, Tick
from actors.ownership import Ownership
from actors.scanner import SlotScanner
from actors.transactions import SlotTransactions
from cluster.errors import SlotFailed
from cluster.model.contract import NO_TIME
from cluster.scripts.facade import Scripts
from cluster.scripts.takeover import EVERY_DEADLINE, retry_dead_owners_claims
from cluster.settings.config import Settings

log = logging.getLogger(__name__)

REAP_LIMIT = 1000


class RetryReaper(Actor):
    name = "retry-reaper"

    def __init__(
        self,
        settings: Settings,
        scripts: Scripts,
        ownership: Ownership,
        scanner: SlotScanner,
        transactions: SlotTransactions | None = None,
    ) -> None:
        super().__init__()
        self.transactions = transactions
        self.settings = settings
        self.scripts = scripts
        self.ownership = ownership
        self.scanner = scanner
        self.retried_total = 0
        self.dead_total = 0
        self.expired_total = 0  # timed out, and a retry would come after their expiry
        self.adopted_total = 0  # dead owners' claims retried when their slot was taken

    def timers(self) -> list[tuple[float, Tick]]:
        return [(self.settings.reap_interval_ms / 1000, self.reap_owned)]

    async def reap_owned(self) -> None:
        """One tick. A Redis error never crashes the reaper: jobs whose deadline passed
        wait in flight until a later tick reaches their Redis node."""
        try:
            failed = await self.reap(self._held())
        except Exception as exc:
            self.warn("reaping failed, will retry: %s", exc)
            return
        if failed:
            self.warn("reaping %d slot(s) failed, will retry: %s", len(failed), failed[0])

    def _held(self) -> list[tuple[int, int]]:
        held = []
        for slot in sorted(self.ownership.owned()):
            try:
                held.append((slot, self.ownership.epoch(slot)))
            except KeyError:
                pass  # the slot moved away meanwhile
        return held

    async def adopt(self, slot: int, epoch: int) -> None:
        """`slot` was just taken, at `epoch`, from a node whose session ended, and this
        node has claimed nothing from it yet: every job in flight there is that node's
        claim. Retry them now rather than after their deadline. Exactly-once: only those
        the journal was read for, the committed ones acked instead (settle_timed_out);
        when it cannot be read, they wait for their deadline. Raises what Redis raised."""
        while True:
            upto_ms = EVERY_DEADLINE
            if self.transactions is not None:
                [claims] = await self.scripts.timed_out_many([slot], EVERY_DEADLINE, REAP_LIMIT)
                if not claims:
                    return
                upto_ms = int(max(deadline for _, deadline in claims))
                if len(claims) == REAP_LIMIT:  # others may share the last deadline
                    upto_ms -= 1
                if not await self.transactions.settle_timed_out(
                    [(slot, epoch)], upto_ms, REAP_LIMIT
                ):
                    return  # logged; the deadline path reads the journal again
            result = await retry_dead_owners_claims(self.scripts, slot, epoch, REAP_LIMIT, upto_ms)
            if result is None:
                return  # taken again since: the new owner's turn
            if isinstance(result, SlotFailed):
                raise result.error
            if result.retried or result.dead or result.expired:
                log.info(
                    "slot %d: %d job(s) its previous owner had claimed when its session "
                    "ended: %d retried now, %d dead, %d expired",
                    slot,
                    result.retried + result.dead + result.expired,
                    result.retried,
                    result.dead,
                    result.expired,
                    extra={"slot": slot},
                )
                self.adopted_total += result.retried
                self.dead_total += result.dead
                self.expired_total += result.expired
            if result.earliest_due_ms != NO_TIME:
                self.scanner.wake(slot, result.earliest_due_ms)
            if not result.more:
                return

    async def reap(self, held: list[tuple[int, int]]) -> list[SlotFailed]:
        """Reap every given (slot, epoch) in one round trip; again for those that hit
        the per-call limit. Returns the slots' failures (the others were reaped)."""
        failures: list[SlotFailed] = []
        s = self.settings
        upto_ms = None
        if self.transactions is not None and held:
            upto_ms = int(self.scanner.redis_now_ms())
            # Only the slots whose journal was read: one slot's failed lookup holds
            # back its own retries, not the others'.
            held = await self.transactions.settle_timed_out(held, upto_ms, REAP_LIMIT)
            await self.transactions.forget_unowned()
        while held:
            results = await self.scripts.reap_many(
                held, REAP_LIMIT, s.retry_backoff_ms, s.retry_backoff_max_ms, upto_ms
            )
            more = []
            for (slot, epoch), result in zip(held, results, strict=True):
                if result is None:
                    self.ownership.lost(slot, epoch)
                    continue
                if isinstance(result, SlotFailed):
                    failures.append(result)  # its Redis node is in trouble: next tick
                    continue
                if result.retried or result.dead or result.expired:
                    log.info(
                        "slot %d: %d in-flight job(s) timed out, %d retried, %d dead, %d expired",
                        slot,
                        result.retried + result.dead + result.expired,
                        result.retried,
                        result.dead,
                        result.expired,
                    )
                    self.retried_total += result.retried
                    self.dead_total += result.dead
                    self.expired_total += result.expired
                if result.earliest_due_ms != NO_TIME:
                    self.scanner.wake(slot, result.earliest_due_ms)
                if result.more:
                    more.append((slot, epoch))
            # Exactly-once: the rest were not looked up in the journal; next tick.
            held = more if upto_ms is None else []
        return failures
