"""tombstones: puts back into Redis the jobs of cancels that failed half-way.

A cancel removes the job from Redis and leaves a tombstone (lua/cancel.lua), then
records the cancel in MySQL (cluster/client/job_changes.py). When that second step
fails (MySQL killed or timing out, the caller killed) and the caller could not put the
job back itself, MySQL still calls the job waiting while Redis lacks it; without this
actor only the periodic full pass of the reconciler (reconcile_interval_ms, 5 min) would
bring it back, and the job would fire that late.

Every CHECK_INTERVAL_S, for the slots this node owns, it reads the tombstones set more
than GRACE_MS ago (a cancel's MySQL step takes milliseconds), asks MySQL which of their
jobs are still waiting, and restores those:

1. In one MySQL transaction (cluster/store/job_writes.py mark_restored) the waiting rows
   are locked and given restored_ms, a Redis TIME just after the cancel's Redis step
   (the tombstone's score minus its lifetime, plus 1 ms, and not before this node's
   reading of the Redis clock, should a client use another marker_retention_ms). From
   the commit on, the UPDATE of that cancel (or of any earlier one) changes nothing: a
   cancel applies only to a row not restored since its own Redis step, and its caller
   tries again.
2. lua/restore.lua, fenced by the slot's epoch, takes each tombstone back only if it
   still has the score read (a cancel since then replaced it, and that cancel decides)
   and adds the job from its row when it is due within the Redis horizon (later ones
   are the reconciler's to load).

So a cancel that returned true never has its job restored (its row was cancelled before
the read, or its UPDATE changed nothing and it tried again), and a job whose cancel
failed is back within about GRACE_MS + CHECK_INTERVAL_S of its tombstone, or of MySQL
answering again. Tombstones whose rows are cancelled, fired or gone are remembered as
judged, so MySQL is asked about each once.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable

from actors.lifecycle import Actor, Tick
from actors.ownership import Ownership
from cluster.errors import SlotFailed
from cluster.scripts.codec import NewJob
from cluster.scripts.facade import Scripts
from cluster.scripts.restores import Restore, RestoreCode, old_tombstones, restore
from cluster.settings.config import Settings
from cluster.store import job_writes
from cluster.store.mysql_store import MySQLStore

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 1.0
# A tombstone this old whose job MySQL still calls waiting belongs to a cancel that
# failed half-way (or is very slow: it then changes nothing and tries again).
GRACE_MS = 5000
PAGE = 500  # tombstones read per slot and check
# Each check reads a slot's tombstones from where the last one was done with them; this
# often it reads them all again (what a script added below the cursor, e.g. a tombstone
# an undone cancel put back), asking MySQL only about the ones not judged before.
FULL_SCAN_S = 30.0


class Tombstones(Actor):
    name = "tombstones"

    def __init__(
        self,
        settings: Settings,
        scripts: Scripts,
        mysql: MySQLStore,
        ownership: Ownership,
        redis_now_ms: Callable[[], float],
    ) -> None:
        super().__init__()
        self.settings = settings
        self.scripts = scripts
        self.mysql = mysql
        self.ownership = ownership
        self.redis_now_ms = redis_now_ms  # the scanner's estimate of the Redis clock
        self.restored_total = 0  # jobs put back into Redis
        self.checks_total = 0  # checks that ran to the end
        # (slot, job id) → tombstone score found guarding a row that is not waiting.
        self._judged: dict[tuple[int, str], int] = {}
        # slot → the score up to which its tombstones are done with (absent: none).
        self._cursor: dict[int, int] = {}
        self._full_scan_at = 0.0  # time.monotonic() of the last read from the start

    def timers(self) -> list[tuple[float, Tick]]:
        return [(CHECK_INTERVAL_S, self.check_owned)]

    async def check_owned(self) -> None:
        try:
            await self.check()
        except Exception as exc:  # MySQL or Redis down: the next check tries again
            self.warn("tombstones: checking old tombstones failed, will retry: %s", exc)

    async def check(self) -> int:
        """One check of the owned slots; returns how many jobs it put back."""
        epochs = {slot: self.ownership.epoch(slot) for slot in sorted(self.ownership.owned())}
        if not epochs:
            return 0
        self._cursor = {slot: at for slot, at in self._cursor.items() if slot in epochs}
        if time.monotonic() - self._full_scan_at >= FULL_SCAN_S:
            self._cursor.clear()
            self._full_scan_at = time.monotonic()
        lifetime = self.settings.marker_retention_ms
        now = int(self.redis_now_ms())
        # Set GRACE_MS ago or earlier: scored (their expiry) at most now + lifetime - grace.
        after = {slot: self._cursor.get(slot) for slot in epochs}
        pages = await old_tombstones(self.scripts, after, now + lifetime - GRACE_MS, PAGE)
        marks: dict[tuple[int, int], dict[str, int]] = defaultdict(dict)  # shard → job → mark
        found: dict[str, tuple[int, int]] = {}  # job → (slot, tombstone score)
        for slot, page in pages.items():
            for job_id, score in page:
                if self._judged.get((slot, job_id)) != score:
                    shard = self.mysql.shard_of(job_id)
                    # Just after the cancel's Redis TIME: that cancel's UPDATE, and any
                    # earlier one's, changes nothing from now on. Never before the Redis
                    # time now, should the cancel's caller use a shorter lifetime.
                    marks[shard][job_id] = max(score - lifetime + 1, now + 1)
                    found[job_id] = (slot, score)
        restores: dict[int, list[Restore]] = defaultdict(list)
        for shard, table_marks in marks.items():
            pool = await self.mysql.pool_for(shard[0])
            table, _ = self.mysql.shard_tables(shard)
            rows = await job_writes.mark_restored(pool, table, table_marks)
            for row in rows:
                slot, score = found[row.job_id]
                add = row.due_ms < now + self.settings.redis_horizon_ms
                restores[slot].append(Restore(row.job_id, score, NewJob.from_record(row), add))
            for job_id in table_marks.keys() - {row.job_id for row in rows}:
                self._judged[(found[job_id][0], job_id)] = found[job_id][1]
        restored = 0
        undone: dict[int, set[str]] = {}  # slot → jobs whose tombstone is still to do
        for slot, wanted in restores.items():
            codes = await restore(self.scripts, slot, epochs[slot], wanted, lifetime, GRACE_MS)
            if codes is None:
                self.ownership.lost(slot, epochs[slot])
                codes = [RestoreCode.YOUNG] * len(wanted)
            elif isinstance(codes, SlotFailed):
                self.warn("tombstones: restoring jobs of slot %d failed: %s", slot, codes)
                codes = [RestoreCode.YOUNG] * len(wanted)
            restored += sum(code == RestoreCode.RESTORED for code in codes)
            undone[slot] = {
                one.job_id
                for one, code in zip(wanted, codes, strict=True)
                if code == RestoreCode.YOUNG
            }
        self._advance(pages, undone)
        # Tombstones long expired are not read again (cancels prune them).
        self._judged = {key: score for key, score in self._judged.items() if score > now - lifetime}
        if restored:
            self.restored_total += restored
            log.warning(
                "tombstones: put back %d job(s) whose cancel failed before MySQL recorded it",
                restored,
            )
        self.checks_total += 1
        return restored

    def _advance(
        self, pages: dict[int, list[tuple[str, int]]], undone: dict[int, set[str]]
    ) -> None:
        """Move each slot's cursor past the tombstones this check is done with: up to the
        first one still to do. Below a full page's last score, in case more share it."""
        for slot, page in pages.items():
            left = undone.get(slot, set())
            done_upto = self._cursor.get(slot)
            for index, (job_id, score) in enumerate(page):
                # The next read starts above the cursor: one still to do (or a full
                # page's last, which more may share) keeps its score above it.
                if job_id in left or (index == len(page) - 1 and len(page) == PAGE):
                    if done_upto is not None:
                        done_upto = min(done_upto, score - 1)
                    break
                done_upto = score
            if done_upto is not None:
                self._cursor[slot] = done_upto
