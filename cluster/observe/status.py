"""`delayq cluster status`: members, the slot map, per-slot depth and the oldest overdue job.

Reads ZooKeeper (members, slot owners and epochs) and Redis (pipelined round trips for
the depths of every slot; a node samples its own slots with the same slot_depths());
changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import orjson
from aiozk import ZKClient, exc

from cluster.connections.redis_conn import RedisClient, open_redis
from cluster.connections.zk_conn import no_auth_error, open_zk
from cluster.errors import StoreUnavailable
from cluster.model.contract import member_id
from cluster.model.keys import KeySpace
from cluster.settings.config import Settings


@dataclass(frozen=True)
class SlotStatus:
    slot: int
    owner: str | None  # member name
    owner_node: str | None
    epoch: int  # ZooKeeper's
    redis_epoch: int  # the owner key in Redis (fencing)
    delay: int
    ready: int
    inflight: int
    dead: int
    overdue_ms: int  # how late its most overdue job is already (0 when none)


@dataclass(frozen=True)
class ClusterStatus:
    root: str
    slots: int
    members: dict[str, dict[str, Any]]
    slot_status: list[SlotStatus]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


async def read_status(settings: Settings) -> ClusterStatus:
    """The cluster's status, read once (its own ZooKeeper session and Redis connection)."""
    reader = await StatusReader.open(settings)
    try:
        return await reader.read()
    finally:
        await reader.close()


class StatusReader:
    """Reads the status again and again over one ZooKeeper session and one Redis
    connection (`delayq top` refreshes every second)."""

    def __init__(self, settings: Settings, zk: ZKClient, redis: RedisClient) -> None:
        self.settings = settings
        self.zk = zk
        self.redis = redis

    @classmethod
    async def open(cls, settings: Settings) -> StatusReader:
        # Authenticated with zk_auth, like the nodes: a protected cluster refuses others.
        try:
            zk = await open_zk(settings)
        except TimeoutError as error:
            raise StoreUnavailable(
                f"ZooKeeper at {settings.zk_hosts} does not answer: is ZooKeeper running? "
                'for the local stack: eval "$(delayq services env)"'
            ) from error
        try:
            redis = await open_redis(settings)
        except BaseException:
            await zk.close()
            raise
        return cls(settings, zk, redis)

    async def close(self) -> None:
        try:
            await self.zk.close()
        finally:
            await self.redis.aclose()

    async def read(self) -> ClusterStatus:
        settings, zk = self.settings, self.zk
        root = settings.zk_cluster_root
        try:
            config = orjson.loads(await zk.get_data(f"{root}/config"))
        except exc.NoNode:
            raise RuntimeError(
                f"no delayq cluster at {root} in ZooKeeper "
                f"{settings.zk_hosts}: no node has joined yet"
            ) from None
        except exc.NoAuth:
            raise no_auth_error(settings, f"{root}/config") from None
        slots = int(config["slots"])
        members: dict[str, dict[str, Any]] = {}
        for name in sorted(await zk.get_children(f"{root}/members")):
            try:
                data = await zk.get_data(f"{root}/members/{name}")
            except exc.NoNode:
                continue  # left while we looked
            members[name] = _member_record(data)
        owners: list[tuple[str | None, str | None, int]] = []
        for slot in range(slots):
            data, stat = await zk.get(f"{root}/slots/{slot}")
            record = orjson.loads(data) if data else {}
            # The epoch of the slot's last take (actors/membership.py); older releases
            # used the znode's version.
            epoch = record.get("epoch")
            epoch = epoch if isinstance(epoch, int) else int(stat.version)
            owners.append((record.get("owner"), record.get("node_id"), epoch))
        depths = await slot_depths(self.redis, KeySpace(settings.key_prefix), range(slots))
        return ClusterStatus(
            root,
            slots,
            members,
            [
                SlotStatus(
                    slot,
                    owner,
                    node if owner else None,
                    epoch,
                    depths[slot].epoch,
                    depths[slot].delay,
                    depths[slot].ready,
                    depths[slot].inflight,
                    depths[slot].dead,
                    depths[slot].overdue_ms,
                )
                for slot, (owner, node, epoch) in enumerate(owners)
            ],
        )


def _member_record(data: bytes | None) -> dict[str, Any]:
    """What a member wrote about itself; not a JSON object (nothing a node writes): an
    empty record, so one bad znode does not hide the cluster."""
    try:
        record = orjson.loads(data or b"null")
    except orjson.JSONDecodeError:
        record = None
    return record if isinstance(record, dict) else {}


class SharedStatus:
    """One StatusReader (one ZooKeeper session, one Redis connection) for a server's
    many askers: a status younger than max_age_s is answered from memory, and askers who
    come while a read is under way wait for that read (single flight). A failed read is
    not kept: the reader is closed and the next asker opens a fresh one."""

    def __init__(self, settings: Settings, max_age_s: float = 1.0) -> None:
        self.settings = settings
        self.max_age_s = max_age_s
        self.reads = 0  # reads of ZooKeeper and Redis made, for tests
        self._reader: StatusReader | None = None
        self._latest: tuple[float, ClusterStatus] | None = None
        self._flight: asyncio.Future[ClusterStatus] | None = None

    async def read(self) -> ClusterStatus:
        loop = asyncio.get_running_loop()
        if self._latest is not None and loop.time() - self._latest[0] < self.max_age_s:
            return self._latest[1]
        if self._flight is None:
            self._flight = asyncio.ensure_future(self._read_fresh())
        # Shielded: one asker who goes away does not cancel the read for the others.
        return await asyncio.shield(self._flight)

    async def _read_fresh(self) -> ClusterStatus:
        try:
            if self._reader is None:
                self._reader = await StatusReader.open(self.settings)
            self.reads += 1
            status = await self._reader.read()
        except BaseException:
            await self._drop_reader()
            raise
        finally:
            self._flight = None
        self._latest = (asyncio.get_running_loop().time(), status)
        return status

    async def _drop_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            with contextlib.suppress(Exception):
                await reader.close()

    async def close(self) -> None:
        flight, self._flight = self._flight, None
        if flight is not None:
            flight.cancel()
            with contextlib.suppress(BaseException):
                await flight
        await self._drop_reader()


@dataclass(frozen=True, slots=True)
class SlotDepth:
    """What one slot holds in Redis right now."""

    epoch: int  # the owner key in Redis (fencing)
    delay: int
    ready: int
    inflight: int
    dead: int
    journal: int  # outcomes waiting to be written to MySQL
    overdue_ms: int  # how late its most overdue unfired job is already (0 when none)


async def slot_depths(
    redis: RedisClient, keys: KeySpace, slots: Iterable[int]
) -> dict[int, SlotDepth]:
    """The depth of each given slot: two pipelined round trips for all of them."""
    slots = list(slots)
    seconds, micros = await redis.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    pipe = redis.pipeline(transaction=False)
    for slot in slots:
        k = keys.slot(slot)
        pipe.get(k.owner)
        pipe.zcard(k.delay)
        pipe.llen(k.ready)
        pipe.zcard(k.inflight)
        pipe.zcard(k.dead)
        pipe.llen(k.done)
        pipe.zrange(k.delay, 0, 0, withscores=True)
        pipe.lindex(k.ready, 0)
    replies = await pipe.execute()
    per = len(replies) // len(slots) if slots else 0
    rows = dict(
        zip(slots, (replies[i * per : i * per + per] for i in range(len(slots))), strict=True)
    )
    # The head of a ready list is due already; its due time is in its envelope.
    heads = {slot: row[-1] for slot, row in rows.items() if row[-1]}
    pipe = redis.pipeline(transaction=False)
    for slot, member in heads.items():
        pipe.hget(keys.slot(slot).jobs, member_id(member))
    envelopes = dict(zip(heads, await pipe.execute(), strict=True)) if heads else {}
    result = {}
    for slot, (epoch, delay, ready, inflight, dead, journal, head, _) in rows.items():
        # A priority lowers a score by under 1 ms: its due ms is the score rounded up.
        due_times = [math.ceil(head[0][1])] if head else []
        if envelopes.get(slot):
            due_times.append(int(envelopes[slot].split(b"|", 3)[2]))
        overdue = max((now_ms - due for due in due_times if due <= now_ms), default=0)
        result[slot] = SlotDepth(int(epoch or 0), delay, ready, inflight, dead, journal, overdue)
    return result


def printable(value: object) -> str:
    """Text from ZooKeeper (what members wrote about themselves: anyone who may write
    there could plant a member) made safe for a terminal: every character a terminal
    would interpret rather than show (ESC, other controls, bidi controls) escaped the way
    repr() does, e.g. \\x1b."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def render(status: ClusterStatus) -> str:
    """The status as `delayq cluster status` prints it, safe for a terminal."""
    p = printable
    lines = [f"cluster {p(status.root)}: {status.slots} slots, {len(status.members)} member(s)"]
    for name, info in status.members.items():
        owned = sum(1 for s in status.slot_status if s.owner == name)
        lines.append(
            f"  {p(name)}  node {p(info.get('node_id'))}  pid {p(info.get('pid'))}  "
            f"host {p(info.get('host'))}  slots {owned}"
        )
    lines.append("")
    lines.append(
        f"{'slot':>5} {'owner':<14} {'epoch':>6} {'delay':>9} {'ready':>7} "
        f"{'inflight':>8} {'dead':>6} {'overdue':>9}"
    )
    for s in status.slot_status:
        owner = p(s.owner if s.owner in status.members else f"({s.owner or '-'})")
        lines.append(
            f"{s.slot:>5} {owner:<14} {s.epoch:>6} {s.delay:>9} {s.ready:>7} "
            f"{s.inflight:>8} {s.dead:>6} {s.overdue_ms / 1000:>8.3f}s"
        )
    totals = [
        sum(getattr(s, f) for s in status.slot_status)
        for f in ("delay", "ready", "inflight", "dead")
    ]
    worst = max(status.slot_status, key=lambda s: s.overdue_ms, default=None)
    lines.append(
        f"total: delay {totals[0]}, ready {totals[1]}, in flight {totals[2]}, "
        f"dead {totals[3]}; oldest overdue job: "
        + (
            f"{worst.overdue_ms} ms late in slot {worst.slot}"
            if worst and worst.overdue_ms
            else "none"
        )
    )
    return "\n".join(lines)
