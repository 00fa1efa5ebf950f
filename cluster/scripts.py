"""Loads the Lua scripts in lua/ and calls them with EVALSHA (reloading on NOSCRIPT).

Each script's contract (KEYS, ARGV, return value) is the header of its .lua file.
The methods here are thin: they name the keys of a slot and convert the replies.
"""

from __future__ import annotations

import importlib.resources
import re
from dataclasses import dataclass
from typing import Any

from redis.commands.core import AsyncScript

from cluster.keys import KeySpace
from cluster.redis_conn import RedisClient

_INCLUDE = re.compile(r"^--@include (\w+)$", re.MULTILINE)
SCRIPT_NAMES = (
    "add", "move", "claim", "ack", "nack", "reap", "cancel", "reschedule", "trim_journal",
)

# Redis Lua's unpack() and argument lists stay well below their limits with this.
ADD_CHUNK = 500


def load_source(name: str) -> str:
    """The text of lua/<name>.lua with its --@include lines expanded."""
    root = importlib.resources.files("lua")
    text = root.joinpath(f"{name}.lua").read_text()

    def include(match: re.Match[str]) -> str:
        return root.joinpath("includes", f"{match.group(1)}.lua").read_text()

    return _INCLUDE.sub(include, text)


@dataclass(frozen=True)
class NewJob:
    """What the add script needs for one job."""

    job_id: str
    due_ms: int
    max_attempts: int
    tail: bytes  # see cluster/envelope.py


@dataclass(frozen=True)
class Claimed:
    job_id: bytes
    envelope: bytes
    attempt: int


@dataclass(frozen=True)
class MoveResult:
    moved: int
    next_due_ms: int  # -1 when the slot is empty
    now_ms: int
    ready: int  # length of the ready list after the move


@dataclass(frozen=True)
class RetryResult:
    retried: int
    dead: int
    earliest_due_ms: int  # -1 when nothing was retried
    more: bool = False


class Scripts:
    """One object per Redis connection: every Lua step of delayq as an async method."""

    def __init__(self, redis: RedisClient, keys: KeySpace) -> None:
        self.redis = redis
        self.keys = keys
        self._scripts: dict[str, AsyncScript] = {
            name: redis.register_script(load_source(name)) for name in SCRIPT_NAMES
        }

    async def _call(self, name: str, keys: list[str], args: list[Any]) -> Any:
        return await self._scripts[name](keys=keys, args=args)

    async def add(self, slot: int, jobs: list[NewJob]) -> tuple[bool, list[int]]:
        """Add jobs of one slot; returns (woke the owner, per-job status 1/0/-1)."""
        k = self.keys.slot(slot)
        woke = False
        statuses: list[int] = []
        for start in range(0, len(jobs), ADD_CHUNK):
            args: list[Any] = [self.keys.wake_channel, slot]
            for job in jobs[start : start + ADD_CHUNK]:
                args += (job.job_id, job.due_ms, job.max_attempts, job.tail)
            reply = await self._call("add", [k.delay, k.jobs, k.seq, k.tomb, k.acked], args)
            woke = woke or reply[0] == 1
            statuses += reply[1:]
        return woke, statuses

    async def move(self, slot: int, limit: int) -> MoveResult:
        k = self.keys.slot(slot)
        moved, next_due, now, ready = await self._call("move", [k.delay, k.ready], [limit])
        return MoveResult(int(moved), int(next_due), int(now), int(ready))

    async def claim(self, slot: int, count: int, timeout_ms: int) -> tuple[int, list[Claimed]]:
        """Claim up to count ready jobs; returns (Redis now ms, claimed jobs)."""
        k = self.keys.slot(slot)
        reply = await self._call(
            "claim", [k.ready, k.inflight, k.jobs, k.attempts], [count, timeout_ms]
        )
        claimed = [
            Claimed(reply[i], reply[i + 1], int(reply[i + 2])) for i in range(1, len(reply), 3)
        ]
        return int(reply[0]), claimed

    async def ack(self, slot: int, job_ids: list[bytes]) -> int:
        k = self.keys.slot(slot)
        return int(
            await self._call(
                "ack", [k.inflight, k.delay, k.jobs, k.attempts, k.done, k.acked, k.dead], job_ids
            )
        )

    def _retry_keys(self, slot: int) -> list[str]:
        k = self.keys.slot(slot)
        return [k.inflight, k.delay, k.dead, k.jobs, k.attempts, k.seq, k.done]

    async def nack(
        self, slot: int, job_ids: list[bytes], error: str, backoff_ms: int, backoff_max_ms: int
    ) -> RetryResult:
        reply = await self._call(
            "nack", self._retry_keys(slot), [backoff_ms, backoff_max_ms, error, *job_ids]
        )
        return RetryResult(int(reply[0]), int(reply[1]), int(reply[2]))

    async def reap(
        self, slot: int, limit: int, backoff_ms: int, backoff_max_ms: int
    ) -> RetryResult:
        reply = await self._call(
            "reap", self._retry_keys(slot), [limit, backoff_ms, backoff_max_ms]
        )
        return RetryResult(int(reply[0]), int(reply[1]), int(reply[2]), reply[3] == 1)

    async def read_journal(self, slot: int, count: int) -> list[bytes]:
        """The oldest count journal entries of a slot (left in place until trimmed)."""
        entries = await self.redis.lrange(self.keys.slot(slot).done, 0, count - 1)
        return [entry if isinstance(entry, bytes) else entry.encode() for entry in entries]

    async def trim_journal(self, slot: int, count: int, fired_ids: list[str]) -> None:
        k = self.keys.slot(slot)
        await self._call("trim_journal", [k.done, k.acked], [count, *fired_ids])

    async def cancel(self, slot: int, job_id: str, tomb_ms: int) -> int:
        k = self.keys.slot(slot)
        keys = [k.delay, k.ready, k.inflight, k.dead, k.jobs, k.attempts, k.tomb, k.acked]
        return int(await self._call("cancel", keys, [job_id, tomb_ms]))

    async def reschedule(self, slot: int, job_id: str, due_ms: int) -> tuple[int, bool]:
        k = self.keys.slot(slot)
        keys = [k.delay, k.ready, k.inflight, k.dead, k.jobs, k.seq, k.acked]
        status, woke = await self._call(
            "reschedule", keys, [self.keys.wake_channel, slot, job_id, due_ms]
        )
        return int(status), woke == 1
