"""Named failpoints: crash the node process at an exact step, for fault tests.

    DELAYQ_FAILPOINT=after-publish delayq node

makes the node exit (code 77, without cleanup, like a SIGKILL) the first time it
reaches that step:

    after-move      the move script ran (jobs are in the ready list)
    after-claim     the claim script ran (jobs are in flight, not yet published)
    after-publish   Kafka acknowledged the records, Redis has not been acked yet
    after-ack       Redis was acked (journal written), MySQL not yet updated
"""

from __future__ import annotations

import os

NAMES = ("after-move", "after-claim", "after-publish", "after-ack")
EXIT_CODE = 77

_armed = os.environ.get("DELAYQ_FAILPOINT", "")
if _armed and _armed not in NAMES:
    raise SystemExit(f"DELAYQ_FAILPOINT={_armed!r} is not one of {', '.join(NAMES)}")


def hit(name: str) -> None:
    """Exit the process here if this failpoint is armed."""
    if name == _armed:
        os._exit(EXIT_CODE)
