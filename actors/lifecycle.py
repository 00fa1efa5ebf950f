"""One lifecycle for every actor: run until stopped, sleep unless stopped, and timers and
child tasks that belong to the actor.

    class Reaper(Actor):
        name = "retry-reaper"

        def timers(self):
            return [(1.0, self.reap_owned)]      # every second until stopped

        async def body(self):
            ...                                  # or a loop over a queue

The supervisor (actors/supervisor.py) calls run() and stop(). run() runs body() and
every timer in one asyncio.TaskGroup, together with the tasks the actor starts with
spawn(): timers end with the body, spawned tasks are awaited, nothing the actor starts
outlives it, and when any of them crashes the others
are cancelled and run() raises that crash, so the supervisor restarts the whole actor.
No task of an actor can fail without a word.

Progress: each task of an actor is either waiting for work (in sleep(), next_batch()
or a `with self.waiting():` block) or busy with a step. busy_for_s() is how long the
longest step in progress has taken so far; the node's /healthz calls an actor stuck
when that exceeds stall_timeout_s. An idle actor is not stuck: it has done all it can.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from typing import Any, ClassVar

from actors.queues import SlotQueue, batch_or_stop

log = logging.getLogger(__name__)

Tick = Callable[[], Awaitable[None]]


class Actor:
    """A long-running part of a node, owned and restarted by the supervisor."""

    name: ClassVar[str] = "actor"

    def __init__(self) -> None:
        self._stopping = asyncio.Event()
        self._children: asyncio.TaskGroup | None = None
        self._warned: dict[str, tuple[float, int]] = {}  # message → (last logged, skipped)
        # Task → time.monotonic() its current step began; absent while it waits for work.
        self._busy: dict[asyncio.Task[Any], float] = {}

    # ----- what subclasses write -----------------------------------------------------

    async def body(self) -> None:
        """The actor's main loop; returns once `stopping` (the default waits for it, for
        actors that are only timers)."""
        with self.waiting():
            await self._stopping.wait()

    def timers(self) -> Sequence[tuple[float, Tick]]:
        """(interval in seconds, coroutine function) pairs, each run every interval
        until the actor stops; the first run is one interval after the start. A tick
        still running when body() returns is cancelled."""
        return ()

    # ----- what the supervisor calls -------------------------------------------------

    async def run(self) -> None:
        """body(), the timers and the spawned tasks, until stop(); raises the first crash
        of any of them (after cancelling the rest)."""
        self._stopping.clear()
        body_task = asyncio.current_task()
        if body_task is not None:
            self._busy[body_task] = time.monotonic()
        try:
            async with asyncio.TaskGroup() as children:
                self._children = children
                timers = [
                    children.create_task(
                        self._every(interval_s, tick), name=f"{self.name}:{_name_of(tick)}"
                    )
                    for interval_s, tick in self.timers()
                ]
                try:
                    await self.body()
                finally:
                    # Periodic work ends with the body, even mid-tick (a tick may be
                    # waiting for room in a queue nobody reads any more); spawned
                    # tasks are awaited by the group.
                    self.stop()
                    for timer in timers:
                        timer.cancel()
        except BaseExceptionGroup as group:
            raise _first_crash(group) from None
        finally:
            self._children = None
            self._busy.clear()

    def stop(self) -> None:
        """Ask the actor to stop; returns at once (run() returns when it has)."""
        self._stopping.set()

    # ----- what subclasses use -------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def sleep(self, seconds: float) -> bool:
        """Sleep for `seconds` unless stopped first; True while the actor goes on."""
        if seconds > 0 and not self._stopping.is_set():
            await self.wait_event(self._stopping, seconds)
        return not self._stopping.is_set()

    async def drain_every(
        self, interval_s: float, step: Callable[[], Awaitable[bool]], failed: str
    ) -> None:
        """Run step() until stopped: again at once while it returns True (it read a full
        page: more is waiting), else after interval_s. A step that raises (a store down)
        is logged as `failed` (warn) and tried again after interval_s."""
        while not self.stopping:
            try:
                more = await step()
            except Exception as exc:
                self.warn("%s, will retry: %s", failed, exc)
                more = False
            if not more and not await self.sleep(interval_s):
                return

    async def wait_event(self, event: asyncio.Event, timeout_s: float) -> None:
        """Wait until `event` is set or timeout_s passed, as waiting for work (idle)."""
        with self.waiting():
            try:
                async with asyncio.timeout(timeout_s):
                    await event.wait()
            except TimeoutError:
                pass

    async def next_batch(self, queue: SlotQueue) -> list[int] | None:
        """Every slot waiting in queue (waiting for the first), or None once stopping."""
        with self.waiting():
            return await batch_or_stop(queue, self._stopping)

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Mark the current task as waiting for work (not busy) inside the block; the
        next step starts when the block ends."""
        task = asyncio.current_task()
        if task is None:
            yield
            return
        self._busy.pop(task, None)
        try:
            yield
        finally:
            if self._children is not None:  # still running: a new step begins
                self._busy[task] = time.monotonic()

    def busy_for_s(self) -> float:
        """How long the longest step now in progress has taken (0 when all wait)."""
        started = [t for task, t in list(self._busy.items()) if not task.done()]
        return time.monotonic() - min(started) if started else 0.0

    def warn(self, message: str, *args: object, every_s: float = 5.0) -> None:
        """log.warning, at most once per every_s for the same message: a Redis node
        failing over makes every round fail for seconds, and one line says it."""
        now = time.monotonic()
        last, skipped = self._warned.get(message, (-every_s, 0))
        if now - last < every_s:
            self._warned[message] = (last, skipped + 1)
            return
        self._warned[message] = (now, 0)
        if skipped:
            message += f" (and {skipped} more like it)"
        logging.getLogger(type(self).__module__).warning(message, *args, stacklevel=2)

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Run `work` as a child task: awaited before run() returns, and a crash of it
        is a crash of the actor. Only while the actor runs."""
        if self._children is None:
            work.close()
            raise RuntimeError(f"{self.name} is not running")
        return self._children.create_task(work, name=f"{self.name}:{name}")

    async def _every(self, interval_s: float, tick: Tick) -> None:
        while await self.sleep(interval_s):
            await tick()


def _name_of(tick: Tick) -> str:
    return getattr(tick, "__name__", "timer")


def _first_crash(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The crash to report for a group of child failures: the only one, or the first
    (the rest are logged)."""
    crashes = list(group.exceptions)
    for other in crashes[1:]:
        log.error("also crashed: %r", other)
    first = crashes[0]
    if isinstance(first, BaseExceptionGroup):
        return _first_crash(first)
    return first
