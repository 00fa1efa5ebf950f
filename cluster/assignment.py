"""Which live member owns which slot: bounded-load rendezvous hashing.

Every member computes the same map from the same member list, with no coordination:
each slot ranks the members by a hash of (member, slot) and goes to the best-ranked
member that still has room (at most floor(slots / members) each, then one extra for as
many members as slots are left over). The result is deterministic and even (owners
differ by at most one slot), and a change of
membership moves few slots: a leaving member's slots are spread over the others, and
a joining member takes about slots / members from the rest.
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
    floor = slots // len(unique)
    ranked = {
        slot: sorted(unique, key=lambda m: _weight(m, slot), reverse=True)
        for slot in range(slots)
    }
    load = dict.fromkeys(unique, 0)
    owners: dict[int, str] = {}
    # Phase 1: every member takes up to `floor` slots, each slot its best-ranked member.
    for slot in range(slots):
        for member in ranked[slot]:
            if load[member] < floor:
                owners[slot] = member
                load[member] += 1
                break
    # Phase 2: the `extra` slots left over go one each to their best-ranked member
    # that has not taken an extra one yet.
    for slot in range(slots):
        if slot not in owners:
            member = next(m for m in ranked[slot] if load[m] == floor)
            owners[slot] = member
            load[member] += 1
    return owners
