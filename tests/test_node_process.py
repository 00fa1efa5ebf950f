"""Real `delayq node` processes stopped with SIGTERM or killed with SIGKILL mid-run:
after a restart every job fires; a clean stop also fires none twice. And the node-process
helper (cluster/devstack/nodes.py): ready by the node's ready file whatever the log level, and
failing with the node's log when it exits while starting."""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from cluster import DelayClient, Job
from cluster.devstack import nodes
from cluster.settings.config import Settings
from tests.conftest import Collector
from tests.processes import NodeProcess

pytestmark = pytest.mark.slow

JOBS = 3000


async def signal_mid_burst(
    settings: Settings,
    client: DelayClient,
    collector: Collector,
    tmp_path: Path,
    topic: str,
    sig: signal.Signals,
) -> tuple[list[str], Counter[str], int]:
    """Node 1 fires a burst of JOBS and gets `sig` a third of the way in; node 2 then
    fires the rest. Returns the job ids, how often each fired, and node 1's exit code."""
    first = NodeProcess(settings, tmp_path, "node-1")
    second: NodeProcess | None = None
    try:
        await first.wait_ready()
        rng = random.Random(11)
        ids = await client.schedule_many(
            [Job(topic, {"i": i}, delay=rng.uniform(0.3, 3.0)) for i in range(JOBS)]
        )
        await collector.until(JOBS // 3, timeout_s=60)  # the node is mid-run
        first.signal(sig)
        code = await first.wait_exit()
        second = NodeProcess(settings, tmp_path, "node-2")
        await second.wait_ready()
        deadline = time.monotonic() + 90
        while not set(ids) <= set(collector_ids(collector)) and time.monotonic() < deadline:
            await collector.poll()
        await collector.quiet_for(1.0)
        assert await second.stop() == 0
        return ids, Counter(collector_ids(collector)), code
    finally:
        first.kill()
        if second is not None:
            second.kill()


def collector_ids(collector: Collector) -> list[str]:
    return [str(r["job_id"]) for r in collector.records]


async def test_sigterm_stops_cleanly_and_loses_nothing(
    settings: Settings, client: DelayClient, collector: Collector, tmp_path: Path, topic: str
) -> None:
    ids, fired, code = await signal_mid_burst(
        settings, client, collector, tmp_path, topic, signal.SIGTERM
    )
    assert code == 0
    assert set(fired) == set(ids)
    assert max(fired.values()) == 1  # a clean stop leaves nothing half-done
    assert all(r["fired_ms"] >= r["due_ms"] for r in collector.records)  # type: ignore


async def test_sigkill_loses_nothing(
    settings: Settings, client: DelayClient, collector: Collector, tmp_path: Path, topic: str
) -> None:
    ids, fired, code = await signal_mid_burst(
        settings, client, collector, tmp_path, topic, signal.SIGKILL
    )
    assert code == -signal.SIGKILL
    assert set(fired) == set(ids)
    assert all(r["fired_ms"] >= r["due_ms"] for r in collector.records)  # type: ignore


async def test_a_quiet_node_is_ready_by_its_ready_file(settings: Settings, tmp_path: Path) -> None:
    """At --log-level WARNING the node logs no "started:" line; the helper still sees it
    ready, by its ready file, which the node deletes when SIGTERM stops it."""
    node = nodes.NodeProcess(
        "quiet", tmp_path, settings=settings, node_id="quiet-node", log_level="WARNING"
    )
    try:
        info = await node.wait_ready(timeout_s=60)
        assert info["pid"] == node.pid
        assert info["node_id"] == "quiet-node"
        assert isinstance(info["member"], str) and info["member"]
        assert node.ready_path.exists()
        assert b"started:" not in node.log_path.read_bytes()
        assert await node.stop() == 0
        assert not node.ready_path.exists()
    finally:
        node.kill()


async def test_a_node_that_exits_while_starting_fails_with_its_log(
    settings: Settings, tmp_path: Path
) -> None:
    node = nodes.NodeProcess("broken", tmp_path, settings=settings, env={"DELAYQ_SLOTS": "3"})
    try:
        with pytest.raises(nodes.NodeProcessError, match="slots must be a power of two"):
            await node.wait_ready(timeout_s=60)
        assert node.returncode == 2
        assert not node.ready_path.exists()
    finally:
        node.kill()
