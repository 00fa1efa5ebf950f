"""recurring: makes the ticks of the recurring schedules of this node's slots into jobs.

A recurring schedule belongs to slot_of(name), and the node owning that slot makes its
ticks into ordinary jobs ahead of time. Every recurring_poll_ms this actor reads, shard
by shard, the schedules of its owned slots whose next tick is due within
recurring_lookahead_ms / 2 (migration 005), and for each, in one transaction
(cluster/store/recurring_store.py):

* moves the schedule's cursor (`next_tick`, the first tick not made yet) on to the
  first tick due more than the lookahead from now, with a compare-and-set on the cursor
  and the definition's generation, recording this node's epoch of the slot;
* writes each tick in between as a job whose id is derived from the schedule and the
  tick (cluster/model/tick_ids.py), with an outbox row: the outbox actor of the node owning
  the tick's own slot adds it to Redis within outbox_poll_ms (actors/outbox.py);
* commits only while the slot's owner key in Redis carries this node's epoch, read
  after those writes (fencing, as every owner script is fenced): a node that lost the
  slot rolls back and drops it.

So each tick is one job: the cursor moves once per tick, and should two nodes make the
same tick during a hand-off (one that lost the slot between its fence check and its
commit), they write the same row (one job per id; the later compare-and-set finds the
cursor moved and rolls its transaction back). Correctness rests on the ids and the
cursor; the fence only stops a node that lost the slot from working on it. A node killed
before its commit wrote nothing, and the slot's next owner makes those ticks; killed
after it, the ticks are jobs with outbox rows, added by whichever node owns their slots.
Ticks made ahead keep firing while the schedule's slot changes hands, so a hand-off
shorter than lookahead / 2 delays no tick.

A tick that no node made into a job before its time (every node down, or the slot
without an owner, for longer than lookahead / 2) is missed, and the schedule's policy
decides (cluster/model/ticks.py plan): "fire_once" makes the last missed tick a job, due
already, so it fires at once; "skip" makes none. Either way the schedule goes on with
its next tick: never a storm of catch-up jobs.
"""

from __future__ import annotations

import logging

from actors.lifecycle import Actor
from actors.ownership import Ownership
from cluster.model.jobs import now_ms
from cluster.model.ticks import plan
from cluster.scripts.facade import Scripts
from cluster.settings.config import Settings
from cluster.store.mysql_store import MySQLStore
from cluster.store.recurring_store import RecurringSchedule, RecurringStore

log = logging.getLogger(__name__)

# Schedules read per shard per round trip.
PAGE = 500


class _Fenced(Exception):
    """The slot's owner key carries another epoch: roll the transaction back."""


class RecurringTicks(Actor):
    name = "recurring"

    def __init__(
        self, settings: Settings, scripts: Scripts, mysql: MySQLStore, ownership: Ownership
    ) -> None:
        super().__init__()
        self.settings = settings
        self.scripts = scripts
        self.store = RecurringStore(mysql)
        self.ownership = ownership
        # Read by the metrics endpoint and node stats.
        self.made_total = 0  # ticks made into jobs
        self.missed_total = 0  # ticks missed that will never fire (their policy)

    async def body(self) -> None:
        # MySQL down: the cursors stay, and the next round goes on from them.
        await self.drain_every(
            self.settings.recurring_poll_ms / 1000,
            self.make_once,
            "making recurring ticks into jobs failed",
        )

    async def make_once(self) -> bool:
        """One page of due schedules per shard; True when a page was full."""
        owned = sorted(self.ownership.owned())
        if not owned:
            return False
        half = self.settings.recurring_lookahead_ms // 2
        full = False

        async def make_due(shard: tuple[int, int]) -> None:
            nonlocal full
            due = await self.store.due_page(shard, owned, now_ms() + half, PAGE)
            full = full or len(due) == PAGE
            for schedule in due:
                if self.stopping:
                    return
                await self.make(schedule)

        # A server down or frozen holds back only the schedules of its own shards.
        await self.store.mysql.on_every_shard(make_due)
        return full and not self.stopping

    async def make(self, schedule: RecurringSchedule) -> bool:
        """Make the schedule's ticks due within the lookahead into jobs; False when
        another node or a client changed it first, or this node no longer owns it."""
        if schedule.next_tick_ms is None or not self.ownership.owns(schedule.slot):
            return False
        try:
            epoch = self.ownership.epoch(schedule.slot)
        except KeyError:  # lost since owns() answered
            return False
        definition = schedule.definition
        now = now_ms()
        made = plan(
            definition.cadence,
            schedule.next_tick_ms,
            now,
            now + self.settings.recurring_lookahead_ms,
            definition.missed,
        )
        try:
            async with self.store.transaction(schedule.name) as (conn, cur):
                done = await self.store.make_ticks(
                    conn, cur, schedule, epoch, made.ticks, made.cursor
                )
                if done and await self._owner_epoch(schedule.slot) != epoch:
                    raise _Fenced
        except _Fenced:
            self.ownership.lost(schedule.slot, epoch)
            return False
        if not done:
            return False  # another node or a client changed it: the next round reads it
        self.made_total += len(made.ticks)
        if made.missed_from is not None:
            self.missed_total += made.missed
            log.warning(
                "recurring %s: ticks from %d to %d ms were not made into jobs in time (no "
                "node made them); missed=%s: %d%s of them will never fire",
                schedule.name,
                made.missed_from,
                made.missed_until,
                definition.missed,
                made.missed,
                "" if made.missed_all_counted else " or more",
                extra={"slot": schedule.slot},
            )
        return True

    async def _owner_epoch(self, slot: int) -> int:
        """The epoch in the slot's owner key in Redis (lua/take.lua writes it)."""
        value = await self.scripts.redis.get(self.scripts.keys.slot(slot).owner)
        return int(value or 0)
