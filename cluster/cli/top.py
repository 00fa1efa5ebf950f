"""`delayq top`: a live view of a cluster, refreshed every second.

    delayq top                    # until Ctrl-C
    delayq top --once [--json]    # one snapshot, for scripts and tests

Each refresh takes a snapshot of the cluster (cluster/observe/snapshot.py: the members,
the slot map and every slot's depth as `delayq cluster status` reads them, over one
ZooKeeper session and Redis connection kept between refreshes, and every member's
/metrics; nodes run without metrics_port show "metrics off"). Fire rates and lateness
quantiles are over the last refresh interval. The pending jobs in MySQL, due within the
Redis horizon and beyond it (cluster/store/counts.py), are counted at most every
CACHE_S seconds. This module draws it with rich.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

import aiohttp
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from cluster.cli.output import shown, shown_json
from cluster.client.counts import CACHE_S, PendingCountsCache
from cluster.observe.pending_view import tiers
from cluster.observe.scrape_guard import scrape_session
from cluster.observe.snapshot import SCRAPE_TIMEOUT_S, Snapshot, SnapshotReader
from cluster.observe.status import SlotStatus
from cluster.settings.config import Settings
from cluster.store.counts import PendingCounts
from cluster.store.sharded import ShardedStore

# Topics the pending table lists, most pending first.
PENDING_TOPICS = 5
# How long one count may take before the view shows it as failed.
COUNT_TIMEOUT_S = 5.0


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} ms"


def _text(value: object) -> Text:
    """Text from ZooKeeper, a scrape or an error: rich must not read it as markup, and the
    terminal must not interpret its control characters."""
    return Text(shown(value))


def _yes(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "NO")


def busiest_slots(slot_status: Iterable[SlotStatus]) -> list[SlotStatus]:
    """The most overdue slots first, then the deepest (delay + ready + in flight)."""
    return sorted(
        slot_status, key=lambda s: (-s.overdue_ms, -(s.delay + s.ready + s.inflight), s.slot)
    )


def render(
    snapshot: Snapshot,
    height: int = 50,
    problem: str | None = None,
    pending: PendingCounts | str | None = None,
) -> Group:
    """The screen: a header, then members, topics, the pending jobs and the busiest
    slots, cut to `height` lines. `problem` is why the last refresh failed (the snapshot
    is then older); `pending`: the last count, or why it failed."""
    # What the header and the tables' titles, headers and borders take (about 16 lines).
    room = max(3, height - 16 - len(snapshot.members) - len(snapshot.topics))
    parts: list[Table | Text] = [_header(snapshot, problem), _members(snapshot), _topics(snapshot)]
    if isinstance(pending, str):
        parts.append(Text(f"pending: count failed: {shown(pending)}", "bold red"))
        room -= 1
    elif pending is not None:
        parts.append(_pending(pending))
        room -= 5 + min(len(pending.topics), PENDING_TOPICS)
    return Group(*parts, _slots(snapshot, max(3, room)))


def _pending(pending: PendingCounts) -> Table:
    """The pending jobs in MySQL: within the Redis horizon and beyond it (~: estimate)."""
    near, far, both = tiers(pending.total)
    table = Table(
        title=f"pending in MySQL: {both} (horizon {pending.horizon_ms / 1000:g} s; ~: estimate)",
        title_justify="left",
    )
    for column in ("topic", "within horizon", "beyond horizon", "pending"):
        table.add_column(column, justify="left" if column == "topic" else "right")
    table.add_row("(all)", near, far, both)
    for topic, counts in pending.top(PENDING_TOPICS):
        table.add_row(_text(topic), *tiers(counts))
    if len(pending.topics) > PENDING_TOPICS or pending.more_topics:
        table.add_row("...", "", "", "")
    return table


async def _count(cache: PendingCountsCache) -> PendingCounts | str:
    """The pending counts (at most CACHE_S old), or why they could not be read: MySQL
    away for a moment must not end the view."""
    try:
        async with asyncio.timeout(COUNT_TIMEOUT_S):  # a hung server must not freeze the view
            return await cache.get()
    except TimeoutError:
        return f"MySQL did not answer within {COUNT_TIMEOUT_S:g} s"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def _header(snapshot: Snapshot, problem: str | None) -> Text:
    over = snapshot.oldest_overdue_ms
    window = snapshot.window_s
    rate = f"fired {snapshot.fire_rate:,.0f}/s" if window else "fire rate after the next refresh"
    head = Text.assemble(
        (f"delayq {shown(snapshot.root)}", "bold"),
        f"  {snapshot.slots} slots, {len(snapshot.members)} member(s)\n",
        f"jobs: {snapshot.delay:,} delayed, {snapshot.ready:,} ready, "
        f"{snapshot.inflight:,} in flight, {snapshot.dead:,} dead letters\n",
        f"{rate}  ",
        (f"oldest overdue {over / 1000:.3f} s" if over else "nothing overdue"),
        (f"  (rates and lateness over the last {window:.1f} s)" if window else ""),
    )
    if problem:
        head.append(f"\nrefresh failed, showing the last snapshot: {shown(problem)}", "bold red")
    return head


def _members(snapshot: Snapshot) -> Table:
    members = Table(title="members", title_justify="left", expand=False)
    for column in ("member", "node", "host", "pid", "slots", "healthy", "ready", "fired/s"):
        members.add_column(
            column, justify="right" if column in ("pid", "slots", "fired/s") else "left"
        )
    for m in snapshot.members:
        members.add_row(
            _text(m.member),
            _text(m.node_id or "-"),
            _text(m.host or "-"),
            str(m.pid or "-"),
            str(m.slots),
            _yes(m.healthy) if m.metrics == "ok" else _text(f"metrics {m.metrics}"),
            _yes(m.ready),
            "-" if m.fire_rate is None else f"{m.fire_rate:,.0f}",
        )
    return members


def _topics(snapshot: Snapshot) -> Table:
    window = snapshot.window_s
    topics = Table(
        title=f"topics (last {window:.1f} s)" if window else "topics", title_justify="left"
    )
    for column in ("topic", "fired/s", "lateness p50", "p99", "fired total"):
        topics.add_column(column, justify="left" if column == "topic" else "right")
    for t in snapshot.topics:
        topics.add_row(
            _text(t.topic),
            f"{t.fire_rate:,.0f}",
            _ms(t.p50_ms),
            _ms(t.p99_ms),
            f"{t.fired_total:,.0f}",
        )
    return topics


def _slots(snapshot: Snapshot, room: int) -> Table:
    """The `room` busiest slots."""
    rows = busiest_slots(snapshot.slot_status)[:room]
    slots = Table(title=f"slots (busiest {len(rows)} of {snapshot.slots})", title_justify="left")
    for column in ("slot", "owner", "delay", "ready", "in flight", "dead", "overdue"):
        slots.add_column(column, justify="left" if column == "owner" else "right")
    live = {m.member: m.node_id for m in snapshot.members}
    for s in rows:
        owner = live.get(s.owner or "", None) or f"({s.owner or 'none'})"
        slots.add_row(
            str(s.slot),
            _text(owner),
            f"{s.delay:,}",
            f"{s.ready:,}",
            f"{s.inflight:,}",
            f"{s.dead:,}",
            f"{s.overdue_ms / 1000:.3f} s" if s.overdue_ms else "-",
        )
    return slots


async def run_top(settings: Settings, interval_s: float, once: bool, as_json: bool) -> int:
    # aiozk logs its session's (re)connections at INFO: not on this screen.
    logging.getLogger("aiozk").setLevel(logging.WARNING)
    reader = SnapshotReader(settings)
    store = ShardedStore(settings, "top")
    counts = PendingCountsCache(store, settings.redis_horizon_ms, CACHE_S)
    timeout = aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S)
    try:
        async with scrape_session(timeout) as http:
            if once:
                return await _print_once(reader, http, counts, interval_s, as_json)
            return await _live(reader, http, counts, interval_s)
    finally:
        await reader.close()
        await store.close()


async def _print_once(
    reader: SnapshotReader,
    http: aiohttp.ClientSession,
    counts: PendingCountsCache,
    interval_s: float,
    as_json: bool,
) -> int:
    await reader.snapshot(http)  # the first scrape: rates need two
    await asyncio.sleep(interval_s)
    snapshot = await reader.snapshot(http)
    pending = await _count(counts)
    if as_json:
        shown_pending = pending if isinstance(pending, str) else pending.as_dict()
        print(shown_json({**snapshot.as_dict(), "pending": shown_pending}))
    else:
        console = Console()
        console.print(render(snapshot, console.size.height, pending=pending))
    return 0


async def _live(
    reader: SnapshotReader,
    http: aiohttp.ClientSession,
    counts: PendingCountsCache,
    interval_s: float,
) -> int:
    console = Console()
    snapshot = await reader.snapshot(http)  # fails the command if there is no cluster
    try:
        first = render(snapshot, console.size.height, pending=await _count(counts))
        with Live(first, console=console, screen=False, auto_refresh=False) as live:
            while True:
                await asyncio.sleep(interval_s)
                problem = None
                try:
                    snapshot = await reader.snapshot(http)
                except Exception as exc:  # ZooKeeper or Redis away for a moment
                    problem = f"{type(exc).__name__}: {exc}"
                pending = await _count(counts)
                live.update(render(snapshot, console.size.height, problem, pending), refresh=True)
    except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C: the normal way out
        return 0
