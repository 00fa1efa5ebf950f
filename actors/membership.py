"""ZooKeeper membership and fenced slot ownership: which slots a node holds (HeldSlots).

Layout under the cluster root, <zk_root>/<key_prefix>:

    config            {"slots": N}, written once by the first node; a node started with
                      another slot count refuses to join
    members/m-<seq>   one ephemeral sequential znode per live node (its session)
    slots/<n>         one persistent znode per slot: {"owner": member or null,
                      "epoch": the epoch of its last take}

With zk_auth every one of them is writable by that digest user only
(cluster/connections/zk_conn.py), and the node checks that it is so: it refuses to start
when one it relies on was created or changed by someone else, and refuses a slot whose
znode was re-created with another ACL. Without zk_auth they are open to anyone.

Every member computes the same slot map from the live members (actors/assignment.py).
Hand-off is two-sided, so a slot is never worked on by two nodes at once:

* the old owner stops scanning, moving and claiming the slot, waits for its rounds in
  flight to be acked, then releases it (owner := null, a compare-and-set on the
  version it holds);
* the new owner takes it only when it is released or its owner is no longer a live
  member (session expired): owner := itself and a new epoch, compare-and-set, then it
  writes the epoch to the slot's owner key in Redis (lua/take.lua). Taken from a dead
  owner, the slot's jobs in flight are all that owner's claims: `adopt` (the reaper's)
  retries them before the node works on the slot, rather than at their deadline.

An epoch never repeats (docs/cluster.md#fencing): a take's epoch is one more than the
largest of the slot znode's last-modified zxid (ZooKeeper's transaction id, which no
client can reset, and which grows past every earlier epoch even when the znode is
deleted and re-created), the epoch in its data and the epoch in Redis; take.lua refuses
an epoch that is not greater than the one Redis holds.

From then on every script that acts as the owner carries the epoch and Redis refuses an
older one (lua/includes/fence.lua). A node whose session expired while it kept
running, was paused or partitioned, is fenced the moment the new owner takes the slot,
even before it notices. When its session is lost, or ZooKeeper has not answered it for
most of the session timeout, a node drops every slot at once and rejoins with a new
session; until then the same bound is its lease (actors/ownership.py), which its actors
check before each step, so a node waking from a freeze acts on nothing, even where
Redis lost the epochs that would fence it. A node that ZooKeeper hears from but that
cannot reach Redis or Kafka gives its slots up to the other members and leaves the slot
map until both answer again (actors/withdrawal.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable

import orjson
from aiozk import WatchEvent, ZKClient, exc
from aiozk.protocol.stat import Stat
from aiozk.states import States

from actors.assignment import assign
from actors.cluster_layout import ensure_layout
from actors.lifecycle import Actor, Tick
from actors.ownership import HeldSlots
from actors.withdrawal import Withdrawal
from cluster.connections.zk_conn import (
    acl_problem,
    check_acls,
    make_zk,
    no_auth_error,
    read_acl,
    unsafe_acl_error,
)
from cluster.errors import ReplicationUnconfirmed
from cluster.scripts.facade import Scripts
from cluster.settings.config import Settings

log = logging.getLogger(__name__)

RECONCILE_INTERVAL_S = 0.2
WATCHDOG_INTERVAL_S = 0.05
# Without an answer from ZooKeeper for this share of the session timeout, a node can no
# longer be sure its session is alive, so it stops working on its slots.
SUSPEND_GIVE_UP = 0.75
# Lua numbers are doubles: an epoch must stay below 2**53 to compare exactly in Redis.
MAX_EPOCH = 2**53 - 1


def _int(value: object) -> int:
    """An epoch read from a znode's data; 0 for anything that is not an integer."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def metrics_url(settings: Settings) -> str | None:
    """Where this node serves /metrics, as `delayq top` reaches it; None when off."""
    if not settings.metrics_port:
        return None
    host = settings.metrics_host
    if host in ("", "0.0.0.0", "::"):
        host = socket.gethostname()  # every interface: the name others know it by
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.metrics_port}/metrics"


class Membership(Actor):
    """Joins the cluster and keeps this node's share of slots in `held`, the HeldSlots
    the node's actors read.

    on_acquired(slot) is called when this node took a slot; quiesce(slot) returns when
    no work on a slot this node is giving up is in flight any more (the dispatcher's
    rounds), so that the release never happens under it.
    """

    name = "membership"

    def __init__(
        self,
        settings: Settings,
        scripts: Scripts,
        held: HeldSlots,
        *,
        on_acquired: Callable[[int], None],
        quiesce: Callable[[int], Awaitable[None]],
        adopt: Callable[[int, int], Awaitable[None]] | None = None,
        withdrawal: Withdrawal | None = None,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.scripts = scripts
        self.held = held
        self.on_acquired = on_acquired
        self.quiesce = quiesce
        self.adopt = adopt
        # Gives the slots up while Redis or Kafka does not answer (actors/withdrawal.py).
        self.withdrawal = withdrawal or Withdrawal(settings, None)
        # The actors act on the slots only while ZooKeeper confirmed them this recently
        # (actors/ownership.py): the watchdog below drops them at the same bound, but
        # only at its next tick, and a node that wakes from a freeze acts before that.
        held.lease_s = settings.zk_session_timeout_ms / 1000 * SUSPEND_GIVE_UP
        self.root = settings.zk_cluster_root
        self.zk: ZKClient | None = None
        self.member: str | None = None
        # The slots the slot map gives this member (it holds them once taken).
        self.assigned: frozenset[int] = frozenset()
        # slot → (znode version, epoch) of every slot ZooKeeper names this member as
        # owner of; a superset of the held slots (a take whose Redis step failed is here
        # only).
        self._claimed: dict[int, tuple[int, int]] = {}
        # slot → created_zxid of a slot znode refused for its ACL (logged once).
        self._refused: dict[int, int] = {}
        self._member_session: int | None = None
        self._last_contact = time.monotonic()
        self._members_watch: asyncio.Future[None] | None = None

    # ----- joining ---------------------------------------------------------------------

    async def join(self) -> None:
        """Connect (authenticated with zk_auth, if set), check or create the cluster's
        config, and register as a member. Raises ClusterConfigError if this node
        disagrees with the cluster, ZooKeeperAccessError if ZooKeeper refuses it the
        cluster's znodes (NoAuth: zk_auth wrong or missing) or, with zk_auth, one of
        them lets someone else change it (cluster/connections/zk_conn.py)."""
        s = self.settings
        # Every znode this client creates gets znode_acl(s) (cluster/connections/zk_conn.py).
        self.zk = make_zk(s)
        await asyncio.wait_for(self.zk.start(), s.zk_session_timeout_ms / 1000 * 3)
        try:
            try:
                await ensure_layout(self.zk, s)
                await self._register()
            except exc.NoAuth:
                raise no_auth_error(s, self.root) from None
        except BaseException:
            await self.zk.close()
            raise

    async def _register(self) -> None:
        data = orjson.dumps(
            {
                "node_id": self.settings.node_id,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "joined_ms": int(time.time() * 1000),
                "metrics_url": metrics_url(self.settings),
            }
        )
        zk = self._zk()
        members = f"{self.root}/members"
        # A container znode: ZooKeeper deletes it once its last member is gone.
        await zk.ensure_path(members)
        await check_acls(zk, self.settings, [members])
        path = await zk.create(f"{members}/m-", data=data, ephemeral=True, sequential=True)
        await check_acls(zk, self.settings, [path])
        self.member = path.rsplit("/", 1)[-1]
        self._member_session = zk.session.session_id
        log.info("joined cluster %s as %s (node %s)", self.root, self.member, self.settings.node_id)

    def session_state(self) -> str:
        """The ZooKeeper session's state: connected, suspended, read_only or lost."""
        if self.zk is None or self.member is None:
            return str(States.LOST)
        return str(self.zk.session.state.current_state)

    def _zk(self) -> ZKClient:
        if self.zk is None:
            raise RuntimeError("not joined")
        return self.zk

    # ----- the loop -----------------------------------------------------------------------

    def stop(self) -> None:
        super().stop()
        self.held.changed.set()

    def timers(self) -> list[tuple[float, Tick]]:
        return [(WATCHDOG_INTERVAL_S, self._watch_session)]

    async def body(self) -> None:
        timeout = self.settings.zk_session_timeout_ms / 1000
        while not self.stopping:
            try:
                if not await self.withdrawal.step(self):
                    await self.withdrawal.unless_cut_off(self._reconcile(), timeout * 2)
            except Exception as error:  # ZooKeeper or Redis unreachable: try again soon
                log.warning("membership: %s: %s", type(error).__name__, error)
            self.held.changed.clear()
            await self.wait_event(self.held.changed, RECONCILE_INTERVAL_S)
        await self.leave()

    async def _reconcile(self) -> None:
        zk = self._zk()
        path = f"{self.root}/members"
        if self._members_watch is None or self._members_watch.done():
            # A join or leave wakes the loop at once (the periodic pass is the fallback).
            self._members_watch = zk.wait_for_events([WatchEvent.CHILDREN_CHANGED], path)
            self._members_watch.add_done_callback(lambda _: self.held.changed.set())
        asked_at = time.monotonic()
        members = sorted(await zk.get_children(path, watch=True))
        self._answered(asked_at)
        if self.member not in members:
            # Our ephemeral znode is gone, so the others may take our slots: stop working
            # on them and rejoin as a new member.
            self.held.drop_all(self._why_member_gone())
            self._claimed.clear()  # its claims name a dead member: anyone may take them
            self.member = None
            self.assigned = frozenset()
            await self._register()
            return
        mine = {
            slot for slot, m in assign(self.settings.slots, members).items() if m == self.member
        }
        self.assigned = frozenset(mine)
        for slot in sorted(set(self._claimed) - mine):
            await self._release(slot)
        for slot in sorted(mine - self.held.holding()):
            if self.stopping or self.member is None:
                return
            await self._take(slot, set(members))

    def _why_member_gone(self) -> str:
        """Why this node's member znode is gone: its session expired, or (the session is
        the one that made it, still alive) another client deleted it."""
        zk = self._zk()
        if self._member_session is None or zk.session.session_id != self._member_session:
            return f"member {self.member} is gone (session expired)"
        log.error(
            "member znode %s/members/%s was deleted by another ZooKeeper client while this "
            "node's session is alive: every slot is dropped and the node rejoins. Only a "
            "client with this cluster's zk_auth (or with no zk_auth set, anyone) can do "
            "that (docs/security.md)",
            self.root,
            self.member,
        )
        return f"member {self.member} was deleted by another client"

    def _answered(self, asked_at: float) -> None:
        """ZooKeeper answered a request sent at `asked_at`: the session was alive then,
        and if it is the one the member (and so its slots) belongs to, the hold too."""
        self._last_contact = max(self._last_contact, asked_at)
        zk = self.zk
        if zk is not None and zk.session.session_id == self._member_session:
            self.held.confirmed(asked_at)

    async def _release(self, slot: int) -> None:
        epoch = self._claimed[slot][1]
        if self.held.release(slot):  # actors stop working on it now
            try:
                await asyncio.wait_for(
                    self.quiesce(slot), self.settings.kafka_delivery_timeout_ms / 1000 * 2
                )
            except TimeoutError:
                log.warning("slot %d: rounds still in flight at hand-off", slot)
        if await self._write_released(slot):
            log.info("released slot %d (epoch %d)", slot, epoch, extra={"slot": slot})

    async def _write_released(self, slot: int) -> bool:
        """Write the slot's znode as released (owner null, its epoch kept), compare-and-
        set on the version this node holds, and forget the claim; False when someone
        took it already (nothing of ours to release). Raises what ZooKeeper raised (the
        claim kept, for the next pass)."""
        version, epoch = self._claimed[slot]
        released = orjson.dumps({"owner": None, "epoch": epoch})
        try:
            await self._zk().set(f"{self.root}/slots/{slot}", released, version=version)
        except exc.BadVersion:
            self._claimed.pop(slot, None)
            return False
        self._claimed.pop(slot, None)
        return True

    async def _take(self, slot: int, live: set[str]) -> None:
        zk = self._zk()
        path = f"{self.root}/slots/{slot}"
        asked_at = time.monotonic()
        try:
            acl_stat = await self._slot_acl(slot, path)
            data, stat = await zk.get(path)
        except exc.NoNode:  # deleted: make it again (it is checked before it is taken)
            with contextlib.suppress(exc.NodeExists):
                await zk.create(path, data=orjson.dumps({"owner": None}))
            return
        self._answered(asked_at)
        if acl_stat is None or stat.created_zxid != acl_stat.created_zxid:
            return  # refused, or re-created since its ACL was read: look again next pass
        record = orjson.loads(data) if data else {}
        record = record if isinstance(record, dict) else {}
        owner = record.get("owner")
        if owner is not None and owner != self.member:
            if owner in live:
                return  # its owner is alive and has not released it yet
            # `live` was read at the start of this pass: a member that joined since
            # may already own the slot. Only a member whose znode is gone is dead.
            if await zk.exists(f"{self.root}/members/{owner}"):
                return
        # Greater than every epoch this slot ever had: ZooKeeper's zxid grows past each
        # earlier take (also across a delete and re-create), Redis keeps the last one
        # should ZooKeeper have lost its data.
        stored = await self.scripts.redis.get(self.scripts.keys.slot(slot).owner)
        epoch = max(stat.last_modified_zxid, _int(record.get("epoch")), int(stored or 0)) + 1
        if epoch > MAX_EPOCH:
            log.error("slot %d: epoch %d is too large to fence with; not taken", slot, epoch)
            return
        try:
            new = await zk.set(
                path,
                orjson.dumps(
                    {"owner": self.member, "node_id": self.settings.node_id, "epoch": epoch}
                ),
                version=stat.version,
            )
        except exc.BadVersion:
            return  # changed meanwhile; look again on the next pass
        if new.created_zxid != acl_stat.created_zxid:
            return  # re-created between the read and the write: not the znode checked
        self._claimed[slot] = (int(new.version), epoch)
        try:
            taken = await self.scripts.take(slot, epoch)
        except ReplicationUnconfirmed as error:
            # Taken on the master. Should a failover undo it, the old epoch is back:
            # this node is then fenced and takes the slot again; its old owner had
            # released it or is dead, so nobody works on it twice meanwhile.
            taken = bool(error.result)
            log.warning("slot %d: epoch %d not confirmed by a replica: %s", slot, epoch, error)
        if not taken:
            # Only a take that raced this one can have put an epoch >= ours there.
            log.warning("slot %d: Redis already holds an epoch >= %d; taking it again", slot, epoch)
            return
        if self.member is None or self.stopping:
            return
        if owner is not None and owner != self.member and self.adopt is not None:
            # Its owner's session ended: its claims will never be published by it.
            await self._adopt(slot, epoch)
            if self.member is None or self.stopping:
                return
        self.held.hold(slot, epoch)
        log.info(
            "took slot %d (epoch %d, previous owner %s)", slot, epoch, owner, extra={"slot": slot}
        )
        self.on_acquired(slot)

    async def _adopt(self, slot: int, epoch: int) -> None:
        """Hand the jobs the dead owner had claimed back for a retry now, before this
        node claims from the slot (so every job in flight is the dead owner's). Bounded
        and never fatal to the take: what it leaves waits for its in-flight deadline."""
        adopt = self.adopt
        if adopt is None:
            return
        try:
            await asyncio.wait_for(
                adopt(slot, epoch), self.settings.kafka_delivery_timeout_ms / 1000 * 2
            )
        except Exception as error:
            log.warning(
                "slot %d: the in-flight jobs of its previous owner were not returned, "
                "they wait for their deadline: %s: %s",
                slot,
                type(error).__name__,
                error,
                extra={"slot": slot},
            )

    async def _slot_acl(self, slot: int, path: str) -> Stat | None:
        """The stat of the slot's znode if its ACL is this cluster's own (or no zk_auth
        is set); None, logged once per re-creation, if someone else can change it."""
        acl, stat = await read_acl(self._zk(), self.settings, path)
        problem = acl_problem(self.settings, acl)
        if problem is None:
            return stat
        if self._refused.get(slot) != stat.created_zxid:
            self._refused[slot] = stat.created_zxid
            error = unsafe_acl_error(self.settings, path, problem)
            log.error("slot %d not taken: %s", slot, error, extra={"slot": slot})
        return None

    async def _watch_session(self) -> None:
        """Drop every slot at once when the session is lost, or when ZooKeeper has not
        answered for most of the session timeout: the server expires a session a
        session timeout after it last heard from it, so stopping earlier means this
        node stops before anyone else may take its slots."""
        zk = self._zk()
        give_up_s = self.settings.zk_session_timeout_ms / 1000 * SUSPEND_GIVE_UP
        if not self.held.holding():
            return
        if zk.session.state.current_state == States.LOST:
            self.held.drop_all("ZooKeeper session lost")
        elif time.monotonic() - self._last_contact > give_up_s:
            self.held.drop_all(f"no answer from ZooKeeper for over {give_up_s:.1f} s")

    async def leave(self) -> None:
        """Release every slot so others take them at once, then end the session.
        Idempotent: the node also calls it when it stops without having run."""
        zk = self.zk
        if zk is None:
            return
        for slot in sorted(self._claimed):
            try:
                await asyncio.wait_for(self._release(slot), 5)
            except (exc.ZKError, TimeoutError, ConnectionError) as error:
                log.warning("could not release slot %d: %s", slot, error)
        self.member = None
        try:
            await asyncio.wait_for(zk.close(), 5)
        except (exc.ZKError, TimeoutError, ConnectionError):
            pass
        self.zk = None
