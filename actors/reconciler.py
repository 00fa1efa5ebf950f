"""reconciler: loads pending jobs from MySQL into Redis: those nearing their due time,
and those Redis lost.

Redis holds only the near future (tiering): a job due more than `redis_horizon_ms`
ahead is written to MySQL alone (cluster/client/job_writer.py), and the reconciler of
the node owning its slot loads it when it comes within horizon/2. Per slot it remembers up to
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

Two more checks make recovery prompt when nothing fences the node, i.e. when Redis
lost writes but kept the owner keys (it came back from an AOF without its last second,
a failover promoted a replica that lagged) or never got them (a producer's add failed
after its MySQL commit: `RedisStepFailed`):

* The Redis watch asks Redis for its run_id (of every primary, in a Redis Cluster)
  every second (WATCH_INTERVAL_S, or recent_reconcile_ms if shorter). A new run_id means
  Redis restarted or another server took over, such as a replica promoted by a failover,
  which may lack the last writes its master acknowledged: the node fires nothing from
  it until it has re-applied MySQL's changes since the restored watermark (cancels,
  reschedules: actors/rollback.py), and every owned slot goes to the inbox for a full
  pass at once. No answer means Redis is unreachable from here, so
  adds may be failing for producers too: the watch notes the trouble.
* The recent pass runs once Redis answers again after such trouble: one paged query per
  shard, for all owned slots at once, over the pending and retrying rows created since
  RECENT_WINDOW (30 s) before the last check that found Redis healthy, due before now +
  horizon/2, walked along the gmt_create index (migration 002). It returns ids only;
  one pipelined HEXISTS per page tells which the slot's jobs hash lacks, and only those
  are read in full and given to the add script (which refuses a job cancelled or fired
  meanwhile, as above). It runs after trouble only, because its cost grows with the
  rows created in the window: 100k such rows in one shard took 2.2 s per pass when Redis
  held them all (0.9 s in MySQL, 1.3 s in the HEXISTS), 8 s when all were re-added.

A job whose Redis add was lost to a Redis restart, failover or outage that this node saw
therefore fires within seconds of Redis answering again. Jobs lost while this node could
reach Redis and Redis did not restart (a producer cut off from Redis alone, keys deleted
by hand) come back at the periodic full pass, or at once when the producer schedules
them again with the ids RedisStepFailed names.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections import defaultdict
from collections.abc import Iterable

from redis.asyncio.cluster import RedisCluster

from actors.lifecycle import Actor, Tick
from actors.ownership import Ownership
from actors.queues import SlotQueue
from actors.reconcile_passes import load_bound_ms, reconcile, reconcile_recent
from actors.rollback import SlotVerifier
from cluster.connections.redis_conn import RedisClient
from cluster.scripts.facade import Scripts
from cluster.settings.config import Settings
from cluster.store.mysql_store import MySQLStore

log = logging.getLogger(__name__)

# The recent pass re-checks rows created this long before its last successful start:
# room for a commit that becomes visible well after its INSERT stamped gmt_create (a
# large multi-shard schedule_many). Each row is examined about window/interval times,
# ~22 us each when Redis has it (docs/guarantees.md), so the window is not made longer.
RECENT_WINDOW = dt.timedelta(seconds=30)
# How often the Redis watch asks for the run_ids: a Redis Cluster failover that lost
# writes is found within this of the promotion (one INFO per primary).
WATCH_INTERVAL_S = 1.0


async def redis_identity(redis: RedisClient) -> frozenset[str]:
    """The run_id of the Redis server (of every primary of a Redis Cluster): it changes
    when Redis restarted, or another server took over, and may have lost writes."""
    if isinstance(redis, RedisCluster):
        reply = await redis.info("server", target_nodes=RedisCluster.PRIMARIES)
        infos = [reply] if "run_id" in reply else list(reply.values())
    else:
        infos = [await redis.info("server")]
    return frozenset(str(info.get("run_id", "")) for info in infos)


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
        self.redis_restarts_seen = 0
        # Slot → every pending row due before this (ms) has been added to Redis.
        self._loaded_until: dict[int, int] = {}
        # MySQL's time at the start of the last recent pass that succeeded.
        self._recent_since: dt.datetime | None = None
        self._recent_failing = False
        self._redis_identity: frozenset[str] | None = None
        # Each owned slot verified on its Redis server before claims (actors/rollback.py).
        self.verifier = SlotVerifier(settings, mysql, scripts, ownership)
        # Set when the watch found Redis unreachable; cleared by a recent pass.
        self._redis_trouble = False

    def timers(self) -> list[tuple[float, Tick]]:
        s = self.settings
        return [
            (s.reconcile_interval_ms / 1000, self._sweep),
            (s.redis_horizon_ms / 4000, self._load_ahead_tick),
            (s.recent_reconcile_ms / 1000, self._recent_tick),
            (min(s.recent_reconcile_ms / 1000, WATCH_INTERVAL_S), self.watch_redis),
        ]

    async def body(self) -> None:
        """Full passes over the slots that come through the inbox (taken slots, the
        periodic sweep, a Redis restart, `delayq recover`)."""
        await self.watch_redis()  # the Redis this node's take-time passes filled
        while (slots := await self.next_batch(self.inbox)) is not None:
            owned = [slot for slot in slots if self.ownership.owns(slot)]
            await self._verify(slot for slot in owned if slot not in self._loaded_until)
            until = load_bound_ms(self.settings)
            # Jobs due after what was loaded already were MySQL's only (tiering); before
            # it, Redis should hold them. A slot just taken: its last owner loaded at
            # least horizon/4 ahead (it loads up to horizon/2 ahead every horizon/4).
            taken_bound = int(time.time() * 1000) + self.settings.redis_horizon_ms // 4
            loaded_from = {slot: self._loaded_until.get(slot, taken_bound) for slot in owned}
            try:
                result = await reconcile(
                    self.settings,
                    self.mysql,
                    self.scripts,
                    owned,
                    until_ms=until,
                    loaded_from_ms=loaded_from,
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
            self.loaded_total += result.loaded
            if result.readded or result.loaded:
                log.info(
                    "added %d job(s) from MySQL to %d slot(s): %d Redis had lost, %d that "
                    "came within the horizon (%d examined)",
                    result.readded + result.loaded,
                    len(owned),
                    result.readded,
                    result.loaded,
                    result.examined,
                )

    def reconciled_slots(self) -> frozenset[int]:
        """The owned slots that had a full pass since this node took them."""
        return frozenset(self._loaded_until) & self.ownership.owned()

    async def _sweep(self) -> None:
        """Every reconcile_interval_ms, a full pass over every owned slot."""
        for slot in sorted(self.ownership.owned()):
            await self.inbox.put(slot)

    async def _recent_tick(self) -> None:
        """Every recent_reconcile_ms: after Redis trouble, re-add the recently created
        jobs Redis lacks; otherwise only remember where such a pass would start."""
        try:
            if not self._redis_trouble:
                self._recent_since = await self.mysql.server_now()
                return
            await self.recent_pass()
            self._redis_trouble = False
        except Exception as exc:  # MySQL or Redis down: the next tick covers this one's rows
            if not self._recent_failing:
                log.warning("re-checking recently scheduled jobs failed, will retry: %s", exc)
            self._recent_failing = True
        else:
            self._recent_failing = False

    async def recent_pass(self) -> int:
        """One recent pass over the owned slots (module docstring); returns how many jobs
        it added."""
        owned = self.ownership.owned()
        if not owned:
            return 0
        started = await self.mysql.server_now()
        since = (self._recent_since or started) - RECENT_WINDOW
        result = await reconcile_recent(
            self.settings,
            self.mysql,
            self.scripts,
            owned,
            created_after=since,
            until_ms=load_bound_ms(self.settings),
        )
        self._recent_since = started
        self.readded_total += result.readded
        if result.readded:
            log.info(
                "added %d recently scheduled job(s) that Redis lacked (%d examined)",
                result.readded,
                result.examined,
            )
        return result.readded

    async def watch_redis(self) -> None:
        """Queue a full pass of every owned slot when Redis's run_id changed."""
        try:
            identity = await redis_identity(self.scripts.redis)
        except Exception:  # unreachable: compare once it is back, then a recent pass
            if not self._redis_trouble:
                log.warning("Redis does not answer; recently scheduled jobs will be checked")
            self._redis_trouble = True
            return
        previous, self._redis_identity = self._redis_identity, identity
        await self._verify(self.ownership.owned())
        if previous is None or previous == identity:
            return
        owned = sorted(self.ownership.owned())
        self.redis_restarts_seen += 1
        log.warning(
            "Redis restarted or failed over (run_id changed); re-adding the pending jobs "
            "of %d owned slot(s) from MySQL",
            len(owned),
        )
        for slot in owned:
            await self.inbox.put(slot)

    async def _verify(self, slots: Iterable[int]) -> None:
        try:
            await self.verifier.check(sorted(slots))
        except Exception as exc:  # MySQL or Redis down: nothing fires from them meanwhile
            self.warn("making Redis agree with MySQL failed, will retry: %s", exc)

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
        groups = [(since, slots) for since, slots in by_since.items() if since < until]
        # All at once: a server down or frozen fails each group's pass only once its
        # other servers' part is done, and holds back no other group.
        results = await asyncio.gather(
            *(
                reconcile(
                    self.settings, self.mysql, self.scripts, slots, since_ms=since, until_ms=until
                )
                for since, slots in groups
            ),
            return_exceptions=True,
        )
        failure: BaseException | None = None
        for (_, slots), result in zip(groups, results, strict=True):
            if isinstance(result, BaseException):
                failure = failure or result
                continue
            for slot in slots:  # a take-time pass meanwhile may have gone further
                self._loaded_until[slot] = max(self._loaded_until.get(slot, 0), until)
            added += result.readded + result.loaded
        self.loaded_total += added
        if failure is not None:
            raise failure
        return added
