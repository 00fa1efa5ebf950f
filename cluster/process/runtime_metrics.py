"""Process-level metrics every delayq process serves beside its own: the asyncio task
count of its event loop. With prometheus-client's process collector (RSS, open file
descriptors, CPU) it shows a leak in a long-running node, ingress or web server: a
count that grows while the load stays the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from prometheus_client import ProcessCollector
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry


class LoopCollector(Collector):
    """delayq_asyncio_tasks: the tasks of the running event loop, counted at each scrape
    (the scrape handler runs on that loop)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            tasks = len(asyncio.all_tasks())
        except RuntimeError:  # no running loop: collected from another thread
            return
        yield GaugeMetricFamily(
            "delayq_asyncio_tasks",
            "asyncio tasks alive in the process's event loop; growth at a steady load is a leak.",
            value=tasks,
        )


def register_process_metrics(registry: CollectorRegistry) -> None:
    """RSS, CPU, open file descriptors (prometheus-client) and the asyncio task count."""
    ProcessCollector(registry=registry)
    registry.register(LoopCollector())
