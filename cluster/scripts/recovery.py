"""The scripts a node runs to make a Redis that came back without its last writes agree
with MySQL (actors/rollback.py), on top of Scripts (cluster/scripts/facade.py):
lua/watermark.lua, lua/correct.lua and lua/reschedule.lua.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cluster.model.contract import ChangeCode
from cluster.scripts.facade import Fenced, Scripts, SlotFailed
from cluster.scripts.runner import Call, per_slot

# Jobs per correct run: Redis Lua's unpack() and argument lists stay well below their limits.
CORRECT_CHUNK = 500


@dataclass(frozen=True)
class Watermark:
    """A slot's watermark as lua/watermark.lua answered: whether it named this server
    (and was refreshed, or verified), this server's run_id, and the Redis time it held
    (-1: none)."""

    current: bool
    run_id: str
    ms: int


def _watermark(reply: list[Any]) -> Watermark:
    run_id = reply[1].decode() if isinstance(reply[1], bytes) else str(reply[1])
    return Watermark(int(reply[0]) == 1, run_id, int(reply[2]))


async def refresh_watermarks(scripts: Scripts, slots: Iterable[int]) -> dict[int, Watermark]:
    """Refresh each slot's watermark where it names this server; the others' as they
    are. Slots whose run failed (their Redis node down) are left out."""
    calls: list[Call] = [(slot, [scripts.keys.slot(slot).watermark], ["refresh"]) for slot in slots]
    return await _watermarks(scripts, calls)


async def verify_watermarks(scripts: Scripts, corrected: Mapping[int, str]) -> set[int]:
    """Mark each slot complete on the server it was corrected on (slot → run_id), unless
    that server was replaced meanwhile; returns the slots marked."""
    calls: list[Call] = [
        (slot, [scripts.keys.slot(slot).watermark], ["verify", run_id])
        for slot, run_id in corrected.items()
    ]
    return {slot for slot, mark in (await _watermarks(scripts, calls)).items() if mark.current}


async def _watermarks(scripts: Scripts, calls: list[Call]) -> dict[int, Watermark]:
    if not calls:
        return {}
    replies = per_slot(await scripts.call_many("watermark", calls), _watermark)
    return {
        slot: reply
        for (slot, _, _), reply in zip(calls, replies, strict=True)
        if isinstance(reply, Watermark)
    }


async def correct_jobs(
    scripts: Scripts,
    epochs: Mapping[int, int],
    changed: Mapping[int, list[tuple[str, str]]],
    marker_ms: int,
) -> int:
    """Per slot, fenced by its epoch, apply what MySQL says of each job (lua/correct.lua:
    'c' cancelled, 'f' fired, 'w' rescheduled); returns how many jobs were removed or
    taken out of flight. Raises Fenced for a slot no longer the caller's, and the first
    slot's failure (the caller tries again)."""
    calls: list[Call] = []
    for slot, jobs in changed.items():
        k = scripts.keys.slot(slot)
        keys = [k.owner, k.delay, k.inflight, k.jobs, k.attempts, k.tomb, k.acked]
        for start in range(0, len(jobs), CORRECT_CHUNK):
            args: list[object] = [epochs[slot], marker_ms]
            for job_id, kind in jobs[start : start + CORRECT_CHUNK]:
                args += [job_id, kind]
            calls.append((slot, keys, args))
    if not calls:
        return 0
    done = 0
    replies = per_slot(await scripts.call_many("correct", calls), int)
    for (slot, _, _), reply in zip(calls, replies, strict=True):
        if reply is None:
            raise Fenced(slot, "while correcting it")
        if isinstance(reply, SlotFailed):
            raise reply.error
        done += reply
    return done


async def move_due_times(scripts: Scripts, due: Mapping[int, list[tuple[str, int]]]) -> int:
    """Give each (job id, due ms) of each slot the due time MySQL has (the reschedule
    script, without waiting for replicas: MySQL holds the truth); returns how many jobs
    Redis held and moved."""
    calls: list[Call] = []
    for slot, jobs in due.items():
        k = scripts.keys.slot(slot)
        keys = k.for_reschedule()
        calls += [(slot, keys, [scripts.keys.wake_channel, slot, j, ms]) for j, ms in jobs]
    if not calls:
        return 0
    moved = 0
    for reply in await scripts.call_many("reschedule", calls):
        if isinstance(reply, SlotFailed):
            raise reply.error
        moved += int(reply[0]) == ChangeCode.CHANGED
    return moved
