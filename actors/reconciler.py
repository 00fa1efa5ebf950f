"""reconciler: loads pending jobs from MySQL into Redis: those nearing their due time,
and those Redis lost.

Redis holds only the near future (tiering): a job due more than `redis_horizon_ms`
ahead is written to MySQL alone (cluster/client.py), and the reconciler of the node
owning its slot loads it when it comes within horizon/2. Per slot it remembers up to
which due time everything was loaded ("loaded until"); every horizon/4 it reads the
rows due between that point and now + horizon/2 and moves the point on. A producer
writes to Redis any job due within the horizon of the moment its MySQL commit
returned, so a row committed after a load pass read past it is in Redis already, as
long as producer and node clocks agree within horizon/2.

Redis can lose jobs (a restart without persistence, FLUSHALL, a failover that lost
writes); MySQL cannot. For each slot it is asked about, the reconciler walks that
slot's pending and retrying rows in MySQL and runs the add script on them. The add
script changes nothing for a job Redis holds (waiting, ready, in flight or dead), and
refuses one that was cancelled or has fired meanwhile: cancel and ack leave markers
that outlive `marker_retention_ms`, and the reconciler never takes longer than half of
that between reading a page and adding it, so a row it read as pending just before it
fired or was cancelled is not brought back.

The full pass (every row due before now + horizon/2) runs for a slot whenever this
node takes the slot (at start, after a hand-off, and after Redis lost the slot's keys:
the lost owner key fences the node, which then takes the slot again), for every owned
slot every reconcile_interval_ms, and on demand (`delayq recover`).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from actors.lifecycle import Actor, Tick
from actors.ownership import Ownership
from actors.queues import SlotQueue
from cluster.config import Settings
from cluster.contract import AddCode, JobStatus
from cluster.mysql_store import MySQLStore, ms_to_datetime
from cluster.scripts import NewJob, Scripts

log = logging.getLogger(__name__)

PAGE = 1000


@dataclass
class ReconcileResult:
    examined: int = 0
    readded: int = 0
    refused: int = 0  # cancelled or fired meanwhile


def load_bound_ms(settings: Settings) -> int:
    """Jobs due before this (local clock, ms) belong in Redis now."""
    return int(time.time() * 1000) + settings.redis_horizon_ms // 2


async def reconcile(
    settings: Settings,
    mysql: MySQLStore,
    scripts: Scripts,
    slots: Iterable[int],
    *,
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> ReconcileResult:
    """Add to Redis every pending or retrying job of `slots` due in [since_ms, until_ms)
    (unbounded where None) that Redis does not hold."""
    wanted = sorted(set(slots))
    result = ReconcileResult()
    if not wanted:
        return result
    budget_s = settings.marker_retention_ms / 1000 / 2
    start = dt.datetime(1970, 1, 1) if since_ms is None else ms_to_datetime(since_ms)
    before = None if until_ms is None else ms_to_datetime(until_ms)
    for shard in mysql.all_shards():
        for status in (JobStatus.PENDING, JobStatus.FIRING):
            cursor = (start, "")
            while True:
                started = time.monotonic()
                rows = await mysql.pending_page(shard, status, cursor, wanted, PAGE, before)
                if not rows:
                    break
                by_slot: dict[int, list[NewJob]] = defaultdict(list)
                for row in rows:
                    by_slot[row.slot].append(NewJob.from_record(row))
                if time.monotonic() - started > budget_s:
                    continue  # too slow to be safe against markers expiring: read it again
                for _, statuses in (await scripts.add_many(by_slot)).values():
                    result.readded += statuses.count(AddCode.ADDED)
                    result.refused += statuses.count(AddCode.REFUSED)
                result.examined += len(rows)
                last = rows[-1]
                cursor = (
                    dt.datetime.fromtimestamp(last.due_ms / 1000, dt.UTC).replace(tzinfo=None),
                    last.job_id,
                )
    return result


class Reconciler(Actor):
    name = "reconciler"

    def __init__(
        self,
        settings: Settings,
        mysql: MySQLStore,
        scripts: Scripts,
        ownership: Ownership,
        inbox: SlotQueue,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.mysql = mysql
        self.scripts = scripts
        self.ownership = ownership
        self.inbox = inbox
        self.readded_total = 0
        self.loaded_total = 0
        # Slot → every pending row due before this (ms) has been added to Redis.
        self._loaded_until: dict[int, int] = {}

    def timers(self) -> list[tuple[float, Tick]]:
        s = self.settings
        return [
            (s.reconcile_interval_ms / 1000, self._sweep),
            (s.redis_horizon_ms / 4000, self._load_ahead_tick),
        ]

    async def body(self) -> None:
        """Full passes over the slots that come through the inbox (taken slots, the
        periodic sweep, `delayq recover`)."""
        while (slots := await self.next_batch(self.inbox)) is not None:
            owned = [slot for slot in slots if self.ownership.owns(slot)]
            until = load_bound_ms(self.settings)
            try:
                result = await reconcile(
                    self.settings, self.mysql, self.scripts, owned, until_ms=until
                )
            except Exception as exc:
                log.warning("reconciling %d slot(s) failed, will retry: %s", len(owned), exc)
                await self.sleep(1)
                for slot in owned:
                    await self.inbox.put(slot)
                continue
            for slot in owned:
                self._loaded_until[slot] = max(self._loaded_until.get(slot, 0), until)
            self.readded_total += result.readded
            if result.readded:
                # Jobs that came within the horizon since the slot's last owner loaded
                # it, or that Redis lost.
                log.info(
                    "added %d job(s) from MySQL to %d slot(s) (%d examined)",
                    result.readded,
                    len(owned),
                    result.examined,
                )

    async def _sweep(self) -> None:
        """Every reconcile_interval_ms, a full pass over every owned slot."""
        for slot in sorted(self.ownership.owned()):
            await self.inbox.put(slot)

    async def _load_ahead_tick(self) -> None:
        """Every horizon/4, load the jobs that came within horizon/2 of their due time."""
        try:
            await self.load_ahead()
        except Exception as exc:  # MySQL or Redis down: the next tick tries again
            log.warning("loading jobs nearing their due time failed: %s", exc)

    async def load_ahead(self) -> int:
        """One loading pass over the owned slots; returns how many jobs it added."""
        owned = self.ownership.owned()
        for slot in [slot for slot in self._loaded_until if slot not in owned]:
            del self._loaded_until[slot]  # taking it again starts with a full pass
        by_since: dict[int, list[int]] = defaultdict(list)
        for slot, since in self._loaded_until.items():
            by_since[since].append(slot)
        until = load_bound_ms(self.settings)
        added = 0
        for since, slots in by_since.items():
            if since >= until:
                continue
            result = await reconcile(
                self.settings, self.mysql, self.scripts, slots, since_ms=since, until_ms=until
            )
            for slot in slots:  # a take-time pass meanwhile may have gone further
                self._loaded_until[slot] = max(self._loaded_until.get(slot, 0), until)
            added += result.readded
        self.loaded_total += added
        return added
