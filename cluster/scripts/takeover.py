"""Retrying at once the jobs a dead node had claimed, when another node takes its slot:
lua/reap.lua with its owner-gone argument, on top of Scripts (cluster/scripts/facade.py).

A claimed job stays in its slot's in-flight set, with a deadline inflight_timeout_ms
after its claim, until it is acked; a node that dies holding claims leaves them there,
and the retry-reaper retries them once the deadline passed. But when a node takes a slot
whose owner's session ended, and has not claimed from it yet, every job in flight there
is the dead owner's and will never be acked by it: they can be retried at once.
"""

from __future__ import annotations

from cluster.errors import SlotFailed
from cluster.scripts.codec import RetryResult, retry_result
from cluster.scripts.facade import Scripts
from cluster.scripts.runner import per_slot

# Above every deadline (ms): Lua compares numbers as doubles, exact below 2**53.
EVERY_DEADLINE = 2**53 - 1


async def retry_dead_owners_claims(
    scripts: Scripts, slot: int, epoch: int, limit: int, upto_ms: int = EVERY_DEADLINE
) -> RetryResult | SlotFailed | None:
    """Retry now (no backoff; dead after max attempts, expired when too late, as the
    reaper does) up to `limit` of the slot's in-flight jobs with a deadline up to
    upto_ms, passed or not. Only for a slot just taken from a node whose session ended,
    before the taker claims from it. None when `epoch` is fenced."""
    args = [epoch, limit, 0, 0, upto_ms, 1]
    [reply] = per_slot(
        await scripts._call_many("reap", [(slot, scripts._retry_keys(slot), args)]), retry_result
    )
    return reply
