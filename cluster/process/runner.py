"""One runner for every long-running delayq process (`delayq node`, `delayq ingress`):
the signals, the ready file and the race between starting and being asked to stop.

    code = await run_process(body, ready_file=Path("node.ready"))

The body (a Service) knows how to start, run, stop and close itself; the runner decides
when:
1. SIGTERM or SIGINT asks for a stop at any moment.
2. `start()` waits for the stores; a stop asked meanwhile cancels it, `abandon()` cleans
   up, and the process exits 0. A start that fails with one of `start_failures` is
   logged as one line (no traceback) and the process exits 1.
3. Once started, the ready file is written (with `ready_info()` and the pid), and
   `run()` runs until a stop is asked or it ends by itself (a failure: exit 1).
4. On the way out the ready file goes first (a supervisor stops routing to the process
   at once), then `stop()` ends `run()` gracefully, and `close()` always runs last.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, Protocol

from cluster.process.ready_file import clear_ready_file, write_ready_file
from cluster.settings.config import redact_url

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Service(Protocol):
    """What run_process runs."""

    # "node n-1", "ingress i-1": how log lines name the process.
    name: str
    # Errors of start() that are the set-up's fault, not bugs: logged as one line.
    start_failures: tuple[type[BaseException], ...]

    async def start(self) -> None:
        """Connect and join; waits for stores that are not there yet."""

    async def abandon(self) -> None:
        """Clean up after start() was cancelled by a stop."""

    def ready_info(self) -> dict[str, Any]:
        """What the ready file says besides the pid."""

    def run(self) -> Coroutine[Any, Any, None]:
        """Serve until stop() ends it; returning or raising by itself is a failure."""

    async def stop(self, running: asyncio.Task[None]) -> None:
        """Ask `running` (the task of run()) to end, and wait until it has."""

    def failed(self, error: BaseException) -> None:
        """Log that run() failed with `error`."""

    async def close(self) -> None:
        """Release everything; runs last, whatever happened after a successful start."""


async def run_process(service: Service, *, ready_file: Path | None = None) -> int:
    """Run `service` until SIGTERM/SIGINT; the exit code for the process: 0 after a
    clean stop (or a stop before it started), 1 when it could not start or failed."""
    stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop_requested.set)
    if ready_file is not None:
        clear_ready_file(ready_file)  # a stale one from an earlier run
    stopper = asyncio.create_task(stop_requested.wait())
    try:
        try:
            if not await _started(service, stopper):
                return 0
        except service.start_failures as exc:
            log.error("%s could not start: %s", service.name, one_line(exc))
            return 1
        return await _serve(service, stopper, ready_file)
    finally:
        stopper.cancel()
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)


async def _started(service: Service, stopper: asyncio.Task[Any]) -> bool:
    """Start, unless a stop comes first: whether the service started."""
    starting = asyncio.create_task(service.start())
    await asyncio.wait((starting, stopper), return_when=asyncio.FIRST_COMPLETED)
    if starting.done():
        starting.result()  # a start failure raises here
        return True
    starting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await starting
    await service.abandon()
    log.info("%s stopped before it started", service.name)
    return False


async def _serve(service: Service, stopper: asyncio.Task[Any], ready_file: Path | None) -> int:
    """Serve until a stop is asked or run() fails; the exit code."""
    try:
        if ready_file is not None:
            write_ready_file(ready_file, service.ready_info())
        running = asyncio.create_task(service.run())
        await asyncio.wait((running, stopper), return_when=asyncio.FIRST_COMPLETED)
        if ready_file is not None:
            clear_ready_file(ready_file)
        log.info("stopping %s", service.name)
        await service.stop(running)
        failure = None if running.cancelled() else running.exception()
        if failure is not None:
            service.failed(failure)
            return 1
        return 0
    finally:
        if ready_file is not None:
            clear_ready_file(ready_file)
        await service.close()


def one_line(error: BaseException) -> str:
    """The error and its cause (e.g. "Connection refused" under aiomysql's 2003), on one
    line, passwords in URLs hidden."""
    text = str(error) or type(error).__name__
    cause = error.__cause__
    if cause is not None and str(cause) and str(cause) not in text:
        text = f"{text}: {cause}"
    return redact_url(" ".join(text.split()))
