"""The event loop a command's coroutine runs on."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any


def run(coro: Coroutine[Any, Any, int]) -> int:
    """Run a command's coroutine on uvloop (imported only when a command runs); its
    result is the exit code."""
    import uvloop

    return uvloop.run(coro)
