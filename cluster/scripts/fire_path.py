"""The scripts a job's firing runs through, as async methods (FirePathScripts, a part
of Scripts): add (schedule), move (delay → ready), claim (ready → in flight), ack,
nack and reap (retries), fill (lean envelopes' tails), release, and take (a slot's
new epoch). Each script's contract is the header of its .lua file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cluster.errors import ReplicationUnconfirmed, SlotFailed, SlotsFailed
from cluster.model.contract import AddCode, TakeCode
from cluster.model.keys import KeySpace
from cluster.scripts.codec import (
    ClaimResult,
    MoveResult,
    NewJob,
    RetryResult,
    claimed_of,
    move_result,
    retry_result,
)
from cluster.scripts.runner import Call, ScriptRunner, only_reply, per_slot

# Redis Lua's unpack() and argument lists stay well below their limits with this.
ADD_CHUNK = 500

# Reply number → enum member by dict: AddCode(n) per job costs 20 times more, and add
# runs for every job scheduled.
_ADD_CODES = {int(code): code for code in AddCode}.__getitem__


class FirePathScripts(ScriptRunner):
    """add, move, claim, ack, nack, reap, fill, release and take."""

    keys: KeySpace
    payload_lead_ms: int
    envelope_version: int
    check_verified: bool

    async def add(self, slot: int, jobs: list[NewJob]) -> tuple[bool, list[AddCode]]:
        """Add jobs of one slot; returns (woke the owner, an AddCode per job)."""
        try:
            return (await self.add_many({slot: jobs}))[slot]
        except SlotsFailed as exc:
            raise exc.failed[slot].error from None

    async def add_many(
        self, jobs_by_slot: dict[int, list[NewJob]]
    ) -> dict[int, tuple[bool, list[AddCode]]]:
        """Add jobs of many slots in one pipelined round trip, ADD_CHUNK jobs per script
        run. Returns per slot: (woke the owner, an AddCode per job in input order).
        Raises SlotsFailed when some slots' runs failed, after the others were done;
        its `done` holds their results (a slot with a failed chunk is not in it)."""
        calls: list[Call] = []
        version = self.envelope_version
        for slot, jobs in jobs_by_slot.items():
            k = self.keys.slot(slot)
            for start in range(0, len(jobs), ADD_CHUNK):
                args: list[Any] = [self.keys.wake_channel, slot, self.payload_lead_ms]
                for job in jobs[start : start + ADD_CHUNK]:
                    args += (job.job_id, job.due_ms, job.fields_text(version), job.tail)
                calls.append((slot, [k.delay, k.jobs, k.seq, k.tomb, k.acked, k.expired], args))
        results: dict[int, tuple[bool, list[AddCode]]] = {}
        failed: dict[int, SlotFailed] = {}
        for (slot, _, _), reply in zip(calls, await self._call_many("add", calls), strict=True):
            if isinstance(reply, SlotFailed):
                failed[slot] = reply
                continue
            woke, codes = results.get(slot, (False, []))
            codes += map(_ADD_CODES, reply[1:])
            results[slot] = (woke or reply[0] == 1, codes)
        if failed:
            raise SlotsFailed(failed, {s: r for s, r in results.items() if s not in failed})
        return results

    def _move_calls(
        self, slot_epochs: list[tuple[int, int]], limit: int, lead_ms: int
    ) -> list[Call]:
        calls: list[Call] = []
        for slot, epoch in slot_epochs:
            k = self.keys.slot(slot)
            calls.append((slot, [k.owner, k.delay, k.ready], [epoch, limit, lead_ms]))
        return calls

    async def move(self, slot: int, epoch: int, limit: int, lead_ms: int = 0) -> MoveResult:
        """Move the slot's jobs due by Redis TIME + lead_ms (at most limit)."""
        calls = self._move_calls([(slot, epoch)], limit, lead_ms)
        return only_reply(await self._call_many("move", calls), move_result)

    async def move_many(
        self, slot_epochs: list[tuple[int, int]], limit: int, lead_ms: int = 0
    ) -> list[MoveResult | SlotFailed | None]:
        """move for several (slot, epoch) in one round trip; None where fenced,
        SlotFailed where the run failed."""
        calls = self._move_calls(slot_epochs, limit, lead_ms)
        return per_slot(await self._call_many("move", calls), move_result)

    def _claim_calls(
        self,
        slot_epochs: list[tuple[int, int]],
        count: int,
        timeout_ms: int,
        after: Mapping[int, int] | None = None,
    ) -> list[Call]:
        check = "1" if self.check_verified else ""
        return [
            (
                slot,
                self.keys.slot(slot).for_claim(),
                [epoch, count, timeout_ms, check, "" if after is None else after.get(slot, "")],
            )
            for slot, epoch in slot_epochs
        ]

    async def claim(self, slot: int, epoch: int, count: int, timeout_ms: int) -> ClaimResult:
        """Claim up to count ready jobs; returns Redis now, the jobs claimed, and how many
        expired instead (their due time + expires_after had passed)."""
        calls = self._claim_calls([(slot, epoch)], count, timeout_ms)
        return only_reply(await self._call_many("claim", calls), claimed_of)

    async def claim_many(
        self,
        slot_epochs: list[tuple[int, int]],
        count: int,
        timeout_ms: int,
        durable: bool = False,
        after: Mapping[int, int] | None = None,
    ) -> list[ClaimResult | SlotFailed | None]:
        """claim for several (slot, epoch) in one round trip; None where fenced,
        SlotFailed where the run failed. durable (with wait_replicas): raise
        ReplicationUnconfirmed unless replicas confirmed the claims, so that a failover
        cannot hand the same jobs out again. after: per slot, the deadline above which
        in-flight jobs are a lost claim's, handed out again (lua/claim.lua)."""
        calls = self._claim_calls(slot_epochs, count, timeout_ms, after)
        if durable and self.wait_replicas:
            replies, confirmed = await self._pipelined_durable("claim", calls)
            if confirmed < self.wait_replicas:
                raise ReplicationUnconfirmed.of_write(None, confirmed, self.wait_replicas)
            return per_slot(replies, claimed_of)
        return per_slot(await self._call_many("claim", calls), claimed_of)

    async def ack(self, slot: int, job_ids: list[bytes]) -> int:
        try:
            acked, failed = await self.ack_many({slot: job_ids})
        except ReplicationUnconfirmed as exc:
            acked, failed = exc.result
        if failed:
            raise failed[slot].error
        return acked

    async def ack_many(
        self, job_ids_by_slot: dict[int, list[bytes]]
    ) -> tuple[int, dict[int, SlotFailed]]:
        """ack for several slots in one round trip; returns the number acked and the
        slots whose run failed (their jobs stay in flight). With wait_replicas, raises
        ReplicationUnconfirmed (its result: that same pair) when a replica did not confirm."""
        calls: list[Call] = []
        for slot, job_ids in job_ids_by_slot.items():
            k = self.keys.slot(slot)
            keys = [k.inflight, k.delay, k.jobs, k.attempts, k.done, k.acked, k.dead, k.expired]
            calls.append((slot, keys, list(job_ids)))
        if self.wait_replicas:
            replies, confirmed = await self._pipelined_durable("ack", calls)
        else:
            replies, confirmed = await self._call_many("ack", calls), None
        acked = 0
        failed: dict[int, SlotFailed] = {}
        for (slot, _, _), reply in zip(calls, replies, strict=True):
            if isinstance(reply, SlotFailed):
                failed[slot] = reply
            else:
                acked += int(reply)
        if confirmed is not None and confirmed < self.wait_replicas:
            raise ReplicationUnconfirmed.of_write((acked, failed), confirmed, self.wait_replicas)
        return acked, failed

    def _retry_keys(self, slot: int) -> list[str]:
        k = self.keys.slot(slot)
        return [
            k.owner,
            k.inflight,
            k.delay,
            k.dead,
            k.jobs,
            k.attempts,
            k.seq,
            k.done,
            k.expired,
        ]

    async def nack(
        self,
        slot: int,
        epoch: int,
        job_ids: list[bytes],
        error: str,
        backoff_ms: int,
        backoff_max_ms: int,
    ) -> RetryResult:
        args = [epoch, backoff_ms, backoff_max_ms, error, *job_ids]
        replies = await self._call_many("nack", [(slot, self._retry_keys(slot), args)])
        return only_reply(replies, retry_result)

    def _reap_calls(
        self,
        slot_epochs: list[tuple[int, int]],
        limit: int,
        backoff_ms: int,
        backoff_max_ms: int,
        upto_ms: int | None = None,
    ) -> list[Call]:
        upto = [] if upto_ms is None else [upto_ms]
        return [
            (slot, self._retry_keys(slot), [epoch, limit, backoff_ms, backoff_max_ms, *upto])
            for slot, epoch in slot_epochs
        ]

    async def reap(
        self, slot: int, epoch: int, limit: int, backoff_ms: int, backoff_max_ms: int
    ) -> RetryResult:
        calls = self._reap_calls([(slot, epoch)], limit, backoff_ms, backoff_max_ms)
        return only_reply(await self._call_many("reap", calls), retry_result)

    async def reap_many(
        self,
        slot_epochs: list[tuple[int, int]],
        limit: int,
        backoff_ms: int,
        backoff_max_ms: int,
        upto_ms: int | None = None,
    ) -> list[RetryResult | SlotFailed | None]:
        """reap for several (slot, epoch) in one round trip; None where fenced,
        SlotFailed where the run failed. upto_ms: only deadlines up to it."""
        calls = self._reap_calls(slot_epochs, limit, backoff_ms, backoff_max_ms, upto_ms)
        return per_slot(await self._call_many("reap", calls), retry_result)

    async def fill_many(
        self, fills: list[tuple[int, int, list[tuple[bytes, bytes, bytes]]]]
    ) -> list[int | SlotFailed | None]:
        """Give lean envelopes their tails: per (slot, epoch, [(job id, seq, tail)]), one
        fill run, all in one round trip. Returns per run the number filled; None where
        fenced, SlotFailed where the run failed."""
        calls: list[Call] = []
        for slot, epoch, jobs in fills:
            k = self.keys.slot(slot)
            args: list[Any] = [epoch]
            for job_id, seq, tail in jobs:
                args += (job_id, seq, tail)
            calls.append((slot, [k.owner, k.jobs], args))
        return per_slot(await self._call_many("fill", calls), int)

    async def release(
        self, slot: int, epoch: int, job_ids: list[bytes], pause_ms: int
    ) -> tuple[int, int]:
        """Put claimed jobs back, due after pause_ms, their attempt not counted
        (lua/release.lua); returns (how many, their due ms or NO_TIME)."""
        k = self.keys.slot(slot)
        keys = [k.owner, k.inflight, k.delay, k.jobs, k.attempts, k.seq]
        replies = await self._call_many("release", [(slot, keys, [epoch, pause_ms, *job_ids])])
        return only_reply(replies, lambda reply: (int(reply[0]), int(reply[1])))

    async def take(self, slot: int, epoch: int) -> bool:
        """Make epoch the slot's current one; False (TakeCode.STALE) if this epoch or a
        newer one is already there (an epoch is issued once: lua/take.lua)."""
        try:
            code = await self._call_durable("take", slot, [self.keys.slot(slot).owner], [epoch])
        except ReplicationUnconfirmed as exc:
            exc.result = bool(exc.result == TakeCode.TAKEN)
            raise
        return bool(code == TakeCode.TAKEN)
