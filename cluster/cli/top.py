"""`delayq top`: a live view of a cluster, refreshed every second.

    delayq top                    # until Ctrl-C
    delayq top --once [--json]    # one snapshot, for scripts and tests

Each refresh takes a snapshot of the cluster (cluster/observe/snapshot.py: the members,
the slot map and every slot's depth as `delayq cluster status` reads them, over one
ZooKeeper session and Redis connection kept between refreshes, and every member's
/metrics; nodes run without metrics_port show "metrics off"). Fire rates and lateness
quantiles are over the last refresh interval. This module draws it with rich.
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
from cluster.observe.snapshot import SCRAPE_TIMEOUT_S, Snapshot, SnapshotReader
from cluster.observe.status import SlotStatus
from cluster.settings.config import Settings


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


def render(snapshot: Snapshot, height: int = 50, problem: str | None = None) -> Group:
    """The screen: a header, then members, topics and the busiest slots, cut to `height`
    lines. `problem` is why the last refresh failed (the snapshot is then older)."""
    # What the header and the tables' titles, headers and borders take (about 16 lines).
    room = max(3, height - 16 - len(snapshot.members) - len(snapshot.topics))
    return Group(
        _header(snapshot, problem),
        _members(snapshot),
        _topics(snapshot),
        _slots(snapshot, room),
    )


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
    timeout = aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as http:
            if once:
                return await _print_once(reader, http, interval_s, as_json)
            return await _live(reader, http, interval_s)
    finally:
        await reader.close()


async def _print_once(
    reader: SnapshotReader, http: aiohttp.ClientSession, interval_s: float, as_json: bool
) -> int:
    await reader.snapshot(http)  # the first scrape: rates need two
    await asyncio.sleep(interval_s)
    snapshot = await reader.snapshot(http)
    if as_json:
        print(shown_json(snapshot.as_dict()))
    else:
        console = Console()
        console.print(render(snapshot, console.size.height))
    return 0


async def _live(reader: SnapshotReader, http: aiohttp.ClientSession, interval_s: float) -> int:
    console = Console()
    snapshot = await reader.snapshot(http)  # fails the command if there is no cluster
    try:
        first = render(snapshot, console.size.height)
        with Live(first, console=console, screen=False, auto_refresh=False) as live:
            while True:
                await asyncio.sleep(interval_s)
                problem = None
                try:
                    snapshot = await reader.snapshot(http)
                except Exception as exc:  # ZooKeeper or Redis away for a moment
                    problem = f"{type(exc).__name__}: {exc}"
                live.update(render(snapshot, console.size.height, problem), refresh=True)
    except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C: the normal way out
        return 0
