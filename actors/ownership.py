"""Which slots this node may work on, and with which epoch (fencing token).

Actors ask `owns()`/`owned()` before each step, pass `epoch(slot)` to every script that
acts as the slot's owner, and call `lost()` when a script answers FENCED. ZooKeeper
membership (actors/membership.py) is the implementation nodes use; StaticOwnership
(every slot, epoch 0) serves tests of single actors.
"""

from __future__ import annotations

import logging
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
        log.error("slot %d is fenced at epoch %d, but static ownership cannot give it up",
                  slot, epoch)
