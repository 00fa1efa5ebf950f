"""Slot assignment: deterministic, even, and moving few slots when members change."""

from __future__ import annotations

from collections import Counter

import pytest

from actors.assignment import assign

MEMBERS = [f"m-{i:010d}" for i in range(8)]
MEMBERS_12 = [f"m-{i:010d}" for i in range(12)]


def moved(before: dict[int, str], after: dict[int, str]) -> int:
    return sum(1 for slot in before if before[slot] != after[slot])


@pytest.mark.parametrize("slots", [1, 16, 64, 1024])
@pytest.mark.parametrize("count", [1, 2, 3, 4, 7])
def test_every_slot_has_one_owner_and_loads_differ_by_at_most_one(slots: int, count: int) -> None:
    owners = assign(slots, MEMBERS[:count])
    assert sorted(owners) == list(range(slots))
    loads = Counter(owners.values())
    assert set(loads) <= set(MEMBERS[:count])
    if slots >= count:
        assert len(loads) == count
    assert max(loads.values()) - min(loads.values()) <= 1


def test_deterministic_whatever_the_member_order() -> None:
    assert assign(64, MEMBERS[:5]) == assign(64, list(reversed(MEMBERS[:5])))


def test_no_members_no_owners() -> None:
    assert assign(16, []) == {}


def fewest_moves(before: dict[int, str], after: dict[int, str]) -> int:
    """The fewest slots any balanced map could move: a leaving member's slots, or the
    share a joining member must take."""
    gone = set(before.values()) - set(after.values())
    new = set(after.values()) - set(before.values())
    return sum(1 for slot in before if before[slot] in gone or after[slot] in new)


@pytest.mark.parametrize("slots", [16, 64, 256])
def test_joins_and_leaves_move_close_to_the_fewest_slots_possible(slots: int) -> None:
    total = fewest = 0
    for count in range(1, 12):
        grown = MEMBERS_12[: count + 1]
        for before, after in (
            (assign(slots, grown[:count]), assign(slots, grown)),  # a member joins
            (assign(slots, grown), assign(slots, grown[1:])),  # the oldest leaves
        ):
            total += moved(before, after)
            fewest += fewest_moves(before, after)
    # Measured: 1.43x the fewest for 16 slots, 1.18x for 64, 1.11x for 256.
    assert total <= 1.5 * fewest


@pytest.mark.parametrize("slots", [16, 64, 1024])
def test_leaving_member_moves_little_more_than_its_own_slots(slots: int) -> None:
    before = assign(slots, MEMBERS[:4])
    after = assign(slots, MEMBERS[:3])
    own = sum(1 for owner in before.values() if owner == MEMBERS[3])
    assert own <= moved(before, after) <= own + max(2, slots // 8)


@pytest.mark.parametrize("slots", [16, 64, 1024])
def test_joining_member_takes_about_its_share(slots: int) -> None:
    before = assign(slots, MEMBERS[:3])
    after = assign(slots, MEMBERS[:4])
    taken = sum(1 for owner in after.values() if owner == MEMBERS[3])
    assert taken >= slots // 4
    assert moved(before, after) <= taken + max(2, slots // 8)
