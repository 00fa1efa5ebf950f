"""/metrics of a `delayq web` process on metrics_host:metrics_port (when metrics_port is
set): its RSS, CPU, open file descriptors and asyncio tasks, so a long-running web server
is watched like a node. The API's own port serves no metrics: it may face the outside.
"""

from __future__ import annotations

from prometheus_client.registry import CollectorRegistry

from cluster.process.metrics_http import MetricsEndpoint
from cluster.process.runtime_metrics import register_process_metrics
from cluster.settings.config import Settings


class WebMetricsServer:
    def __init__(self, settings: Settings) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        register_process_metrics(self.registry)
        self.endpoint = MetricsEndpoint(settings, self.registry, "web metrics")

    async def start(self) -> None:
        await self.endpoint.start()

    async def stop(self) -> None:
        await self.endpoint.stop()
