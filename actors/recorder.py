"""recorder: applies each slot's outcome journal (fired, retrying, dead) to MySQL.

The ack and retry scripts append outcomes to a journal list in Redis, atomically with
the state change, so nothing is lost when the node dies or MySQL is down: the
recorder reads the oldest entries, writes them to MySQL in batches, and only then
trims them. Writing an entry twice (after a crash) is harmless.
"""

from __future__ import annotations

import asyncio
import logging

from actors.base import SlotQueue, next_or_stop
from cluster.jobs import JobStatus
from cluster.mysql_store import MySQLStore, Outcome
from cluster.ownership import StaticOwnership
from cluster.scripts import Scripts

log = logging.getLogger(__name__)

RETRY_AFTER_ERROR_S = 1.0


def parse_entry(entry: bytes, slot: int) -> Outcome:
    """b"<status>|<attempt>|<ms>|<id length>|<id><note>" → Outcome."""
    status, attempt, at_ms, id_len, rest = entry.split(b"|", 4)
    n = int(id_len)
    return Outcome(
        job_id=rest[:n].decode(),
        status=JobStatus(int(status)),
        attempt=int(attempt),
        at_ms=int(at_ms),
        note=rest[n:].decode(errors="replace"),
        slot=slot,
    )


class Recorder:
    name = "recorder"

    def __init__(
        self,
        scripts: Scripts,
        mysql: MySQLStore,
        ownership: StaticOwnership,
        inbox: SlotQueue,
        batch: int,
        sweep_interval_ms: int,
    ) -> None:
        self.scripts = scripts
        self.mysql = mysql
        self.ownership = ownership
        self.inbox = inbox
        self.batch = batch
        self.sweep_interval_ms = sweep_interval_ms
        self.recorded_total = 0
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        self._stopping.clear()
        sweeper = asyncio.create_task(self._sweep())
        try:
            while (slot := await next_or_stop(self.inbox, self._stopping)) is not None:
                await self.drain(slot)
        finally:
            sweeper.cancel()
        # Last pass on the way out, so a clean stop leaves MySQL up to date.
        for slot in sorted(self.ownership.owned()):
            await self.drain(slot)

    async def _sweep(self) -> None:
        """Look at every owned slot now and then: journals left by a previous owner,
        by the reaper, or by a drain that failed."""
        while True:
            for slot in sorted(self.ownership.owned()):
                await self.inbox.put(slot)
            await asyncio.sleep(self.sweep_interval_ms / 1000)

    async def drain(self, slot: int) -> None:
        while True:
            try:
                entries = await self.scripts.read_journal(slot, self.batch)
                if not entries:
                    return
                outcomes = [parse_entry(entry, slot) for entry in entries]
                await self.mysql.record_outcomes(outcomes)
                fired = [o.job_id for o in outcomes if o.status == JobStatus.FIRED]
                await self.scripts.trim_journal(slot, len(entries), fired)
            except Exception as exc:
                log.warning("recording outcomes of slot %d failed (kept in Redis): %s",
                            slot, exc)
                await asyncio.sleep(RETRY_AFTER_ERROR_S)
                return
            self.recorded_total += len(entries)
            if len(entries) < self.batch:
                return
