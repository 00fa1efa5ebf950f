"""Real `delayq node` processes stopped with SIGTERM or killed with SIGKILL mid-run:
after a restart every job fires; a clean stop also fires none twice."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from cluster.client import DelayClient, Job
from cluster.config import Settings
from tests.conftest import Collector

pytestmark = pytest.mark.slow

JOBS = 3000


def node_env(settings: Settings) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "DELAYQ_KEY_PREFIX": settings.key_prefix,
        # Short deadlines so jobs in flight on a killed node come back within the test.
        "DELAYQ_INFLIGHT_TIMEOUT_MS": "4000",
        "DELAYQ_KAFKA_REQUEST_TIMEOUT_MS": "3000",
        "DELAYQ_RETRY_BACKOFF_MS": "100",
    })
    return env


class NodeProcess:
    def __init__(self, settings: Settings, log_path: Path) -> None:
        self.log_path = log_path
        self.log = log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cluster.cli", "node"],
            env=node_env(settings), stdout=self.log, stderr=subprocess.STDOUT,
        )

    async def wait_started(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while b"started:" not in self.log_path.read_bytes():
            assert self.proc.poll() is None, self.log_path.read_text()
            assert time.monotonic() < deadline, "node did not start"
            await asyncio.sleep(0.1)

    async def wait_exit(self, timeout_s: float = 60) -> int:
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None:
            assert time.monotonic() < deadline, "node did not exit"
            await asyncio.sleep(0.1)
        self.log.close()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


async def run_scenario(
    settings: Settings, client: DelayClient, collector: Collector, tmp_path: Path,
    topic: str, sig: signal.Signals,
) -> tuple[list[str], Counter[str], int]:
    first = NodeProcess(settings, tmp_path / "node-1.log")
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
        second = NodeProcess(settings, tmp_path / "node-2.log")
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
