"""Loads the Lua scripts in lua/ and calls them with EVALSHA (reloading on NOSCRIPT).

Each script's contract (KEYS, ARGV, return value) is the header of its .lua file.
The methods here are thin: they name the keys of a slot and convert the replies.
"""

from __future__ import annotations

import asyncio
import importlib.resources
import re
from collections.abc import Callable
from typing import Any, TypeVar

from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, ResponseError

from cluster.contract import AddCode, ChangeCode, ErrorCode, ReplayCode, TakeCode
from cluster.keys import KeySpace
from cluster.redis_conn import RedisClient
from cluster.script_io import (
    CancelResult,
    Claimed,
    MoveResult,
    NewJob,
    RetryResult,
    cancel_result,
    claimed_of,
    move_result,
    retry_result,
)

# Re-exported: callers import what the scripts take and return from here.
__all__ = [
    "ADD_CHUNK",
    "SCRIPT_NAMES",
    "CancelResult",
    "Claimed",
    "Fenced",
    "MoveResult",
    "NewJob",
    "RetryResult",
    "Scripts",
    "load_source",
    "script_error",
]

T = TypeVar("T")

_INCLUDE = re.compile(r"^--@include (\w+)$", re.MULTILINE)
SCRIPT_NAMES = (
    "add",
    "move",
    "claim",
    "ack",
    "nack",
    "reap",
    "cancel",
    "reschedule",
    "trim_journal",
    "take",
    "dead_replay",
    "dead_purge",
    "untomb",
)

# Redis Lua's unpack() and argument lists stay well below their limits with this.
ADD_CHUNK = 500

# Reply number → enum member by dict: AddCode(n) per job costs 20 times more, and add
# runs for every job scheduled.
_ADD_CODES = {int(code): code for code in AddCode}.__getitem__


def load_source(name: str) -> str:
    """The text of lua/<name>.lua with its --@include lines expanded. An include may
    include others (common.lua needs contract.lua); each is pulled in once, where it
    is first named, so every name is defined once and before its first use."""
    root = importlib.resources.files("lua")
    seen: set[str] = set()

    def include(match: re.Match[str]) -> str:
        included = match.group(1)
        if included in seen:
            return ""
        seen.add(included)
        return _INCLUDE.sub(include, root.joinpath("includes", f"{included}.lua").read_text())

    return _INCLUDE.sub(include, root.joinpath(f"{name}.lua").read_text())


class Fenced(RuntimeError):
    """A script refused to act: the caller's ownership epoch of the slot is not current."""

    def __init__(self, slot: int, detail: str = "") -> None:
        super().__init__(f"slot {slot} is fenced: {detail}")
        self.slot = slot


# Each error code a script may answer with, and the exception it becomes (built from
# the slot and the rest of the error message).
_ERRORS: dict[str, Callable[[int, str], Exception]] = {ErrorCode.FENCED: Fenced}


def script_error(error: ResponseError, slot: int) -> Exception:
    """The Python exception for a script's error reply: the one place that reads them.
    A reply without a known ErrorCode (a bug, Redis out of memory, ...) stays as it is."""
    code, _, detail = str(error).partition(" ")
    known = _ERRORS.get(code)
    return error if known is None else known(slot, detail)


# One script run: (slot, keys, args). The slot names the Fenced a refusal becomes.
Call = tuple[int, list[str], list[Any]]


def _refusal(error: BaseException, slot: int) -> Fenced:
    """A run's error in a batch: a Fenced refusal is kept in place (the other slots'
    runs count); anything else raises."""
    exc = script_error(error, slot) if isinstance(error, ResponseError) else error
    if isinstance(exc, Fenced):
        return exc
    raise exc


def _each(replies: list[Any], convert: Callable[[Any], T]) -> list[T | None]:
    """The converted replies of a batch, None where the slot was fenced."""
    return [None if isinstance(reply, Fenced) else convert(reply) for reply in replies]


def _only(replies: list[Any], convert: Callable[[Any], T]) -> T:
    """The converted reply of a one-slot batch; raises Fenced if it was fenced."""
    [reply] = replies
    if isinstance(reply, Fenced):
        raise reply
    return convert(reply)


class Scripts:
    """One object per Redis connection: every Lua step of delayq as an async method.

    A method for one slot raises Fenced when the script refuses the caller's epoch; its
    `*_many` form answers None for that slot and goes on with the others."""

    def __init__(self, redis: RedisClient, keys: KeySpace) -> None:
        self.redis = redis
        self.keys = keys
        self._scripts: dict[str, AsyncScript] = {
            name: redis.register_script(load_source(name)) for name in SCRIPT_NAMES
        }

    async def _call(self, name: str, keys: list[str], args: list[Any]) -> Any:
        return await self._scripts[name](keys=keys, args=args)

    async def _call_many(self, name: str, calls: list[Call]) -> list[Any]:
        """Run one script several times (e.g. for several slots) in one pipelined round
        trip. Each call is still its own atomic script run. A run refused with an error
        code (script_error) comes back in place as its exception; any other error
        raises."""
        if len(calls) == 1:
            slot, keys, args = calls[0]
            try:
                return [await self._call(name, keys, args)]
            except ResponseError as exc:
                return [_refusal(exc, slot)]
        if isinstance(self.redis, RedisCluster):
            # redis-py's cluster pipeline refuses EVALSHA: run the calls concurrently.
            replies = await asyncio.gather(
                *(self._call(name, keys, args) for _, keys, args in calls),
                return_exceptions=True,
            )
        else:
            replies = await self._pipelined(name, calls)
        return [
            _refusal(reply, slot) if isinstance(reply, BaseException) else reply
            for (slot, _, _), reply in zip(calls, replies, strict=True)
        ]

    async def _pipelined(self, name: str, calls: list[Call]) -> list[Any]:
        """The replies of calls sent in one pipeline, errors in place."""
        script = self._scripts[name]
        for attempt in range(2):
            pipe = self.redis.pipeline(transaction=False)
            for _, keys, args in calls:
                pipe.evalsha(script.sha, len(keys), *keys, *args)
            replies: list[Any] = await pipe.execute(raise_on_error=False)
            if attempt == 0 and any(isinstance(r, NoScriptError) for r in replies):
                await self.redis.script_load(script.script)  # Redis restarted or flushed
                continue
            return replies
        raise AssertionError("unreachable")

    async def add(self, slot: int, jobs: list[NewJob]) -> tuple[bool, list[AddCode]]:
        """Add jobs of one slot; returns (woke the owner, an AddCode per job)."""
        return (await self.add_many({slot: jobs}))[slot]

    async def add_many(
        self, jobs_by_slot: dict[int, list[NewJob]]
    ) -> dict[int, tuple[bool, list[AddCode]]]:
        """Add jobs of many slots in one pipelined round trip, ADD_CHUNK jobs per script
        run. Returns per slot: (woke the owner, an AddCode per job in input order)."""
        calls: list[Call] = []
        for slot, jobs in jobs_by_slot.items():
            k = self.keys.slot(slot)
            for start in range(0, len(jobs), ADD_CHUNK):
                args: list[Any] = [self.keys.wake_channel, slot]
                for job in jobs[start : start + ADD_CHUNK]:
                    args += (job.job_id, job.due_ms, job.max_attempts, job.tail)
                calls.append((slot, [k.delay, k.jobs, k.seq, k.tomb, k.acked], args))
        results: dict[int, tuple[bool, list[AddCode]]] = {}
        for (slot, _, _), reply in zip(calls, await self._call_many("add", calls), strict=True):
            woke, codes = results.get(slot, (False, []))
            codes += map(_ADD_CODES, reply[1:])
            results[slot] = (woke or reply[0] == 1, codes)
        return results

    def _move_calls(self, slot_epochs: list[tuple[int, int]], limit: int) -> list[Call]:
        calls: list[Call] = []
        for slot, epoch in slot_epochs:
            k = self.keys.slot(slot)
            calls.append((slot, [k.owner, k.delay, k.ready], [epoch, limit]))
        return calls

    async def move(self, slot: int, epoch: int, limit: int) -> MoveResult:
        replies = await self._call_many("move", self._move_calls([(slot, epoch)], limit))
        return _only(replies, move_result)

    async def move_many(
        self, slot_epochs: list[tuple[int, int]], limit: int
    ) -> list[MoveResult | None]:
        """move for several (slot, epoch) in one round trip; None where fenced."""
        replies = await self._call_many("move", self._move_calls(slot_epochs, limit))
        return _each(replies, move_result)

    def _claim_calls(
        self, slot_epochs: list[tuple[int, int]], count: int, timeout_ms: int
    ) -> list[Call]:
        calls: list[Call] = []
        for slot, epoch in slot_epochs:
            k = self.keys.slot(slot)
            calls.append(
                (
                    slot,
                    [k.owner, k.ready, k.inflight, k.jobs, k.attempts],
                    [epoch, count, timeout_ms],
                )
            )
        return calls

    async def claim(
        self, slot: int, epoch: int, count: int, timeout_ms: int
    ) -> tuple[int, list[Claimed]]:
        """Claim up to count ready jobs; returns (Redis now ms, claimed jobs)."""
        calls = self._claim_calls([(slot, epoch)], count, timeout_ms)
        return _only(await self._call_many("claim", calls), claimed_of)

    async def claim_many(
        self, slot_epochs: list[tuple[int, int]], count: int, timeout_ms: int
    ) -> list[tuple[int, list[Claimed]] | None]:
        """claim for several (slot, epoch) in one round trip; None where fenced."""
        calls = self._claim_calls(slot_epochs, count, timeout_ms)
        return _each(await self._call_many("claim", calls), claimed_of)

    async def ack(self, slot: int, job_ids: list[bytes]) -> int:
        return await self.ack_many({slot: job_ids})

    async def ack_many(self, job_ids_by_slot: dict[int, list[bytes]]) -> int:
        """ack for several slots in one round trip; returns the number acked."""
        calls: list[Call] = []
        for slot, job_ids in job_ids_by_slot.items():
            k = self.keys.slot(slot)
            keys = [k.inflight, k.delay, k.jobs, k.attempts, k.done, k.acked, k.dead]
            calls.append((slot, keys, list(job_ids)))
        return sum(int(n) for n in await self._call_many("ack", calls))

    def _retry_keys(self, slot: int) -> list[str]:
        k = self.keys.slot(slot)
        return [k.owner, k.inflight, k.delay, k.dead, k.jobs, k.attempts, k.seq, k.done]

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
        return _only(replies, retry_result)

    def _reap_calls(
        self,
        slot_epochs: list[tuple[int, int]],
        limit: int,
        backoff_ms: int,
        backoff_max_ms: int,
    ) -> list[Call]:
        return [
            (slot, self._retry_keys(slot), [epoch, limit, backoff_ms, backoff_max_ms])
            for slot, epoch in slot_epochs
        ]

    async def reap(
        self, slot: int, epoch: int, limit: int, backoff_ms: int, backoff_max_ms: int
    ) -> RetryResult:
        calls = self._reap_calls([(slot, epoch)], limit, backoff_ms, backoff_max_ms)
        return _only(await self._call_many("reap", calls), retry_result)

    async def reap_many(
        self,
        slot_epochs: list[tuple[int, int]],
        limit: int,
        backoff_ms: int,
        backoff_max_ms: int,
    ) -> list[RetryResult | None]:
        """reap for several (slot, epoch) in one round trip; None where fenced."""
        calls = self._reap_calls(slot_epochs, limit, backoff_ms, backoff_max_ms)
        return _each(await self._call_many("reap", calls), retry_result)

    async def read_journal(self, slot: int, count: int) -> list[bytes]:
        """The oldest count journal entries of a slot (left in place until trimmed)."""
        return (await self.read_journals([slot], count))[0]

    async def read_journals(self, slots: list[int], count: int) -> list[list[bytes]]:
        """The oldest count journal entries of each slot, in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for slot in slots:
            pipe.lrange(self.keys.slot(slot).done, 0, count - 1)
        return [list(entries) for entries in await pipe.execute()]

    def _trim_calls(
        self, trims: dict[int, tuple[int, int, list[str]]], retention_ms: int
    ) -> list[Call]:
        calls: list[Call] = []
        for slot, (epoch, count, fired_ids) in trims.items():
            k = self.keys.slot(slot)
            calls.append(
                (slot, [k.owner, k.done, k.acked], [epoch, count, retention_ms, *fired_ids])
            )
        return calls

    async def trim_journal(
        self, slot: int, epoch: int, count: int, fired_ids: list[str], retention_ms: int
    ) -> None:
        calls = self._trim_calls({slot: (epoch, count, fired_ids)}, retention_ms)
        _only(await self._call_many("trim_journal", calls), int)

    async def trim_journals(
        self, trims: dict[int, tuple[int, int, list[str]]], retention_ms: int
    ) -> set[int]:
        """trim_journal for several slots: slot → (epoch, entries recorded, fired job
        ids). Returns the slots where it was fenced (nothing trimmed there)."""
        replies = await self._call_many("trim_journal", self._trim_calls(trims, retention_ms))
        return {
            slot for slot, reply in zip(trims, replies, strict=True) if isinstance(reply, Fenced)
        }

    async def take(self, slot: int, epoch: int) -> bool:
        """Make epoch the slot's current one; False (TakeCode.STALE) if a newer epoch is
        already there."""
        code = await self._call("take", [self.keys.slot(slot).owner], [epoch])
        return bool(code == TakeCode.TAKEN)

    async def dead_page(
        self, slot: int, start: int, count: int
    ) -> list[tuple[bytes, int, bytes | None]]:
        """Dead jobs of a slot by time of death: (job id, died ms, envelope)."""
        k = self.keys.slot(slot)
        entries: list[Any] = await self.redis.zrange(
            k.dead, start, start + count - 1, withscores=True
        )
        if not entries:
            return []
        envelopes: list[Any] = await self.redis.hmget(k.jobs, [job_id for job_id, _ in entries])
        return [
            (job_id, int(score), envelope)
            for (job_id, score), envelope in zip(entries, envelopes, strict=True)
        ]

    async def dead_one(self, slot: int, job_id: str) -> tuple[int, bytes] | None:
        """(died ms, envelope) of a dead job, or None if it is not dead."""
        k = self.keys.slot(slot)
        died = await self.redis.zscore(k.dead, job_id)
        envelope: Any = await self.redis.hget(k.jobs, job_id)
        if died is None or envelope is None:
            return None
        return int(died), envelope

    async def dead_replay(self, slot: int, job_ids: list[str]) -> list[ReplayCode]:
        """Replay dead jobs of a slot (they are due now); a ReplayCode per job id."""
        k = self.keys.slot(slot)
        replies = await self._call(
            "dead_replay",
            [k.dead, k.delay, k.jobs, k.attempts, k.seq, k.done],
            [self.keys.wake_channel, slot, *job_ids],
        )
        return [ReplayCode(reply) for reply in replies]  # an operator's few hundred

    async def dead_purge(self, slot: int, job_ids: list[str]) -> int:
        k = self.keys.slot(slot)
        return int(await self._call("dead_purge", [k.dead, k.jobs, k.attempts], job_ids))

    async def cancel(self, slot: int, job_id: str, tomb_ms: int) -> CancelResult:
        """Cancel a job in Redis; on CHANGED and ABSENT a tombstone refuses its adds for
        tomb_ms (see lua/cancel.lua)."""
        k = self.keys.slot(slot)
        keys = [k.delay, k.inflight, k.dead, k.jobs, k.attempts, k.tomb, k.acked]
        return cancel_result(await self._call("cancel", keys, [job_id, tomb_ms]))

    async def untomb(self, slot: int, job_id: str, cancelled: CancelResult) -> bool:
        """Take back the tombstone of `cancelled` (lua/untomb.lua); False when it is no
        longer that cancel's."""
        args = [job_id, cancelled.tomb_ms, cancelled.replaced_ms]
        return bool(await self._call("untomb", [self.keys.slot(slot).tomb], args) == 1)

    async def reschedule(self, slot: int, job_id: str, due_ms: int) -> tuple[ChangeCode, bool]:
        """A new due time for a job; returns (what happened, woke the owner)."""
        k = self.keys.slot(slot)
        keys = [k.delay, k.inflight, k.dead, k.jobs, k.seq, k.acked]
        code, woke = await self._call(
            "reschedule", keys, [self.keys.wake_channel, slot, job_id, due_ms]
        )
        return ChangeCode(code), woke == 1
