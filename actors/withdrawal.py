"""A node that cannot reach Redis or Kafka gives its slots up, and takes its share back.

ZooKeeper alone decides who holds a slot, and a node that ZooKeeper hears from keeps
its slots for as long as its session lives, even while it cannot do their work. With
store_unreachable_release_ms set (not 0), the membership (actors/membership.py) asks
this class at the start of every pass, using what the store-watch found
(actors/store_watch.py):

* a store unanswered for half the bound is written into this node's member znode
  (`"unreachable": ["redis"]`), and removed from it once it answers again;
* a store unanswered for the whole bound makes the node withdraw, when another member
  is not marked so (if every member is cut off, none could do better, and the slots
  stay where they are): it stops working on every slot at once, releases each one in
  ZooKeeper (owner := null, compare-and-set on its version) and deletes its member
  znode, so the others compute the slot map without it and take its slots. Nothing
  of this waits for Redis or Kafka, nor for the rounds in flight on them: every step
  is a ZooKeeper call bounded by STEP_S, and a late write of the node is fenced (a
  script's epoch in Redis, a slot's transactional id in Kafka);
* withdrawn, the node keeps its session and waits until every store has answered
  every check for the bound again; then it registers as a new member and takes its
  share of the slots back.

A pass that hangs on a store (a take writes the slot's epoch to Redis) is cut short
when the bound passes, so that the withdrawal is not held up by the store it is about.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

import orjson
from aiozk import exc

from actors.store_watch import StoreWatch
from cluster.settings.config import Settings

if TYPE_CHECKING:
    from actors.membership import Membership

log = logging.getLogger(__name__)

STEP_S = 2.0  # one ZooKeeper call of the withdrawal, at most
POLL_S = 0.05  # how often a pass in progress is checked against the bound


def marked_unreachable(data: bytes | None) -> bool:
    """Whether a member's znode data (untrusted) says a store is unreachable to it."""
    try:
        record = orjson.loads(data) if data else None
    except orjson.JSONDecodeError:
        return False
    if not isinstance(record, dict):
        return False
    stores = record.get("unreachable")
    return isinstance(stores, list) and bool(stores)


class Withdrawal:
    """When the node leaves the slot map for want of Redis or Kafka, and when it comes
    back (module docstring). Inert without a watch or with a bound of 0."""

    def __init__(self, settings: Settings, watch: StoreWatch | None) -> None:
        self.bound_s = settings.store_unreachable_release_ms / 1000
        self.watch = watch if self.bound_s > 0 else None
        self.reason: str | None = None  # why the node is withdrawn; None: it is not
        self.withdrawals = 0
        self._marked: tuple[str, ...] = ()
        self._others_fit = True
        self._others_checked_at = -float("inf")

    def cut_off(self) -> list[str]:
        """The stores unanswered for the bound, while the node is a member."""
        if self.watch is None or self.reason is not None:
            return []
        return self.watch.unanswered(self.bound_s)

    async def step(self, m: Membership) -> bool:
        """Mark, withdraw or rejoin as the checks say; True when the membership pass
        must do nothing more (the node is withdrawn)."""
        if self.watch is None:
            return False
        if self.reason is not None:
            if not self.watch.steady(self.bound_s):
                return True
            await m._register()
            log.info(
                "rejoined the cluster as %s: Redis and Kafka answered every check for %g s",
                m.member,
                self.bound_s,
            )
            self.reason, self._marked = None, ()
            return False
        if m.member is None:
            return False  # joining again after its session ended: the usual pass
        failing = tuple(self.watch.unanswered(self.bound_s / 2))
        if failing != self._marked:
            try:
                await self._mark(m, failing)
            except exc.NoNode:
                # The member znode is gone (its session expired while the node was cut
                # off): the pass registers a new one, which starts unmarked. Raising
                # here would stop every pass before that, and the node would never rejoin.
                self._marked = ()
                return False
        cut = self.watch.unanswered(self.bound_s)
        if not cut or not await self._others_can_serve(m):
            return False
        await self._withdraw(m, cut)
        return True

    async def unless_cut_off(self, work: Coroutine[Any, Any, None], timeout_s: float) -> None:
        """Await `work` for at most timeout_s (TimeoutError after that), and cancel it
        as soon as the node is to withdraw."""
        task = asyncio.ensure_future(work)
        try:
            async with asyncio.timeout(timeout_s):
                while not task.done():
                    await asyncio.wait({task}, timeout=POLL_S)
                    if not task.done() and self.cut_off() and self._others_fit:
                        log.warning("membership pass cut short: %s unanswered", self.cut_off())
                        return
            task.result()
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait({task})

    async def _mark(self, m: Membership, failing: tuple[str, ...]) -> None:
        """Write (or clear) the stores this node cannot reach into its member znode."""
        zk = m._zk()
        path = f"{m.root}/members/{m.member}"
        async with asyncio.timeout(STEP_S):
            data = await zk.get_data(path)
            record = orjson.loads(data) if data else {}
            record = record if isinstance(record, dict) else {}
            if failing:
                record["unreachable"] = list(failing)
            else:
                record.pop("unreachable", None)
            await zk.set(path, orjson.dumps(record), -1)
        self._marked = failing
        if failing:
            log.warning("no answer from %s for over %g s", " and ".join(failing), self.bound_s / 2)

    async def _others_can_serve(self, m: Membership) -> bool:
        """Whether another member is not marked unreachable (read at most every half
        bound)."""
        if time.monotonic() - self._others_checked_at < self.bound_s / 2:
            return self._others_fit
        zk = m._zk()
        fit = False
        async with asyncio.timeout(STEP_S):
            for name in await zk.get_children(f"{m.root}/members"):
                if name == m.member:
                    continue
                try:
                    data = await zk.get_data(f"{m.root}/members/{name}")
                except exc.NoNode:
                    continue  # gone meanwhile
                if not marked_unreachable(data):
                    fit = True
                    break
        if not fit and self._others_fit:
            log.warning("every other member is cut off from a store too: this node keeps its slots")
        self._others_fit, self._others_checked_at = fit, time.monotonic()
        return fit

    async def _withdraw(self, m: Membership, stores: list[str]) -> None:
        """Stop, release every slot in ZooKeeper and leave the slot map (no store
        but ZooKeeper involved). Raises if ZooKeeper did not answer: the next pass
        tries again."""
        reason = f"no answer from {' and '.join(stores)} for over {self.bound_s:g} s"
        m.held.drop_all(reason)  # the actors stop working on the slots now
        zk = m._zk()
        released = 0
        for slot in sorted(m._claimed):
            async with asyncio.timeout(STEP_S):
                released += await m._write_released(slot)
        async with asyncio.timeout(STEP_S):
            with contextlib.suppress(exc.NoNode):
                await zk.delete(f"{m.root}/members/{m.member}", force=True)
        log.warning(
            "withdrew from the cluster (member %s): %s; released %d slot(s) to the other "
            "members; rejoins once Redis and Kafka answer every check for %g s",
            m.member,
            reason,
            released,
            self.bound_s,
        )
        m.member = None
        m.assigned = frozenset()
        self.reason = reason
        self.withdrawals += 1
