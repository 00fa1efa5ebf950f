"""The supervisor with stand-in actors: restart with backoff, give up, stop in order."""

from __future__ import annotations

import asyncio

import pytest

from actors.supervisor import Supervisor
from cluster.errors import SupervisorGaveUp


class Flaky:
    """Crashes `crashes` times, then runs until stopped."""

    def __init__(self, name: str, crashes: int, log: list[str]) -> None:
        self.name = name
        self.crashes = crashes
        self.runs = 0
        self.log = log
        self._stop = asyncio.Event()

    async def run(self) -> None:
        self.runs += 1
        if self.runs <= self.crashes:
            raise RuntimeError("boom")
        self._stop.clear()
        await self._stop.wait()
        self.log.append(f"{self.name} finished")

    def stop(self) -> None:
        self.log.append(f"{self.name} asked to stop")
        self._stop.set()


async def until(predicate: object, timeout_s: float = 10) -> None:
    for _ in range(int(timeout_s * 100)):
        if predicate():  # type: ignore[operator]
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


async def test_restarts_a_crashed_actor() -> None:
    actor = Flaky("flaky", crashes=2, log=[])
    supervisor = Supervisor([actor], max_restarts=5)
    supervisor.start()
    await until(lambda: actor.runs == 3)
    assert supervisor.restarts == {"flaky": 2}
    await supervisor.stop()
    await asyncio.wait_for(supervisor.wait(), 5)


async def test_gives_up_on_an_actor_that_keeps_crashing() -> None:
    log: list[str] = []
    steady, broken = Flaky("steady", 0, log), Flaky("broken", 1000, log)
    supervisor = Supervisor([steady, broken], max_restarts=2)
    supervisor.start()
    with pytest.raises(SupervisorGaveUp, match="broken crashed 3 times"):
        await asyncio.wait_for(supervisor.wait(), 10)
    assert "steady finished" in log  # the others were stopped on the way out


async def test_stops_actors_one_by_one_in_order() -> None:
    log: list[str] = []
    actors = [Flaky(name, 0, log) for name in ("first", "second", "third")]
    supervisor = Supervisor(actors)
    supervisor.start()
    await until(lambda: all(a.runs == 1 for a in actors))
    await supervisor.stop()
    await supervisor.stop()  # idempotent
    assert log == [
        "first asked to stop",
        "first finished",
        "second asked to stop",
        "second finished",
        "third asked to stop",
        "third finished",
    ]
