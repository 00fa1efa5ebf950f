"""Loads the Lua scripts in lua/ and calls them with EVALSHA (reloading on NOSCRIPT).

Each script's contract (KEYS, ARGV, return value) is the header of its .lua file.
The methods here are thin: they name the keys of a slot and convert the replies.
"""

from __future__ import annotations

import asyncio
import importlib.resources
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, ResponseError

from cluster.envelope import make_tail
from cluster.keys import KeySpace
from cluster.redis_conn import RedisClient

if TYPE_CHECKING:
    from cluster.mysql_store import JobRecord

_INCLUDE = re.compile(r"^--@include (\w+)$", re.MULTILINE)
SCRIPT_NAMES = (
    "add", "move", "claim", "ack", "nack", "reap", "cancel", "reschedule", "trim_journal",
    "take", "dead_replay", "dead_purge",
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


class Fenced(RuntimeError):
    """A script refused to act: the caller's ownership epoch of the slot is not current."""

    def __init__(self, slot: int, detail: str = "") -> None:
        super().__init__(f"slot {slot} is fenced: {detail}")
        self.slot = slot


def _is_fenced(reply: object) -> bool:
    return isinstance(reply, ResponseError) and str(reply).startswith("FENCED")


@dataclass(frozen=True)
class NewJob:
    """What the add script needs for one job."""

    job_id: str
    due_ms: int
    max_attempts: int
    tail: bytes  # see cluster/envelope.py

    @classmethod
    def from_record(cls, record: JobRecord) -> NewJob:
        """What the add script needs, rebuilt from a job's MySQL row."""
        tail = make_tail(record.job_id, record.topic, record.biz_id, record.biz_type,
                         record.payload_json.encode())
        return cls(record.job_id, record.due_ms, record.max_attempts, tail)


@dataclass(slots=True)  # not frozen: built per job, and frozen init is slower
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

    async def _call_many(self, name: str, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        """Run one script several times (e.g. for several slots) in one pipelined round
        trip. Each call is still its own atomic script run. A FENCED refusal comes back
        in place as its ResponseError; any other error raises."""
        if len(calls) == 1:
            try:
                return [await self._call(name, *calls[0])]
            except ResponseError as exc:
                if _is_fenced(exc):
                    return [exc]
                raise
        if isinstance(self.redis, RedisCluster):
            # redis-py's cluster pipeline refuses EVALSHA: run the calls concurrently.
            replies = await asyncio.gather(
                *(self._call(name, keys, args) for keys, args in calls), return_exceptions=True
            )
            for reply in replies:
                if isinstance(reply, BaseException) and not _is_fenced(reply):
                    raise reply
            return list(replies)
        script = self._scripts[name]
        for attempt in range(2):
            pipe = self.redis.pipeline(transaction=False)
            for keys, args in calls:
                pipe.evalsha(script.sha, len(keys), *keys, *args)
            replies = await pipe.execute(raise_on_error=False)
            if attempt == 0 and any(isinstance(r, NoScriptError) for r in replies):
                await self.redis.script_load(script.script)  # Redis restarted or flushed
                continue
            for reply in replies:
                if isinstance(reply, Exception) and not _is_fenced(reply):
                    raise reply
            return list(replies)
        raise AssertionError("unreachable")

    async def add(self, slot: int, jobs: list[NewJob]) -> tuple[bool, list[int]]:
        """Add jobs of one slot; returns (woke the owner, per-job status 1/0/-1)."""
        return (await self.add_many({slot: jobs}))[slot]

    async def add_many(
        self, jobs_by_slot: dict[int, list[NewJob]]
    ) -> dict[int, tuple[bool, list[int]]]:
        """Add jobs of many slots in one pipelined round trip, ADD_CHUNK jobs per script
        run. Returns per slot: (woke the owner, per-job status 1 added / 0 already there
        / -1 refused)."""
        calls: list[tuple[list[str], list[Any]]] = []
        owners: list[int] = []
        for slot, jobs in jobs_by_slot.items():
            k = self.keys.slot(slot)
            for start in range(0, len(jobs), ADD_CHUNK):
                args: list[Any] = [self.keys.wake_channel, slot]
                for job in jobs[start : start + ADD_CHUNK]:
                    args += (job.job_id, job.due_ms, job.max_attempts, job.tail)
                calls.append(([k.delay, k.jobs, k.seq, k.tomb, k.acked], args))
                owners.append(slot)
        results: dict[int, tuple[bool, list[int]]] = {}
        for slot, reply in zip(owners, await self._call_many("add", calls), strict=True):
            woke, statuses = results.get(slot, (False, []))
            results[slot] = (woke or reply[0] == 1, statuses + list(reply[1:]))
        return results

    async def move(self, slot: int, epoch: int, limit: int) -> MoveResult:
        result = (await self.move_many([(slot, epoch)], limit))[0]
        if result is None:
            raise Fenced(slot)
        return result

    async def move_many(
        self, slot_epochs: list[tuple[int, int]], limit: int
    ) -> list[MoveResult | None]:
        """move for several (slot, epoch) in one round trip; None where fenced."""
        calls: list[tuple[list[str], list[Any]]] = []
        for slot, epoch in slot_epochs:
            k = self.keys.slot(slot)
            calls.append(([k.owner, k.delay, k.ready], [epoch, limit]))
        return [
            None if _is_fenced(reply)
            else MoveResult(int(reply[0]), int(reply[1]), int(reply[2]), int(reply[3]))
            for reply in await self._call_many("move", calls)
        ]

    async def claim_many(
        self, slot_epochs: list[tuple[int, int]], count: int, timeout_ms: int
    ) -> list[tuple[int, list[Claimed]] | None]:
        """claim for several (slot, epoch) in one round trip; None where fenced."""
        calls: list[tuple[list[str], list[Any]]] = []
        for slot, epoch in slot_epochs:
            k = self.keys.slot(slot)
            calls.append(
                ([k.owner, k.ready, k.inflight, k.jobs, k.attempts], [epoch, count, timeout_ms])
            )
        return [
            None if _is_fenced(reply) else _claimed(reply)
            for reply in await self._call_many("claim", calls)
        ]

    async def ack_many(self, job_ids_by_slot: dict[int, list[bytes]]) -> int:
        """ack for several slots in one round trip; returns the number acked."""
        calls: list[tuple[list[str], list[Any]]] = []
        for slot, job_ids in job_ids_by_slot.items():
            k = self.keys.slot(slot)
            keys = [k.inflight, k.delay, k.jobs, k.attempts, k.done, k.acked, k.dead]
            calls.append((keys, list(job_ids)))
        return sum(int(n) for n in await self._call_many("ack", calls))

    async def read_journals(self, slots: list[int], count: int) -> list[list[bytes]]:
        """The oldest count journal entries of each slot, in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for slot in slots:
            pipe.lrange(self.keys.slot(slot).done, 0, count - 1)
        return [list(entries) for entries in await pipe.execute()]

    async def trim_journals(
        self, trims: dict[int, tuple[int, int, list[str]]], retention_ms: int
    ) -> set[int]:
        """trim_journal for several slots: slot → (epoch, entries recorded, fired job
        ids). Returns the slots where it was fenced (nothing trimmed there)."""
        calls: list[tuple[list[str], list[Any]]] = []
        for slot, (epoch, count, fired_ids) in trims.items():
            k = self.keys.slot(slot)
            calls.append(
                ([k.owner, k.done, k.acked], [epoch, count, retention_ms, *fired_ids])
            )
        replies = await self._call_many("trim_journal", calls)
        return {slot for slot, reply in zip(trims, replies, strict=True) if _is_fenced(reply)}

    async def take(self, slot: int, epoch: int) -> bool:
        """Make epoch the slot's current one; False if a newer epoch is already there."""
        return int(await self._call("take", [self.keys.slot(slot).owner], [epoch])) == 1

    async def claim(
        self, slot: int, epoch: int, count: int, timeout_ms: int
    ) -> tuple[int, list[Claimed]]:
        """Claim up to count ready jobs; returns (Redis now ms, claimed jobs)."""
        result = (await self.claim_many([(slot, epoch)], count, timeout_ms))[0]
        if result is None:
            raise Fenced(slot)
        return result

    async def ack(self, slot: int, job_ids: list[bytes]) -> int:
        return await self.ack_many({slot: job_ids})

    async def _fenced_call(self, name: str, slot: int, keys: list[str], args: list[Any]) -> Any:
        reply = (await self._call_many(name, [(keys, args)]))[0]
        if _is_fenced(reply):
            raise Fenced(slot, str(reply))
        return reply

    def _retry_keys(self, slot: int) -> list[str]:
        k = self.keys.slot(slot)
        return [k.owner, k.inflight, k.delay, k.dead, k.jobs, k.attempts, k.seq, k.done]

    async def nack(
        self, slot: int, epoch: int, job_ids: list[bytes], error: str, backoff_ms: int,
        backoff_max_ms: int,
    ) -> RetryResult:
        reply = await self._fenced_call(
            "nack", slot, self._retry_keys(slot),
            [epoch, backoff_ms, backoff_max_ms, error, *job_ids],
        )
        return RetryResult(int(reply[0]), int(reply[1]), int(reply[2]))

    async def reap(
        self, slot: int, epoch: int, limit: int, backoff_ms: int, backoff_max_ms: int
    ) -> RetryResult:
        result = (await self.reap_many([(slot, epoch)], limit, backoff_ms, backoff_max_ms))[0]
        if result is None:
            raise Fenced(slot)
        return result

    async def reap_many(
        self, slot_epochs: list[tuple[int, int]], limit: int, backoff_ms: int,
        backoff_max_ms: int,
    ) -> list[RetryResult | None]:
        """reap for several (slot, epoch) in one round trip; None where fenced."""
        calls = [(self._retry_keys(slot), [epoch, limit, backoff_ms, backoff_max_ms])
                 for slot, epoch in slot_epochs]
        return [
            None if _is_fenced(reply)
            else RetryResult(int(reply[0]), int(reply[1]), int(reply[2]), reply[3] == 1)
            for reply in await self._call_many("reap", calls)
        ]

    async def read_journal(self, slot: int, count: int) -> list[bytes]:
        """The oldest count journal entries of a slot (left in place until trimmed)."""
        return (await self.read_journals([slot], count))[0]
    async def trim_journal(
        self, slot: int, epoch: int, count: int, fired_ids: list[str], retention_ms: int
    ) -> None:
        if await self.trim_journals({slot: (epoch, count, fired_ids)}, retention_ms):
            raise Fenced(slot)
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
        return [(job_id, int(score), envelope)
                for (job_id, score), envelope in zip(entries, envelopes, strict=True)]

    async def dead_one(self, slot: int, job_id: str) -> tuple[int, bytes] | None:
        """(died ms, envelope) of a dead job, or None if it is not dead."""
        k = self.keys.slot(slot)
        died = await self.redis.zscore(k.dead, job_id)
        envelope: Any = await self.redis.hget(k.jobs, job_id)
        if died is None or envelope is None:
            return None
        return int(died), envelope

    async def dead_replay(self, slot: int, job_ids: list[str]) -> list[bool]:
        """Replay dead jobs of a slot; per job id, whether it was in the dead-letter set
        (and is now due)."""
        k = self.keys.slot(slot)
        replies = await self._call(
            "dead_replay", [k.dead, k.delay, k.jobs, k.attempts, k.seq, k.done],
            [self.keys.wake_channel, slot, *job_ids],
        )
        return [int(reply) == 1 for reply in replies]

    async def dead_purge(self, slot: int, job_ids: list[str]) -> int:
        k = self.keys.slot(slot)
        return int(await self._call("dead_purge", [k.dead, k.jobs, k.attempts], job_ids))

    async def cancel(self, slot: int, job_id: str, tomb_ms: int) -> int:
        k = self.keys.slot(slot)
        keys = [k.delay, k.inflight, k.dead, k.jobs, k.attempts, k.tomb, k.acked]
        return int(await self._call("cancel", keys, [job_id, tomb_ms]))

    async def reschedule(self, slot: int, job_id: str, due_ms: int) -> tuple[int, bool]:
        k = self.keys.slot(slot)
        keys = [k.delay, k.inflight, k.dead, k.jobs, k.seq, k.acked]
        status, woke = await self._call(
            "reschedule", keys, [self.keys.wake_channel, slot, job_id, due_ms]
        )
        return int(status), woke == 1


def _claimed(reply: list[Any]) -> tuple[int, list[Claimed]]:
    """The claim script's reply: (Redis now ms, claimed jobs)."""
    jobs = [Claimed(reply[i], reply[i + 1], int(reply[i + 2])) for i in range(1, len(reply), 3)]
    return int(reply[0]), jobs
