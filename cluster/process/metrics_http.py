"""The HTTP endpoint a delayq process serves its Prometheus metrics on: /metrics on
metrics_host:metrics_port, and any other GET routes the process adds (a node's /healthz
and /readyz). Shared by `delayq node` (actors/metrics.py) and `delayq ingress`
(cluster/ingress/metrics.py).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import CollectorRegistry

from cluster.errors import ConfigError
from cluster.settings.config import Settings

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def labelled_counter(
    name: str, doc: str, label: str, counts: Iterable[tuple[str, float]]
) -> CounterMetricFamily:
    """A counter with one label: a sample for each (label value, count)."""
    family = CounterMetricFamily(name, doc, labels=[label])
    for value, count in counts:
        family.add_metric([value], count)
    return family


class MetricsEndpoint:
    def __init__(
        self,
        settings: Settings,
        registry: CollectorRegistry,
        what: str,
        routes: Mapping[str, Handler] | None = None,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.what = what  # "metrics", "ingress metrics": how the log line names it
        self.routes = dict(routes or {})
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Listen; ConfigError (naming the settings) when the port cannot be had."""
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        for path, handler in self.routes.items():
            app.router.add_get(path, handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.settings.metrics_host, self.settings.metrics_port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise ConfigError(
                f"cannot serve metrics on {self.settings.metrics_host}:"
                f"{self.settings.metrics_port} (metrics_host, metrics_port): {exc.strerror}"
            ) from exc
        self._runner = runner
        others = f" ({', '.join(self.routes)})" if self.routes else ""
        log.info(
            "%s on http://%s:%d/metrics%s",
            self.what,
            self.settings.metrics_host,
            self.settings.metrics_port,
            others,
        )

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _metrics(self, _: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
