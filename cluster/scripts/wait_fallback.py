"""redis_wait_fallback (docs/cluster.md): what a cancel or reschedule whose WAIT no
replica answered is told when its Redis master has no replica attached at all, as after
a hard failover until the old master returns.

"raise" (the default): ReplicationUnconfirmed, saying that no replica is attached, so
calling again does not confirm it before one attaches. "mysql": the change counts as
confirmed by MySQL, which records it too and from which the owning node re-applies it
to a Redis that lost it; ScriptRunner (cluster/scripts/runner.py) returns the script's
reply and `FallbackNotes` logs it, at most once a minute per master.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from redis.asyncio.cluster import ClusterNode

from cluster.connections.redis_conn import RedisClient
from cluster.errors import ReplicationUnconfirmed

log = logging.getLogger(__name__)

WAIT_FALLBACKS = ("raise", "mysql")
# The changes MySQL records too: only these may fall back to its confirmation.
MYSQL_CONFIRMED = frozenset({"cancel", "reschedule"})
# A master without replicas is said at most this often (with the count meanwhile).
FALLBACK_LOG_EVERY_S = 60.0


def replicas_attached(info: Any) -> int | None:
    """How many replicas a master's INFO replication (as redis-py parses it) says are
    connected; None when it is not a master's. INFO, not ROLE: ROLE is an @admin
    command, which the delayq Redis user may not run (docs/security.md)."""
    if isinstance(info, dict) and info.get("role") == "master":
        connected = info.get("connected_slaves")
        return connected if isinstance(connected, int) else None
    return None


async def replicas_of(redis: RedisClient, node: ClusterNode | None) -> int | None:
    """How many replicas the master (the single Redis, or the cluster's `node`) has
    attached now; None when it does not say."""
    try:
        if node is None:
            info = await redis.execute_command("INFO", "replication")
        else:
            info = await node.execute_command("INFO", "replication")
    except Exception:  # it just ran the script: a failover under way, say
        return None
    return replicas_attached(info)


def unconfirmed(
    reply: Any, confirmed: int, wanted: int, attached: int | None, where: str
) -> ReplicationUnconfirmed:
    """ReplicationUnconfirmed for a write too few replicas confirmed, saying so when
    its master has none attached (a retry cannot confirm it until one attaches)."""
    if attached != 0:
        return ReplicationUnconfirmed.of_write(reply, confirmed, wanted)
    return ReplicationUnconfirmed(
        f"{confirmed} of {wanted} replica(s) confirmed the write: the Redis master"
        f"{' ' + where if where else ''} has no replica attached (as after a failover, "
        "until one attaches), so no replica confirms it before one does "
        "(redis_wait_fallback = mysql lets MySQL's record confirm a cancel or reschedule "
        "instead: docs/cluster.md)",
        result=reply,
        replicas=confirmed,
        wanted=wanted,
    )


class FallbackNotes:
    """The masters last seen without a replica, and the changes MySQL confirmed there."""

    def __init__(self) -> None:
        # Node names ("" for a single Redis): a change there asks INFO instead of
        # waiting out a WAIT that no replica can answer.
        self.replicaless: set[str] = set()
        self.confirmed_by_mysql = 0
        self._said: dict[str, tuple[float, int]] = {}  # master → (last line, changes since)

    def confirmed(self, where: str) -> None:
        """A change on master `where` (no replica attached) that MySQL confirms."""
        self.replicaless.add(where)
        self.confirmed_by_mysql += 1
        now = time.monotonic()
        said, since = self._said.get(where, (-FALLBACK_LOG_EVERY_S, 0))
        if now - said < FALLBACK_LOG_EVERY_S:
            self._said[where] = (said, since + 1)
            return
        self._said[where] = (now, 0)
        log.warning(
            "Redis master%s has no replica attached: its cancels and reschedules are "
            "confirmed by MySQL alone (redis_wait_fallback = mysql) until one attaches; "
            "a failure of that master meanwhile can undo them in Redis until the node "
            "owning the slot re-applies MySQL's state%s",
            f" {where}" if where else "",
            f" ({since} more since the last such line)" if since else "",
        )
