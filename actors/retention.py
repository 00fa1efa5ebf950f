"""retention: deletes the old fired and cancelled jobs of the slots this node owns.

Every retention_interval_s, the jobs of owned slots whose row last changed more than
retention_days ago go, with their history, in batches of retention_batch
(cluster/retention.py). Each slot has one owner, so each row is pruned by one node.
retention_days = 0 keeps everything. A failure (MySQL down) is logged and tried again
at the next interval.
"""

from __future__ import annotations

import logging

from actors.lifecycle import Actor, Tick
from actors.ownership import Ownership
from cluster.config import Settings
from cluster.mysql_store import MySQLStore
from cluster.retention import prune

log = logging.getLogger(__name__)

DAY_S = 86400.0


class Retention(Actor):
    name = "retention"

    def __init__(self, settings: Settings, mysql: MySQLStore, ownership: Ownership) -> None:
        super().__init__()
        self.settings = settings
        self.mysql = mysql
        self.ownership = ownership
        self.deleted_jobs_total = 0
        self.deleted_history_total = 0

    def timers(self) -> list[tuple[float, Tick]]:
        if not self.settings.retention_days:
            return []
        return [(self.settings.retention_interval_s, self.prune_owned)]

    async def prune_owned(self) -> None:
        owned = self.ownership.owned()
        if not owned:
            return
        s = self.settings
        try:
            pruned = await prune(
                self.mysql, s.retention_days * DAY_S, s.retention_batch, slots=owned
            )
        except Exception as exc:
            self.warn("retention: deleting old jobs failed, will retry: %s", exc)
            return
        self.deleted_jobs_total += pruned.jobs
        self.deleted_history_total += pruned.history
        if pruned.jobs:
            log.info(
                "retention: deleted %d fired or cancelled job(s) older than %g day(s) and "
                "%d history row(s)",
                pruned.jobs,
                s.retention_days,
                pruned.history,
            )
