"""A snapshot of a running cluster: its members, slots and depths as `delayq cluster
status` reads them (status.py), with each member's fire rate and lateness from its /metrics.

`SnapshotReader` keeps one ZooKeeper session and Redis connection, and each member's
previous scrape, between snapshots: it scrapes every member's /metrics at the URL it
published in ZooKeeper (nodes run with metrics_port set; others are "off"). Fire rates and
lateness quantiles are over the interval between two snapshots: the difference between
two scrapes, the quantiles interpolated within the histogram's buckets the way
Prometheus' histogram_quantile() does. `delayq top` draws these snapshots in a terminal
(cluster/cli/top.py) and the web console charts them (cluster/web/stats.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from yarl import URL

from cluster.observe.scrape_guard import allowed_address, odd_numeric_host
from cluster.observe.status import ClusterStatus, SharedStatus, SlotStatus, StatusReader
from cluster.settings.config import Settings

SCRAPE_TIMEOUT_S = 2.0
# A node's /metrics is some kilobytes per topic; metrics_max_topics bounds the topics.
SCRAPE_MAX_BYTES = 8 * 1024 * 1024
SCRAPES_AT_ONCE = 16
Buckets = list[tuple[float, float]]  # (upper bound, cumulative count), +Inf last


# ----- one node's metrics (pure) ---------------------------------------------------------


@dataclass
class Scrape:
    """What a snapshot reads from one node's /metrics."""

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


def scrape_url(info: Mapping[str, Any]) -> str | None:
    """The member's metrics_url if it has the form a node publishes
    (http[s]://host:port/metrics: no user, query or fragment, and not a link-local,
    multicast or unspecified address such as a cloud metadata service's, nor an IPv4
    address in another notation); None if not. A name is checked where it is resolved:
    scrape with a scrape_guard.scrape_session().

    A member's record is whatever was written to ZooKeeper, so this is what keeps a
    planted record from pointing the scraper at any other path; the scrape itself
    follows no redirect, reads at most SCRAPE_MAX_BYTES within SCRAPE_TIMEOUT_S, and
    shows nothing of an answer but the figures it parses (or the kind of failure).
    """
    text = info.get("metrics_url")
    if not isinstance(text, str) or len(text) > 1000:
        return None
    try:
        url = URL(text)
        port = url.explicit_port
    except ValueError:
        return None
    if (
        url.scheme not in ("http", "https")
        or not url.host
        or port is None
        or url.user is not None
        or url.password is not None
        or url.raw_path != "/metrics"
        or url.raw_query_string
        or url.raw_fragment
    ):
        return None
    if odd_numeric_host(url.host):
        return None  # an address written so as to slip past the check below
    try:
        ipaddress.ip_address(url.host)
    except ValueError:
        return str(url)  # a name: its addresses are checked when it is resolved
    return str(url) if allowed_address(url.host) else None


async def scrape_members(
    http: aiohttp.ClientSession, members: Mapping[str, Mapping[str, Any]]
) -> dict[str, Scrape | str]:
    gate = asyncio.Semaphore(SCRAPES_AT_ONCE)

    async def one(info: Mapping[str, Any]) -> Scrape | str:
        if not info.get("metrics_url"):
            return "off"
        url = scrape_url(info)
        if url is None:
            return "refused (not a node's metrics URL)"
        try:
            async with gate, asyncio.timeout(SCRAPE_TIMEOUT_S):
                async with http.get(url, allow_redirects=False) as answer:
                    if answer.status != 200:
                        return f"unreachable (HTTP {answer.status})"
                    body = bytearray()
                    async for chunk in answer.content.iter_chunked(64 * 1024):
                        body += chunk
                        if len(body) > SCRAPE_MAX_BYTES:
                            return "too large"
        except (aiohttp.ClientError, TimeoutError) as exc:
            return f"unreachable ({type(exc).__name__})"
        try:
            return parse_scrape(body.decode(errors="replace"), time.monotonic())
        except (ValueError, KeyError) as exc:  # not what a delayq node serves
            return f"unreadable ({type(exc).__name__})"

    names = list(members)
    results = await asyncio.gather(*(one(members[name]) for name in names))
    return dict(zip(names, results, strict=True))


class SnapshotReader:
    """Keeps the previous scrape of each member, and one ZooKeeper session and Redis
    connection, between snapshots."""

    def __init__(self, settings: Settings, shared: SharedStatus | None = None) -> None:
        self.settings = settings
        self.previous: dict[str, Scrape | str] = {}
        self.status_reader: StatusReader | None = None
        self.shared = shared  # a server's one status reader, used instead of its own

    async def _status(self) -> ClusterStatus:
        if self.shared is not None:
            return await self.shared.read()
        if self.status_reader is None:
            self.status_reader = await StatusReader.open(self.settings)
        try:
            return await self.status_reader.read()
        except BaseException:
            await self.close()  # the next snapshot connects afresh
            raise

    async def snapshot(self, http: aiohttp.ClientSession) -> Snapshot:
        status = await self._status()
        scrapes = await scrape_members(http, status.members)
        snapshot = build_snapshot(status, scrapes, self.previous)
        self.previous = scrapes
        return snapshot

    async def close(self) -> None:
        reader, self.status_reader = self.status_reader, None
        if reader is not None:
            with contextlib.suppress(Exception):
                await reader.close()
