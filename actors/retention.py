"""retention: deletes the old fired, cancelled and expired jobs of the slots this node owns.

Every retention_interval_s, the jobs of owned slots whose row last changed more than
retention_days ago go, with their history, in batches of retention_batch
(cluster/store/retention.py). Each slot has one owner, so each row is pruned by one node; the
owned slots are read again before every batch, so a slot handed over mid-pass is left
to its new owner. retention_days = 0 keeps everything.

Each batch is a step of its own, with a pass through the event loop in between: a first
pass through a large backlog may take minutes, but no single step takes long enough to
count as stuck (stall_timeout_s), and the node's other actors keep running. A failure
(MySQL down) is logged and the pass tried again at the next interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from actors.lifecycle import Actor, Tick
from actors.ownership import Ownership
from cluster.settings.config import Settings
from cluster.store.mysql_store import MySQLStore
from cluster.store.retention import Pruned, age_text, prune_batches

log = logging.getLogger(__name__)

DAY_S = 86400.0


class Retention(Actor):
    name = "retention"

    def __init__(self, settings: Settings, mysql: MySQLStore, ownership: Ownership) -> None:
        super().__init__()
        self.settings = settings
        self.mysql = mysql
        self.ownership = ownership
        # Read by the metrics endpoint (delayq_retention_deleted_total).
        self.deleted_jobs_total = 0
        self.deleted_history_total = 0

    def timers(self) -> list[tuple[float, Tick]]:
        if not self.settings.retention_days:
            return []
        return [(self.settings.retention_interval_s, self.prune_owned)]

    async def prune_owned(self) -> None:
        """One pass over the owned slots, batch by batch; logs what it deleted."""
        if not self.ownership.owned():
            return
        s = self.settings
        this_pass = Pruned()
        batches = prune_batches(
            self.mysql, s.retention_days * DAY_S, s.retention_batch, slots=self.ownership.owned
        )
        try:
            async with contextlib.aclosing(batches):
                async for done in batches:
                    this_pass += done
                    self.deleted_jobs_total += done.jobs
                    self.deleted_history_total += done.history
                    if self.stopping:
                        break
                    with self.waiting():  # the next batch is a new step
                        await asyncio.sleep(0)
        except Exception as exc:  # MySQL down or failing: the next interval tries again
            self.warn(
                "retention: deleting old jobs failed (after %d job(s) this pass), will "
                "retry in %g s: %s",
                this_pass.jobs,
                s.retention_interval_s,
                exc,
            )
            return
        if this_pass.jobs:
            log.info(
                "retention: deleted %d fired, cancelled or expired job(s) and %d history row(s) "
                "older than %s",
                this_pass.jobs,
                this_pass.history,
                age_text(s.retention_days * DAY_S),
            )
