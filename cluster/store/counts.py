"""Pending jobs (pending or retrying) per topic and in total, split at the Redis horizon:
due within `redis_horizon_ms` of now (in Redis, or loaded into it by the owning node
before they are due) and beyond it (in MySQL alone). Cheap enough to refresh every few
seconds on any number of rows (docs/operations.md, "Pending counts"):

- The topics with waiting jobs come from a loose index scan of idx_status_topic_due
  (migration 009): one index dive per (status, topic), however many rows each has. At
  most MAX_TOPICS topics per table are listed (the first by name); the total still
  counts every topic.
- Each (topic, tier) range of that index is first estimated with EXPLAIN (InnoDB's
  records-in-range dives: a few index pages, whatever the range holds); the ranges
  whose estimate is small are then counted exactly, smallest first, until EXACT_ROWS
  rows per table are spent. The others keep their estimate and are marked approximate.
- InnoDB's estimate of a range wider than a few pages is rough (it doubles what its
  dives find, "as the algorithm tends to underestimate"): off by up to 2x. So the
  estimates of a table are calibrated by one probe: the first PROBE_ROWS entries of its
  biggest estimated range, counted exactly and estimated, give the factor applied to
  every estimate of the table of at least CALIBRATED_FROM rows (a narrower range may
  be within the few pages InnoDB counts exactly; such ranges are nearly always within
  the exact budget anyway). docs/benchmarks.md measures what is left of the error.
- One connection per server; the tables of a server are read one after the other.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cluster.model.contract import WAITING_STATUSES
from cluster.store import sql
from cluster.store.sharded import ShardedStore

# Topics listed per table at most (a loose index scan reads one index entry per topic).
MAX_TOPICS = 1000
# Index entries one refresh counts exactly per table at most; ranges beyond that budget
# keep InnoDB's estimate. Counting reads about 5-10 million entries a second.
EXACT_ROWS = 100_000
# EXPLAIN and COUNT statements carry at most this many ranges each (UNION ALL parts).
PARTS_PER_STATEMENT = 200
# Index entries the calibration probe of a table reads at most, and the estimates it
# corrects (InnoDB counts a range within 10 leaf pages, about 3,000 entries, exactly).
PROBE_ROWS = 20_000
CALIBRATED_FROM = 5_000

_WAITING = sql.int_list(WAITING_STATUSES)
_BY_TOPIC = "idx_status_topic_due"  # migration 009
_BY_DUE = "idx_status_action_time"  # for the whole table's ranges
_NEAR, _FAR = "in_redis", "beyond_horizon"


@dataclass
class TierCounts:
    """Pending jobs due within the horizon (in_redis) and beyond it; approximate when
    some part is InnoDB's estimate rather than a count."""

    in_redis: int = 0
    beyond_horizon: int = 0
    in_redis_estimated: bool = False
    beyond_estimated: bool = False

    @property
    def approximate(self) -> bool:
        return self.in_redis_estimated or self.beyond_estimated

    @property
    def pending(self) -> int:
        return self.in_redis + self.beyond_horizon

    def add(self, other: TierCounts) -> None:
        self.in_redis += other.in_redis
        self.beyond_horizon += other.beyond_horizon
        self.in_redis_estimated = self.in_redis_estimated or other.in_redis_estimated
        self.beyond_estimated = self.beyond_estimated or other.beyond_estimated

    def as_dict(self) -> dict[str, Any]:
        return {
            "in_redis": self.in_redis,
            "beyond_horizon": self.beyond_horizon,
            "approximate": self.approximate,
        }


@dataclass
class PendingCounts:
    """The answer of one refresh. topics: biggest first; more_topics: some table had
    more than MAX_TOPICS topics, so `topics` leaves some out (total does not)."""

    total: TierCounts
    topics: dict[str, TierCounts]
    horizon_ms: int
    as_of_ms: int
    more_topics: bool = False
    took_ms: float = 0.0

    def top(self, limit: int | None = None) -> list[tuple[str, TierCounts]]:
        """(topic, counts), most pending first, then by name."""
        ranked = sorted(self.topics.items(), key=lambda item: (-item[1].pending, item[0]))
        return ranked if limit is None else ranked[:limit]

    def as_dict(self, limit: int | None = None) -> dict[str, Any]:
        return {
            "total": self.total.as_dict(),
            "topics": [{"topic": t, **c.as_dict()} for t, c in self.top(limit)],
            "more_topics": self.more_topics or (limit is not None and len(self.topics) > limit),
            "horizon_ms": self.horizon_ms,
            "as_of_ms": self.as_of_ms,
        }


@dataclass
class _Range:
    """One index range to count: a topic's jobs (None: every topic's) on one side of
    the edge."""

    topic: str | None
    tier: str
    estimate: int = 0
    count: int | None = None  # exact, once counted

    @property
    def index(self) -> str:
        return _BY_DUE if self.topic is None else _BY_TOPIC

    def where(self, statuses: str = _WAITING) -> tuple[str, tuple[Any, ...]]:
        """The condition, and its parameters but the edge (always last)."""
        side = "action_time <= %s" if self.tier == _NEAR else "action_time > %s"
        if self.topic is None:
            return f"status IN ({statuses}) AND {side}", ()
        return f"status IN ({statuses}) AND topic = %s AND {side}", (self.topic,)


@dataclass
class _TableCounts:
    topics: dict[str, TierCounts] = field(default_factory=dict)
    total: TierCounts = field(default_factory=TierCounts)
    more_topics: bool = False


async def pending_counts(
    store: ShardedStore,
    horizon_ms: int,
    *,
    exact_rows: int = EXACT_ROWS,
    max_topics: int = MAX_TOPICS,
) -> PendingCounts:
    """Count every shard's pending jobs, per topic and in total, split at now +
    horizon_ms (the producers' edge: a job due later is written to MySQL alone)."""
    started = time.perf_counter()
    as_of = int(time.time() * 1000)
    edge = sql.ms_to_datetime(as_of + horizon_ms)

    async def read(conn: Any, dbs: list[int]) -> list[_TableCounts]:
        tables = [store.shard_tables(shard)[0] for shard in store.all_shards(dbs)]
        async with conn.cursor() as cur:
            return [await count_table(cur, t, edge, exact_rows, max_topics) for t in tables]

    dbs = list(range(store.settings.mysql_databases))
    parts = [table for server in await store.router.run_grouped(dbs, read) for table in server]
    answer = PendingCounts(TierCounts(), {}, horizon_ms, as_of)
    for part in parts:
        answer.total.add(part.total)
        answer.more_topics = answer.more_topics or part.more_topics
        for topic, counts in part.topics.items():
            answer.topics.setdefault(topic, TierCounts()).add(counts)
    answer.took_ms = (time.perf_counter() - started) * 1000
    return answer


async def count_table(
    cur: Any, table: str, edge: Any, exact_rows: int, max_topics: int
) -> _TableCounts:
    """One job table's counts (see the module's docstring)."""
    found = _TableCounts()
    topics = await waiting_topics(cur, table, max_topics + 1)
    found.more_topics = len(topics) > max_topics
    topics = topics[:max_topics]
    ranges = [_Range(topic, tier) for topic in topics for tier in (_NEAR, _FAR)]
    if found.more_topics:  # the total must then count the topics left out too
        ranges += [_Range(None, _NEAR), _Range(None, _FAR)]
    await _estimate(cur, table, ranges, edge)
    chosen, budget = [], exact_rows
    for part in sorted(ranges, key=lambda r: r.estimate):  # smallest first
        if part.estimate > budget:
            break
        budget -= part.estimate
        chosen.append(part)
    await _count(cur, table, chosen, edge)
    estimated = [part for part in ranges if part.count is None]
    if estimated:
        factor = await calibration(cur, table, max(estimated, key=lambda r: r.estimate), edge)
        for part in estimated:
            if part.estimate >= CALIBRATED_FROM:  # narrower ones may be exact already
                part.estimate = round(part.estimate * factor)
    for part in ranges:
        exact = part.count is not None
        value = part.count if part.count is not None else part.estimate
        if part.topic is None:
            counts = found.total
        else:
            counts = found.topics.setdefault(part.topic, TierCounts())
        if part.tier == _NEAR:
            counts.in_redis, counts.in_redis_estimated = value, not exact
        else:
            counts.beyond_horizon, counts.beyond_estimated = value, not exact
    if not found.more_topics:
        for counts in found.topics.values():
            found.total.add(counts)
    return found


async def waiting_topics(cur: Any, table: str, limit: int) -> list[str]:
    """The topics that have pending or retrying jobs in one table, at most `limit`
    (sorted): a loose index scan (EXPLAIN: "Using index for group-by"), one index dive
    per (status, topic) rather than a read of every row."""
    await cur.execute(
        f"SELECT topic FROM {table} FORCE INDEX ({_BY_TOPIC}) WHERE status IN ({_WAITING})"
        f" GROUP BY status, topic LIMIT {int(limit) * len(WAITING_STATUSES)}"
    )
    return sorted({str(topic) for (topic,) in await cur.fetchall()})[:limit]


def _chunks(ranges: Sequence[_Range]) -> Iterable[Sequence[_Range]]:
    for start in range(0, len(ranges), PARTS_PER_STATEMENT):
        yield ranges[start : start + PARTS_PER_STATEMENT]


def _union(table: str, ranges: Sequence[_Range], edge: Any) -> tuple[str, list[Any]]:
    """One COUNT(*) per range over idx_status_topic_due, as one UNION ALL statement whose
    parts answer in order (each part is tagged with its place: a UNION's row order is
    not guaranteed)."""
    selects, params = [], []
    for place, part in enumerate(ranges):
        where, values = part.where()
        selects.append(
            f"SELECT {place}, COUNT(*) FROM {table} FORCE INDEX ({part.index}) WHERE {where}"
        )
        params += [*values, edge]
    return " UNION ALL ".join(selects), params


async def _estimate(cur: Any, table: str, ranges: Sequence[_Range], edge: Any) -> None:
    """Each range's estimated rows: EXPLAIN of the counts, one row per UNION part (id 1,
    2, ... in order; the union result's own row has no id)."""
    for chunk in _chunks(ranges):
        statement, params = _union(table, chunk, edge)
        await cur.execute(f"EXPLAIN {statement}", params)
        columns = [column[0] for column in cur.description]
        for row in await cur.fetchall():
            plan = dict(zip(columns, row, strict=True))
            if plan.get("id") is None:
                continue
            chunk[int(plan["id"]) - 1].estimate = int(plan.get("rows") or 0)


async def _count(cur: Any, table: str, ranges: Sequence[_Range], edge: Any) -> None:
    for chunk in _chunks(ranges):
        statement, params = _union(table, chunk, edge)
        await cur.execute(statement, params)
        for place, counted in await cur.fetchall():
            chunk[int(place)].count = int(counted)


async def calibration(cur: Any, table: str, part: _Range, edge: Any) -> float:
    """exact / estimated rows of the first PROBE_ROWS index entries of `part` (of its
    first status; all of them when it holds fewer): the factor that corrects the
    table's estimates. Reads at most PROBE_ROWS entries; 1.0 for an empty range."""
    status = min(WAITING_STATUSES)
    where, values = part.where(str(int(status)))
    probe = f"FROM {table} FORCE INDEX ({part.index}) WHERE {where}"
    params: tuple[Any, ...] = (*values, edge)
    await cur.execute(
        f"SELECT action_time {probe} ORDER BY action_time LIMIT 1 OFFSET {PROBE_ROWS - 1}",
        params,
    )
    row = await cur.fetchone()
    if row is not None:  # the first PROBE_ROWS entries, up to that due time
        probe += " AND action_time <= %s"
        params += (row[0],)
    await cur.execute(f"EXPLAIN SELECT COUNT(*) {probe}", params)
    columns = [column[0] for column in cur.description]
    estimate = int(dict(zip(columns, await cur.fetchone(), strict=True)).get("rows") or 0)
    await cur.execute(f"SELECT COUNT(*) {probe}", params)
    (exact,) = await cur.fetchone()
    return int(exact) / estimate if estimate > 0 and exact else 1.0
