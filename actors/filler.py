"""filler: loads the payloads of lean jobs from MySQL shortly before they are due.

A job due more than `payload_lead_ms` ahead is stored in Redis lean, its envelope header
alone (lua/add.lua): the payload, topic and key stay in MySQL, which holds them anyway,
so Redis keeps about half the bytes per waiting job. About once a second (four times
per lead when the lead is shorter than 4 s), and at once
when this node takes a slot, the filler walks each owned slot's delay zset from where it
stopped last time up to Redis TIME + payload_lead_ms, reads the rows of the lean jobs it
finds (one MySQL read per batch), and gives their envelopes the tail the producer made
(lua/fill.lua, fenced by the slot's epoch; a job cancelled, fired, rescheduled or
retried meanwhile is left alone). Each member is examined about once: the position per
slot lives in this node's memory and starts again from the beginning when the node
takes the slot.

A job that is still lean when claimed (rescheduled or retried close to its time, a row
not waiting when the filler read it, the filler behind or MySQL down) is built by the
dispatcher from its row (actors/dispatcher.py). So while MySQL is down, jobs within the
lead keep firing, and later ones wait for MySQL.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Any

from actors.lifecycle import Actor
from actors.ownership import Ownership
from cluster.errors import SlotFailed
from cluster.model.contract import WAITING_STATUSES, split_member
from cluster.model.envelope import is_lean
from cluster.scripts.facade import Scripts
from cluster.settings.config import Settings
from cluster.store.mysql_store import MySQLStore

log = logging.getLogger(__name__)

# Between passes: a quarter of the lead, at most a second, so a job comes within the lead
# a few passes before it is due even with the shortest lead.
MAX_FILL_INTERVAL_S = 1.0
# Delay members examined per slot per round trip, and job ids per MySQL read.
FILL_BATCH = 500
READ_BATCH = 1000

# Where a slot's walk goes on: the lowest score not examined yet (None: from the start),
# and how many members with exactly that score were examined already.
Cursor = tuple[int | None, int]


class Filler(Actor):
    name = "filler"

    def __init__(
        self,
        settings: Settings,
        scripts: Scripts,
        mysql: MySQLStore,
        ownership: Ownership,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.scripts = scripts
        self.mysql = mysql
        self.ownership = ownership
        self.filled_total = 0
        self._cursors: dict[int, Cursor] = {}
        self._wake = asyncio.Event()
        self.interval_s = min(MAX_FILL_INTERVAL_S, settings.payload_lead_ms / 4000)

    def acquired(self, slot: int) -> None:
        """This node took `slot`: walk it from the start, now."""
        self._cursors.pop(slot, None)
        self._wake.set()

    def stop(self) -> None:
        super().stop()
        self._wake.set()  # ends the wait between passes

    async def body(self) -> None:
        if self.settings.payload_lead_ms == 0:
            await super().body()  # no lean envelopes are made: nothing to do
            return
        while not self.stopping:
            self._wake.clear()
            try:
                await self.fill_owned()
            except Exception as exc:  # MySQL or Redis down: the next pass goes on from here
                self.warn("filling lean envelopes failed, will retry: %s", exc)
            await self.wait_event(self._wake, self.interval_s)

    async def fill_owned(self) -> int:
        """One pass over the owned slots; returns how many envelopes it filled."""
        owned = self.ownership.owned()
        for slot in [slot for slot in self._cursors if slot not in owned]:
            del self._cursors[slot]
        held: dict[int, int] = {}
        for slot in sorted(owned):
            try:
                held[slot] = self.ownership.epoch(slot)
            except KeyError:
                pass  # the slot moved away meanwhile
        if not held:
            return 0
        # By the Redis clock, as add.lua decides what is lean: a job added after this
        # read with a due time up to `until` was within the lead then, so stored full.
        seconds, micros = await self.scripts.redis.time()
        until = seconds * 1000 + micros // 1000 + self.settings.payload_lead_ms
        filled = 0
        while held:
            filled += await self._fill_step(held, until)
        self.filled_total += filled
        return filled

    async def _fill_step(self, held: dict[int, int], until: int) -> int:
        """Examine the next FILL_BATCH members of each slot in `held` due up to `until`
        and fill the lean ones; drops from `held` the slots that are done (or fenced, or
        failing: the next pass tries them again)."""
        slots = list(held)
        keys = [self.scripts.keys.slot(slot) for slot in slots]
        pipe = self.scripts.redis.pipeline(transaction=False)
        for slot, k in zip(slots, keys, strict=True):
            low, skip = self._cursors.get(slot, (None, 0))
            pipe.zrangebyscore(
                k.delay,
                "-inf" if low is None else low,
                until,
                start=skip,
                num=FILL_BATCH,
                withscores=True,
            )
        pages: list[list[tuple[bytes, float]]] = await pipe.execute()
        pipe = self.scripts.redis.pipeline(transaction=False)
        for k, page in zip(keys, pages, strict=True):
            if page:
                pipe.hmget(k.jobs, [split_member(member)[1] for member, _ in page])
        envelopes: list[list[Any]] = await pipe.execute() if any(pages) else []
        lean: dict[int, list[tuple[bytes, bytes]]] = defaultdict(list)  # slot → (id, seq)
        found = iter(envelopes)
        for slot, page in zip(slots, pages, strict=True):
            if not page:
                continue
            for (member, _), envelope in zip(page, next(found), strict=True):
                seq, job_id = split_member(member)
                # Gone (fired, cancelled) or full: nothing to do. A lean one with another
                # seq was rescheduled or retried: fill.lua leaves it to the dispatcher.
                if envelope is not None and is_lean(envelope):
                    lean[slot].append((job_id, seq))
        tails = await self._tails([job_id for jobs in lean.values() for job_id, _ in jobs])
        fills: list[tuple[int, int, list[tuple[bytes, bytes, bytes]]]] = []
        for slot, jobs in lean.items():
            ready = [(job_id, seq, tails[job_id]) for job_id, seq in jobs if job_id in tails]
            if ready:
                fills.append((slot, held[slot], ready))
        results = await self.scripts.fill_many(fills) if fills else []
        filled = 0
        stopped: set[int] = set()
        for (slot, epoch, _), result in zip(fills, results, strict=True):
            if result is None:
                self.ownership.lost(slot, epoch)
                stopped.add(slot)
            elif isinstance(result, SlotFailed):
                self.warn("filling lean envelopes of slot %d failed, will retry: %s", slot, result)
                stopped.add(slot)
            else:
                filled += result
        for slot, page in zip(slots, pages, strict=True):
            if slot in stopped:
                del held[slot]
            elif len(page) < FILL_BATCH:
                self._cursors[slot] = (until + 1, 0)  # scores are whole ms
                del held[slot]
            else:
                self._cursors[slot] = self._after(self._cursors.get(slot, (None, 0)), page)
        return filled

    @staticmethod
    def _after(cursor: Cursor, page: list[tuple[bytes, float]]) -> Cursor:
        """The cursor past a full page read from `cursor`."""
        last = int(page[-1][1])
        at_last = sum(1 for _, score in page if int(score) == last)
        low, skip = cursor
        return (last, skip + at_last if low == last else at_last)

    async def _tails(self, job_ids: list[bytes]) -> dict[bytes, bytes]:
        """The envelope tails of the jobs whose MySQL row is waiting (a row not waiting
        any more belongs to a job about to leave Redis: left alone). Jobs whose server
        does not answer stay lean (the next pass, or the dispatcher, loads them; the
        sampler reports the server): they hold back no other server's."""
        tails: dict[bytes, bytes] = {}
        for start in range(0, len(job_ids), READ_BATCH):
            chunk = [job_id.decode() for job_id in job_ids[start : start + READ_BATCH]]
            rows, _ = await self.mysql.get_answering(chunk)
            for job_id, row in rows.items():
                if row.status in WAITING_STATUSES:
                    tails[job_id.encode()] = row.tail
        return tails
