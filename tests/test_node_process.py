"""Real `delayq node` processes stopped with SIGTERM or killed with SIGKILL mid-run:
after a restart every job fires; a clean stop also fires none twice."""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from cluster import DelayClient, Job
from cluster.config import Settings
from tests.conftest import Collector
from tests.processes import NodeProcess

pytestmark = pytest.mark.slow

JOBS = 3000


async def run_scenario(
    settings: Settings, client: DelayClient, collector: Collector, tmp_path: Path,
    topic: str, sig: signal.Signals,
) -> tuple[list[str], Counter[str], int]:
    first = NodeProcess(settings, tmp_path, "node-1")
    second: NodeProcess | None = None
    try:
        await first.wait_started()
        rng = random.Random(11)
        ids = await client.schedule_many(
            [Job(topic, {"i": i}, delay=rng.uniform(0.3, 3.0)) for i in range(JOBS)]
        )
        await collector.until(JOBS // 3, timeout_s=60)  # the node is mid-run
        first.proc.send_signal(sig)
        code = await first.wait_exit()
        second = NodeProcess(settings, tmp_path, "node-2")
        await second.wait_started()
        deadline = time.monotonic() + 90
        while not set(ids) <= set(collector_ids(collector)) and time.monotonic() < deadline:
            await collector.poll()
        await collector.quiet_for(1.0)
        second.proc.send_signal(signal.SIGTERM)
        assert await second.wait_exit() == 0
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
    ids, fired, code = await run_scenario(
        settings, client, collector, tmp_path, topic, signal.SIGTERM
    )
    assert code == 0
    assert set(fired) == set(ids)
    assert max(fired.values()) == 1  # a clean stop leaves nothing half-done
    assert all(r["fired_ms"] >= r["due_ms"] for r in collector.records)  # type: ignore


async def test_sigkill_loses_nothing(
    settings: Settings, client: DelayClient, collector: Collector, tmp_path: Path, topic: str
) -> None:
    ids, fired, code = await run_scenario(
        settings, client, collector, tmp_path, topic, signal.SIGKILL
    )
    assert code == -signal.SIGKILL
    assert set(fired) == set(ids)
    assert all(r["fired_ms"] >= r["due_ms"] for r in collector.records)  # type: ignore
