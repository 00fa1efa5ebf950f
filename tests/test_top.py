"""`delayq top` (cluster/top.py): the rates and quantiles it computes from two scrapes
of real prometheus-client output, and the command against a real node."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from actors.histogram import LATENESS_BUCKETS_S
from cluster import DelayClient, Job
from cluster.config import Settings
from cluster.top import bucket_increase, increase, parse_scrape, quantile
from devstack.nodes import settings_env
from tests.conftest import Collector
from tests.processes import NodeProcess
from tests.test_operations import free_port, metrics_env


def scrape_text(lateness_s: list[float], fired: int, healthy: int = 1) -> str:
    """A node's /metrics as prometheus-client writes it."""
    registry = CollectorRegistry()
    counter = Counter("delayq_jobs_fired", "fired", ["topic"], registry=registry)
    histogram = Histogram(
        "delayq_fire_lateness_seconds",
        "lateness",
        ["topic"],
        buckets=LATENESS_BUCKETS_S,
        registry=registry,
    )
    Gauge("delayq_healthy", "healthy", registry=registry).set(healthy)
    counter.labels("orders").inc(fired)
    for value in lateness_s:
        histogram.labels("orders").observe(value)
    return generate_latest(registry).decode()


def test_rates_and_quantiles_over_the_window() -> None:
    before = parse_scrape(scrape_text([0.02] * 10, fired=10), at=100.0)
    # Then 100 more jobs: 50 within (5, 10] ms and 50 within (25, 50] ms.
    now = parse_scrape(scrape_text([0.02] * 10 + [0.008] * 50 + [0.03] * 50, fired=110), at=102.0)
    assert now.healthy and not now.ready
    assert increase(now.fired["orders"], before.fired["orders"]) / (now.at - before.at) == 50.0
    window = bucket_increase(now.lateness["orders"], before.lateness["orders"])
    assert window[-1] == (float("inf"), 100.0)
    # Rank 50 is the last of the (5, 10] ms bucket; rank 99 is 49/50 into (25, 50] ms.
    assert quantile(0.5, window) == pytest.approx(0.010)
    assert quantile(0.99, window) == pytest.approx(0.025 + 0.025 * 49 / 50)


def test_a_restarted_node_counts_from_zero_and_empty_windows_have_no_quantile() -> None:
    before = parse_scrape(scrape_text([0.02] * 10, fired=500), at=1.0)
    now = parse_scrape(scrape_text([0.3] * 4, fired=4), at=2.0)  # restarted meanwhile
    assert increase(now.fired["orders"], before.fired["orders"]) == 4
    window = bucket_increase(now.lateness["orders"], before.lateness["orders"])
    assert window[-1][1] == 4 and quantile(0.5, window) == pytest.approx(0.25 + 0.25 * 2 / 4)
    idle = bucket_increase(now.lateness["orders"], now.lateness["orders"])
    assert quantile(0.5, idle) is None
    over = parse_scrape(scrape_text([100.0] * 3, fired=3), at=3.0)
    assert quantile(0.99, over.lateness["orders"]) == 60.0  # the highest finite bound


def top(settings: Settings, port: int, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **settings_env(settings), "COLUMNS": "160", "LINES": "60"}
    return subprocess.run(
        [sys.executable, "-m", "cluster.cli", "top", "--once", "--interval", "1", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
async def test_top_shows_a_running_node(
    settings: Settings, client: DelayClient, collector: Collector, topic: str, tmp_path: Path
) -> None:
    port = free_port()
    node = NodeProcess(settings, tmp_path, "node-top", metrics_env(port))
    try:
        await node.wait_ready()
        jobs = 300
        await client.schedule_many([Job(topic, {"i": i}, delay=0.2) for i in range(jobs)])
        await client.schedule_many([Job(topic, {"i": i}, delay=120) for i in range(7)])
        assert len(await collector.until(jobs, timeout_s=60)) == jobs
        await asyncio.sleep(2.5)  # one sample of the slots' depths after the fires
        shown = await asyncio.to_thread(top, settings, port, "--json")
        assert shown.returncode == 0, shown.stderr
        snapshot = orjson.loads(shown.stdout)
        (member,) = snapshot["members"]
        assert member["node_id"] == "node-top" and member["slots"] == settings.slots
        assert member["metrics"] == "ok" and member["healthy"] and member["ready"]
        (seen,) = [t for t in snapshot["topics"] if t["topic"] == topic]
        assert seen["fired_total"] == jobs
        assert sum(s["delay"] for s in snapshot["slot_status"]) == 7
        text = await asyncio.to_thread(top, settings, port)
        assert text.returncode == 0, text.stderr
        assert "node-top" in text.stdout and topic in text.stdout
    finally:
        await node.stop()


def test_top_refuses_bad_arguments(settings: Settings) -> None:
    bad = subprocess.run(
        [sys.executable, "-m", "cluster.cli", "top", "--json"],
        env={**os.environ, **settings_env(settings)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2 and "--json needs --once" in bad.stderr
