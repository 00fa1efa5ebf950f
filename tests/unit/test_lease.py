"""HeldSlots' lease (actors/ownership.py): the slots count as owned only while the
membership confirmed them within lease_s, on the monotonic clock."""

from __future__ import annotations

import pytest

from actors import ownership
from actors.ownership import HeldSlots, StaticOwnership


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(ownership.time, "monotonic", clock)
    return clock


def test_slots_are_owned_only_within_the_lease(clock: Clock) -> None:
    held = HeldSlots(lease_s=2.25)
    held.hold(3, 7)
    assert held.owned() == {3} and held.owns(3) and held.leased()
    clock.now += 2.25
    assert held.leased()
    clock.now += 0.01
    assert not held.leased()
    assert held.owned() == frozenset() and not held.owns(3)
    assert held.holding() == {3}  # still taken: the membership renews or drops it
    assert held.epoch(3) == 7


def test_an_answer_renews_the_lease_from_when_it_was_asked(clock: Clock) -> None:
    held = HeldSlots(lease_s=2.0)
    held.hold(1, 5)
    clock.now += 3.0
    assert not held.owns(1)
    held.confirmed(clock.now - 2.5)  # asked before the lease's end: still lapsed
    assert not held.owns(1)
    held.confirmed(clock.now - 0.5)
    assert held.owns(1)
    held.confirmed(clock.now - 10)  # an older answer never moves it back
    assert held.owns(1)


def test_without_a_lease_the_slots_stay_owned(clock: Clock) -> None:
    held = HeldSlots()
    held.hold(2, 1)
    clock.now += 3600
    assert held.owns(2) and held.leased()
    assert StaticOwnership(4).leased()
