"""How delayq runs its Lua scripts (lua/): loading them with their includes, EVALSHA
(reloading on NOSCRIPT), several runs for several slots in one round trip, and the
writes that wait for replicas. cluster/scripts/facade.py names each script's keys and
arguments on top of this.

A batch of runs never fails as a whole for one slot's sake: each run's error comes back
in its place, as Fenced (the script refused the caller's epoch) or SlotFailed (the run
failed: its Redis node down, failing over, loading), so one failing Redis Cluster
master never undoes or holds back the work of the slots on the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.resources
import os
import re
import traceback
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from redis.asyncio.cluster import ClusterNode, PipelineCommand, RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import (
    AskError,
    MovedError,
    NoScriptError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import (
    ConnectionError as RedisConnectionError,
)
from redis.exceptions import (
    TimeoutError as RedisTimeoutError,
)

from cluster.connections.redis_conn import CLUSTER_MAX_CONNECTIONS, POOL_WAIT_S, RedisClient
from cluster.errors import (
    Fenced,
    RedisRestarted,
    SlotFailed,
    SlotsFailed,
)
from cluster.model.contract import ErrorCode
from cluster.scripts.wait_fallback import (
    MYSQL_CONFIRMED,
    FallbackNotes,
    replicas_attached,
    replicas_of,
    unconfirmed,
)

T = TypeVar("T")

# Script runs one cluster client has under way at once: well below the connections
# redis-py allows per node, so it never fails a call for want of one.
CLUSTER_CALLS = CLUSTER_MAX_CONNECTIONS // 4

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
    "fill",
    "release",
    "uncancel",
    "restore",
    "correct",
    "watermark",
)


def load_source(name: str) -> str:
    """The text of lua/<name>.lua with its --@include lines expanded. An include may
    include others (common.lua needs contract.lua); each is pulled in once, where it
    is first named, so every name is defined once and before its first use."""
    root = importlib.resources.files("cluster.lua")
    seen: set[str] = set()

    def include(match: re.Match[str]) -> str:
        included = match.group(1)
        if included in seen:
            return ""
        seen.add(included)
        return _INCLUDE.sub(include, root.joinpath("includes", f"{included}.lua").read_text())

    return _INCLUDE.sub(include, root.joinpath(f"{name}.lua").read_text())


# Each error code a script may answer with, and the exception it becomes (built from
# the slot and the rest of the error message).
_ERRORS: dict[str, Callable[[int, str], Exception]] = {
    ErrorCode.FENCED: Fenced,
    ErrorCode.RESTARTED: RedisRestarted,
}


def script_error(error: ResponseError, slot: int) -> Exception:
    """The Python exception for a script's error reply: the one place that reads them.
    A reply without a known ErrorCode (a bug, Redis out of memory, ...) stays as it is."""
    code, _, detail = str(error).partition(" ")
    known = _ERRORS.get(code)
    return error if known is None else known(slot, detail)


# One script run: (slot, keys, args). The slot names the Fenced a refusal becomes.
Call = tuple[int, list[str], list[Any]]


def _in_place(error: BaseException, slot: int) -> Fenced | SlotFailed:
    """A run's error in a batch, kept in place so the other slots' runs count: a
    refusal (Fenced), or SlotFailed for anything else."""
    if isinstance(error, Exception):
        exc = script_error(error, slot) if isinstance(error, ResponseError) else error
        return exc if isinstance(exc, Fenced) else SlotFailed(slot, exc)
    raise error  # CancelledError, KeyboardInterrupt: never swallowed


def per_slot(replies: list[Any], convert: Callable[[Any], T]) -> list[T | SlotFailed | None]:
    """The converted replies of a batch: None where the slot was fenced, SlotFailed
    where its run failed."""
    return [
        None
        if isinstance(reply, Fenced)
        else reply
        if isinstance(reply, SlotFailed)
        else convert(reply)
        for reply in replies
    ]


def every_reply(replies: list[Any], calls: list[Call]) -> list[Any]:
    """The replies of a batch whose caller needs every run: raises SlotsFailed (after the
    others were done) when some failed; Fenced replies stay in place."""
    failed = {
        call[0]: reply
        for call, reply in zip(calls, replies, strict=True)
        if isinstance(reply, SlotFailed)
    }
    if failed:
        raise SlotsFailed(failed)
    return replies


def only_reply(replies: list[Any], convert: Callable[[Any], T]) -> T:
    """The converted reply of a one-slot batch; raises Fenced if it was fenced, and the
    driver's own exception if the run failed."""
    [reply] = replies
    if isinstance(reply, Fenced):
        raise reply
    if isinstance(reply, SlotFailed):
        raise reply.error
    return convert(reply)


# Redirections a durable call follows itself: the slot moved to another node (a
# failover, a reshard), so the WAIT must go to that node's connection too.
_REDIRECTED = (MovedError, AskError, TryAgainError)


def _node_of(redis: RedisCluster, key: str) -> ClusterNode:
    """The master serving `key` in the client's slot map."""
    node = redis.get_node_from_key(key)
    if node is None:
        raise SlotNotCoveredError(f"no Redis node serves the hash slot of {key}")
    return node


@contextlib.contextmanager
def driver_errors() -> Iterator[None]:
    """Turns the errors redis-py's cluster client raises from inside itself while a
    failover closes its connections (AttributeError: 'NoneType' object has no attribute
    'writelines'; RuntimeError: unable to perform operation on a closed transport) into
    the ConnectionError they stand for, which callers retry like any other."""
    try:
        yield
    except (AttributeError, RuntimeError) as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        if frames and f"{os.sep}redis{os.sep}" in frames[-1].filename:
            raise RedisConnectionError(f"connection lost in a topology change: {exc}") from exc
        raise


class ScriptRunner:
    """Runs the scripts of lua/ on one Redis client (a single Redis or a cluster).

    With wait_replicas > 0 the durable runs (call_durable, pipelined_durable) are
    followed by WAIT on the same connection: they return once that many replicas
    have the write, or raise ReplicationUnconfirmed after wait_timeout_ms. With
    wait_fallback "mysql", a cancel or reschedule on a master with no replica attached
    at all returns instead: MySQL's record of it confirms it (docs/cluster.md)."""

    def __init__(
        self,
        redis: RedisClient,
        *,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 500,
    ) -> None:
        self.redis = redis
        self._room = asyncio.Semaphore(CLUSTER_CALLS) if isinstance(redis, RedisCluster) else None
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = wait_timeout_ms
        self.wait_fallback = "raise"  # Settings.redis_wait_fallback
        self.fallback_notes = FallbackNotes()
        self._scripts: dict[str, AsyncScript] = {
            name: redis.register_script(load_source(name)) for name in SCRIPT_NAMES
        }

    async def _call_durable(self, name: str, slot: int, keys: list[str], args: list[Any]) -> Any:
        """Run one script whose effect backs a promise. With wait_replicas, WAIT goes in
        the same pipeline, so on the same connection (WAIT counts that connection's
        writes), to the node that ran the script; ReplicationUnconfirmed when too few replicas
        confirmed in time."""
        if self.wait_replicas == 0:
            try:
                return await self._call(name, keys, args)
            except ResponseError as exc:
                raise script_error(exc, slot) from None
        script = self._scripts[name]
        last: Exception | None = None
        fallback = self.wait_fallback == "mysql" and name in MYSQL_CONFIRMED
        for attempt in range(4):
            # execute_command, not pipe.evalsha: redis-py's cluster pipeline blocks the
            # method but sends the command like any other keyed one.
            evalsha = ("EVALSHA", script.sha, len(keys), *keys, *args)
            with driver_errors():
                node = (
                    _node_of(self.redis, keys[0]) if isinstance(self.redis, RedisCluster) else None
                )
            where = "" if node is None else node.name
            # On a master last seen without a replica, INFO says whether one attached
            # since; the WAIT would only wait out its timeout.
            probe = fallback and where in self.fallback_notes.replicaless
            wait = (
                ("INFO", "replication")
                if probe
                else ("WAIT", self.wait_replicas, self.wait_timeout_ms)
            )
            with driver_errors():
                if node is not None:
                    # Both on one connection of that node, sent once: redis-py's cluster
                    # pipeline sends again what a lost connection did not answer, the
                    # script to the slot's new master but the WAIT to any node, where a
                    # connection without writes counts as confirmed at once.
                    sent = [PipelineCommand(0, *evalsha), PipelineCommand(1, *wait)]
                    try:
                        await node.execute_pipeline(sent)
                    except (RedisConnectionError, RedisTimeoutError) as exc:
                        last = exc  # the node is gone: learn the new slot map, try again
                        with contextlib.suppress(Exception):
                            await self.redis.exists(keys[0])
                        await asyncio.sleep(0.05 * attempt)
                        continue
                    reply, replicas = sent[0].result, sent[1].result
                else:
                    pipe = self.redis.pipeline(transaction=False)
                    pipe.execute_command(*evalsha)
                    pipe.execute_command(*wait)
                    reply, replicas = await pipe.execute(raise_on_error=False)
            if isinstance(reply, NoScriptError):
                await self.redis.script_load(script.script)  # Redis restarted or flushed
                last = reply
                continue
            if isinstance(reply, _REDIRECTED):
                # A keyed read through the client's own path learns the new slot map.
                await self.redis.exists(keys[0])
                await asyncio.sleep(0.05 * attempt)
                last = reply
                continue
            if isinstance(reply, ResponseError):
                raise script_error(reply, slot)
            if isinstance(reply, Exception):
                raise reply
            if probe:
                attached, confirmed = replicas_attached(replicas), 0
            else:
                confirmed = replicas if isinstance(replicas, int) else 0
                if confirmed >= self.wait_replicas:
                    return reply
                attached = await replicas_of(self.redis, node)
            if attached == 0 and fallback:
                self.fallback_notes.confirmed(where)
                return reply
            self.fallback_notes.replicaless.discard(where)
            raise unconfirmed(reply, confirmed, self.wait_replicas, attached, where)
        assert last is not None
        raise last

    async def _call(self, name: str, keys: list[str], args: list[Any]) -> Any:
        with driver_errors():
            if self._room is None:
                return await self._scripts[name](keys=keys, args=args)
            # redis-py's cluster client fails a call when a node's connections are all
            # in use; here callers past CLUSTER_CALLS wait for room instead (POOL_WAIT_S
            # at most, then TimeoutError), as they wait for a single Redis's pool.
            async with asyncio.timeout(POOL_WAIT_S):
                await self._room.acquire()
            try:
                return await self._scripts[name](keys=keys, args=args)
            finally:
                self._room.release()

    async def call_many(self, name: str, calls: list[Call]) -> list[Any]:
        """_call_many, for the scripts run outside the facade (cluster/scripts/recovery.py)."""
        return await self._call_many(name, calls)

    async def _call_many(self, name: str, calls: list[Call]) -> list[Any]:
        """Run one script several times (e.g. for several slots) in one pipelined round
        trip. Each call is still its own atomic script run. A run's error comes back in
        place: Fenced for a refusal (script_error), SlotFailed for anything else (its
        Redis node down or failing over), so one failing node never undoes the work the
        other slots' runs did."""
        replies: list[Any]
        if len(calls) == 1:
            _, keys, args = calls[0]
            try:
                replies = [await self._call(name, keys, args)]
            except Exception as exc:
                replies = [exc]
        elif isinstance(self.redis, RedisCluster):
            # redis-py's cluster pipeline refuses EVALSHA: run the calls concurrently.
            replies = await asyncio.gather(
                *(self._call(name, keys, args) for _, keys, args in calls),
                return_exceptions=True,
            )
        else:
            try:
                replies = await self._pipelined(name, calls)
            except Exception as exc:  # one connection: every run failed alike
                replies = [exc] * len(calls)
        return [
            _in_place(reply, slot) if isinstance(reply, BaseException) else reply
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

    async def _pipelined_durable(self, name: str, calls: list[Call]) -> tuple[list[Any], int]:
        """Every call in one pipeline, then WAIT on each node that ran some (the same
        connections: WAIT counts that connection's writes). Returns the replies (Fenced
        or SlotFailed in place) and the fewest replicas any node confirmed."""
        script = self._scripts[name]
        wait = ("WAIT", self.wait_replicas, self.wait_timeout_ms)
        for attempt in range(2):
            try:
                if isinstance(self.redis, RedisCluster):
                    replies = await self._on_nodes(self.redis, script.sha, calls, wait)
                else:
                    pipe = self.redis.pipeline(transaction=False)
                    for _, keys, args in calls:
                        pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
                    pipe.execute_command(*wait)
                    replies = await pipe.execute(raise_on_error=False)
            except Exception as exc:  # the whole round trip failed
                return [SlotFailed(slot, exc) for slot, _, _ in calls], 0
            runs, waits = replies[: len(calls)], replies[len(calls) :]
            if attempt == 0 and any(isinstance(r, NoScriptError) for r in runs):
                await self.redis.script_load(script.script)  # Redis restarted or flushed
                continue
            confirmed = min((w if isinstance(w, int) else 0 for w in waits), default=0)
            return [
                _in_place(reply, slot) if isinstance(reply, BaseException) else reply
                for (slot, _, _), reply in zip(calls, runs, strict=True)
            ], confirmed
        raise AssertionError("unreachable")

    async def _on_nodes(
        self, redis: RedisCluster, sha: str, calls: list[Call], wait: tuple[Any, ...]
    ) -> list[Any]:
        """The replies of `calls` (EVALSHA of `sha`), then of a `wait` on each node that
        ran some. Each node's share goes on one of its connections, sent once, never
        again by redis-py (see _call_durable); a node that cannot be reached gets its
        error in place of its replies, and the client learns the new slot map."""
        by_node: dict[str, tuple[ClusterNode, list[int]]] = {}
        with driver_errors():
            for index, (_, keys, _) in enumerate(calls):
                node = _node_of(redis, keys[0])
                by_node.setdefault(node.name, (node, []))[1].append(index)

        async def send(node: ClusterNode, indexes: list[int]) -> list[PipelineCommand]:
            sent = [
                PipelineCommand(i, "EVALSHA", sha, len(calls[i][1]), *calls[i][1], *calls[i][2])
                for i in indexes
            ]
            sent.append(PipelineCommand(-1, *wait))
            try:
                with driver_errors():
                    await node.execute_pipeline(sent)
            except Exception as exc:
                for command in sent:
                    command.result = exc
            return sent

        runs: list[Any] = [None] * len(calls)
        waits: list[Any] = []
        for sent in await asyncio.gather(*(send(n, ix) for n, ix in by_node.values())):
            for command in sent[:-1]:
                runs[command.position] = command.result
            waits.append(sent[-1].result)
        lost = (RedisConnectionError, RedisTimeoutError, *_REDIRECTED)
        for (_, keys, _), reply in zip(calls, runs, strict=True):
            if isinstance(reply, lost):
                with contextlib.suppress(Exception):  # a keyed call learns the new slot map
                    await redis.exists(keys[0])
                break
        return runs + waits
