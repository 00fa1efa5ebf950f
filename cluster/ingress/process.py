"""`delayq ingress`: one ingress process, until SIGTERM or SIGINT.

    code = await run_ingress(settings, ready_file=Path("ingress.ready"))

On a signal the process stops reading; a round that is storing its jobs finishes that
attempt and commits, one waiting to try again is abandoned uncommitted (its records are
read again by whoever owns the partition next, as the same jobs). Then it leaves the
consumer group and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cluster.errors import ConfigError, SchemaError, StartupFailed, StoreAccessError
from cluster.ingress.consumer import Ingress
from cluster.process.runner import run_process
from cluster.settings.config import Settings

if TYPE_CHECKING:
    from cluster.ingress.metrics import IngressMetricsServer

log = logging.getLogger(__name__)

# After a stop is asked, how long the current round may take before it is cancelled (a
# commit that waits for a broker that is gone, say): cancelled, it commits nothing.
STOP_GRACE_S = 10.0
# What a start that failed is reported as, in one line, rather than a traceback.
START_FAILURES = (StartupFailed, StoreAccessError, SchemaError, ConfigError)


class _IngressService:
    """An Ingress (and its /metrics) as cluster.process.runner runs it."""

    start_failures: tuple[type[BaseException], ...] = START_FAILURES

    def __init__(self, settings: Settings, ingress: Ingress) -> None:
        self.settings = settings
        self.ingress = ingress
        self.name = f"ingress {settings.node_id}"
        self.metrics: IngressMetricsServer | None = None

    async def start(self) -> None:
        await self.ingress.start()
        if not self.settings.metrics_port:
            return
        from cluster.ingress.metrics import IngressMetricsServer  # aiohttp: only when serving

        metrics = IngressMetricsServer(self.settings, self.ingress)
        try:
            await metrics.start()  # ConfigError when the port is taken
        except BaseException:
            await self.ingress.close()
            raise
        self.metrics = metrics

    async def abandon(self) -> None:
        await self.ingress.close()

    def ready_info(self) -> dict[str, Any]:
        return {
            "node_id": self.settings.node_id,
            "topic": self.settings.ingress_topic,
            "group": self.settings.ingress_group,
        }

    def run(self) -> Coroutine[Any, Any, None]:
        return self.ingress.run()

    async def stop(self, running: asyncio.Task[None]) -> None:
        if running.done():
            return
        self.ingress.stop()
        done, _ = await asyncio.wait((running,), timeout=STOP_GRACE_S)
        if not done:
            log.warning(
                "ingress: the round in progress did not end within %g s of the stop; "
                "abandoned, its offsets not committed",
                STOP_GRACE_S,
            )
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running

    def failed(self, error: BaseException) -> None:
        log.error("ingress failed, the round in progress not committed", exc_info=error)

    async def close(self) -> None:
        if self.metrics is not None:
            await self.metrics.stop()
        await self.ingress.close()
        records = self.ingress.records_total.items()
        log.info(
            "ingress %s stopped: %s; %d round(s) committed",
            self.settings.node_id,
            ", ".join(f"{count} {result}" for result, count in records),
            self.ingress.committed_rounds_total,
        )


async def run_ingress(settings: Settings, *, ready_file: Path | None = None) -> int:
    """Run an ingress until SIGTERM/SIGINT; the exit code for the process: 0 after a
    clean stop, 1 when it could not start (its metrics port taken included) or failed,
    2 for settings it cannot run with. With ready_file, it writes that file once
    started and deletes it when it stops."""
    try:
        ingress = Ingress(settings)
    except ConfigError as exc:
        log.error("ingress: configuration error: %s", exc)
        return 2
    return await run_process(_IngressService(settings, ingress), ready_file=ready_file)
