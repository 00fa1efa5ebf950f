"""reconciler: re-adds to Redis the pending jobs that Redis lost, from MySQL.

Redis can lose jobs (a restart without persistence, FLUSHALL, a failover that lost
writes); MySQL cannot. For each slot it is asked about, the reconciler walks that
slot's pending and retrying rows in MySQL and runs the add script on them. The add
script changes nothing for a job Redis holds (waiting, ready, in flight or dead), and
refuses one that was cancelled or has fired meanwhile: cancel and ack leave markers
that outlive `marker_retention_ms`, and the reconciler never takes longer than half of
that between reading a page and adding it, so a row it read as pending just before it
fired or was cancelled is not brought back.

It runs for a slot whenever this node takes the slot (at start, after a hand-off, and
after Redis lost the slot's keys: the lost owner key fences the node, which then takes
the slot again), for every owned slot every reconcile_interval_ms, and on demand
(`delayq recover`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from actors.base import SlotQueue, batch_or_stop
from cluster.config import Settings
from cluster.jobs import JobStatus
from cluster.mysql_store import MySQLStore
from cluster.ownership import Ownership
from cluster.scripts import NewJob, Scripts

log = logging.getLogger(__name__)

PAGE = 1000


@dataclass
class ReconcileResult:
    examined: int = 0
    readded: int = 0
    refused: int = 0  # cancelled or fired meanwhile


async def reconcile(
    settings: Settings, mysql: MySQLStore, scripts: Scripts, slots: Iterable[int]
) -> ReconcileResult:
    """Re-add every pending or retrying job of `slots` that Redis does not hold."""
    wanted = sorted(set(slots))
    result = ReconcileResult()
    if not wanted:
        return result
    budget_s = settings.marker_retention_ms / 1000 / 2
    for shard in mysql.all_shards():
        for status in (JobStatus.PENDING, JobStatus.FIRING):
            cursor = (dt.datetime(1970, 1, 1), "")
            while True:
                started = time.monotonic()
                rows = await mysql.pending_page(shard, status, cursor, wanted, PAGE)
                if not rows:
                    break
                by_slot: dict[int, list[NewJob]] = defaultdict(list)
                for row in rows:
                    by_slot[row.slot].append(NewJob.from_record(row))
                if time.monotonic() - started > budget_s:
                    continue  # too slow to be safe against markers expiring: read it again
                for _, statuses in (await scripts.add_many(by_slot)).values():
                    result.readded += statuses.count(1)
                    result.refused += statuses.count(-1)
                result.examined += len(rows)
                last = rows[-1]
                cursor = (dt.datetime.fromtimestamp(last.due_ms / 1000, dt.UTC)
                          .replace(tzinfo=None), last.job_id)
    return result


class Reconciler:
    name = "reconciler"

    def __init__(
        self, settings: Settings, mysql: MySQLStore, scripts: Scripts, ownership: Ownership,
        inbox: SlotQueue,
    ) -> None:
        self.settings = settings
        self.mysql = mysql
        self.scripts = scripts
        self.ownership = ownership
        self.inbox = inbox
        self.readded_total = 0
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        self._stopping.clear()
        sweeper = asyncio.create_task(self._sweep())
        try:
            while (slots := await batch_or_stop(self.inbox, self._stopping)) is not None:
                owned = [slot for slot in slots if self.ownership.owns(slot)]
                try:
                    result = await reconcile(self.settings, self.mysql, self.scripts, owned)
                except Exception as exc:
                    log.warning("reconciling %d slot(s) failed, will retry: %s",
                                len(owned), exc)
                    await asyncio.sleep(1)
                    for slot in owned:
                        await self.inbox.put(slot)
                    continue
                self.readded_total += result.readded
                if result.readded:
                    log.warning("re-added %d job(s) that Redis had lost, from MySQL "
                                "(%d examined)", result.readded, result.examined)
        finally:
            sweeper.cancel()

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(self.settings.reconcile_interval_ms / 1000)
            for slot in sorted(self.ownership.owned()):
                await self.inbox.put(slot)
