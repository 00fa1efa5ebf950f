"""An ingress process's /metrics (Prometheus), on metrics_host:metrics_port.

    server = IngressMetricsServer(settings, ingress)
    await server.start()
    ...
    await server.stop()

The figures are the ingress's plain counters, read when Prometheus scrapes (as a node's
are, actors/metrics.py); docs/ingress.md lists them.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from cluster.ingress.consumer import Ingress
from cluster.process.metrics_http import MetricsEndpoint, labelled_counter
from cluster.process.runtime_metrics import register_process_metrics
from cluster.settings.config import Settings

# Every delayq_ingress_* series an ingress process exposes.
METRIC_NAMES = frozenset(
    {
        "delayq_ingress_records_total",
        "delayq_ingress_rounds_total",
        "delayq_ingress_commit_failures_total",
        "delayq_ingress_store_failures_total",
        "delayq_ingress_error_send_failures_total",
        "delayq_ingress_last_round_seconds",
        "delayq_asyncio_tasks",  # cluster/process/runtime_metrics.py
    }
)


class IngressCollector(Collector):
    """Reads a running ingress's counters at scrape time."""

    def __init__(self, ingress: Ingress) -> None:
        self.ingress = ingress

    def collect(self) -> Iterator[Metric]:
        i = self.ingress
        yield labelled_counter(
            "delayq_ingress_records",
            "Records of the ingress topic by outcome: scheduled (a new job), already_there "
            "(a job of that id existed: a record read again, or a repeated job_id), invalid "
            "(sent to the error topic).",
            "result",
            sorted(i.records_total.items()),
        )
        yield labelled_counter(
            "delayq_ingress_rounds",
            "Rounds read (up to ingress_batch records each), and those whose offsets were "
            "committed.",
            "state",
            [("read", i.rounds_total), ("committed", i.committed_rounds_total)],
        )
        yield CounterMetricFamily(
            "delayq_ingress_commit_failures",
            "Offset commits that failed (a rebalance): those records are read again.",
            value=i.commit_failures_total,
        )
        yield CounterMetricFamily(
            "delayq_ingress_store_failures",
            "Attempts to store a round that failed (MySQL unreachable, an unknown outcome) "
            "and were tried again.",
            value=i.store_failures_total,
        )
        yield CounterMetricFamily(
            "delayq_ingress_error_send_failures",
            "Attempts to send a round's error records that the broker did not acknowledge.",
            value=i.error_send_failures_total,
        )
        yield GaugeMetricFamily(
            "delayq_ingress_last_round_seconds",
            "When the last round was stored and committed (epoch seconds; 0: none yet).",
            value=i.last_round_ms / 1000,
        )


class IngressMetricsServer:
    """/metrics of one ingress process."""

    def __init__(self, settings: Settings, ingress: Ingress) -> None:
        self.settings = settings
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(IngressCollector(ingress))
        register_process_metrics(self.registry)  # RSS, CPU, fds, asyncio tasks
        self.endpoint = MetricsEndpoint(settings, self.registry, "ingress metrics")

    async def start(self) -> None:
        await self.endpoint.start()

    async def stop(self) -> None:
        await self.endpoint.stop()
