"""The node's HTTP endpoint: /metrics (Prometheus), /healthz and /readyz.

    server = MetricsServer(settings, node)
    await server.start()    # serves on metrics_host:metrics_port (metrics_port > 0)
    ...
    await server.stop()

Every figure is read from the actors when Prometheus scrapes, so the hot path only
bumps plain integers and fills the batch histograms of actors/histogram.py; nothing
here runs per job. docs/operations.md lists the metrics; ops/ has the dashboard and
the alert rules built on them.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

import orjson
from aiohttp import web
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from actors.health import Verdict, busy_s, liveness, readiness
from actors.histogram import Histograms
from actors.pending_metric import pending_gauge
from cluster.process.metrics_http import MetricsEndpoint, labelled_counter
from cluster.process.runtime_metrics import register_process_metrics
from cluster.settings.config import Settings

if TYPE_CHECKING:
    from actors.node import Node, NodeParts

# Every delayq_* series a node exposes (histograms by their base name); the dashboard
# and alert rules in ops/ may use only these (tests/unit/test_ops_files.py, tests/test_promtool.py).
METRIC_NAMES = frozenset(
    {
        "delayq_jobs_fired_total",
        "delayq_jobs_moved_total",
        "delayq_publish_failures_total",
        "delayq_jobs_retried_total",
        "delayq_jobs_dead_total",
        "delayq_jobs_expired_total",
        "delayq_fenced_total",
        "delayq_jobs_readded_total",
        "delayq_jobs_loaded_total",
        "delayq_payloads_loaded_total",
        "delayq_jobs_released_total",
        "delayq_journal_recorded_total",
        "delayq_actor_restarts_total",
        "delayq_retention_deleted_total",
        "delayq_recurring_ticks_total",
        "delayq_transactions_total",
        "delayq_journal_records_skipped_total",
        "delayq_jobs_found_committed_total",
        "delayq_fire_lateness_seconds",
        "delayq_stage_seconds",
        "delayq_cluster_slots",
        "delayq_slots_owned",
        "delayq_slot_jobs",
        "delayq_overdue_seconds",
        "delayq_journal_backlog",
        "delayq_zk_connected",
        "delayq_actor_progress_age_seconds",
        "delayq_store_last_ok_seconds",
        "delayq_mysql_server_last_ok_seconds",
        "delayq_mysql_shards",
        "delayq_healthy",
        "delayq_ready",
        "delayq_node_info",
        "delayq_metrics_topics_folded",
        "delayq_asyncio_tasks",  # cluster/process/runtime_metrics.py
        "delayq_pending_jobs",  # actors/pending_metric.py, from the node holding slot 0
    }
)
# The topic label of the series that sum the topics beyond metrics_max_topics: not a
# valid Kafka topic name, so never mistaken for one.
OTHER_TOPICS = "(other)"


class NodeCollector(Collector):
    """Reads a running node's actors at scrape time."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def collect(self) -> Iterator[Metric]:
        parts = self.node.parts
        if parts is None:
            return
        topics = TopicLabels(parts.dispatcher.published_by_topic, self.node.settings)
        yield from _counters(parts, topics)
        yield from _histograms(parts, topics)
        yield from _gauges(parts, self.node.settings)
        yield from pending_gauge(parts.sampler.pending, self.node.settings.metrics_max_topics)
        yield _gauge(
            "delayq_metrics_topics_folded",
            'Topics this node fired to whose series are summed under topic="(other)": '
            "it fired to more than metrics_max_topics topics.",
            topics.folded,
        )


class TopicLabels:
    """The topic label of each topic a node fired to. Producers choose topic names, so
    the label values are capped: the first metrics_max_topics topics the node fired to
    keep their own series, and the series of any later ones are summed under
    OTHER_TOPICS (a set that only grows, so that sum only grows, as a counter must)."""

    def __init__(self, seen: Counter[str], settings: Settings) -> None:
        # A Counter keeps its keys in the order they were first counted.
        self.own = frozenset(itertools.islice(seen, settings.metrics_max_topics))
        self.folded = len(seen) - len(self.own)

    def label(self, topic: str) -> str:
        return topic if topic in self.own else OTHER_TOPICS

    def counts(self, by_topic: Counter[str]) -> list[tuple[str, float]]:
        """by_topic's counts by label."""
        summed: Counter[str] = Counter()
        for topic, count in by_topic.items():
            summed[self.label(topic)] += count
        return sorted(summed.items())

    def histograms(
        self, histograms: Histograms
    ) -> Iterator[tuple[tuple[str, ...], list[tuple[str, int]], float]]:
        """histograms' cumulative series by label (a topic is the first label): those of
        the topics under OTHER_TOPICS added up, bucket by bucket."""
        summed: dict[tuple[str, ...], tuple[list[tuple[str, int]], float]] = {}
        for labels, buckets, total in histograms.cumulative():
            key = (self.label(labels[0]), *labels[1:])
            if key in summed:
                before, before_total = summed[key]
                buckets = [
                    (le, count + earlier)
                    for (le, count), (_, earlier) in zip(buckets, before, strict=True)
                ]
                total += before_total
            summed[key] = (buckets, total)
        for key, (buckets, total) in summed.items():
            yield key, buckets, total


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _counters(p: NodeParts, topics: TopicLabels) -> Iterator[Metric]:
    yield labelled_counter(
        "delayq_jobs_fired",
        "Jobs published to Kafka and acknowledged by the broker (a duplicate counts again).",
        "topic",
        topics.counts(p.dispatcher.published_by_topic),
    )
    yield _counter("delayq_jobs_moved", "Jobs moved from delay to ready.", p.mover.moved_total)
    yield _counter(
        "delayq_publish_failures",
        "Jobs whose publish attempt failed (retried, or dead when out of attempts).",
        p.dispatcher.failed_total,
    )
    yield _counter(
        "delayq_jobs_retried",
        "Retries scheduled: failed publishes and in-flight jobs whose deadline passed.",
        p.reaper.retried_total + p.dispatcher.retried_total,
    )
    yield _counter(
        "delayq_jobs_dead",
        "Jobs that used up their attempts (dead letters).",
        p.reaper.dead_total + p.dispatcher.dead_total,
    )
    yield _counter(
        "delayq_jobs_expired",
        "Jobs not published because their due time + expires_after had passed (EXPIRED): "
        "claimed too late, or a failed attempt's retry would have come too late.",
        p.dispatcher.expired_total + p.reaper.expired_total,
    )
    yield _counter(
        "delayq_fenced",
        "Script runs Redis refused because another node took the slot (epoch fencing).",
        p.held.fenced_total,
    )
    yield _counter(
        "delayq_jobs_readded",
        "Jobs re-added to Redis from MySQL by the reconciler: what Redis had lost.",
        p.reconciler.readded_total,
    )
    yield _counter(
        "delayq_jobs_loaded",
        "Jobs loaded from MySQL into Redis as they came within redis_horizon_ms.",
        p.reconciler.loaded_total,
    )
    yield labelled_counter(
        "delayq_payloads_loaded",
        "Payloads of lean jobs loaded from MySQL into Redis: by the filler shortly before "
        "the due time, or by the dispatcher when it claimed a job still lean.",
        "by",
        [("filler", p.filler.filled_total), ("claim", p.dispatcher.tails_loaded_total)],
    )
    yield _counter(
        "delayq_jobs_released",
        "Lean jobs put back unpublished, their attempt not used, because MySQL did not answer.",
        p.dispatcher.released_total,
    )
    yield _counter(
        "delayq_journal_recorded",
        "Outcome journal entries (fired, retrying, dead) written to MySQL.",
        p.recorder.recorded_total,
    )
    if (t := p.transactions) is not None:  # delivery = exactly_once
        yield labelled_counter(
            "delayq_transactions",
            "Kafka transactions of the slots' producers, by outcome; in_doubt: their "
            "outcome was read from the journal (also counted under the one found).",
            "outcome",
            [
                ("committed", t.committed_total),
                ("aborted", t.aborted_total),
                ("in_doubt", t.in_doubt_total),
            ],
        )
        yield labelled_counter(
            "delayq_journal_records_skipped",
            "Journal records a lookup skipped: unreadable (not a record delayq writes) or "
            "unauthenticated (its HMAC does not match: not written by this cluster's nodes).",
            "reason",
            sorted(t.journal.skipped.items()),
        )
        yield _counter(
            "delayq_jobs_found_committed",
            "In-flight jobs past their deadline that the journal showed committed: acked, "
            "not retried.",
            t.resolved_total,
        )
    yield labelled_counter(
        "delayq_actor_restarts",
        "Restarts of a crashed actor by the supervisor.",
        "actor",
        sorted(p.supervisor.restarts.items()),
    )
    yield labelled_counter(
        "delayq_retention_deleted",
        "Rows of fired, cancelled and expired jobs deleted by retention.",
        "table",
        [("jobs", p.retention.deleted_jobs_total), ("history", p.retention.deleted_history_total)],
    )
    yield labelled_counter(
        "delayq_recurring_ticks",
        "Ticks of recurring schedules: made into jobs ahead of their time, or missed (no "
        "node made them in time) and dropped by their schedule's missed policy.",
        "outcome",
        [("made", p.recurring.made_total), ("missed", p.recurring.missed_total)],
    )


def _add(family: HistogramMetricFamily, histograms: Histograms, *extra: str) -> None:
    for labels, buckets, total in histograms.cumulative():
        family.add_metric([*labels, *extra], buckets, total)


def _histograms(p: NodeParts, topics: TopicLabels) -> Iterator[Metric]:
    lateness = HistogramMetricFamily(
        "delayq_fire_lateness_seconds",
        "Broker acknowledgement time minus due time, per fired job (Redis clock).",
        labels=["topic"],
    )
    for labels, buckets, total in topics.histograms(p.dispatcher.lateness):
        lateness.add_metric(list(labels), buckets, total)
    yield lateness
    stages = HistogramMetricFamily(
        "delayq_stage_seconds",
        "Per job: move = due to moved to ready (the move run's most overdue job); "
        "claim = ready to claimed (from the slot's latest move); publish = claimed to "
        "acknowledged by the broker.",
        labels=["stage"],
    )
    _add(stages, p.mover.move_lag, "move")
    _add(stages, p.dispatcher.claim_lag, "claim")
    _add(stages, p.dispatcher.publish_lag, "publish")
    yield stages


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _gauges(p: NodeParts, settings: Settings) -> Iterator[Metric]:
    yield _gauge("delayq_cluster_slots", "Slots of the cluster.", settings.slots)
    yield _gauge("delayq_slots_owned", "Slots this node holds now.", len(p.held.owned()))
    depth = GaugeMetricFamily(
        "delayq_slot_jobs",
        "Jobs per owned slot and state, sampled every stats_interval_ms.",
        labels=["slot", "state"],
    )
    for slot, d in sorted(p.sampler.depths.items()):
        for state, count in (
            ("delay", d.delay),
            ("ready", d.ready),
            ("inflight", d.inflight),
            ("dead", d.dead),
        ):
            depth.add_metric([str(slot), state], count)
    yield depth
    yield _gauge(
        "delayq_overdue_seconds",
        "How late the most overdue unfired job of this node's slots already is.",
        p.sampler.overdue_s(),
    )
    yield _gauge(
        "delayq_journal_backlog",
        "Outcome journal entries waiting to be written to MySQL.",
        p.sampler.journal_backlog(),
    )
    yield _gauge(
        "delayq_zk_connected",
        "1 while this node is a member with a connected ZooKeeper session.",
        1 if p.membership.session_state() == "connected" else 0,
    )
    busy = GaugeMetricFamily(
        "delayq_actor_progress_age_seconds",
        "How long an actor has been busy with its current step (0: waiting for work).",
        labels=["actor"],
    )
    for actor, seconds in sorted(busy_s(p).items()):
        busy.add_metric([actor], seconds)
    yield busy
    stores = GaugeMetricFamily(
        "delayq_store_last_ok_seconds",
        "Seconds since the store last answered the node's check (absent: not yet).",
        labels=["store"],
    )
    for store, age in p.sampler.store_ages_s().items():
        if age is not None:
            stores.add_metric([store], age)
    yield stores
    yield from _mysql_servers(p)
    yield _gauge("delayq_healthy", "1 when /healthz answers 200.", liveness(p, settings).ok)
    yield _gauge("delayq_ready", "1 when /readyz answers 200.", readiness(p, settings).ok)
    info = GaugeMetricFamily(
        "delayq_node_info", "The node's id and cluster member name.", labels=["node_id", "member"]
    )
    info.add_metric([settings.node_id, p.membership.member or ""], 1)
    yield info


class MetricsServer:
    """/metrics, /healthz and /readyz of one node, on metrics_host:metrics_port."""

    def __init__(self, settings: Settings, node: Node) -> None:
        self.settings = settings
        self.node = node
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(NodeCollector(node))
        register_process_metrics(self.registry)  # RSS, CPU, fds, asyncio tasks
        self.endpoint = MetricsEndpoint(
            settings,
            self.registry,
            "metrics",
            {"/healthz": self._healthz, "/readyz": self._readyz},
        )

    async def start(self) -> None:
        await self.endpoint.start()

    async def stop(self) -> None:
        await self.endpoint.stop()

    async def _healthz(self, _: web.Request) -> web.Response:
        parts = self.node.parts
        if parts is None:
            return _answer(Verdict(False, ["the node is starting or stopping"]), "ok", "unhealthy")
        return _answer(liveness(parts, self.settings), "ok", "unhealthy")

    async def _readyz(self, _: web.Request) -> web.Response:
        parts = self.node.parts
        if parts is None:
            return _answer(
                Verdict(False, ["the node is starting or stopping"]), "ready", "not ready"
            )
        return _answer(readiness(parts, self.settings), "ready", "not ready")


def _answer(verdict: Verdict, passing: str, failing: str) -> web.Response:
    return web.Response(
        body=orjson.dumps(verdict.as_dict(passing, failing), option=orjson.OPT_INDENT_2),
        status=200 if verdict.ok else 503,
        content_type="application/json",
    )


def _mysql_servers(p: NodeParts) -> Iterator[GaugeMetricFamily]:
    """Per MySQL server: when it last answered, and the logical shards it serves."""
    ages = GaugeMetricFamily(
        "delayq_mysql_server_last_ok_seconds",
        "Seconds since the MySQL server last answered the node's check (absent: not yet).",
        labels=["server"],
    )
    for server, age in p.sampler.mysql_server_ages_s().items():
        ages.add_metric([server], age)
    yield ages
    shards = GaugeMetricFamily(
        "delayq_mysql_shards",
        "Logical shards (shard databases) the MySQL server serves, as the node last saw.",
        labels=["server"],
    )
    homes = p.sampler.mysql.homes
    for spec in p.sampler.mysql.servers:
        shards.add_metric([spec.name], sum(1 for home in homes.values() if home == spec.index))
    yield shards
