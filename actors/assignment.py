"""Which live member owns which slot: bounded-load rendezvous hashing.

Every member computes the same map from the same member list, with no coordination.
Each (member, slot) pair has a pseudo-random weight; going through all pairs from the
heaviest down, a slot goes to the member of the pair if the slot has no owner yet and
the member has room (floor(slots / members) each, plus one extra for as many members
as slots are left over). The map is deterministic and even (owners differ by at most
one slot), and a change of membership moves few slots: a slot keeps its owner unless
that owner left or a heavier pair claims the room, so a leaving member's slots spread
over the others and a joining member takes about slots / members from the rest
(tests/unit/test_assignment.py measures how close to the fewest possible moves this is).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def _weight(member: str, slot: int) -> int:
    digest = hashlib.blake2b(f"{member}/{slot}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def assign(slots: int, members: Sequence[str]) -> dict[int, str]:
    """slot → owning member, for every slot in range(slots); empty if no members."""
    if not members:
        return {}
    unique = sorted(set(members))
    floor, extra = divmod(slots, len(unique))
    pairs = sorted(
        ((_weight(member, slot), slot, member) for slot in range(slots) for member in unique),
        reverse=True,
    )
    load = dict.fromkeys(unique, 0)
    owners: dict[int, str] = {}
    for _, slot, member in pairs:
        if slot in owners:
            continue
        if load[member] < floor or (load[member] == floor and extra > 0):
            if load[member] == floor:
                extra -= 1
            owners[slot] = member
            load[member] += 1
            if len(owners) == slots:
                break
    return owners
