"""Which slots this node may work on, and with which epoch (fencing token).

Actors ask `owns()`/`owned()` before each step, pass `epoch(slot)` to every script that
acts as the slot's owner, and call `lost()` when a script answers FENCED. A node's
actors share one HeldSlots, which ZooKeeper membership (actors/membership.py) fills and
empties; StaticOwnership (every slot, epoch 0) serves tests of single actors.

The lease: a fencing token in Redis stops a node whose slots moved on only while Redis
still holds the newer epoch. A Redis that lost its data (flushed, restarted empty) holds
none, so a node also knows from its own monotonic clock when its hold may have ended:
HeldSlots owns nothing, and `leased()` is False, once ZooKeeper has not answered a
request of the session the slots were taken with for longer than the lease (less than
the session timeout, after which ZooKeeper lets others take them). A frozen node that
wakes up past its session therefore claims, moves and publishes nothing until
ZooKeeper answers again on that session (then its slots are still its own) or, the
session being gone, it has taken slots anew.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

log = logging.getLogger(__name__)


class Ownership(Protocol):
    def owned(self) -> frozenset[int]: ...

    def owns(self, slot: int) -> bool: ...

    def epoch(self, slot: int) -> int:
        """The epoch this node holds the slot with; KeyError if it does not own it."""
        ...

    def lost(self, slot: int, epoch: int) -> None:
        """A script refused `epoch` for `slot`: stop working on that slot at once."""
        ...

    def leased(self) -> bool:
        """Whether this node's hold of its slots is confirmed recently enough to act
        on them (module docstring); asked right before publishing."""
        ...


class StaticOwnership:
    """This node owns every slot with epoch 0, always (no fencing takes place)."""

    def __init__(self, slots: int) -> None:
        self._owned = frozenset(range(slots))

    def owned(self) -> frozenset[int]:
        return self._owned

    def owns(self, slot: int) -> bool:
        return slot in self._owned

    def epoch(self, slot: int) -> int:
        if slot not in self._owned:
            raise KeyError(slot)
        return 0

    def lost(self, slot: int, epoch: int) -> None:
        log.error(
            "slot %d is fenced at epoch %d, but static ownership cannot give it up", slot, epoch
        )

    def leased(self) -> bool:
        return True


class HeldSlots:
    """The slots a node works on, with their epochs: what its actors read, what its
    membership writes. `changed` is set whenever a slot is lost or dropped, so the
    membership loop reacts at once. With a lease (lease_s, set by the membership), the
    slots count as owned only while ZooKeeper confirmed them within lease_s (module
    docstring); without one, always."""

    def __init__(self, lease_s: float | None = None) -> None:
        self._held: dict[int, int] = {}
        self.changed = asyncio.Event()
        self.fenced_total = 0  # script runs refused because another node took the slot
        self.lease_s = lease_s
        self._confirmed = time.monotonic()

    def confirmed(self, asked_at: float) -> None:
        """ZooKeeper answered a request sent at `asked_at` (time.monotonic()) on the
        session the slots were taken with: the hold was alive then."""
        self._confirmed = max(self._confirmed, asked_at)

    def leased(self) -> bool:
        """A monotonic comparison: cheap enough for every batch."""
        return self.lease_s is None or time.monotonic() - self._confirmed <= self.lease_s

    def owned(self) -> frozenset[int]:
        return frozenset(self._held) if self.leased() else frozenset()

    def owns(self, slot: int) -> bool:
        return slot in self._held and self.leased()

    def holding(self) -> frozenset[int]:
        """The slots taken and not given up, whether or not the lease is current (for
        the membership, which renews it)."""
        return frozenset(self._held)

    def epoch(self, slot: int) -> int:
        return self._held[slot]

    def lost(self, slot: int, epoch: int) -> None:
        if self._held.get(slot) == epoch:
            self.fenced_total += 1
            del self._held[slot]
            log.warning(
                "slot %d: epoch %d is fenced, another node owns it now",
                slot,
                epoch,
                extra={"slot": slot},
            )
            self.changed.set()

    def hold(self, slot: int, epoch: int) -> None:
        self._held[slot] = epoch

    def release(self, slot: int) -> bool:
        """Stop working on a slot; True if it was held."""
        return self._held.pop(slot, None) is not None

    def drop_all(self, reason: str) -> None:
        """Stop working on every slot now."""
        if self._held:
            log.warning("dropping all %d slot(s): %s", len(self._held), reason)
            self._held.clear()
        self.changed.set()
