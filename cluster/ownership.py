"""Which slots this node may work on.

Actors ask `owned()` before each step and wait on `changed` when it moves. In a
single-node deployment one node owns every slot (StaticOwnership); ZooKeeper-backed
ownership implements the same three members.
"""

from __future__ import annotations

import asyncio


class StaticOwnership:
    """This node owns every slot, always."""

    def __init__(self, slots: int) -> None:
        self._owned = frozenset(range(slots))
        self.changed = asyncio.Event()

    def owned(self) -> frozenset[int]:
        return self._owned

    def owns(self, slot: int) -> bool:
        return slot in self._owned
