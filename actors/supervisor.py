"""supervisor: starts the actors, restarts a crashed one with backoff, stops them in order.

An actor that crashes more than `max_restarts` times within `window_s` makes the
supervisor give up (SupervisorGaveUp), and the node process exits non-zero so that
systemd or Kubernetes can take over. stop() stops actors in the order they were
given: the ones that produce work first, the ones that finish it last.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Sequence
from typing import Protocol

from cluster.errors import SupervisorGaveUp

log = logging.getLogger(__name__)


class Supervised(Protocol):
    """What the supervisor runs (actors/lifecycle.py's Actor is one): run() works until
    stop() is called, then returns; an exception from run() is a crash, and the
    supervisor restarts it. stop() asks politely and returns at once."""

    @property
    def name(self) -> str: ...

    async def run(self) -> None: ...

    def stop(self) -> None: ...


class Supervisor:
    name = "supervisor"

    def __init__(
        self,
        actors: Sequence[Supervised],
        *,
        max_restarts: int = 10,
        window_s: float = 60.0,
        stop_timeout_s: float = 30.0,
    ) -> None:
        self.actors = list(actors)
        self.max_restarts = max_restarts
        self.window_s = window_s
        self.stop_timeout_s = stop_timeout_s
        self.restarts: dict[str, int] = {actor.name: 0 for actor in self.actors}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._stopping: set[str] = set()
        self._stop_started = False

    def start(self) -> None:
        for actor in self.actors:
            self._tasks[actor.name] = asyncio.create_task(
                self._keep_running(actor), name=actor.name
            )

    def running(self, name: str) -> bool:
        """Whether the actor's supervising task is alive (a crashed actor waiting for its
        restart counts as running; one the supervisor gave up on does not)."""
        task = self._tasks.get(name)
        return task is not None and not task.done()

    async def wait(self) -> None:
        """Returns when every actor has stopped; raises SupervisorGaveUp if one kept
        crashing (after stopping the others)."""
        try:
            await asyncio.gather(*self._tasks.values())
        except SupervisorGaveUp:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop actors one by one in start order; idempotent."""
        if self._stop_started:
            return
        self._stop_started = True
        for actor in self.actors:
            task = self._tasks.get(actor.name)
            self._stopping.add(actor.name)
            actor.stop()
            if task is None or task.done():
                continue
            try:
                await asyncio.wait_for(asyncio.shield(task), self.stop_timeout_s)
            except TimeoutError:
                log.error(
                    "%s did not stop within %.0f s; cancelling it", actor.name, self.stop_timeout_s
                )
                task.cancel()
            except Exception:  # its crash was logged by _keep_running
                pass

    async def _keep_running(self, actor: Supervised) -> None:
        crashes: deque[float] = deque()
        while True:
            try:
                await actor.run()
            except asyncio.CancelledError:
                raise
            except Exception:
                if actor.name in self._stopping:
                    log.exception("%s crashed while stopping", actor.name)
                    return
                log.exception("%s crashed", actor.name)
            else:
                if actor.name in self._stopping:
                    return
                log.error("%s returned without being stopped", actor.name)
            now = time.monotonic()
            crashes.append(now)
            while crashes and crashes[0] < now - self.window_s:
                crashes.popleft()
            if len(crashes) > self.max_restarts:
                raise SupervisorGaveUp(
                    f"{actor.name} crashed {len(crashes)} times within {self.window_s:.0f} s"
                )
            self.restarts[actor.name] += 1
            backoff = min(0.1 * 2 ** (len(crashes) - 1), 5.0)
            log.info("restarting %s in %.1f s", actor.name, backoff)
            await asyncio.sleep(backoff)
