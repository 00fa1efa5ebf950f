"""The reconciler's passes over MySQL (actors/reconciler.py has the why): the full pass,
which adds to Redis every waiting job of some slots due within a bound that Redis lacks,
and the recent pass, which does so for the jobs created since a moment. Each goes over
every shard, the servers at once: a server down or frozen holds back only its own shards
(the pass then fails at its end, and is run again). `delayq recover` runs the full pass too.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cluster.model.contract import WAITING_STATUSES, AddCode, JobStatus
from cluster.scripts.facade import NewJob, Scripts
from cluster.settings.config import Settings
from cluster.store.mysql_store import JobRecord, MySQLStore, ms_to_datetime

PAGE = 1000


@dataclass
class ReconcileResult:
    examined: int = 0
    readded: int = 0  # added, but Redis should have held them: what it had lost
    loaded: int = 0  # added, having come within the horizon since the last load
    refused: int = 0  # cancelled or fired meanwhile


def load_bound_ms(settings: Settings) -> int:
    """Jobs due before this (local clock, ms) belong in Redis now."""
    return int(time.time() * 1000) + settings.redis_horizon_ms // 2


async def reconcile(
    settings: Settings,
    mysql: MySQLStore,
    scripts: Scripts,
    slots: Iterable[int],
    *,
    since_ms: int | None = None,
    until_ms: int | None = None,
    loaded_from_ms: Mapping[int, int] | None = None,
) -> ReconcileResult:
    """Add to Redis every pending or retrying job of `slots` due in [since_ms, until_ms)
    (unbounded where None) that Redis does not hold. An added job due at or after its
    slot's loaded_from_ms counts as loaded (tiering), any other as re-added (drift)."""
    wanted = sorted(set(slots))
    result = ReconcileResult()
    if not wanted:
        return result
    budget_s = settings.marker_retention_ms / 1000 / 2
    start = dt.datetime(1970, 1, 1) if since_ms is None else ms_to_datetime(since_ms)
    before = None if until_ms is None else ms_to_datetime(until_ms)

    async def load(shard: tuple[int, int]) -> None:
        for status in (JobStatus.PENDING, JobStatus.FIRING):
            await _reconcile_shard(
                mysql,
                scripts,
                shard,
                status,
                (start, ""),
                wanted,
                before,
                budget_s,
                result,
                loaded_from_ms,
            )

    # Each server's shards in turn, the servers at once: one down or frozen holds back
    # only its own shards; the pass then fails at its end and is run again.
    await mysql.on_every_shard(load)
    return result


async def _reconcile_shard(
    mysql: MySQLStore,
    scripts: Scripts,
    shard: tuple[int, int],
    status: JobStatus,
    cursor: tuple[dt.datetime, str],
    wanted: list[int],
    before: dt.datetime | None,
    budget_s: float,
    result: ReconcileResult,
    loaded_from_ms: Mapping[int, int] | None,
) -> None:
    while True:
        started = time.monotonic()
        rows = await mysql.pending_page(shard, status, cursor, wanted, PAGE, before)
        if not rows:
            return
        if time.monotonic() - started > budget_s:
            continue  # too slow to be safe against markers expiring: read it again
        await _add_records(scripts, rows, result, loaded_from_ms)
        result.examined += len(rows)
        last = rows[-1]
        cursor = (
            dt.datetime.fromtimestamp(last.due_ms / 1000, dt.UTC).replace(tzinfo=None),
            last.job_id,
        )


async def reconcile_recent(
    settings: Settings,
    mysql: MySQLStore,
    scripts: Scripts,
    slots: Iterable[int],
    *,
    created_after: dt.datetime,
    until_ms: int,
) -> ReconcileResult:
    """Add to Redis every pending or retrying job of `slots` created after
    `created_after` (MySQL's clock) and due before until_ms that Redis does not hold."""
    wanted = sorted(set(slots))
    result = ReconcileResult()
    if not wanted:
        return result
    budget_s = settings.marker_retention_ms / 1000 / 2
    before = ms_to_datetime(until_ms)

    async def recent(shard: tuple[int, int]) -> None:
        await _recent_shard(
            mysql, scripts, shard, created_after, wanted, before, until_ms, budget_s, result
        )

    await mysql.on_every_shard(recent)  # as reconcile()
    return result


async def _recent_shard(
    mysql: MySQLStore,
    scripts: Scripts,
    shard: tuple[int, int],
    created_after: dt.datetime,
    wanted: list[int],
    before: dt.datetime,
    until_ms: int,
    budget_s: float,
    result: ReconcileResult,
) -> None:
    cursor = (created_after, "")
    while page := await mysql.recent_waiting_page(shard, cursor, wanted, PAGE, before):
        cursor = (page[-1][0], page[-1][1])
        result.examined += len(page)
        absent = await _absent(scripts, page)
        if not absent:
            continue
        while True:
            started = time.monotonic()
            rows = sorted(
                (await mysql.get_many(absent)).values(), key=lambda r: (r.due_ms, r.job_id)
            )
            if time.monotonic() - started <= budget_s:
                break  # else too slow to be safe against markers expiring: read again
        # A row's status may have changed since the page was read.
        waiting = [r for r in rows if r.status in WAITING_STATUSES and r.due_ms < until_ms]
        await _add_records(scripts, waiting, result)


async def _add_records(
    scripts: Scripts,
    rows: Iterable[JobRecord],
    result: ReconcileResult,
    loaded_from_ms: Mapping[int, int] | None = None,
) -> None:
    """Run the add script on these MySQL rows (one pipelined round trip for all their
    slots) and count what it added (re-added, or loaded: due at or after the slot's
    loaded_from_ms) and refused into result."""
    by_slot: dict[int, list[NewJob]] = defaultdict(list)
    for row in rows:
        by_slot[row.slot].append(NewJob.from_record(row))
    if not by_slot:
        return
    for slot, (_, statuses) in (await scripts.add_many(by_slot)).items():
        result.refused += statuses.count(AddCode.REFUSED)
        fresh_from = None if loaded_from_ms is None else loaded_from_ms.get(slot)
        for job, status in zip(by_slot[slot], statuses, strict=True):
            if status != AddCode.ADDED:
                continue
            if fresh_from is not None and job.due_ms >= fresh_from:
                result.loaded += 1
            else:
                result.readded += 1


async def _absent(scripts: Scripts, page: list[tuple[dt.datetime, str, int]]) -> list[str]:
    """The job ids of a recent page that their slot's jobs hash lacks (one round trip)."""
    pipe = scripts.redis.pipeline(transaction=False)
    for _, job_id, slot in page:
        pipe.hexists(scripts.keys.slot(slot).jobs, job_id)
    present = await pipe.execute()
    return [job_id for (_, job_id, _), here in zip(page, present, strict=True) if not here]
