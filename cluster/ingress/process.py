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
import signal
from pathlib import Path

from cluster.errors import ConfigError, SchemaError, StartupFailed, StoreAccessError
from cluster.ingress.consumer import Ingress
from cluster.process.ready_file import clear_ready_file, write_ready_file
from cluster.settings.config import Settings

log = logging.getLogger(__name__)

# After a stop is asked, how long the current round may take before it is cancelled (a
# commit that waits for a broker that is gone, say): cancelled, it commits nothing.
STOP_GRACE_S = 10.0
# What a start that failed is reported as, in one line, rather than a traceback.
START_FAILURES = (StartupFailed, StoreAccessError, SchemaError, ConfigError)


async def run_ingress(settings: Settings, *, ready_file: Path | None = None) -> int:
    """Run an ingress until SIGTERM/SIGINT; the exit code for the process: 0 after a
    clean stop, 1 when it could not start or failed, 2 for settings it cannot run with.
    With ready_file, it writes that file once started and deletes it when it stops."""
    try:
        ingress = Ingress(settings)
    except ConfigError as exc:
        log.error("ingress: configuration error: %s", exc)
        return 2
    stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_requested.set)
    if ready_file is not None:
        clear_ready_file(ready_file)  # a stale one from an earlier run
    stopper = asyncio.create_task(stop_requested.wait())
    starting = asyncio.create_task(ingress.start())
    await asyncio.wait((starting, stopper), return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        await ingress.close()
        log.info("ingress %s stopped before it started", settings.node_id)
        return 0
    try:
        starting.result()
    except START_FAILURES as exc:
        stopper.cancel()
        log.error("ingress %s could not start: %s", settings.node_id, exc)
        return 1
    metrics = None
    code = 0
    try:
        if settings.metrics_port:
            from cluster.ingress.metrics import IngressMetricsServer  # aiohttp: only when serving

            metrics = IngressMetricsServer(settings, ingress)
            await metrics.start()
        if ready_file is not None:
            write_ready_file(
                ready_file,
                {
                    "node_id": settings.node_id,
                    "topic": settings.ingress_topic,
                    "group": settings.ingress_group,
                },
            )
        running = asyncio.create_task(ingress.run())
        await asyncio.wait((running, stopper), return_when=asyncio.FIRST_COMPLETED)
        if not running.done():
            log.info("stopping ingress %s", settings.node_id)
            ingress.stop()
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
        failure = None if running.cancelled() else running.exception()
        if failure is not None:
            log.error("ingress failed, the round in progress not committed", exc_info=failure)
            code = 1
    except ConfigError as exc:  # the metrics port is taken
        log.error("ingress: %s", exc)
        code = 2
    finally:
        stopper.cancel()
        if ready_file is not None:
            clear_ready_file(ready_file)
        if metrics is not None:
            await metrics.stop()
        await ingress.close()
    log.info(
        "ingress %s stopped: %s; %d round(s) committed",
        settings.node_id,
        ", ".join(f"{count} {result}" for result, count in ingress.records_total.items()),
        ingress.committed_rounds_total,
    )
    return code
