"""The actor lifecycle (actors/lifecycle.py): timers, spawned tasks, sleep and stop."""

from __future__ import annotations

import asyncio

import pytest

from actors.lifecycle import Actor, Tick
from actors.supervisor import Supervisor


class Ticker(Actor):
    """Counts timer ticks; the tick numbered `crash_on` raises."""

    name = "ticker"

    def __init__(self, crash_on: int = 0) -> None:
        super().__init__()
        self.ticks = 0
        self.crash_on = crash_on

    def timers(self) -> list[tuple[float, Tick]]:
        return [(0.01, self.tick)]

    async def tick(self) -> None:
        self.ticks += 1
        if self.ticks == self.crash_on:
            raise RuntimeError(f"tick {self.ticks} failed")


async def until(predicate: object, timeout_s: float = 10) -> None:
    for _ in range(int(timeout_s * 100)):
        if predicate():  # type: ignore[operator]
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


async def test_timers_run_until_stopped() -> None:
    actor = Ticker()
    task = asyncio.create_task(actor.run())
    await until(lambda: actor.ticks >= 3)
    actor.stop()
    await asyncio.wait_for(task, 5)
    ticks = actor.ticks
    await asyncio.sleep(0.05)
    assert actor.ticks == ticks  # nothing of the actor runs after run() returned


async def test_a_failing_timer_is_a_crash_of_the_actor() -> None:
    actor = Ticker(crash_on=2)
    with pytest.raises(RuntimeError, match="tick 2 failed"):
        await asyncio.wait_for(actor.run(), 5)


async def test_the_supervisor_restarts_an_actor_whose_timer_failed() -> None:
    actor = Ticker(crash_on=2)
    supervisor = Supervisor([actor], max_restarts=5)
    supervisor.start()
    await until(lambda: supervisor.restarts["ticker"] == 1 and actor.ticks > 3)
    await supervisor.stop()
    await asyncio.wait_for(supervisor.wait(), 5)


class Spawner(Actor):
    name = "spawner"

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.finished: list[str] = []

    async def body(self) -> None:
        self.spawn(self.child(), "child")
        await super().body()

    async def child(self) -> None:
        await self.release.wait()
        self.finished.append("child")


async def test_run_waits_for_spawned_tasks() -> None:
    actor = Spawner()
    task = asyncio.create_task(actor.run())
    await asyncio.sleep(0.05)
    actor.stop()
    await asyncio.sleep(0.05)
    assert not task.done()  # the child still runs
    actor.release.set()
    await asyncio.wait_for(task, 5)
    assert actor.finished == ["child"]


async def test_spawn_outside_run_is_refused() -> None:
    actor = Spawner()
    with pytest.raises(RuntimeError, match="not running"):
        actor.spawn(actor.child(), "child")


class Blocked(Actor):
    """A timer stuck on a full queue nobody reads once the body has returned."""

    name = "blocked"

    def __init__(self) -> None:
        super().__init__()
        self.queue: asyncio.Queue[int] = asyncio.Queue(1)

    def timers(self) -> list[tuple[float, Tick]]:
        return [(0.01, self.fill)]

    async def fill(self) -> None:
        await self.queue.put(1)


async def test_a_timer_stuck_mid_tick_does_not_hold_up_stop() -> None:
    actor = Blocked()
    task = asyncio.create_task(actor.run())
    await until(lambda: actor.queue.full())
    await asyncio.sleep(0.05)  # the next tick now waits for room
    actor.stop()
    await asyncio.wait_for(task, 5)


async def test_sleep_ends_at_stop() -> None:
    actor = Actor()
    task = asyncio.create_task(actor.run())
    await asyncio.sleep(0)
    sleeper = asyncio.create_task(actor.sleep(3600))
    await asyncio.sleep(0.01)
    actor.stop()
    assert await asyncio.wait_for(sleeper, 5) is False
    await asyncio.wait_for(task, 5)


class Stepper(Actor):
    """Waits for work on `go`, then is busy until `done` is set."""

    name = "stepper"

    def __init__(self) -> None:
        super().__init__()
        self.go = asyncio.Event()
        self.done = asyncio.Event()
        self.in_step = asyncio.Event()

    async def body(self) -> None:
        while not self.stopping:
            with self.waiting():
                await self.go.wait()
            self.go.clear()
            if self.stopping:
                return
            self.in_step.set()
            await self.done.wait()  # a step that does not end: "stuck"
            self.done.clear()
            self.in_step.clear()


async def test_an_actor_waiting_for_work_is_not_busy_and_a_long_step_is() -> None:
    actor = Stepper()
    task = asyncio.create_task(actor.run())
    await asyncio.sleep(0.02)
    assert actor.busy_for_s() == 0  # waiting for work: idle, not stuck
    actor.go.set()
    await actor.in_step.wait()
    await asyncio.sleep(0.05)
    assert actor.busy_for_s() >= 0.05
    actor.done.set()
    await until(lambda: not actor.in_step.is_set())
    await asyncio.sleep(0.01)
    assert actor.busy_for_s() == 0
    actor.stop()
    actor.go.set()
    await task
    assert actor.busy_for_s() == 0


async def test_sleeping_and_timers_between_ticks_are_not_busy() -> None:
    actor = Ticker()
    actor.timers = lambda: [(10.0, actor.tick)]  # type: ignore[method-assign]
    task = asyncio.create_task(actor.run())
    await asyncio.sleep(0.05)
    assert actor.busy_for_s() == 0  # the default body waits for stop; the timer sleeps
    actor.stop()
    await task
