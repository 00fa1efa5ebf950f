"""`delayq top`: a live view of a cluster, refreshed every second.

    delayq top                    # until Ctrl-C
    delayq top --once [--json]    # one snapshot, for scripts and tests

Each refresh reads the members, the slot map and every slot's depth as `delayq cluster
status` does (cluster/observe/status.py, over one ZooKeeper session and Redis connection kept
between refreshes), and scrapes every member's /metrics at the URL it
published in ZooKeeper (nodes run with metrics_port set; others show "metrics off").
Fire rates and lateness quantiles are over the last refresh interval: the difference
between two scrapes, the quantiles interpolated within the histogram's buckets the way
Prometheus' histogram_quantile() does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from cluster.cli.main import shown, shown_json
from cluster.observe.status import ClusterStatus, SlotStatus, StatusReader
from cluster.settings.config import Settings

SCRAPE_TIMEOUT_S = 2.0
Buckets = list[tuple[float, float]]  # (upper bound, cumulative count), +Inf last


# ----- one node's metrics (pure) ---------------------------------------------------------


@dataclass
class Scrape:
    """What `delayq top` reads from one node's /metrics."""

    at: float  # time.monotonic() of the scrape
    fired: dict[str, float] = field(default_factory=dict)  # topic → counter
    lateness: dict[str, Buckets] = field(default_factory=dict)  # topic → cumulative buckets
    dead_total: float = 0.0
    healthy: bool = False
    ready: bool = False


def parse_scrape(text: str, at: float) -> Scrape:
    scrape = Scrape(at)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "delayq_jobs_fired_total":
                scrape.fired[sample.labels["topic"]] = sample.value
            elif sample.name == "delayq_fire_lateness_seconds_bucket":
                bound = float(sample.labels["le"])
                scrape.lateness.setdefault(sample.labels["topic"], []).append((bound, sample.value))
            elif sample.name == "delayq_jobs_dead_total":
                scrape.dead_total = sample.value
            elif sample.name == "delayq_healthy":
                scrape.healthy = sample.value == 1
            elif sample.name == "delayq_ready":
                scrape.ready = sample.value == 1
    for buckets in scrape.lateness.values():
        buckets.sort()
    return scrape


def increase(now: float, before: float | None) -> float:
    """A counter's increase; a smaller value means the node restarted (counted from 0)."""
    if before is None or now < before:
        return now
    return now - before


def bucket_increase(now: Buckets, before: Buckets | None) -> Buckets:
    """A histogram's observations between two scrapes; like increase(), a bucket that went
    down means the node restarted, and then everything it holds is new."""
    if before is None or [b for b, _ in before] != [b for b, _ in now]:
        return list(now)
    if any(count < old for (_, count), (_, old) in zip(now, before, strict=True)):
        return list(now)
    return [(bound, count - old) for (bound, count), (_, old) in zip(now, before, strict=True)]


def quantile(q: float, buckets: Buckets) -> float | None:
    """Prometheus' histogram_quantile over cumulative buckets; None without observations."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound  # in the +Inf bucket: the highest finite bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (
                count - lower_count
            )
        lower_bound, lower_count = bound, count
    return lower_bound


def merge_buckets(many: Iterable[Buckets]) -> Buckets:
    """The sum of histograms with the same bounds (several nodes firing one topic)."""
    total: dict[float, float] = {}
    for buckets in many:
        for bound, count in buckets:
            total[bound] = total.get(bound, 0.0) + count
    return sorted(total.items())


# ----- a snapshot of the cluster -----------------------------------------------------------


@dataclass
class MemberView:
    member: str
    node_id: str | None
    host: str | None
    pid: int | None
    slots: int
    metrics: str  # "ok", "off" or why the scrape failed
    healthy: bool | None
    ready: bool | None
    fire_rate: float | None


@dataclass
class TopicView:
    topic: str
    fire_rate: float
    p50_ms: float | None
    p99_ms: float | None
    fired_total: float


@dataclass
class Snapshot:
    root: str
    slots: int
    window_s: float
    members: list[MemberView]
    topics: list[TopicView]
    slot_status: list[SlotStatus]
    fire_rate: float  # jobs/s over the last window_s, all members
    p50_ms: float | None  # lateness at the consumer's end of the node, all topics
    p99_ms: float | None
    delay: int  # jobs in Redis over all slots, by where they are
    ready: int
    inflight: int
    dead: int  # the dead-letter sets
    dead_total: float  # went dead since the nodes started (their counters)
    oldest_overdue_ms: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def build_snapshot(
    status: ClusterStatus,
    scrapes: Mapping[str, Scrape | str],
    previous: Mapping[str, Scrape | str],
) -> Snapshot:
    """The view from the cluster status and, per member, its latest and previous scrape
    (or "off" / the error of a failed scrape)."""
    members = []
    topic_rate: dict[str, float] = {}
    topic_total: dict[str, float] = {}
    topic_buckets: dict[str, list[Buckets]] = {}
    windows = []
    dead_total = 0.0
    for name, info in status.members.items():
        owned = sum(1 for s in status.slot_status if s.owner == name)
        now = scrapes.get(name, "off")
        before = previous.get(name)
        rate: float | None = None
        if isinstance(now, Scrape):
            dead_total += now.dead_total
            for topic, total in now.fired.items():
                topic_total[topic] = topic_total.get(topic, 0.0) + total
            if isinstance(before, Scrape) and now.at > before.at:
                window = now.at - before.at
                windows.append(window)
                rate = 0.0
                for topic, total in now.fired.items():
                    topic_rate[topic] = (
                        topic_rate.get(topic, 0.0)
                        + increase(total, before.fired.get(topic)) / window
                    )
                    rate += increase(total, before.fired.get(topic)) / window
                for topic, buckets in now.lateness.items():
                    delta = bucket_increase(buckets, before.lateness.get(topic))
                    topic_buckets.setdefault(topic, []).append(delta)
        members.append(
            MemberView(
                member=name,
                node_id=info.get("node_id"),
                host=info.get("host"),
                pid=info.get("pid"),
                slots=owned,
                metrics="ok" if isinstance(now, Scrape) else now,
                healthy=now.healthy if isinstance(now, Scrape) else None,
                ready=now.ready if isinstance(now, Scrape) else None,
                fire_rate=rate,
            )
        )
    topics = []
    for topic in sorted(topic_total):
        merged = merge_buckets(topic_buckets.get(topic, []))
        p50, p99 = quantile(0.5, merged), quantile(0.99, merged)
        topics.append(
            TopicView(
                topic,
                topic_rate.get(topic, 0.0),
                None if p50 is None else p50 * 1000,
                None if p99 is None else p99 * 1000,
                topic_total[topic],
            )
        )
    every = merge_buckets(b for buckets in topic_buckets.values() for b in buckets)
    p50_all, p99_all = quantile(0.5, every), quantile(0.99, every)
    return Snapshot(
        root=status.root,
        slots=status.slots,
        window_s=max(windows, default=0.0),
        members=members,
        topics=topics,
        slot_status=status.slot_status,
        fire_rate=sum(topic_rate.values()),
        p50_ms=None if p50_all is None else p50_all * 1000,
        p99_ms=None if p99_all is None else p99_all * 1000,
        delay=sum(s.delay for s in status.slot_status),
        ready=sum(s.ready for s in status.slot_status),
        inflight=sum(s.inflight for s in status.slot_status),
        dead=sum(s.dead for s in status.slot_status),
        dead_total=dead_total,
        oldest_overdue_ms=max((s.overdue_ms for s in status.slot_status), default=0),
    )


# ----- reading the cluster -------------------------------------------------------------------


async def scrape_members(
    http: aiohttp.ClientSession, members: Mapping[str, Mapping[str, Any]]
) -> dict[str, Scrape | str]:
    async def one(info: Mapping[str, Any]) -> Scrape | str:
        url = info.get("metrics_url")
        if not url:
            return "off"
        try:
            async with http.get(url) as answer:
                answer.raise_for_status()
                text = await answer.text()
        except (aiohttp.ClientError, TimeoutError) as exc:
            return f"unreachable ({type(exc).__name__})"
        try:
            return parse_scrape(text, time.monotonic())
        except (ValueError, KeyError) as exc:  # not what a delayq node serves
            return f"unreadable ({type(exc).__name__})"

    names = list(members)
    results = await asyncio.gather(*(one(members[name]) for name in names))
    return dict(zip(names, results, strict=True))


class Top:
    """Keeps the previous scrape of each member, and one ZooKeeper session and Redis
    connection, between refreshes."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.previous: dict[str, Scrape | str] = {}
        self.reader: StatusReader | None = None

    async def snapshot(self, http: aiohttp.ClientSession) -> Snapshot:
        if self.reader is None:
            self.reader = await StatusReader.open(self.settings)
        try:
            status = await self.reader.read()
        except BaseException:
            await self.close()  # the next refresh connects afresh
            raise
        scrapes = await scrape_members(http, status.members)
        snapshot = build_snapshot(status, scrapes, self.previous)
        self.previous = scrapes
        return snapshot

    async def close(self) -> None:
        reader, self.reader = self.reader, None
        if reader is not None:
            with contextlib.suppress(Exception):
                await reader.close()


# ----- drawing ----------------------------------------------------------------------------------


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
    busiest = busiest_slots(snapshot.slot_status)
    # What the header and the tables' titles, headers and borders take (about 16 lines).
    rows = busiest[: max(3, height - 16 - len(snapshot.members) - len(snapshot.topics))]
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
    return Group(head, members, topics, slots)


async def run_top(settings: Settings, interval_s: float, once: bool, as_json: bool) -> int:
    # aiozk logs its session's (re)connections at INFO: not on this screen.
    logging.getLogger("aiozk").setLevel(logging.WARNING)
    top = Top(settings)
    timeout = aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as http:
            if once:
                return await _print_once(top, http, interval_s, as_json)
            return await _live(top, http, interval_s)
    finally:
        await top.close()


async def _print_once(
    top: Top, http: aiohttp.ClientSession, interval_s: float, as_json: bool
) -> int:
    await top.snapshot(http)  # the first scrape: rates need two
    await asyncio.sleep(interval_s)
    snapshot = await top.snapshot(http)
    if as_json:
        print(shown_json(snapshot.as_dict()))
    else:
        console = Console()
        console.print(render(snapshot, console.size.height))
    return 0


async def _live(top: Top, http: aiohttp.ClientSession, interval_s: float) -> int:
    console = Console()
    snapshot = await top.snapshot(http)  # fails the command if there is no cluster
    try:
        first = render(snapshot, console.size.height)
        with Live(first, console=console, screen=False, auto_refresh=False) as live:
            while True:
                await asyncio.sleep(interval_s)
                problem = None
                try:
                    snapshot = await top.snapshot(http)
                except Exception as exc:  # ZooKeeper or Redis away for a moment
                    problem = f"{type(exc).__name__}: {exc}"
                live.update(render(snapshot, console.size.height, problem), refresh=True)
    except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C: the normal way out
        return 0
