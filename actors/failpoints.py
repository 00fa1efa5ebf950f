"""Named failpoints: crash the node process at an exact step, for fault tests.

    DELAYQ_FAILPOINT=after-publish delayq node

makes the node exit (code 77, without cleanup, like a SIGKILL) the first time it
reaches that step:

    after-move      the move script ran (jobs are in the ready list)
    after-claim     the claim script ran (jobs are in flight, not yet published)
    after-publish   Kafka acknowledged the records, Redis has not been acked yet
    after-ack       Redis was acked (journal written), MySQL not yet updated

and, with delivery = exactly_once only:

    before-commit   the transaction's records and journal record were sent, not committed

And a stall, to make an actor stuck for health tests:

    DELAYQ_STALL_FILE=/tmp/stall delayq node

While that file exists and names an actor (its text, e.g. "mover"), the actor blocks
at the start of each step, busy, until the file is removed.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

NAMES = ("after-move", "after-claim", "after-publish", "after-ack")
EXACTLY_ONCE_NAMES = ("before-commit",)
EXIT_CODE = 77

_armed = os.environ.get("DELAYQ_FAILPOINT", "")
if _armed and _armed not in NAMES + EXACTLY_ONCE_NAMES:
    raise SystemExit(
        f"DELAYQ_FAILPOINT={_armed!r} is not one of {', '.join(NAMES + EXACTLY_ONCE_NAMES)}"
    )


STALL_FILE = os.environ.get("DELAYQ_STALL_FILE", "")
STALL_POLL_S = 0.05


async def stall(actor: str) -> None:
    """Block while DELAYQ_STALL_FILE exists and names `actor` (callers check STALL_FILE
    first, so a node without the variable pays nothing)."""
    path = Path(STALL_FILE)
    # Polled: the test that makes the file lives in another process.
    while _names(path, actor):  # noqa: ASYNC110
        await asyncio.sleep(STALL_POLL_S)


def _names(path: Path, actor: str) -> bool:
    try:
        return actor in path.read_text().split()
    except OSError:
        return False


def hit(name: str) -> None:
    """Exit the process here if this failpoint is armed."""
    if name == _armed:
        os._exit(EXIT_CODE)
