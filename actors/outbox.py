"""outbox: adds to Redis the jobs that callers scheduled inside their own transactions.

DelayClient.schedule_in() writes a job's row and an outbox row through the caller's
connection, inside the caller's transaction (migration 004), and nothing to Redis: the
job must not exist before that transaction commits, and Redis cannot wait for it. The
outbox row becomes visible exactly when the transaction commits (never, for a rollback),
whatever time its INSERT ran, so no cursor over creation times can miss it.

Every outbox_poll_ms this actor reads the oldest outbox rows of the slots this node owns
(a page per shard, all shards in one statement, so an idle poll is one round trip), and
for each shard with rows reads their job rows, runs the add script for those still waiting
and due within the Redis horizon (later ones are loaded by the reconciler in time), and
deletes the outbox rows. A node killed between the add and the delete leaves the rows,
and the next owner adds them again, which changes nothing for a job Redis holds; a job
cancelled or fired meanwhile is refused by the add script's markers, and skipped when its
row says so. When a page comes back full, the next one is read at once.
"""

from __future__ import annotations

import logging
from collections import defaultdict

from actors.lifecycle import Actor
from actors.ownership import Ownership
from cluster.model.contract import WAITING_STATUSES
from cluster.model.jobs import now_ms
from cluster.scripts.facade import NewJob, Scripts
from cluster.settings.config import Settings
from cluster.store.mysql_store import MySQLStore

log = logging.getLogger(__name__)

# Outbox rows read per shard per round trip.
PAGE = 1000


class Outbox(Actor):
    name = "outbox"

    def __init__(
        self, settings: Settings, scripts: Scripts, mysql: MySQLStore, ownership: Ownership
    ) -> None:
        super().__init__()
        self.settings = settings
        self.scripts = scripts
        self.mysql = mysql
        self.ownership = ownership
        self.added_total = 0  # outbox rows handled (their jobs added, or not waiting)

    async def body(self) -> None:
        # MySQL or Redis down: the rows stay for the next round.
        await self.drain_every(
            self.settings.outbox_poll_ms / 1000,
            self.drain_once,
            "adding jobs from the outbox failed",
        )

    async def drain_once(self) -> bool:
        """One page per shard, read in one statement; True when a page was full (more
        rows are waiting)."""
        owned = sorted(self.ownership.owned())
        if not owned:
            return False
        full = False
        for shard, page in (await self.mysql.outbox_pages(owned, PAGE)).items():
            full = full or len(page) == PAGE
            job_ids = list(dict.fromkeys(job_id for _, job_id, _ in page))
            rows = await self.mysql.get_many(job_ids)
            horizon_end = now_ms() + self.settings.redis_horizon_ms
            by_slot: dict[int, list[NewJob]] = defaultdict(list)
            for job_id in job_ids:
                row = rows.get(job_id)
                if row is not None and row.status in WAITING_STATUSES and row.due_ms < horizon_end:
                    by_slot[row.slot].append(NewJob.from_record(row))
            if by_slot:
                await self.scripts.add_many(by_slot)  # SlotsFailed: the rows stay
            await self.mysql.delete_outbox(shard, [row_id for row_id, _, _ in page])
            self.added_total += len(page)
        return full
