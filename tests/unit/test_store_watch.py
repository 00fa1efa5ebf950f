"""The store-watch (actors/store_watch.py) and the withdrawal's decisions that need no
service (actors/withdrawal.py): when a store counts as unanswered, when the links are
steady again, what a member's mark says, and a membership pass cut short."""

from __future__ import annotations

import asyncio

import pytest

from actors import store_watch
from actors.store_watch import StoreWatch
from actors.withdrawal import Withdrawal, marked_unreachable
from cluster.errors import ConfigError
from cluster.settings.config import Settings


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(store_watch.time, "monotonic", clock)
    return clock


async def _yes() -> bool:
    return True


def test_a_store_is_unanswered_once_the_bound_passed_since_its_last_answer(
    clock: Clock,
) -> None:
    watch = StoreWatch(2.0, {"redis": _yes, "kafka": _yes})
    assert watch.unanswered(2.0) == [] and watch.steady(0)  # answering from the start
    watch.record("redis", False, clock.now)
    clock.now += 2.0
    assert watch.unanswered(2.0) == []
    clock.now += 0.01
    assert watch.unanswered(2.0) == ["kafka", "redis"]  # no check answered at all
    watch.record("kafka", True, clock.now - 0.5)
    assert watch.unanswered(2.0) == ["redis"]
    assert watch.unanswered(1.0) == ["redis"] and watch.unanswered(5.0) == []


def test_steady_needs_every_store_answering_every_check_for_the_bound(clock: Clock) -> None:
    watch = StoreWatch(2.0, {"redis": _yes, "kafka": _yes})
    watch.record("redis", False, clock.now)
    assert not watch.steady(2.0)
    clock.now += 1.0
    watch.record("redis", True, clock.now - 0.9)  # asked during the cut, answered now
    clock.now += 1.99
    assert not watch.steady(2.0)  # counted from the answer, not the question
    clock.now += 0.01
    assert watch.steady(2.0)
    watch.record("kafka", False, clock.now)  # one failed check starts the wait again
    watch.record("kafka", True, clock.now)
    assert not watch.steady(2.0)
    clock.now += 2.0
    assert watch.steady(2.0)


def test_check_pacing_follows_the_bound() -> None:
    assert StoreWatch(5.0, {}).interval_s == 0.5
    assert StoreWatch(5.0, {}).timeout_s == 2.5
    assert StoreWatch(60.0, {}).interval_s == 1.0
    assert StoreWatch(0.1, {}).interval_s == 0.05


async def test_a_check_that_hangs_or_fails_is_not_an_answer() -> None:
    hung = asyncio.Event()

    async def hangs() -> bool:
        await hung.wait()
        return True

    async def fails() -> bool:
        raise ConnectionError("refused")

    watch = StoreWatch(0.2, {"redis": hangs, "kafka": fails, "mysql": _yes})
    task = asyncio.create_task(watch.run())
    try:
        for _ in range(100):
            if watch.unanswered(0.2) == ["kafka", "redis"]:
                break
            await asyncio.sleep(0.02)
        assert watch.unanswered(0.2) == ["kafka", "redis"]
        assert not watch.steady(0)
    finally:
        watch.stop()
        await task


@pytest.mark.parametrize(
    ("data", "marked"),
    [
        (b'{"node_id": "a", "unreachable": ["redis"]}', True),
        (b'{"node_id": "a", "unreachable": []}', False),
        (b'{"node_id": "a"}', False),
        (b'{"unreachable": "redis"}', False),
        (b"[1, 2]", False),
        (b"not json", False),
        (b"", False),
        (None, False),
    ],
)
def test_only_a_well_formed_mark_says_a_member_is_cut_off(data: bytes | None, marked: bool) -> None:
    assert marked_unreachable(data) is marked


def test_the_bound_is_a_setting_that_can_be_off() -> None:
    assert Settings().store_unreachable_release_ms == 5000
    with pytest.raises(ConfigError, match="store_unreachable_release_ms"):
        Settings(store_unreachable_release_ms=-1)
    off = Withdrawal(Settings(store_unreachable_release_ms=0), StoreWatch(1.0, {}))
    assert off.watch is None and off.cut_off() == []


async def test_a_pass_is_cut_short_when_the_node_is_to_withdraw() -> None:
    watch = StoreWatch(1.0, {"redis": _yes})
    withdrawal = Withdrawal(Settings(store_unreachable_release_ms=1000), watch)
    finished = asyncio.Event()

    async def slow_pass() -> None:
        await asyncio.sleep(0.2)
        finished.set()

    await withdrawal.unless_cut_off(slow_pass(), 5)  # healthy: the pass runs to its end
    assert finished.is_set()
    finished.clear()
    watch.links["redis"].last_ok -= 1.5  # redis unanswered past the bound
    await withdrawal.unless_cut_off(slow_pass(), 5)
    assert not finished.is_set()

    async def failing_pass() -> None:
        raise RuntimeError("zk")

    watch.links["redis"].last_ok += 1.5
    with pytest.raises(RuntimeError, match="zk"):
        await withdrawal.unless_cut_off(failing_pass(), 5)
    with pytest.raises(TimeoutError):
        await withdrawal.unless_cut_off(slow_pass(), 0.05)
