"""Real `delayq node` processes for tests that stop, kill, pause and add nodes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from cluster.devstack import nodes
from cluster.observe.status import read_status
from cluster.settings.config import Settings

# Short timeouts so failover happens within a test: a dead node's session expires after
# 3 s, its jobs in flight come back after 4 s.
FAST_FAILOVER = {
    "DELAYQ_ZK_SESSION_TIMEOUT_MS": "3000",
    "DELAYQ_INFLIGHT_TIMEOUT_MS": "4000",
    "DELAYQ_KAFKA_REQUEST_TIMEOUT_MS": "2000",
    "DELAYQ_KAFKA_DELIVERY_TIMEOUT_MS": "3000",
    "DELAYQ_RETRY_BACKOFF_MS": "100",
}


class NodeProcess(nodes.NodeProcess):
    """A node of a test's cluster: its node id is its name, with FAST_FAILOVER timeouts
    and then `extra_env` on top of the test's settings."""

    def __init__(
        self,
        settings: Settings,
        log_dir: Path,
        name: str,
        extra_env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        super().__init__(
            name,
            log_dir,
            settings=settings,
            node_id=name,
            env={**FAST_FAILOVER, **(extra_env or {})},
            cwd=cwd,
        )


async def start_nodes(settings: Settings, log_dir: Path, names: list[str]) -> list[NodeProcess]:
    started = [NodeProcess(settings, log_dir, name) for name in names]
    try:
        for node in started:
            await node.wait_ready()
    except BaseException:
        for node in started:  # none left running behind a failed test
            node.kill()
        raise
    return started


async def slots_served_by(settings: Settings) -> dict[int, str | None]:
    """slot → node id of its owner, if that owner is a live member whose epoch is the
    one in Redis; None for a slot nobody serves right now."""
    status = await read_status(settings)
    return {
        s.slot: s.owner_node if s.owner in status.members and s.redis_epoch == s.epoch else None
        for s in status.slot_status
    }


async def wait_served(settings: Settings, by: set[str], timeout_s: float = 60) -> float:
    """Wait until every slot is served by one of the nodes in `by`, spread over all of
    them; returns the time.time() when that was first seen."""
    deadline = time.monotonic() + timeout_s
    while True:
        served = await slots_served_by(settings)
        owners = set(served.values())
        if None not in owners and owners == by:
            return time.time()
        assert time.monotonic() < deadline, f"slots not served by {by}: {served}"
        await asyncio.sleep(0.1)
