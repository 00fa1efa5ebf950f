"""Putting back the jobs of cancels that failed half-way: lua/uncancel.lua (the client
undoing its own cancel when MySQL could not be reached) and lua/restore.lua (the slot
owner's recovery, actors/tombstones.py), as calls on a Scripts object.

A cancel removes the job from Redis and sets a tombstone first, then records the cancel
in MySQL (cluster/client/job_changes.py). When the MySQL step fails, MySQL still calls
the job waiting; these put it back so that it fires on time instead of at the next full
reconcile pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from cluster.errors import SlotFailed
from cluster.scripts.codec import CancelStep, NewJob
from cluster.scripts.facade import Scripts
from cluster.scripts.runner import Call, per_slot


class RestoreCode(IntEnum):
    """What lua/restore.lua did with one tombstone."""

    GONE = 0  # the tombstone is no longer the one read: unchanged
    RESTORED = 1  # the tombstone removed and the job added
    UNTOMBED = 2  # the tombstone removed only (the job is beyond the horizon, or present)
    YOUNG = 3  # set less than the grace ago: unchanged


@dataclass(frozen=True)
class Restore:
    """One tombstone to take back, and the job (from its MySQL row) to add with it."""

    job_id: str
    tomb_ms: int  # the tombstone's score as read
    job: NewJob
    add: bool  # False: due beyond the Redis horizon, the reconciler loads it in time


async def uncancel(scripts: Scripts, slot: int, job_id: str, step: CancelStep) -> bool:
    """Undo `step` (lua/uncancel.lua): its tombstone taken back and what it removed put
    back. False when the tombstone is no longer that cancel's (nothing changed)."""
    k = scripts.keys.slot(slot)
    keys = [k.tomb, k.delay, k.jobs, k.attempts, k.seq, k.acked, k.expired]
    args = [
        scripts.keys.wake_channel,
        slot,
        job_id,
        step.tomb_ms,
        step.replaced_ms,
        step.envelope,
        step.score,
        step.attempts,
    ]
    return bool(await scripts._call("uncancel", keys, args) == 1)


async def old_tombstones(
    scripts: Scripts, after_ms: dict[int, int | None], upto_ms: int, count: int
) -> dict[int, list[tuple[str, int]]]:
    """Per slot of after_ms, its tombstones scored above after_ms[slot] (None: any) and at
    most upto_ms, lowest first, at most count, with their scores; in one round trip."""
    pipe = scripts.redis.pipeline(transaction=False)
    for slot, after in after_ms.items():
        low = "-inf" if after is None else f"({after}"
        pipe.zrangebyscore(
            scripts.keys.slot(slot).tomb, low, upto_ms, start=0, num=count, withscores=True
        )
    pages = await pipe.execute()
    return {
        slot: [(job_id.decode(), int(score)) for job_id, score in entries]
        for slot, entries in zip(after_ms, pages, strict=True)
    }


async def restore(
    scripts: Scripts,
    slot: int,
    epoch: int,
    restores: list[Restore],
    tomb_lifetime_ms: int,
    grace_ms: int,
) -> list[RestoreCode] | SlotFailed | None:
    """lua/restore.lua for one slot: a RestoreCode per restore; None when fenced,
    SlotFailed when the run failed."""
    k = scripts.keys.slot(slot)
    keys = [k.owner, k.tomb, k.delay, k.jobs, k.seq, k.acked, k.expired]
    args: list[Any] = [
        epoch,
        scripts.keys.wake_channel,
        slot,
        scripts.payload_lead_ms,
        tomb_lifetime_ms,
        grace_ms,
    ]
    for one in restores:
        job = one.job
        fields = job.fields_text(scripts.envelope_version)
        args += (one.job_id, one.tomb_ms, int(one.add), job.due_ms, fields, job.tail)
    calls: list[Call] = [(slot, keys, args)]
    [reply] = per_slot(await scripts._call_many("restore", calls), _codes)
    return reply


def _codes(reply: list[Any]) -> list[RestoreCode]:
    return [RestoreCode(int(code)) for code in reply[1:]]
