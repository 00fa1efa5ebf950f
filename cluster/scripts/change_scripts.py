"""A producer's changes to a scheduled job as async methods (JobChangeScripts, a part of
Scripts): cancel with its tombstone (lua/cancel.lua), taking the tombstone back
(lua/untomb.lua), and reschedule (lua/reschedule.lua).
"""

from __future__ import annotations

from cluster.errors import ReplicationUnconfirmed
from cluster.model.contract import ChangeCode
from cluster.model.keys import KeySpace
from cluster.scripts.codec import CancelStep, cancel_step
from cluster.scripts.runner import ScriptRunner


class JobChangeScripts(ScriptRunner):
    """cancel, untomb, reschedule."""

    keys: KeySpace

    async def cancel(self, slot: int, job_id: str, tomb_ms: int) -> CancelStep:
        """Cancel a job in Redis; on CHANGED and ABSENT a tombstone refuses its adds for
        tomb_ms (see lua/cancel.lua)."""
        k = self.keys.slot(slot)
        keys = [k.delay, k.inflight, k.dead, k.jobs, k.attempts, k.tomb, k.acked, k.expired]
        try:
            reply = await self._call_durable("cancel", slot, keys, [job_id, tomb_ms])
        except ReplicationUnconfirmed as exc:
            exc.result = cancel_step(exc.result)
            raise
        return cancel_step(reply)

    async def untomb(self, slot: int, job_id: str, cancelled: CancelStep) -> bool:
        """Take back the tombstone of `cancelled` (lua/untomb.lua); False when it is no
        longer that cancel's."""
        args = [job_id, cancelled.tomb_ms, cancelled.replaced_ms]
        return bool(await self._call("untomb", [self.keys.slot(slot).tomb], args) == 1)

    async def reschedule(self, slot: int, job_id: str, due_ms: int) -> tuple[ChangeCode, bool]:
        """A new due time for a job; returns (what happened, woke the owner)."""
        k = self.keys.slot(slot)
        keys = k.for_reschedule()
        args = [self.keys.wake_channel, slot, job_id, due_ms]
        try:
            code, woke = await self._call_durable("reschedule", slot, keys, args)
        except ReplicationUnconfirmed as exc:
            exc.result = (ChangeCode(exc.result[0]), exc.result[1] == 1)
            raise
        return ChangeCode(code), woke == 1
