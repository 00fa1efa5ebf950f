"""Real `delayq node` processes for tests that stop, kill, pause and add nodes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cluster.config import Settings
from cluster.status import read_status

# Short timeouts so failover happens within a test: a dead node's session expires after
# 3 s, its jobs in flight come back after 4 s.
FAST_FAILOVER = {
    "DELAYQ_ZK_SESSION_TIMEOUT_MS": "3000",
    "DELAYQ_INFLIGHT_TIMEOUT_MS": "4000",
    "DELAYQ_KAFKA_REQUEST_TIMEOUT_MS": "2000",
    "DELAYQ_KAFKA_DELIVERY_TIMEOUT_MS": "3000",
    "DELAYQ_RETRY_BACKOFF_MS": "100",
}


class NodeProcess:
    def __init__(
        self, settings: Settings, log_dir: Path, name: str,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self.log = self.log_path.open("ab")
        env = {**os.environ, **FAST_FAILOVER, "DELAYQ_KEY_PREFIX": settings.key_prefix,
               "DELAYQ_MYSQL_URL": settings.mysql_url, "DELAYQ_NODE_ID": name,
               **(extra_env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cluster.cli", "node"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def wait_started(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while b"started:" not in self.log_path.read_bytes():
            assert self.proc.poll() is None, self.log_path.read_text()
            assert time.monotonic() < deadline, f"{self.name} did not start"
            await asyncio.sleep(0.1)

    async def wait_exit(self, timeout_s: float = 60) -> int:
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None:
            assert time.monotonic() < deadline, f"{self.name} did not exit"
            await asyncio.sleep(0.1)
        self.log.close()
        return self.proc.returncode

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
        self.log.close()


async def start_nodes(settings: Settings, log_dir: Path, names: list[str]) -> list[NodeProcess]:
    nodes = [NodeProcess(settings, log_dir, name) for name in names]
    for node in nodes:
        await node.wait_started()
    return nodes


async def slots_served_by(settings: Settings) -> dict[int, str | None]:
    """slot → node id of its owner, if that owner is a live member whose epoch is the
    one in Redis; None for a slot nobody serves right now."""
    status = await read_status(settings)
    return {
        s.slot: s.owner_node if s.owner in status.members and s.redis_epoch == s.epoch
        else None
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
