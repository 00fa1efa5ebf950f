"""One `delayq services up` or `down` at a time on one stack.

Two at once (make test's workers each starting the stack they share, or two shells)
would each start or stop what the other is starting; the second waits for the first,
holding an flock on the stack's state folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def one_at_a_time(root: Path) -> Iterator[None]:
    """The stack folder `root` locked for the block (made first when missing)."""
    root.mkdir(parents=True, exist_ok=True)
    folder = os.open(root, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        yield
    finally:
        os.close(folder)  # releases the lock
