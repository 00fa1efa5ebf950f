"""rollback: when Redis comes back without its last writes, make it agree with MySQL
before firing from it again.

A single Redis restarted from an append-only file written with `appendfsync everysec`
(after a host crash), or a replica promoted before it had its master's last writes,
holds an older state: a job whose cancel() returned true is back, a rescheduled job
has its old due time. MySQL holds every change that was answered (cancel and
reschedule return only after their MySQL step). So:

* Watermark. Each slot's watermark key names the Redis server (run_id) the slot is
  known complete on, and the Redis time up to which that server held every write of
  it (lua/watermark.lua). The slot's owner refreshes it every second; a restored
  server brings back the watermark of its restore point, naming the server before.
* Claims. A node's claims refuse a slot whose watermark names another server, or
  none (ERROR_RESTARTED; lua/includes/incarnation.lua): nothing fires from it yet.
  This holds per slot, whichever node owns it, whenever it was taken.
* Correction. For such a slot its owner (every second, and at once for a slot it
  takes) re-applies every MySQL change since the watermark's time, less
  CLOCK_MARGIN_MS for the MySQL and Redis clocks: jobs MySQL has cancelled or fired
  are removed and marked, rescheduled ones (pending or retrying, updated since their
  insert) are taken out of a stale flight (lua/correct.lua) and given MySQL's due
  time (lua/reschedule.lua). Then it verifies the slot on this server (unless the
  server changed again meanwhile), and claims go on; the reconciler's full pass
  re-adds the pending jobs the server lacks.

A slot without a watermark (new, or on a server that lost everything) needs no
correction: it is verified at once, and the full pass rebuilds it from MySQL alone.
What this does not cover, by design, is said in
docs/guarantees.md#a-single-redis-that-comes-back-older.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from actors.ownership import Ownership
from cluster.model.contract import JobStatus
from cluster.model.jobs import now_ms
from cluster.scripts.facade import Scripts
from cluster.scripts.recovery import (
    correct_jobs,
    move_due_times,
    refresh_watermarks,
    verify_watermarks,
)
from cluster.settings.config import Settings
from cluster.store import listings
from cluster.store.mysql_store import MySQLStore, ms_to_datetime

log = logging.getLogger(__name__)

# How far the MySQL server's clock (gmt_modified) may be behind the Redis server's
# (the watermark): the correction starts this much before the watermark.
CLOCK_MARGIN_MS = 5_000
# Jobs MySQL recorded fired are removed (no duplicate) only when the watermark is at
# most this old: a server restored from an old backup would make that pass read every
# fire since; it then fires those jobs again (duplicates), as any lost ack does.
FIRED_LOOKBACK_MS = 60_000
PAGE = 1000
# What correct.lua is told of each MySQL status it re-applies.
_KINDS = {
    JobStatus.CANCELLED: "c",
    JobStatus.FIRED: "f",
    JobStatus.PENDING: "w",
    JobStatus.FIRING: "w",
}


@dataclass
class Correction:
    examined: int = 0  # rows MySQL changed since the watermark
    changed: int = 0  # cancelled or fired jobs removed, rescheduled ones taken out of flight
    moved: int = 0  # rescheduled jobs given MySQL's due time


async def correct_slots(
    settings: Settings,
    mysql: MySQLStore,
    scripts: Scripts,
    ownership: Ownership,
    slots: list[int],
    since_ms: int,
) -> Correction:
    """Re-apply to these slots MySQL's changes since since_ms (module docstring)."""
    result = Correction()
    since = ms_to_datetime(since_ms - CLOCK_MARGIN_MS)
    with_fired = now_ms() - since_ms <= FIRED_LOOKBACK_MS
    changed: dict[int, list[tuple[str, str]]] = defaultdict(list)
    due: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for shard in mysql.all_shards():
        table, _ = mysql.shard_tables(shard)
        for status, kind in _KINDS.items():
            if status == JobStatus.FIRED and not with_fired:
                continue
            cursor = (since, "")
            # A waiting row never updated since its insert was not rescheduled: if Redis
            # lacks it, the full pass adds it.
            while page := await mysql.router.run(
                shard[0],
                functools.partial(
                    listings.changed_page,
                    job_table=table,
                    status=status,
                    after=cursor,
                    slots=slots,
                    limit=PAGE,
                    updated_only=kind == "w",
                ),
            ):
                cursor = (page[-1][0], page[-1][1])
                result.examined += len(page)
                for _, job_id, slot, due_ms in page:
                    changed[slot].append((job_id, kind))
                    if kind == "w":
                        due[slot].append((job_id, due_ms))
    epochs = {slot: ownership.epoch(slot) for slot in changed}
    result.changed = await correct_jobs(scripts, epochs, changed, settings.marker_retention_ms)
    result.moved = await move_due_times(scripts, due)
    return result


class SlotVerifier:
    """Keeps each owned slot's watermark, and re-applies MySQL's changes to a slot
    whose watermark names another Redis server before its claims go on (module
    docstring). The reconciler calls check() every second, and for slots it takes."""

    def __init__(
        self, settings: Settings, mysql: MySQLStore, scripts: Scripts, ownership: Ownership
    ) -> None:
        self.settings = settings
        self.mysql = mysql
        self.scripts = scripts
        self.ownership = ownership
        self.corrections = 0
        scripts.check_verified = True  # this node's claims refuse unverified slots

    async def check(self, slots: Iterable[int]) -> Correction | None:
        """Refresh the slots' watermarks; correct and verify those that name another
        server (or none). Returns the correction made, if any. Raises when it failed
        (the slots stay unverified: the next check tries again)."""
        marks = await refresh_watermarks(self.scripts, [s for s in slots if self.ownership.owns(s)])
        stale = {slot: mark for slot, mark in marks.items() if not mark.current}
        if not stale:
            return None
        known = sorted(slot for slot, mark in stale.items() if mark.ms >= 0)
        result = None
        if known:  # the others have no watermark yet: a new slot, or a Redis that lost all
            since_ms = min(stale[slot].ms for slot in known)
            result = await correct_slots(
                self.settings, self.mysql, self.scripts, self.ownership, known, since_ms
            )
            self.corrections += 1
            log.warning(
                "Redis of %d owned slot(s) is another server than they were last complete "
                "on (it restarted or failed over): re-applied MySQL's changes since %d ms "
                "ago before firing from them (%d changed job(s) examined, %d removed or "
                "taken out of flight, %d due time(s) corrected)",
                len(known),
                now_ms() - since_ms,
                result.examined,
                result.changed,
                result.moved,
            )
        await verify_watermarks(self.scripts, {slot: mark.run_id for slot, mark in stale.items()})
        return result
